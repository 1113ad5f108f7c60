// Package qp is goroce's verbs-like API: devices, protection domains, memory
// regions, completion queues, shared receive queues, RC and UD queue pairs
// (ud.go), address handles and the GSI (QP1, gsi.go), in the shape of
// libibverbs (ibv_open_device, ibv_alloc_pd, ibv_reg_mr, ibv_create_cq,
// ibv_create_srq, ibv_create_qp, ibv_modify_qp, ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq).
//
// A program imports only this package. OpenInterface binds a Device to a
// network interface (AF_XDP, AF_PACKET or a UDP socket); OpenMemoryPair
// gives two Devices joined by an in-memory link; Open takes any nic.Link.
// The work request and completion types, opcodes, flags, statuses, QP
// states, attribute masks and access flags are all declared here (see
// Example_write). A failed completion's WC.Err is a *CompletionError that
// unwraps to its WCStatus: errors.Is(wc.Err(), WCRemAccessErr). Everything
// that waits takes a context: OpenInterface, QP.Connect and QP.Modify (the
// peer's MAC is resolved then), CQ.Wait, CQ.WaitEvent, Device.Progress.
//
// Model. A Device owns one nic.Link, one memory-registration table and the
// RC engines (transport.QP) of its queue pairs. The engines are
// deterministic state machines without goroutines or timers; the Device
// serialises every call into them under one mutex and provides the two
// things they need from the outside world: a driver goroutine that reads
// frame batches from the link, parses them (wire.Parse, ICRC checked) and
// hands each packet to the QP it is addressed to, and calls the engines'
// Tick at their deadlines (a heap over the QPs, deadline.go); between the
// two it parks in the Go runtime's network poller (driver.go). Frames the
// engines produce are collected into a batch and written to the link once
// per call, after the mutex is released.
//
// Completions are delivered into CQs, which applications poll (Poll) or
// wait on (Wait, with solicited-only notification like ibv_req_notify_cq).
// A goroutine in CQ.Wait drives the device itself while nobody else reads
// the link, so a completion reaches it without a hand-off from the driver
// goroutine (selfdrive.go).
//
// Extension: MR.WaitWrite. Verbs has no event for a peer's RDMA WRITE
// without immediate; goroce's MRs count the WRITE messages placed into
// them (MR.Writes), and MR.WaitWrite(ctx, n) sleeps until the count passes
// n, driving the device like CQ.Wait. Nothing changes on the wire
// (writewait.go).
//
// Two modes (Config.Mode) start no goroutines. ModeManual: the deterministic
// simulator calls Device.Poll itself with a fake clock. ModeBusyPoll: the
// application's own polling drives the device on the
// real clock — CQ.Poll reads the link and runs expired timers first, and
// CQ.Wait spins instead of sleeping (see busypoll.go).
package qp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	satomic "sync/atomic"
	"time"

	"github.com/goroce/goroce/atomic"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// ErrClosed is returned after a Device was closed.
var ErrClosed = errors.New("qp: device closed")

// DefaultResolveTimeout bounds a neighbour resolution whose context has no
// deadline (Config.ResolveTimeout).
const DefaultResolveTimeout = 3 * time.Second

// GID is a 16-byte RoCE global identifier (an IPv6 address; IPv4 as
// ::ffff:a.b.c.d).
type GID = netip.Addr

// Config describes a Device.
type Config struct {
	Name string
	Link nic.Link
	// Links, when it has more than one entry, makes a multi-queue device:
	// one link per queue (a NIC's queue: an AF_XDP socket per queue of
	// the interface, queues.go), Links[0] being Link (Link may be left
	// nil). Every queue's reader delivers the frames it reads to whatever
	// QP they address; a QP transmits on the queue its UDP source port
	// picks (port mod len(Links)), as a NIC's RSS spreads flows. At most
	// MaxQueues. Empty: one queue, Link.
	Links []nic.Link
	// IP is the device's address; the GID table is built from it (index 0 the
	// IPv6 link-local GID from the MAC, index 1 ::ffff:IP for IPv4, as rxe).
	IP netip.Addr
	// Resolve finds the MAC of a peer IP (neighbour table), within ctx:
	// the context of the QP.Modify (or QP.Connect) call that moves a QP to
	// RTR, bounded by ResolveTimeout when it has no deadline. When nil,
	// Neighbors is consulted.
	Resolve   func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
	Neighbors map[netip.Addr]net.HardwareAddr
	// Logger receives the device's warnings (the GSI's QP1 recovery and
	// send errors). Nil: nothing is logged.
	Logger *slog.Logger
	// ResolveTimeout bounds one Resolve call whose context has no deadline
	// (0: DefaultResolveTimeout). A context with a deadline is used as it is.
	ResolveTimeout time.Duration
	// Seed makes memory keys deterministic and QP numbers start at 0x11
	// as rxe's (0: random keys and a random first QP number).
	Seed int64
	// RetryCnt7Infinite selects rxe's retry_cnt == 7 semantics (see transport.Config).
	RetryCnt7Infinite bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// RouteHopLimit, when non-zero, replaces the hop limit of every address
	// vector, as the kernel does for RoCE: ib_resolve_unicast_gid_dmac
	// (drivers/infiniband/core/verbs.c) overwrites grh.hop_limit with the
	// route's, so rxe and mlx5 send TTL 64 even when rc_pingpong asks for 1.
	// OpenInterface sets it from the interface's namespace (ip_default_ttl). Zero
	// keeps the application's value.
	RouteHopLimit uint8
	// Mode is how the device makes progress: who reads the link and runs
	// the engines' timers. The zero value, ModeThreaded, starts the
	// device's own goroutines; ModeBusyPoll and ModeManual start none (see
	// Mode). Both need a link with a non-blocking TryReadBatch (nic.Poller:
	// the in-memory link, nic/afpacket, nic/afxdp, nic/udp).
	Mode Mode
	// CC, when set, turns RoCEv2 congestion control on: ECN marking, CNPs
	// and DCQCN with these parameters (cc.go; DefaultCCParams). Off by
	// default, as rxe has none.
	CC *CCParams
	// JoinGroup, when set, joins the multicast group ip on the device's
	// interface when a QP of the device is the first to attach to it
	// (QP.AttachMcast), and returns how to leave it (called when the last
	// one detaches, or at Close). OpenInterface sets it on Linux to an
	// IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP on the interface (IGMP or MLD
	// reports, the NIC's filter). Nil: nothing to join (in-memory links).
	JoinGroup func(ip netip.Addr) (leave func(), err error)
	// Pcap, when set, records every frame the device receives or sends
	// (pcap.go; Device.SetPcap attaches one later). The device does not
	// close it.
	Pcap *PcapWriter
}

// Device is one RoCE device bound to a link.
//
// Its fields are grouped by concern. What Open sets and nothing changes
// comes first; then the engine lock, mu, and what it guards (the QP table,
// the timers, one call's bookkeeping, multicast, the statistics, the async
// events' state); then the parts with locks of their own (the transmit
// batch, the resolver, the GSI's creation) and the driver, which keeps the
// link's receive side (driver.go).
//
// Lock order. A goroutine holding one of these may take only those after
// it:
//
//	Device.mu             the engine lock: every engine call, everything "under mu"
//	CQ.mu                 a completion into a CQ (the engines complete under Device.mu)
//	asyncQueue.mu         the async event queue (a leaf)
//	txBatch.mu            taken under Device.mu by handoff, held past its
//	                      release while the batch is written (unlock); on a
//	                      multi-queue device one per queue, in queue order
//	PcapWriter.mu         the capture (a leaf, under Device.mu or txBatch.mu)
//
// The memory-registration table's locks (memreg) are taken under
// Device.mu by the engines and without it by RegMR. gsiMu and
// GSI.dispatchMu come before Device.mu (creating the GSI's QP, its MAD
// handlers' posts), never under it; resolveCalls.mu is a leaf taken
// without Device.mu. A data-path frame
// costs Device.mu once per batch (not per frame), CQ.mu per completion and
// txBatch.mu once per written batch.
type Device struct {
	// Set by Open, read-only after.
	cfg         Config
	log         *slog.Logger // cfg.Logger, or a discarding one
	now         func() time.Time
	customClock bool // Config.Now was given: the link's deadlines are converted to the real clock
	mac         [6]byte
	gids        []GID
	maxMTU      transport.MTU
	cc          *CCParams        // congestion control (cc.go); nil: off
	mrs         *memreg.Table    // its own locks
	atomics     *atomic.Executor // used under mu
	// drv is how the device makes progress (driver.go), chosen by Open
	// from Config.Mode: its link's receive side and the wait policies.
	drv driver

	mu        sync.Mutex // the engine lock: serialises every engine call; guards what follows up to tx
	closed    bool
	tab       qpTable     // QPs and SRQs (qp.go)
	deadlines timerQueue  // the engines' deadlines (deadline.go)
	call      callState   // what one call into the engines collects
	mc        mcastState  // multicast groups and looped datagrams (mcast.go)
	stats     deviceStats // counters
	ev        eventState  // AsyncEvent's queue and what feeds it (events.go)
	// onAsync, when set, also receives the CQ-overrun events (with d.mu
	// held), for tests.
	onAsync func(asyncEvent)

	// With locks of their own.
	tx txBatch // frames to write; tx.mu is taken after mu
	// queues are the transmit batches of a multi-queue device's queues
	// (queues.go), queues[0] being &tx; one entry on a one-queue device.
	// Their mus are taken in index order, after mu.
	queues []*txBatch
	res    resolveCalls                // Config.Resolve calls in progress (qp.go)
	pcap   satomic.Pointer[PcapWriter] // the device's capture (pcap.go); nil: off
	gsi    satomic.Pointer[GSI]        // QP1, once Device.GSI made it (gsi.go)
	gsiMu  sync.Mutex                  // serialises its creation

	done chan struct{}  // closed by Close
	wg   sync.WaitGroup // the device's goroutines (the driver's, the GSI's)
	// rxUse is read-held by a multi-queue reader parsing lent frames
	// outside mu (preparse); closeOwnedLink takes it before the links go.
	rxUse sync.RWMutex
}

// qpTable is the device's queue pairs and shared receive queues (under
// Device.mu).
type qpTable struct {
	qps     map[uint32]*QP
	qpList  []*QP  // creation order
	srqs    []*SRQ // not destroyed, creation order
	nextQPN uint32
	qpSeq   uint64 // creation counter: QP.seq
	// qpnLimit is the highest QP number handed out (maxQPN; tests lower
	// it to reach the wrap quickly).
	qpnLimit uint32
}

// timerQueue is the engines' deadlines (under Device.mu; deadline.go).
type timerQueue struct {
	heap deadlineHeap // QPs with an engine deadline
	due  []*QP        // timers' scratch
}

// callState is what one call into the engines (a drive pass, a post)
// collects for its end (under Device.mu).
type callState struct {
	// failedCQs are CQs that overran since the last endCall; their QPs
	// still have to be moved to ERR.
	failedCQs []*CQ
	// touched are the QPs that received a frame in the batch drive is
	// handling (EndBatch).
	touched []*QP
	// held are the QPs whose owed ACK waits for the application's next
	// call (ackhold.go); holdAcks makes drive hold them.
	held     []*QP
	holdAcks bool
	noHold   bool // Device.SetAckHold(false): nothing is held (ackhold.go)
}

// mcastState is the device's multicast (under Device.mu; mcast.go).
type mcastState struct {
	// groups are the multicast groups with QPs attached.
	groups map[GID]*mcastGroup
	// loop are copies of the datagrams this device's QPs sent to its
	// groups, delivered to its attached QPs at the end of the call;
	// loopN of them are in use.
	loop  [][]byte
	loopN int
	pkt   wire.Packet // deliverLoopedMcast's parse
}

// deviceStats are the device's counters (under Device.mu).
type deviceStats struct {
	counters transport.Counters
	corked   uint64 // posts whose frames waited for a later write (cork.go)
	rx       RxStats
}

// resolveCalls are the Config.Resolve calls in progress, one per IP
// (qp.go).
type resolveCalls struct {
	mu    sync.Mutex // a leaf, taken without Device.mu
	calls map[GID]*resolveCall
}

// RxStats count frames the device dropped before any QP saw them.
type RxStats struct {
	Frames      uint64
	ParseErrors uint64 // truncated, bad lengths, unknown opcode, bad pad
	BadICRC     uint64
	NotRoCE     uint64
	WrongDst    uint64 // destination MAC or IP is not ours
	NoQP        uint64 // destination QP does not exist
}

// Open starts a device on cfg.Link.
func Open(cfg Config) (*Device, error) {
	if err := cfg.checkLinks(); err != nil {
		return nil, err
	}
	if cfg.Link == nil {
		return nil, fmt.Errorf("qp: open device: no link")
	}
	if !cfg.IP.IsValid() {
		return nil, fmt.Errorf("qp: open device: no IP address")
	}
	custom := cfg.Now != nil
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = "goroce0"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{log: log,
		cfg: cfg, mrs: memreg.NewTable(cfg.Seed), atomics: atomic.NewExecutor(),
		tab: qpTable{qps: map[uint32]*QP{}, nextQPN: firstQPN(cfg.Seed), qpnLimit: maxQPN}, now: cfg.Now,
		done: make(chan struct{}), customClock: custom,
	}
	copy(d.mac[:], cfg.Link.HardwareAddr())
	d.gids = []GID{linkLocal(d.mac)}
	ip := cfg.IP.Unmap()
	if ip.Is4() {
		d.gids = append(d.gids, netip.AddrFrom16(ip.As16()))
	} else {
		d.gids = append(d.gids, ip)
	}
	d.maxMTU = PathMTU(cfg.Link.MTU())
	d.tx.init(cfg.Link, cfg.Link.MTU()+wire.EthernetLen+wire.VLANTagLen+64)
	d.tx.pcap, d.tx.now = &d.pcap, d.now
	d.initQueues()
	if cfg.Pcap != nil {
		d.pcap.Store(cfg.Pcap)
	}
	if err := d.ccSetup(); err != nil {
		return nil, fmt.Errorf("qp: open device: %w", err)
	}
	drv, err := newDriver(d)
	if err != nil {
		return nil, err
	}
	d.drv = drv
	drv.start()
	d.startQueues()
	return d, nil
}

// PathMTU is the largest IB MTU ≤ netdev MTU − 80 (rxe's RXE_MAX_HDR_LENGTH):
// 1500 gives 1024, 9000 gives 4096.
func PathMTU(netdevMTU int) MTU {
	m := MTU4096
	for ; m > MTU256; m-- {
		if m.Bytes() <= netdevMTU-80 {
			break
		}
	}
	return m
}

func linkLocal(mac [6]byte) GID {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^2, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// GIDs returns the GID table.
func (d *Device) GIDs() []GID { return append([]GID(nil), d.gids...) }

// GID returns GID index i.
func (d *Device) GID(i int) (GID, error) {
	if i < 0 || i >= len(d.gids) {
		return GID{}, fmt.Errorf("qp: GID index %d out of range (table has %d)", i, len(d.gids))
	}
	return d.gids[i], nil
}

// ActiveMTU is the port's path MTU.
func (d *Device) ActiveMTU() MTU { return d.maxMTU }

// MAC returns the link's MAC address (a copy).
func (d *Device) MAC() net.HardwareAddr { return append(net.HardwareAddr(nil), d.mac[:]...) }

// Counters returns the device-wide transport counters.
func (d *Device) Counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.countersLocked()
}

// RxStats returns the receive-path drop counters.
func (d *Device) RxStats() RxStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats.rx
}

// Close stops the device's goroutines and closes the link.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	// Held ACKs leave first: the application that saw the last
	// completion and closes must not leave its peer retrying.
	d.flushHeld()
	d.closed = true
	close(d.done)
	var leaves []func()
	for _, g := range d.mc.groups {
		if g.leave != nil {
			leaves = append(leaves, g.leave)
		}
	}
	d.mc.groups = nil
	defer func() {
		for _, leave := range leaves {
			leave()
		}
	}()
	d.drv.stop()
	d.unlock() // held ACKs and corked posts (cork.go) leave before the link closes
	d.dropLent()
	d.mrs.Close(ErrClosed)
	if g := d.gsi.Load(); g != nil {
		g.stop()
	}
	return d.drv.closeLink()
}

// dropLent stops the transmit batches from building frames in the links'
// buffers (txBatch), which go away when the links close.
func (d *Device) dropLent() {
	d.mu.Lock()
	for _, b := range d.queues {
		b.mu.Lock()
		b.dropLent()
		b.mu.Unlock()
	}
	d.mu.Unlock()
}

// closeOwnedLink is Close's end for a device that owns its link (every
// driver but the manual one).
func (d *Device) closeOwnedLink() error {
	// Frames handed off before closed was set (the ACK of what a waiter
	// just completed, often) are being written outside d.mu; let them
	// leave before the link closes, as a NIC's last frames do.
	for _, b := range d.queues {
		b.mu.Lock()
		b.mu.Unlock() // empty: only waits for the writer
	}
	if p := d.pcap.Load(); p != nil {
		p.Flush()
	}
	// A multi-queue reader parsing lent frames outside d.mu (preparse)
	// finishes before their memory goes; later ones see d.done.
	d.rxUse.Lock()
	d.rxUse.Unlock() // empty: only waits for the parsers
	err := d.cfg.Link.Close()
	for _, l := range d.cfg.Links[min(1, len(d.cfg.Links)):] {
		if err2 := l.Close(); err == nil {
			err = err2
		}
	}
	d.wg.Wait()
	return err
}

// asyncKind names an asynchronous event (enum ibv_event_type).
type asyncKind int

const (
	eventCQErr   asyncKind = iota // IBV_EVENT_CQ_ERR: a CQ overran
	eventQPFatal                  // IBV_EVENT_QP_FATAL: a QP went to ERR because its CQ overran
)

// asyncEvent is one asynchronous event (struct ibv_async_event).
type asyncEvent struct {
	kind asyncKind
	cq   *CQ
	qp   *QP
}

// endCall finishes a call into the engines (d.mu held): QPs whose CQ
// overran go to ERR, and the driver learns that the engines' earliest
// deadline may have moved (a driver parked with a later one re-arms). The
// frames the engines produced leave in unlock.
func (d *Device) endCall(now time.Time) {
	if d.mc.loopN > 0 {
		d.deliverLoopedMcast(now)
	}
	if len(d.call.failedCQs) > 0 {
		d.failCQs(now)
	}
	d.drv.callEnded()
}

// unlock releases d.mu and then writes the frames the engines produced
// while it was held, in one WriteBatch outside it: the batch is handed over
// under d.mu with d.tx.mu taken, so batches reach the link in the order
// their calls ran, and the next call fills the other buffer meanwhile.
func (d *Device) unlock() {
	if len(d.queues) > 1 {
		d.unlockQueues()
		return
	}
	out := d.tx.handoff()
	d.mu.Unlock()
	if out != nil {
		d.tx.writeSpare()
		d.tx.mu.Unlock()
	}
}

// failCQs handles CQ overruns as rxe does (rxe_cq_post: the CQ goes to
// the error state and IB_EVENT_CQ_ERR is raised) and as IBTA C11-25
// requires of the QPs using it: they go to ERR, flushing their work
// requests (into their other CQ where that one has room). Moving a QP to
// ERR can overrun another CQ; the loop runs until none is left.
func (d *Device) failCQs(now time.Time) {
	for len(d.call.failedCQs) > 0 {
		cq := d.call.failedCQs[0]
		d.call.failedCQs = d.call.failedCQs[1:]
		d.event(asyncEvent{kind: eventCQErr, cq: cq})
		for _, q := range d.tab.qpList {
			if (q.sendCQ == cq || q.recvCQ == cq) && q.eng.State() != StateErr && q.eng.State() != StateReset {
				q.eng.Modify(&transport.Attr{State: StateErr}, AttrState, now)
				d.touch(q)
				d.event(asyncEvent{kind: eventQPFatal, cq: cq, qp: q})
			}
		}
	}
	d.call.failedCQs = d.call.failedCQs[:0]
}

func (d *Device) event(ev asyncEvent) {
	if d.onAsync != nil {
		d.onAsync(ev)
	}
	d.raise(ev.public())
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() *PD { return &PD{dev: d, pd: d.mrs.AllocPD()} }

// PD is a protection domain.
type PD struct {
	dev *Device
	pd  *memreg.PD
}

// RegMR registers buf (ibv_reg_mr). The IOVA is buf's address. While it is
// registered, the remote peer may read or write buf at any time the access
// flags allow: the application should touch it only when a completion says
// the data it needs is there.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if pd.dev.isClosed() {
		return nil, ErrClosed
	}
	mr, err := pd.pd.Register(buf, access)
	return (*MR)(mr), err
}

// RegMRIOVA registers buf with a chosen IOVA (ibv_reg_mr_iova).
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if pd.dev.isClosed() {
		return nil, ErrClosed
	}
	mr, err := pd.pd.RegisterIOVA(buf, iova, access)
	return (*MR)(mr), err
}

// Dealloc frees the PD (fails while MRs or memory windows remain).
func (pd *PD) Dealloc() error { return pd.pd.Dealloc() }

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }

// rxBatch holds the receive buffers of one drive loop.
type rxBatch struct {
	bufs  [][]byte
	sizes []int
	pkt   wire.Packet
	// icrc checks the received frames' ICRCs with the headers of the QPs
	// seen before (wire.ICRCCache); one reader at a time, as the buffers.
	icrc wire.ICRCCache
	// lends: the reads lend the frames in the link's memory and set bufs
	// to them (newLinkRxBatch).
	lends bool
	// pkts and perr are the frames parsed before d.mu was taken, when
	// parsed (a multi-queue device's readers: preparse, queues.go).
	pkts   []wire.Packet
	perr   []error
	parsed bool
}

func newRxBatch(l nic.Link) *rxBatch {
	n := l.BatchSize()
	if n <= 0 {
		n = 32
	}
	b := &rxBatch{bufs: make([][]byte, n), sizes: make([]int, n)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, l.MTU()+wire.EthernetLen+wire.VLANTagLen+64)
	}
	return b
}

// newLinkRxBatch is newRxBatch for a reader of l, a link of a device that
// owns and closes its links (every driver but the manual one): where the
// link lends its received frames (nic.RxLender: afxdp's UMEM chunks),
// lending is turned on, and the reads set b.bufs to the frames in the
// link's memory instead of copying them into b's buffers. That is safe
// because every reader of the link is the device's (one at a time, with
// an rxBatch), the link takes a batch's frames back at its next read, and
// every frame is used before that read: under d.mu in drive (the capture,
// the parse, the engines, which copy payloads out and keep no view of a
// frame), or by a multi-queue device's reader in preparse, under d.rxUse.
// Close marks the device closed (d.mu, d.done) before the links and their
// memory go, no drive runs after that, and closeOwnedLink waits out any
// preparse in progress (d.rxUse) before it closes the links.
func (d *Device) newLinkRxBatch(l nic.Link) *rxBatch {
	b := newRxBatch(l)
	if r := rxLender(l); r != nil {
		b.lends = r.LendRx(true)
	}
	return b
}

// rxLender returns the nic.RxLender of a link the device owns (under
// OpenInterface's ownedLink), looking through qp's own wrappers only (a
// WrapLink wrapper may keep, copy or drop frames); nil if it has none.
func rxLender(l nic.Link) nic.RxLender {
	owned := false
	for {
		switch w := l.(type) {
		case *waitedLink:
			l, owned = w.ownedLink.Link, true
		case *polledLink:
			l, owned = w.ownedLink.Link, true
		case *ownedLink:
			l, owned = w.Link, true
		case nic.RxLender:
			if owned {
				return w
			}
			return nil
		default:
			return nil
		}
	}
}

// drive is the device's one unit of work, whoever runs it (the driver
// goroutine, or the receive and timer goroutines, or Poll in the manual and
// busy-poll modes: the drivers), with d.mu held, after the caller sent the
// ACKs held for it (flushHeld) if it should: input the n frames read into b, then,
// with timers set, tick every engine whose deadline has passed. The frames
// the engines produced leave when the caller unlocks. It returns the frames
// and timer expiries handled and the earliest engine deadline left (zero
// if none).
func (d *Device) drive(b *rxBatch, n int, timers bool) (events int, next time.Time) {
	now := d.now()
	if p := d.pcap.Load(); p != nil && n > 0 {
		p.writeRx(d.now, b, n)
	}
	if b != nil && b.parsed {
		// Parsed outside d.mu by a multi-queue device's reader (queues.go).
		for i := 0; i < n; i++ {
			d.inputParsed(&b.pkts[i], b.perr[i], now)
		}
		b.parsed = false
	} else {
		for i := 0; i < n; i++ {
			d.input(b.bufs[i][:b.sizes[i]], &b.pkt, &b.icrc, now)
		}
	}
	// ACK coalescing: end the receive batch of every QP that got a frame
	// in it, so each sends one cumulative ACK, written with the rest of
	// this pass, or holds it for the application's next call (ackhold.go).
	if d.call.holdAcks {
		d.holdTouched(now)
	} else {
		for _, q := range d.call.touched {
			q.eng.EndBatch(now)
			d.touch(q)
		}
	}
	clear(d.call.touched)
	d.call.touched = d.call.touched[:0]
	fired := 0
	if timers {
		fired, next = d.timers(now, true)
	} else {
		next = d.earliest()
	}
	d.endCall(now)
	return n + fired, next
}

// input parses one frame (its ICRC checked through c) and hands it to its
// QP. Called with d.mu held.
func (d *Device) input(frame []byte, pkt *wire.Packet, c *wire.ICRCCache, now time.Time) {
	d.inputParsed(pkt, c.Parse(frame, pkt), now)
}

// inputParsed is input after wire.Parse gave pkt and err (d.mu held): a
// multi-queue device's readers parse outside d.mu (queues.go, preparse).
func (d *Device) inputParsed(pkt *wire.Packet, err error, now time.Time) {
	d.stats.rx.Frames++
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrBadICRC):
			d.stats.rx.BadICRC++
		case errors.Is(err, wire.ErrNotRoCE), errors.Is(err, wire.ErrNotIP):
			d.stats.rx.NotRoCE++
		default:
			d.stats.rx.ParseErrors++
		}
		return
	}
	dst := pkt.DstIP()
	if dst.IsMulticast() {
		d.inputMcast(pkt, dst, now)
		return
	}
	if pkt.Eth != nil && pkt.Eth.Dst() != d.mac {
		d.stats.rx.WrongDst++
		return
	}
	if dst != d.gids[1].Unmap() && netip.AddrFrom16(dst.As16()) != d.gids[1] {
		d.stats.rx.WrongDst++
		return
	}
	// A batch's frames mostly go to the QP of the frame before: the last
	// QP touched in this batch (QPs are created and destroyed under d.mu,
	// which drive holds) is checked before the map.
	qpn := pkt.BTH.DestQP()
	var q *QP
	if k := len(d.call.touched); k > 0 && d.call.touched[k-1].eng.QPN() == qpn {
		q = d.call.touched[k-1]
	} else if q = d.tab.qps[qpn]; q == nil {
		d.stats.rx.NoQP++
		return
	}
	if d.ccInput(q, pkt, now) {
		return
	}
	q.eng.Receive(pkt, now)
	// Remember the QP for EndBatch in drive (consecutive frames of one QP
	// add it once; a repeat later in the batch is harmless). drive's end
	// of batch re-arms its deadline (d.touch), once per batch, not here
	// per frame: nothing reads the deadlines before that.
	if k := len(d.call.touched); k == 0 || d.call.touched[k-1] != q {
		d.call.touched = append(d.call.touched, q)
	}
}

// txBatch collects the frames the engines produce during one call (it
// implements transport.Output). Two buffer sets alternate: the engines fill
// one under d.mu while the other is written to the link under d.tx.mu
// (handoff, write).
//
// On a link that lends its transmit buffers (nic.TxReserver: afxdp's UMEM
// chunks) the sets' buffers are the link's, and the engines build each
// frame where the link sends it from: WriteBatch posts it without a copy.
// A written buffer is the link's again, so write reserves new ones in its
// place; where the link has none to spare, the set's own buffer (heap)
// stands in, and WriteBatch copies that frame as before.
type txBatch struct {
	mu     sync.Mutex // held while frames are written to the link; taken after Device.mu
	link   nic.Link
	bufs   [][]byte
	frames [][]byte
	heap   [][]byte // bufs' own buffers (with res: where the link lent none)
	// The other set, written by the holder of mu.
	spareBufs   [][]byte
	spareFrames [][]byte
	spareHeap   [][]byte
	// res lends the link's transmit buffers (nil: frames are built in
	// heap and copied by WriteBatch).
	res nic.TxReserver
	// The device's capture and clock (pcap.go).
	pcap *satomic.Pointer[PcapWriter]
	now  func() time.Time
}

func (b *txBatch) init(link nic.Link, frameLen int) {
	size := link.BatchSize()
	if size <= 0 {
		size = 32
	}
	size = max(size, 64)
	b.link = link
	mk := func() [][]byte {
		bufs := make([][]byte, size)
		for i := range bufs {
			bufs[i] = make([]byte, frameLen)
		}
		return bufs
	}
	b.heap, b.spareHeap = mk(), mk()
	b.bufs, b.spareBufs = append([][]byte(nil), b.heap...), append([][]byte(nil), b.spareHeap...)
	b.frames, b.spareFrames = make([][]byte, 0, size), make([][]byte, 0, size)
	if r := txReserver(link); r != nil {
		b.res = r
		b.refill(b.bufs, b.heap, size)
		b.refill(b.spareBufs, b.spareHeap, size)
	}
}

// txReserver returns the link's nic.TxReserver, looking through qp's own
// wrappers only (a WrapLink wrapper may drop or copy frames, which would
// leak lent buffers); nil if it has none.
func txReserver(l nic.Link) nic.TxReserver {
	for {
		switch w := l.(type) {
		case *waitedLink:
			l = w.ownedLink.Link
		case *polledLink:
			l = w.ownedLink.Link
		case *ownedLink:
			l = w.Link
		case nic.TxReserver:
			return w
		default:
			return nil
		}
	}
}

// refill gives bufs[0:n], written, new buffers: the link's where it lends
// them, else the set's own (b.mu held, or init).
func (b *txBatch) refill(bufs, heap [][]byte, n int) {
	k := 0
	if b.res != nil {
		k = b.res.ReserveTx(bufs[:n])
	}
	copy(bufs[k:n], heap[k:n])
}

// dropLent puts the sets' own buffers back in place of the link's (d.mu
// and b.mu held), before the link closes and its memory goes away.
func (b *txBatch) dropLent() {
	if b.res == nil {
		return
	}
	b.res = nil
	copy(b.bufs, b.heap)
	copy(b.spareBufs, b.spareHeap)
}

func (b *txBatch) Frame() []byte {
	if len(b.frames) == len(b.bufs) {
		// Full in the middle of a call: write it now, in order after
		// any batch still being written.
		b.mu.Lock()
		b.write(b.frames, b.bufs, b.heap)
		b.mu.Unlock()
		b.frames = b.frames[:0]
	}
	return b.bufs[len(b.frames)]
}

func (b *txBatch) Send(n int) {
	b.frames = append(b.frames, b.bufs[len(b.frames)][:n])
}

// handoff (d.mu held) takes b.mu and swaps the buffer sets, returning the
// frames to write once d.mu is released (nil, without b.mu, when there are
// none): writeSpare writes them. b.mu is held until the previous batch was
// written, so the spare set is free by then.
func (b *txBatch) handoff() [][]byte {
	if len(b.frames) == 0 {
		return nil
	}
	b.mu.Lock()
	out := b.frames
	b.bufs, b.spareBufs = b.spareBufs, b.bufs
	b.heap, b.spareHeap = b.spareHeap, b.heap
	b.frames, b.spareFrames = b.spareFrames[:0], out
	return out
}

// writeSpare writes the frames handoff handed over (b.mu held).
func (b *txBatch) writeSpare() { b.write(b.spareFrames, b.spareBufs, b.spareHeap) }

// flushLocked writes the frames collected so far (d.mu held).
func (b *txBatch) flushLocked() {
	if len(b.frames) == 0 {
		return
	}
	b.mu.Lock()
	b.write(b.frames, b.bufs, b.heap)
	b.mu.Unlock()
	b.frames = b.frames[:0]
}

// write writes frames, built in bufs[0:len(frames)] of the set whose own
// buffers are heap, to the link (b.mu held), and refills the buffers the
// link took.
func (b *txBatch) write(frames, bufs, heap [][]byte) {
	var p *PcapWriter
	if b.pcap != nil {
		p = b.pcap.Load()
	}
	if p != nil && b.res != nil {
		// A lent buffer is the link's once written, and may carry
		// another frame before WriteBatch returns: capture first.
		p.write(b.now, frames)
		p = nil
	}
	off := 0
	for off < len(frames) {
		n, err := b.link.WriteBatch(frames[off:])
		if n > 0 && p != nil {
			p.write(b.now, frames[off:off+n])
		}
		if err != nil || n == 0 {
			break // the link counted the loss; RC recovers by retransmission
		}
		off += n
	}
	if b.res != nil {
		b.refill(bufs, heap, off)
	}
}
