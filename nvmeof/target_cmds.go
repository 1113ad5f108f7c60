package nvmeof

import (
	"fmt"
	"math/bits"
	"strconv"
)

// parseAdmin is nvmet_parse_admin_cmd and nvmet_parse_discovery_cmd.
func (tq *tqueue) parseAdmin(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	if ctrl.discovery() {
		switch c.Opcode() {
		case AdminGetLogPage:
			r.xfer = logLen(c)
			r.execute = tq.getLogPage
		case AdminIdentify:
			r.xfer = IdentifySize
			r.execute = tq.identify
		case AdminSetFeatures:
			r.execute = tq.setFeatures
		case AdminGetFeatures:
			r.execute = tq.getFeatures
		case AdminAsyncEvent:
			r.execute = tq.asyncEvent
		case AdminKeepAlive:
			r.execute = tq.keepAliveCmd
		default:
			return StatusInvalidOpcode | StatusDNR
		}
		return 0
	}
	if !ctrl.ready() {
		return StatusCmdSeqError | StatusDNR
	}
	switch c.Opcode() {
	case AdminGetLogPage:
		r.xfer = logLen(c)
		r.execute = tq.getLogPage
	case AdminIdentify:
		r.xfer = IdentifySize
		r.execute = tq.identify
	case AdminAbort:
		r.execute = func(r *trsp) uint16 { r.cqe.Result = 1; return 0 } // not aborted
	case AdminSetFeatures:
		r.execute = tq.setFeatures
	case AdminGetFeatures:
		r.execute = tq.getFeatures
		if c.CDW(10)&0xff == FeatHostID {
			r.xfer = 16
		}
	case AdminAsyncEvent:
		r.execute = tq.asyncEvent
	case AdminKeepAlive:
		r.execute = tq.keepAliveCmd
	default:
		return StatusInvalidOpcode | StatusDNR
	}
	return 0
}

func logLen(c *Command) int {
	numd := c.CDW(10)>>16 | (c.CDW(11)&0xffff)<<16
	return int(numd+1) * 4
}

func (tq *tqueue) keepAliveCmd(r *trsp) uint16 {
	ctrl := tq.ctrl
	ctrl.mu.Lock()
	kato := ctrl.kato
	ctrl.mu.Unlock()
	if kato == 0 {
		return StatusKATOInvalid
	}
	select {
	case ctrl.kaReset <- struct{}{}:
	default:
	}
	return 0
}

// asyncEvent holds an Asynchronous Event Request until an event completes
// it (nvmet_execute_async_event), or completes it now with a pending one.
func (tq *tqueue) asyncEvent(r *trsp) uint16 {
	ctrl := tq.ctrl
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	if len(ctrl.aers) >= aerLimit {
		return StatusAsyncLimit | StatusDNR
	}
	if len(ctrl.events) > 0 {
		r.cqe.Result = uint64(ctrl.events[0])
		ctrl.events = ctrl.events[1:]
		return 0
	}
	ctrl.aers = append(ctrl.aers, r)
	return holdResponse
}

// Asynchronous event notices (NVMe 1.4 figure 146, include/linux/nvme.h).
const (
	aerTypeNotice   = 2
	aerNoticeNSAttr = 0    // NVME_AER_NOTICE_NS_CHANGED
	aenBitNSAttr    = 8    // NVME_AEN_BIT_NS_ATTR: in Set Features 0x0b and OAES
	maxChangedNS    = 1024 // NVME_MAX_CHANGED_NAMESPACES
)

// Resize changes the size a namespace of subsystem nqn serves (nvmet's
// revalidate_size: a file that grew, a device that was resized) and, as
// nvmet_ns_changed does, adds the namespace to every controller's changed
// namespace list and sends the controllers that enabled namespace
// attribute notices an asynchronous event (notice, "namespace attribute
// changed", log page 04h). A second notice waits until the host has read
// that log page. size must be a positive multiple of the block size and
// fit the backend (a backend with Size() int64 is checked).
func (t *Target) Resize(nqn string, nsid uint32, size int64) error {
	t.init()
	sub := t.subsystem(nqn)
	if sub == nil {
		return fmt.Errorf("nvmeof: resize: no subsystem %q", nqn)
	}
	var ns *Namespace
	for _, n := range sub.Namespaces {
		if n.ID == nsid {
			ns = n
		}
	}
	if ns == nil {
		return fmt.Errorf("nvmeof: resize: subsystem %q has no namespace %d", nqn, nsid)
	}
	if size <= 0 || size%int64(ns.BlockSize) != 0 {
		return fmt.Errorf("nvmeof: resize: size %d is not a positive multiple of %d", size, ns.BlockSize)
	}
	if b, ok := ns.Backend.(interface{ Size() int64 }); ok && size > b.Size() {
		return fmt.Errorf("nvmeof: resize: size %d beyond the backend's %d bytes", size, b.Size())
	}
	if ns.ServedSize() == size {
		return nil
	}
	ns.served.Store(size)
	t.nsChanged(sub, nsid)
	return nil
}

// nsChanged is nvmet_ns_changed.
func (t *Target) nsChanged(sub *Subsystem, nsid uint32) {
	t.mu.Lock()
	var ctrls []*controller
	for _, c := range t.ctrls {
		if c.subsys == sub {
			ctrls = append(ctrls, c)
		}
	}
	t.mu.Unlock()
	for _, c := range ctrls {
		c.mu.Lock()
		c.addChangedNS(nsid)
		if c.aen&(1<<aenBitNSAttr) == 0 || c.aenMasked&(1<<aenBitNSAttr) != 0 {
			c.mu.Unlock()
			continue
		}
		c.aenMasked |= 1 << aenBitNSAttr
		c.events = append(c.events, aerTypeNotice|aerNoticeNSAttr<<8|LogChangedNS<<16)
		c.mu.Unlock()
		c.fireEvents()
	}
}

// addChangedNS is nvmet_add_to_changed_ns_log: once the list is full it
// holds 0xffffffff alone. Called with c.mu held.
func (c *controller) addChangedNS(nsid uint32) {
	if len(c.changedNS) == 1 && c.changedNS[0] == 0xffffffff {
		return
	}
	for _, n := range c.changedNS {
		if n == nsid {
			return
		}
	}
	if len(c.changedNS) == maxChangedNS {
		c.changedNS = append(c.changedNS[:0], 0xffffffff)
		return
	}
	c.changedNS = append(c.changedNS, nsid)
}

// fireEvents completes held AERs with pending events
// (nvmet_async_event_work).
func (c *controller) fireEvents() {
	for {
		c.mu.Lock()
		if len(c.events) == 0 || len(c.aers) == 0 || c.admin == nil {
			c.mu.Unlock()
			return
		}
		r, ev := c.aers[0], c.events[0]
		c.aers, c.events = c.aers[1:], c.events[1:]
		admin := c.admin
		c.mu.Unlock()
		r.cqe.Result = uint64(ev)
		admin.complete(r, 0)
		admin.sendNow(r)
		c.t.log().Debug("nvmeof: asynchronous event", "ctrl", c.id, "result", fmt.Sprintf("%#x", ev))
	}
}

func (tq *tqueue) setFeatures(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	v := c.CDW(11)
	switch c.CDW(10) & 0xff {
	case FeatNumQueues:
		if ctrl.discovery() {
			return StatusInvalidField | StatusDNR
		}
		n := uint64(tq.t.MaxIOQueues - 1)
		r.cqe.Result = n | n<<16
	case FeatKeepAlive:
		ctrl.mu.Lock()
		ctrl.kato = (v + 999) / 1000
		r.cqe.Result = uint64(ctrl.kato)
		ctrl.mu.Unlock()
	case FeatAsyncEvent:
		ctrl.mu.Lock()
		ctrl.aen = v & (1 << 8)
		ctrl.mu.Unlock()
		r.cqe.Result = uint64(v)
	case FeatHostID:
		return StatusCmdSeqError | StatusDNR
	default:
		return StatusInvalidField | StatusDNR
	}
	return 0
}

func (tq *tqueue) getFeatures(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	ctrl.mu.Lock()
	defer ctrl.mu.Unlock()
	switch c.CDW(10) & 0xff {
	case FeatNumQueues:
		n := uint64(tq.t.MaxIOQueues - 1)
		r.cqe.Result = n | n<<16
	case FeatKeepAlive:
		r.cqe.Result = uint64(ctrl.kato) * 1000
	case FeatAsyncEvent:
		r.cqe.Result = uint64(ctrl.aen)
	case FeatArbitration, FeatPowerMgmt, FeatErrRecovery, FeatIRQCoalesce, FeatWriteAtom:
		r.cqe.Result = 0
	case FeatVolatileWC:
		r.cqe.Result = 1
	case FeatHostID:
		if c.CDW(11)&1 == 0 {
			return StatusInvalidField | StatusDNR
		}
		copy(r.data, ctrl.hostID[:])
	default:
		return StatusInvalidField | StatusDNR
	}
	return 0
}

func putStr(b []byte, s string) {
	for i := range b {
		b[i] = ' '
	}
	copy(b, s)
}

func (tq *tqueue) identify(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	d := r.data
	clear(d)
	cns := c.CDW(10) & 0xff
	if ctrl.discovery() && cns != CNSController {
		return StatusInvalidField | StatusDNR
	}
	switch cns {
	case CNSController:
		tq.identifyController(d)
	case CNSNamespace:
		nsid := c.NSID()
		if nsid == 0xffffffff {
			return StatusInvalidNS | StatusDNR
		}
		ns := ctrl.namespace(nsid)
		if ns == nil {
			return 0 // an inactive namespace: zeroes
		}
		nlb := uint64(ns.ServedSize() / int64(ns.BlockSize))
		le.PutUint64(d[0:], nlb)
		le.PutUint64(d[8:], nlb)
		le.PutUint64(d[16:], nlb)
		d[33] = 1 // DLFEAT: deallocated blocks read as zeroes
		copy(d[104:120], ns.UUID[:])
		d[128+2] = uint8(bits.TrailingZeros(uint(ns.BlockSize))) // LBAF0.DS
	case CNSActiveNSList:
		after := c.NSID()
		if after >= 0xfffffffe {
			return StatusInvalidNS | StatusDNR
		}
		i := 0
		for _, ns := range ctrl.subsys.Namespaces {
			if ns.ID > after && i < 1024 {
				le.PutUint32(d[i*4:], ns.ID)
				i++
			}
		}
	case CNSNSDescList:
		ns := ctrl.namespace(c.NSID())
		if ns == nil {
			return StatusInvalidNS | StatusDNR
		}
		d[0], d[1] = 3, 16 // UUID
		copy(d[4:20], ns.UUID[:])
		d[20], d[21] = 2, 16 // NGUID
		copy(d[24:40], ns.UUID[:])
		d[40], d[41] = 4, 1 // CSI: NVM
	case CNSCSController, CNSCSNamespace:
		if c.CDW(11)>>24 != 0 { // CSI other than NVM
			return StatusInvalidField | StatusDNR
		}
	default:
		return StatusInvalidField | StatusDNR
	}
	return 0
}

func (tq *tqueue) identifyController(d []byte) {
	t, ctrl := tq.t, tq.ctrl
	sub := ctrl.subsys
	nqn, serial, model := DiscoveryNQN, "", "goroce"
	if sub != nil {
		nqn, serial = sub.NQN, sub.Serial
		if sub.Model != "" {
			model = sub.Model
		}
	}
	if serial == "" {
		serial = strconv.FormatUint(uint64(fnv32(nqn)), 16)
	}
	putStr(d[4:24], serial)
	putStr(d[24:64], model)
	putStr(d[64:72], "1.0")
	d[72] = 6    // RAB
	d[77] = mdts // MDTS
	le.PutUint16(d[78:], ctrl.id)
	le.PutUint32(d[80:], 0x10300)   // VER 1.3
	d[259] = aerLimit - 1           // AERL
	d[261] = 1 << 2                 // LPA: extended data for Get Log Page
	d[262] = 127                    // ELPE
	le.PutUint16(d[320:], kasUnits) // KAS
	d[512], d[513] = 0x66, 0x44     // SQES, CQES
	le.PutUint16(d[514:], uint16(t.MaxQueueSize))
	sgls := uint32(1 | 1<<2)
	if t.InlineDataSize > 0 {
		sgls |= 1 << 20
	}
	le.PutUint32(d[536:], sgls)
	copy(d[768:1023], nqn)
	if ctrl.discovery() {
		d[111] = 2 // CNTRLTYPE: discovery
	} else {
		d[111] = 1                 // I/O controller
		le.PutUint32(d[92:], 1<<8) // OAES: namespace attribute notices
		d[258] = 3                 // ACL
		var nn uint32
		for _, ns := range sub.Namespaces {
			nn = max(nn, ns.ID)
		}
		le.PutUint32(d[516:], nn)
		le.PutUint16(d[520:], 1<<2|1<<3) // ONCS: DSM, Write Zeroes
		d[525] = 1                       // VWC: volatile write cache (Flush)
	}
	le.PutUint32(d[1792:], uint32((SQESize+t.InlineDataSize)/16)) // IOCCSZ
	le.PutUint32(d[1796:], CQESize/16)                            // IORCSZ
	d[1803] = 1                                                   // MSDBD
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func (tq *tqueue) getLogPage(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	lid := c.CDW(10) & 0xff
	off := uint64(c.CDW(12)) | uint64(c.CDW(13))<<32
	var page []byte
	switch {
	case lid == LogDiscovery && ctrl.discovery():
		page = tq.discoveryLog()
	case ctrl.discovery():
		return StatusInvalidField | StatusDNR
	case lid == LogError:
		page = make([]byte, 64)
	case lid == LogSMART:
		page = make([]byte, 512)
		le.PutUint16(page[1:], 300) // temperature, Kelvin
		page[3], page[4] = 100, 10  // available spare, threshold
		le.PutUint64(page[32:], ctrl.unitsRead.Load())
		le.PutUint64(page[48:], ctrl.unitsWritten.Load())
		le.PutUint64(page[64:], ctrl.readCmds.Load())
		le.PutUint64(page[80:], ctrl.writeCmds.Load())
	case lid == LogFWSlot, lid == LogEffects:
		page = make([]byte, 512)
	case lid == LogChangedNS:
		// nvmet_execute_get_log_changed_ns: the list, cleared, and the
		// notice unmasked unless Retain Asynchronous Event is set.
		page = make([]byte, 4096)
		ctrl.mu.Lock()
		for i, n := range ctrl.changedNS {
			le.PutUint32(page[4*i:], n)
		}
		ctrl.changedNS = ctrl.changedNS[:0]
		if c.CDW(10)&(1<<15) == 0 {
			ctrl.aenMasked &^= 1 << aenBitNSAttr
		}
		ctrl.mu.Unlock()
	default:
		return StatusInvalidField | StatusDNR
	}
	if off&3 != 0 {
		return StatusInvalidField | StatusDNR
	}
	clear(r.data)
	if off < uint64(len(page)) {
		copy(r.data, page[off:])
	}
	return 0
}

func (tq *tqueue) discoveryLog() []byte {
	t := tq.t
	t.mu.Lock()
	addr := t.addr
	t.mu.Unlock()
	if !addr.Addr().IsValid() || addr.Addr().IsUnspecified() {
		addr = tq.conn.LocalAddr()
	}
	var entries []DiscoveryEntry
	fam := uint8(1)
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		fam = 2
	}
	mk := func(nqn string, sub uint8) DiscoveryEntry {
		return DiscoveryEntry{TrType: 1, AdrFam: fam, SubType: sub, PortID: 1, CNTLID: 0xffff,
			ASQSZ: AdminQueueDepth, TrSvcID: strconv.Itoa(int(addr.Port())), TrAddr: addr.Addr().Unmap().String(), SubNQN: nqn}
	}
	for _, s := range t.Subsystems {
		if hostAllowed(s, tq.ctrl.hostNQN) {
			entries = append(entries, mk(s.NQN, 2))
		}
	}
	entries = append(entries, mk(DiscoveryNQN, 3)) // the current discovery subsystem
	b := make([]byte, DiscoveryHdrSize+len(entries)*DiscoveryEntrySize)
	le.PutUint64(b, 1)
	le.PutUint64(b[8:], uint64(len(entries)))
	for i, e := range entries {
		e.encode(b[DiscoveryHdrSize+i*DiscoveryEntrySize:])
	}
	return b
}

// parseIO is nvmet_parse_io_cmd with io-cmd-file's parse and execute.
func (tq *tqueue) parseIO(r *trsp) uint16 {
	c := &r.cmd
	ctrl := tq.ctrl
	if !ctrl.ready() {
		return StatusCmdSeqError | StatusDNR
	}
	ns := ctrl.namespace(c.NSID())
	if ns == nil {
		return StatusInvalidNS | StatusDNR
	}
	r.ns = ns
	switch c.Opcode() {
	case IORead, IOWrite:
		r.xfer = int(c.NLB()) * ns.BlockSize
		r.execute = execRW
	case IOFlush:
		r.execute = execFlush
	case IOWriteZeroes:
		r.execute = execWriteZeroes
	case IODSM:
		r.xfer, r.lte = dsmLen(c), true
		r.execute = execDSM
	default:
		return StatusInvalidOpcode | StatusDNR
	}
	return 0
}

// The I/O commands' handlers are functions, not closures, so parsing a
// command allocates nothing.

func execRW(r *trsp) uint16 { return r.q.rw(r, r.ns) }

func execFlush(r *trsp) uint16 {
	if s, ok := r.ns.Backend.(syncer); ok {
		if err := s.Sync(); err != nil {
			return StatusInternal | StatusDNR
		}
	}
	return 0
}

func execWriteZeroes(r *trsp) uint16 {
	c, ns := &r.cmd, r.ns
	off, n := int64(c.SLBA())*int64(ns.BlockSize), int64(c.NLB())*int64(ns.BlockSize)
	if size := ns.ServedSize(); c.SLBA() > uint64(size) || off+n > size {
		return StatusCapExceeded | StatusDNR
	}
	if err := zeroRange(ns.Backend, off, n); err != nil {
		return StatusInternal | StatusDNR
	}
	return 0
}

func dsmLen(c *Command) int { return int(c.CDW(10)&0xff+1) * 16 }

func execDSM(r *trsp) uint16 {
	c, ns := &r.cmd, r.ns
	if c.CDW(11)&(1<<2) == 0 { // not deallocate
		return 0
	}
	need := dsmLen(c)
	for i := 0; i+16 <= need && i+16 <= len(r.data); i += 16 {
		nlb, slba := le.Uint32(r.data[i+4:]), le.Uint64(r.data[i+8:])
		off, n := int64(slba)*int64(ns.BlockSize), int64(nlb)*int64(ns.BlockSize)
		if size := ns.ServedSize(); slba > uint64(size) || off+n > size {
			return StatusCapExceeded | StatusDNR
		}
		if err := zeroRange(ns.Backend, off, n); err != nil {
			return StatusInternal | StatusDNR
		}
	}
	return 0
}

func (tq *tqueue) rw(r *trsp, ns *Namespace) uint16 {
	c := &r.cmd
	slba := c.SLBA()
	off := int64(slba) * int64(ns.BlockSize)
	if size := ns.ServedSize(); slba > uint64(size) || off+int64(r.xfer) > size {
		return StatusCapExceeded | StatusDNR
	}
	ctrl := tq.ctrl
	units := uint64(r.xfer+511) / 512
	if c.Opcode() == IOWrite {
		if _, err := ns.Backend.WriteAt(r.data[:r.xfer], off); err != nil {
			return StatusInternal | StatusDNR // nvmet: errno_to_nvme_status
		}
		ctrl.writeCmds.Add(1)
		ctrl.unitsWritten.Add(units)
		tq.t.stats.BytesWritten.Add(uint64(r.xfer))
		return 0
	}
	if n, err := ns.Backend.ReadAt(r.data[:r.xfer], off); err != nil && n < r.xfer {
		return StatusInternal | StatusDNR
	}
	ctrl.readCmds.Add(1)
	ctrl.unitsRead.Add(units)
	tq.t.stats.BytesRead.Add(uint64(r.xfer))
	return 0
}
