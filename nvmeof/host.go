package nvmeof

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/qp"
)

// Errors of the host. A failed command is a *StatusError, which matches
// ErrStatus; a refused queue is a *RejectError, which matches ErrRejected
// and cm.ErrRejected.
var (
	ErrStatus    = errors.New("nvmeof: command failed")
	ErrRejected  = errors.New("nvmeof: queue connection rejected")
	ErrClosed    = errors.New("nvmeof: controller closed")
	ErrUnaligned = errors.New("nvmeof: I/O not aligned to the namespace's block size")
	ErrProtocol  = errors.New("nvmeof: protocol violation by the target")
)

// StatusError is an NVMe completion with a status other than success.
type StatusError struct {
	Opcode uint8
	Status uint16 // DNR | More | SCT<<8 | SC
	Result uint64
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvmeof: command %#02x failed: status %#x (%s)", e.Opcode, e.Status, StatusText(e.Status))
}

// Is matches ErrStatus, and a *StatusError with the same status code
// (ignoring DNR and More).
func (e *StatusError) Is(target error) bool {
	if target == ErrStatus {
		return true
	}
	var s *StatusError
	if errors.As(target, &s) {
		return s.Status&0x7ff == e.Status&0x7ff
	}
	return false
}

// StatusText names a status code.
func StatusText(s uint16) string {
	switch s & 0x7ff {
	case StatusSuccess:
		return "success"
	case StatusInvalidOpcode:
		return "invalid opcode"
	case StatusInvalidField:
		return "invalid field"
	case StatusInternal:
		return "internal error"
	case StatusInvalidNS:
		return "invalid namespace"
	case StatusCmdSeqError:
		return "command sequence error"
	case StatusSGLInvalidData:
		return "SGL data block invalid"
	case StatusSGLInvalidType:
		return "SGL descriptor type invalid"
	case StatusSGLInvalidOffset:
		return "SGL offset invalid"
	case StatusLBARange:
		return "LBA out of range"
	case StatusCapExceeded:
		return "capacity exceeded"
	case StatusConnectFormat:
		return "connect: incompatible format"
	case StatusConnectInvParam:
		return "connect: invalid parameters"
	case StatusConnectInvHost:
		return "connect: invalid host"
	case StatusKATOInvalid:
		return "keep alive timeout invalid"
	case StatusAsyncLimit:
		return "asynchronous event request limit exceeded"
	}
	return "status " + strconv.FormatUint(uint64(s&0x7ff), 16)
}

// RejectError is a queue connection refused by the target with an
// nvme_rdma_cm_rej status (CMInvalidHSQSize, …).
type RejectError struct {
	Sts uint16
	Err error // the cm error
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("nvmeof: queue rejected with status %d (%s): %v", e.Sts, CMStatusText(e.Sts), e.Err)
}

// Unwrap returns the cm error.
func (e *RejectError) Unwrap() error { return e.Err }

// Is matches ErrRejected.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// CMStatusText is nvme_rdma_cm_msg.
func CMStatusText(s uint16) string {
	switch s {
	case CMInvalidLen:
		return "invalid length"
	case CMInvalidRecfmt:
		return "invalid record format"
	case CMInvalidQID:
		return "invalid queue ID"
	case CMInvalidHSQSize:
		return "invalid host SQ size"
	case CMInvalidHRQSize:
		return "invalid host RQ size"
	case CMNoResources:
		return "resource not found"
	case CMInvalidIRD:
		return "invalid IRD"
	case CMInvalidORD:
		return "Invalid ORD"
	}
	return "unrecognized reason"
}

// HostOptions configure Dial and Discover. The zero value is usable.
type HostOptions struct {
	// HostNQN and HostID identify the host (defaults: a random host ID and
	// nqn.2014-08.org.nvmexpress:uuid:<it>).
	HostNQN string
	HostID  [16]byte
	// Queues is the number of I/O queues (default 1) and QueueDepth their
	// depth (default 32; at most the target's CAP.MQES+1).
	Queues, QueueDepth int
	// KeepAlive is the keep-alive timeout sent in Connect (default 5 s, as
	// the Linux host); NoKeepAlive sends 0 and no Keep Alive commands.
	KeepAlive   time.Duration
	NoKeepAlive bool
	// KeepAliveInterval is how often Keep Alive is sent (default
	// KeepAlive/2; negative: never, which a target punishes after KATO).
	KeepAliveInterval time.Duration
	// MaxTransfer bounds one command's data (default and upper bound: the
	// target's MDTS, at most 128 KiB).
	MaxTransfer int
	// IOTimeout is how long a command may stay unanswered before its queue
	// fails with ErrTimeout, ending every wait on it (default 30 s, the
	// Linux host's io_timeout; negative: never). The Linux host then
	// reconnects; this host does not.
	IOTimeout time.Duration
	// InCapsuleData bounds the writes an I/O queue sends as in-capsule
	// data, in the command's SEND right after the SQE, so the target needs
	// no RDMA READ (the Linux host's use_inline_data). The size is what
	// the target's Identify Controller allows (IOCCSZ × 16 − 64, with SGLS
	// bit 20), at most this (default 16 KiB; negative: none, every write
	// is a keyed SGL the target reads).
	InCapsuleData int
	// Window is the requester window of the host's QPs (qp.QP.SetWindow:
	// PSNs of commands and in-capsule data in flight unacknowledged; 0:
	// rxe's 128), as Target.Window.
	Window int
	// Logger receives debug and warning messages (nil: none).
	Logger *slog.Logger
	// OnAsyncEvent, if set, is called (on the controller's event
	// goroutine) with every asynchronous event the target reports. The
	// host keeps an Asynchronous Event Request outstanding on an I/O
	// controller whose OAES has namespace attribute notices, enables them,
	// and on one reads the changed namespace list (log page 04h) and
	// identifies the namespaces again, so HostNamespace.Size follows a
	// resize, before calling OnAsyncEvent, as the Linux host's scan work
	// does.
	OnAsyncEvent func(AsyncEvent)
}

// AsyncEvent is a completed Asynchronous Event Request: completion dword 0
// (type, information, log page) and, for a namespace attribute notice, the
// changed namespace list it read.
type AsyncEvent struct {
	Type, Info, LogPage uint8
	// ChangedNS are the namespaces the changed namespace log listed
	// (0xffffffff: more than 1024).
	ChangedNS []uint32
}

// NamespaceChanged reports whether e is a namespace attribute notice.
func (e AsyncEvent) NamespaceChanged() bool {
	return e.Type == aerTypeNotice && e.Info == aerNoticeNSAttr && e.LogPage == LogChangedNS
}

func (o *HostOptions) withDefaults() HostOptions {
	var h HostOptions
	if o != nil {
		h = *o
	}
	if h.HostID == ([16]byte{}) {
		rand.Read(h.HostID[:])
		h.HostID[6] = h.HostID[6]&0x0f | 0x40
		h.HostID[8] = h.HostID[8]&0x3f | 0x80
	}
	if h.HostNQN == "" {
		u := h.HostID
		h.HostNQN = fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	if h.Queues <= 0 {
		h.Queues = 1
	}
	if h.QueueDepth <= 0 {
		h.QueueDepth = 32
	}
	if h.KeepAlive == 0 {
		h.KeepAlive = 5 * time.Second
	}
	if h.NoKeepAlive {
		h.KeepAlive = 0
	}
	if h.IOTimeout == 0 {
		h.IOTimeout = 30 * time.Second
	}
	if h.IOTimeout < 0 {
		h.IOTimeout = 0
	}
	if h.MaxTransfer <= 0 || h.MaxTransfer > 128<<10 {
		h.MaxTransfer = 128 << 10
	}
	if h.InCapsuleData == 0 {
		h.InCapsuleData = defaultInCapsule
	}
	if h.InCapsuleData < 0 {
		h.InCapsuleData = 0
	}
	if h.Logger == nil {
		h.Logger = slog.New(discardHandler{})
	}
	return h
}

// Controller is a connected NVMe-oF controller: its admin queue, I/O
// queues and namespaces.
type Controller struct {
	o       HostOptions
	dev     *qp.Device
	addr    string
	subNQN  string
	cntlid  uint16
	cap     uint64
	ident   []byte
	maxXfer int
	inline  int // in-capsule data bytes on I/O queues (0: none)
	admin   *hqueue
	io      []*hqueue
	ns      []*HostNamespace
	rr      atomic.Uint32
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// Dial connects to subsystem subNQN at addr ("ip:port"; port 4420 if
// missing) the way the Linux nvme-rdma host does: admin queue and Connect,
// CAP, CC.EN and CSTS.RDY, Identify, Set Features (number of queues), I/O
// queues and their Connect, the active namespace list and each namespace.
func Dial(ctx context.Context, dev *qp.Device, addr, subNQN string, opts *HostOptions) (*Controller, error) {
	o := opts.withDefaults()
	addr = withPort(addr)
	c := &Controller{o: o, dev: dev, addr: addr, subNQN: subNQN, stop: make(chan struct{})}
	if err := c.setupAdmin(ctx); err != nil {
		return nil, err
	}
	fail := func(err error) (*Controller, error) {
		c.Close()
		return nil, err
	}
	if subNQN == DiscoveryNQN {
		return c, nil
	}
	// Number of queues.
	var cmd Command
	cmd.SetHeader(AdminSetFeatures, 0, 0)
	cmd.SetCDW(10, FeatNumQueues)
	n := uint32(o.Queues - 1)
	cmd.SetCDW(11, n|n<<16)
	cqe, err := c.admin.submit(ctx, &cmd, nil, false)
	if err != nil {
		return fail(fmt.Errorf("nvmeof: set number of queues: %w", err))
	}
	granted := int(min(cqe.Result&0xffff, cqe.Result>>16&0xffff)) + 1
	nq := min(o.Queues, granted)
	depth := min(o.QueueDepth, int(c.cap&0xffff)+1)
	for i := 1; i <= nq; i++ {
		q, err := c.connectQueue(ctx, uint16(i), depth)
		if err != nil {
			return fail(err)
		}
		c.io = append(c.io, q)
	}
	// Namespaces.
	list := make([]byte, IdentifySize)
	cmd = Command{}
	cmd.SetHeader(AdminIdentify, 0, 0)
	cmd.SetCDW(10, CNSActiveNSList)
	if _, err := c.admin.submit(ctx, &cmd, list, true); err != nil {
		return fail(fmt.Errorf("nvmeof: identify active namespaces: %w", err))
	}
	for i := 0; i < 1024; i++ {
		nsid := le.Uint32(list[i*4:])
		if nsid == 0 {
			break
		}
		id := make([]byte, IdentifySize)
		cmd = Command{}
		cmd.SetHeader(AdminIdentify, 0, nsid)
		cmd.SetCDW(10, CNSNamespace)
		if _, err := c.admin.submit(ctx, &cmd, id, true); err != nil {
			return fail(fmt.Errorf("nvmeof: identify namespace %d: %w", nsid, err))
		}
		flbas := id[26] & 0xf
		ds := id[128+4*int(flbas)+2]
		if ds < 9 || ds > 16 {
			return fail(fmt.Errorf("%w: namespace %d has LBA data size 2^%d", ErrProtocol, nsid, ds))
		}
		bs := 1 << ds
		n := &HostNamespace{c: c, id: nsid, bs: bs}
		n.size.Store(int64(le.Uint64(id)) * int64(bs))
		c.ns = append(c.ns, n)
	}
	if le.Uint32(c.ident[92:])&(1<<aenBitNSAttr) != 0 {
		// nvme_enable_aen: the notices the controller supports, and an
		// AER outstanding (nvme_queue_async_events).
		cmd = Command{}
		cmd.SetHeader(AdminSetFeatures, 0, 0)
		cmd.SetCDW(10, FeatAsyncEvent)
		cmd.SetCDW(11, 1<<aenBitNSAttr)
		if _, err := c.admin.submit(ctx, &cmd, nil, false); err != nil {
			return fail(fmt.Errorf("nvmeof: set features async event configuration: %w", err))
		}
		c.wg.Add(1)
		go c.asyncEvents()
	}
	if o.KeepAlive > 0 && o.KeepAliveInterval >= 0 {
		c.wg.Add(1)
		go c.keepAlive()
	}
	return c, nil
}

// asyncEvents keeps one Asynchronous Event Request outstanding and handles
// what completes it (nvme_complete_async_event, nvme_scan_work).
func (c *Controller) asyncEvents() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
		case <-c.admin.dead:
		}
		cancel()
	}()
	for ctx.Err() == nil {
		var cmd Command
		cmd.SetHeader(AdminAsyncEvent, 0, 0)
		cqe, err := c.admin.submit(ctx, &cmd, nil, false)
		if err != nil {
			if ctx.Err() == nil {
				c.o.Logger.Warn("nvmeof: asynchronous event request failed", "err", err)
			}
			return
		}
		ev := AsyncEvent{Type: uint8(cqe.Result & 7), Info: uint8(cqe.Result >> 8), LogPage: uint8(cqe.Result >> 16)}
		c.o.Logger.Debug("nvmeof: asynchronous event", "type", ev.Type, "info", ev.Info, "log", ev.LogPage)
		if ev.NamespaceChanged() {
			if ev.ChangedNS, err = c.rescan(ctx); err != nil {
				c.o.Logger.Warn("nvmeof: rescan after a namespace notice", "err", err)
			}
		}
		if c.o.OnAsyncEvent != nil {
			c.o.OnAsyncEvent(ev)
		}
	}
}

// rescan reads (and so clears) the changed namespace list and identifies
// the namespaces on it again, updating their sizes.
func (c *Controller) rescan(ctx context.Context) ([]uint32, error) {
	page := make([]byte, 4096)
	var cmd Command
	cmd.SetHeader(AdminGetLogPage, 0, 0xffffffff)
	numd := uint32(len(page)/4 - 1)
	cmd.SetCDW(10, LogChangedNS|numd<<16)
	cmd.SetCDW(11, numd>>16)
	if _, err := c.admin.submit(ctx, &cmd, page, true); err != nil {
		return nil, fmt.Errorf("nvmeof: changed namespace log: %w", err)
	}
	var changed []uint32
	for i := 0; i < len(page); i += 4 {
		nsid := le.Uint32(page[i:])
		if nsid == 0 {
			break
		}
		changed = append(changed, nsid)
	}
	id := make([]byte, IdentifySize)
	for _, n := range c.ns {
		if len(changed) > 0 && changed[0] != 0xffffffff && !slices.Contains(changed, n.id) {
			continue
		}
		cmd = Command{}
		cmd.SetHeader(AdminIdentify, 0, n.id)
		cmd.SetCDW(10, CNSNamespace)
		if _, err := c.admin.submit(ctx, &cmd, id, true); err != nil {
			return changed, fmt.Errorf("nvmeof: identify namespace %d: %w", n.id, err)
		}
		n.size.Store(int64(le.Uint64(id)) * int64(n.bs))
	}
	return changed, nil
}

func withPort(addr string) string {
	if _, err := netip.ParseAddrPort(addr); err == nil {
		return addr
	}
	if a, err := netip.ParseAddr(addr); err == nil {
		return netip.AddrPortFrom(a, DefaultPort).String()
	}
	return addr
}

func (c *Controller) setupAdmin(ctx context.Context) error {
	q, err := c.connectQueue(ctx, 0, AdminQueueDepth)
	if err != nil {
		return err
	}
	c.admin = q
	fail := func(err error) error {
		c.Close()
		return err
	}
	var cmd Command
	setProp(&cmd, FabricsPropertyGet, 0, true, RegCAP, 0)
	cqe, err := q.submit(ctx, &cmd, nil, false)
	if err != nil {
		return fail(fmt.Errorf("nvmeof: property get CAP: %w", err))
	}
	c.cap = cqe.Result
	cc := uint64(1 | 6<<16 | 4<<20)
	setProp(&cmd, FabricsPropertySet, 0, false, RegCC, cc)
	if _, err := q.submit(ctx, &cmd, nil, false); err != nil {
		return fail(fmt.Errorf("nvmeof: property set CC.EN: %w", err))
	}
	to := time.Duration(c.cap>>24&0xff+1) * 500 * time.Millisecond
	deadline := time.Now().Add(to)
	for {
		setProp(&cmd, FabricsPropertyGet, 0, false, RegCSTS, 0)
		cqe, err := q.submit(ctx, &cmd, nil, false)
		if err != nil {
			return fail(fmt.Errorf("nvmeof: property get CSTS: %w", err))
		}
		if cqe.Result&2 != 0 {
			return fail(fmt.Errorf("%w: controller fatal status (CSTS.CFS) after enable", ErrProtocol))
		}
		if cqe.Result&1 != 0 {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("%w: CSTS.RDY not set within %v", ErrProtocol, to))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.ident = make([]byte, IdentifySize)
	cmd = Command{}
	cmd.SetHeader(AdminIdentify, 0, 0)
	cmd.SetCDW(10, CNSController)
	if _, err := q.submit(ctx, &cmd, c.ident, true); err != nil {
		return fail(fmt.Errorf("nvmeof: identify controller: %w", err))
	}
	if le.Uint32(c.ident[536:])&(1<<2) == 0 {
		return fail(fmt.Errorf("%w: keyed SGLs not supported", ErrProtocol))
	}
	if id := le.Uint16(c.ident[78:]); id != c.cntlid {
		return fail(fmt.Errorf("%w: identify cntlid %d, connect gave %d", ErrProtocol, id, c.cntlid))
	}
	c.maxXfer = c.o.MaxTransfer
	if m := c.ident[77]; m != 0 && 4096<<m < c.maxXfer {
		c.maxXfer = 4096 << m
	}
	// nvme_rdma_setup_ctrl refuses a controller with in-capsule data at
	// an offset (ICDOFF); nvme_rdma_alloc_queue sizes an I/O queue's
	// capsule from IOCCSZ and use_inline_data needs SGLS bit 20.
	if off := le.Uint16(c.ident[1800:]); off != 0 {
		return fail(fmt.Errorf("%w: in-capsule data offset (ICDOFF) %d not supported", ErrProtocol, off))
	}
	if le.Uint32(c.ident[536:])&(1<<20) != 0 {
		if n := int64(le.Uint32(c.ident[1792:]))*16 - SQESize; n > 0 {
			c.inline = int(min(n, int64(c.o.InCapsuleData), int64(c.maxXfer)))
		}
	}
	return nil
}

// connectQueue makes one queue: rdma_cm with the nvme_rdma_cm_req, then
// the Connect command.
func (c *Controller) connectQueue(ctx context.Context, qid uint16, depth int) (*hqueue, error) {
	inline := 0
	if qid != 0 {
		inline = c.inline // none on the admin queue, as the Linux host
	}
	q, err := dialQueue(ctx, c.dev, c.addr, qid, depth, c.o.MaxTransfer, inline, c.o.Window, c.o.IOTimeout, c.o.Logger)
	if err != nil {
		return nil, err
	}
	var cmd Command
	kato := uint32(c.o.KeepAlive / time.Millisecond)
	if qid != 0 {
		kato = 0
	}
	setConnect(&cmd, 0, qid, uint16(depth-1), kato)
	cntlid := uint16(0xffff)
	if qid != 0 {
		cntlid = c.cntlid
	}
	data := ConnectData{HostID: c.o.HostID, CNTLID: cntlid, SubNQN: c.subNQN, HostNQN: c.o.HostNQN}.Encode()
	cqe, err := q.submit(ctx, &cmd, data, false)
	if err != nil {
		q.close()
		return nil, fmt.Errorf("nvmeof: connect queue %d: %w", qid, err)
	}
	if qid == 0 {
		c.cntlid = uint16(cqe.Result)
	}
	return q, nil
}

// CNTLID is the controller ID the target assigned.
func (c *Controller) CNTLID() uint16 { return c.cntlid }

// IdentifyController returns the 4096-byte Identify Controller data.
func (c *Controller) IdentifyController() []byte { return c.ident }

// Namespaces are the controller's active namespaces.
func (c *Controller) Namespaces() []*HostNamespace { return c.ns }

// Queues is the number of I/O queues.
func (c *Controller) Queues() int { return len(c.io) }

// InCapsuleDataSize is the largest write the I/O queues send as in-capsule
// data (0: none; see HostOptions.InCapsuleData).
func (c *Controller) InCapsuleDataSize() int { return c.inline }

// HostStats count the commands a Controller's I/O queues sent.
type HostStats struct {
	// InCapsule are the commands whose data went in the command capsule,
	// Keyed those whose data the target moved with RDMA READ or WRITE
	// through a keyed SGL.
	InCapsule, Keyed uint64
}

// Stats sums the I/O queues' counters.
func (c *Controller) Stats() HostStats {
	var s HostStats
	for _, q := range c.io {
		s.InCapsule += q.inCapsule.Load()
		s.Keyed += q.keyed.Load()
	}
	return s
}

// Admin submits an admin command with its data (read into data when
// toHost) and returns the completion.
func (c *Controller) Admin(ctx context.Context, cmd *Command, data []byte, toHost bool) (Completion, error) {
	return c.admin.submit(ctx, cmd, data, toHost)
}

func (c *Controller) keepAlive() {
	defer c.wg.Done()
	iv := c.o.KeepAliveInterval
	if iv == 0 {
		iv = c.o.KeepAlive / 2
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			var cmd Command
			cmd.SetHeader(AdminKeepAlive, 0, 0)
			ctx, cancel := context.WithTimeout(context.Background(), c.o.KeepAlive)
			_, err := c.admin.submit(ctx, &cmd, nil, false)
			cancel()
			if err != nil {
				c.o.Logger.Warn("nvmeof: keep alive failed", "err", err)
			}
		}
	}
}

// Done is closed when the admin queue is disconnected (by Close, the
// target or a transport error).
func (c *Controller) Done() <-chan struct{} { return c.admin.dead }

// Err says why Done was closed.
func (c *Controller) Err() error { return c.admin.err() }

// Close shuts the controller down (CC.SHN, as the Linux host on
// disconnect) and disconnects every queue.
func (c *Controller) Close() error {
	c.once.Do(func() {
		close(c.stop)
		c.wg.Wait()
		if c.admin != nil && c.admin.err() == nil && c.subNQN != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var cmd Command
			setProp(&cmd, FabricsPropertySet, 0, false, RegCC, 1<<14|6<<16|4<<20)
			c.admin.submit(ctx, &cmd, nil, false)
			cancel()
		}
		for _, q := range c.io {
			q.close()
		}
		if c.admin != nil {
			c.admin.close()
		}
	})
	return nil
}

// Discover reads the discovery log of the discovery controller at addr.
func Discover(ctx context.Context, dev *qp.Device, addr string, opts *HostOptions) ([]DiscoveryEntry, error) {
	o := HostOptions{}
	if opts != nil {
		o = *opts
	}
	o.NoKeepAlive = true
	c, err := Dial(ctx, dev, addr, DiscoveryNQN, &o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	get := func(n int) ([]byte, error) {
		b := make([]byte, n)
		var cmd Command
		cmd.SetHeader(AdminGetLogPage, 0, 0)
		numd := uint32(n/4 - 1)
		cmd.SetCDW(10, LogDiscovery|numd<<16)
		cmd.SetCDW(11, numd>>16)
		_, err := c.admin.submit(ctx, &cmd, b, true)
		return b, err
	}
	hdr, err := get(DiscoveryHdrSize)
	if err != nil {
		return nil, fmt.Errorf("nvmeof: discovery log header: %w", err)
	}
	numrec := min(le.Uint64(hdr[8:]), 64)
	full, err := get(DiscoveryHdrSize + int(numrec)*DiscoveryEntrySize)
	if err != nil {
		return nil, fmt.Errorf("nvmeof: discovery log: %w", err)
	}
	_, _, entries, err := DecodeDiscoveryLog(full)
	return entries, err
}

// HostNamespace is a namespace of a Controller: an io.ReaderAt and
// io.WriterAt in whole blocks, spread over the controller's I/O queues.
type HostNamespace struct {
	c    *Controller
	id   uint32
	bs   int
	size atomic.Int64
}

// ID is the namespace ID.
func (n *HostNamespace) ID() uint32 { return n.id }

// BlockSize is the LBA size.
func (n *HostNamespace) BlockSize() int { return n.bs }

// Size is the namespace's size in bytes.
// It follows the target's namespace attribute notices (see
// HostOptions.OnAsyncEvent).
func (n *HostNamespace) Size() int64 { return n.size.Load() }

func (n *HostNamespace) queue() *hqueue {
	return n.c.io[int(n.c.rr.Add(1))%len(n.c.io)]
}

// ReadAt reads len(p) bytes at off (both multiples of the block size).
func (n *HostNamespace) ReadAt(p []byte, off int64) (int, error) {
	return n.rw(context.Background(), IORead, p, off)
}

// WriteAt writes p at off (both multiples of the block size).
func (n *HostNamespace) WriteAt(p []byte, off int64) (int, error) {
	return n.rw(context.Background(), IOWrite, p, off)
}

// ReadAtContext and WriteAtContext are ReadAt and WriteAt bounded by ctx.
func (n *HostNamespace) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return n.rw(ctx, IORead, p, off)
}

// WriteAtContext is WriteAt bounded by ctx.
func (n *HostNamespace) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	return n.rw(ctx, IOWrite, p, off)
}

func (n *HostNamespace) rw(ctx context.Context, op uint8, p []byte, off int64) (int, error) {
	if off%int64(n.bs) != 0 || len(p)%n.bs != 0 {
		return 0, ErrUnaligned
	}
	if len(n.c.io) == 0 {
		return 0, ErrClosed
	}
	chunk := n.c.maxXfer
	if len(p) <= chunk {
		if err := n.one(ctx, op, p, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < len(p); i += chunk {
		b := p[i:min(i+chunk, len(p))]
		wg.Add(1)
		go func(b []byte, o int64) {
			defer wg.Done()
			if err := n.one(ctx, op, b, o); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(b, off+int64(i))
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return len(p), nil
}

func (n *HostNamespace) one(ctx context.Context, op uint8, b []byte, off int64) error {
	var cmd Command
	cmd.SetHeader(op, 0, n.id)
	cmd.SetRW(uint64(off/int64(n.bs)), uint32(len(b)/n.bs))
	_, err := n.queue().submit(ctx, &cmd, b, op == IORead)
	return err
}

// Flush commits the target's volatile write cache (NVMe Flush).
func (n *HostNamespace) Flush(ctx context.Context) error {
	var cmd Command
	cmd.SetHeader(IOFlush, 0, n.id)
	_, err := n.queue().submit(ctx, &cmd, nil, false)
	return err
}

// WriteZeroes zeroes nlb blocks from slba.
func (n *HostNamespace) WriteZeroes(ctx context.Context, slba uint64, nlb uint32) error {
	var cmd Command
	cmd.SetHeader(IOWriteZeroes, 0, n.id)
	cmd.SetRW(slba, nlb)
	_, err := n.queue().submit(ctx, &cmd, nil, false)
	return err
}

// Deallocate deallocates (trims) nlb blocks from slba (Dataset Management).
func (n *HostNamespace) Deallocate(ctx context.Context, slba uint64, nlb uint32) error {
	var cmd Command
	cmd.SetHeader(IODSM, 0, n.id)
	cmd.SetCDW(10, 0)
	cmd.SetCDW(11, 1<<2)
	r := make([]byte, 16)
	le.PutUint32(r[4:], nlb)
	le.PutUint64(r[8:], slba)
	_, err := n.queue().submit(ctx, &cmd, r, false)
	return err
}

// Submit sends an I/O command on one of the I/O queues.
func (c *Controller) Submit(ctx context.Context, cmd *Command, data []byte, toHost bool) (Completion, error) {
	if len(c.io) == 0 {
		return Completion{}, ErrClosed
	}
	return c.io[int(c.rr.Add(1))%len(c.io)].submit(ctx, cmd, data, toHost)
}
