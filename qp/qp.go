package qp

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// InitAttr are the creation attributes of a QP (struct ibv_qp_init_attr).
type InitAttr struct {
	// SendCQ and RecvCQ receive the completions of the send and receive
	// queues (the same CQ may serve both); both are required and must
	// belong to the QP's device.
	SendCQ, RecvCQ *CQ
	// Cap sizes the queues: MaxSendWR and MaxRecvWR outstanding work
	// requests, MaxSendSGE and MaxRecvSGE scatter/gather elements each.
	Cap Caps
	// SQSigAll makes every send WR generate a completion, as if each had
	// SendSignaled (ibv_qp_init_attr.sq_sig_all).
	SQSigAll bool
	// SRQ, when set, is the shared receive queue of the same device the QP
	// takes its receive WRs from (srq.go): Cap.MaxRecvWR and MaxRecvSGE
	// are ignored and QP.PostRecv fails.
	SRQ *SRQ
	// Type is the transport service: QPTypeRC (the zero value),
	// QPTypeUC (uc.go) or QPTypeUD (ud.go).
	Type QPType
	// BlockSelfMcastLoopback keeps the QP's datagrams to a multicast
	// group from being delivered to the QPs of its own device attached to
	// it (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, mckey -l; mcast.go).
	BlockSelfMcastLoopback bool
}

// QP is a queue pair: reliable connected (RC) or, with InitAttr.Type,
// unreliable connected (QPTypeUC, uc.go) or unreliable datagram
// (QPTypeUD, ud.go).
type QP struct {
	dev            *Device
	pd             *PD
	eng            *transport.QP
	sendCQ, recvCQ *CQ
	srq            *SRQ
	destroyed      bool    // guarded by dev.mu
	ackHeld        bool    // under dev.mu: in dev.call.held (ackhold.go)
	holdSkip       bool    // under dev.mu: its last held ACK was not answered (ackhold.go)
	cc             ccState // notification point (cc.go), under dev.mu

	// The device's deadline heap (deadline.go), under dev.mu.
	seq  uint64    // creation order
	hidx int       // index in the heap, -1 when not in it
	dl   time.Time // the deadline it is placed with
	// mcast counts the multicast groups the QP is attached to, under
	// dev.mu (mcast.go): Destroy refuses while it is not zero.
	mcast int
	// noMcastLoop: InitAttr.BlockSelfMcastLoopback.
	noMcastLoop bool
	// hooks forward the engine's frames to the transmit batch of the
	// QP's queue (queues.go); queue is that queue's index. Under dev.mu.
	hooks *qpHooks
	queue int
}

// ErrDestroyed is returned by the calls on a QP after QP.Destroy.
var ErrDestroyed = errors.New("qp: QP destroyed")

// QPN range. 0 and 1 are the IB special QPs; rxe hands out numbers from
// RXE_QPN_MIN (0x11) cyclically (xa_alloc_cyclic), so a freed number is
// reused only after every other one was.
const (
	minQPN = 0x11
	maxQPN = 0xFFFFFF
)

// firstQPN is where a device starts handing out QP numbers: random in
// [minQPN, maxQPN], or minQPN (rxe's RXE_QPN_MIN) when seed is not 0. rxe
// starts every device at 0x11, but goroce runs many devices (processes)
// on one host address, and a peer connected to one of them must not take
// another's QPs for its own stale connections (nvme-rdma's CM REJs them as
// stale). A seeded device is deterministic, and keeps rxe's numbers so the
// seeded captures and their goldens (dump's testdata) stay as they are.
func firstQPN(seed int64) uint32 {
	if seed != 0 {
		return minQPN
	}
	var b [4]byte
	_, _ = crand.Read(b[:]) // never fails (Go 1.24+ crypto/rand)
	return minQPN + binary.LittleEndian.Uint32(b[:])%(maxQPN-minQPN+1)
}

// CreateQP creates a QP (RC, or UD with InitAttr.Type) in the RESET state
// (ibv_create_qp).
func (pd *PD) CreateQP(ia InitAttr) (*QP, error) { return pd.createQP(ia, 0) }

// createQP creates a QP with the next free number, or with number fixed
// when it is not 0 (QP1, the GSI).
func (pd *PD) createQP(ia InitAttr, fixed uint32) (*QP, error) {
	d := pd.dev
	if ia.SendCQ == nil || ia.RecvCQ == nil {
		return nil, fmt.Errorf("qp: create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	}
	if ia.SendCQ.dev != d || ia.RecvCQ.dev != d {
		return nil, fmt.Errorf("qp: create QP: a CQ of another device: %w", ErrInvalidArgument)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if ia.SendCQ.failed() || ia.RecvCQ.failed() {
		return nil, fmt.Errorf("qp: create QP: the CQ is in the error state: %w", ErrCQOverrun)
	}
	srq, err := ia.srqEngine(d)
	if err != nil {
		return nil, err
	}
	qpn := fixed
	if qpn == 0 {
		if qpn, err = d.allocQPN(); err != nil {
			return nil, err
		}
	} else if d.tab.qps[qpn] != nil {
		return nil, fmt.Errorf("qp: create QP: QP number %#x is in use: %w", qpn, ErrInvalidArgument)
	}
	hooks := d.qpHooks()
	eng, err := transport.New(transport.Config{
		QPN: qpn, PD: pd.pd, MRs: d.mrs, Atomics: d.atomics, Caps: transport.Caps(ia.Cap), SQSigAll: ia.SQSigAll,
		SendCQ: ia.SendCQ.sink(), RecvCQ: ia.RecvCQ.sink(), Out: hooks, Events: hooks, PortMaxMTU: d.maxMTU,
		RetryCnt7Infinite: d.cfg.RetryCnt7Infinite, DeviceCounters: &d.stats.counters, SRQ: srq, Type: ia.Type,
		CC: d.cc,
	})
	if err != nil {
		return nil, fmt.Errorf("qp: create QP: %w", err)
	}
	if fixed == 0 {
		d.tab.nextQPN = qpn + 1
	}
	d.tab.qpSeq++
	q := &QP{dev: d, pd: pd, eng: eng, sendCQ: ia.SendCQ, recvCQ: ia.RecvCQ, srq: ia.SRQ, seq: d.tab.qpSeq, hidx: -1,
		noMcastLoop: ia.BlockSelfMcastLoopback}
	hooks.attach(eng, q)
	q.hooks = hooks
	d.pickQueue(q)
	if q.srq != nil {
		q.srq.users++
	}
	d.tab.qps[qpn] = q
	d.tab.qpList = append(d.tab.qpList, q)
	return q, nil
}

// allocQPN returns the next free QP number after the last one handed out,
// wrapping from d.tab.qpnLimit to minQPN. Called with d.mu held.
func (d *Device) allocQPN() (uint32, error) {
	limit := d.tab.qpnLimit
	if span := limit - minQPN + 1; uint32(len(d.tab.qps)) >= span {
		return 0, fmt.Errorf("qp: create QP: all %d QP numbers are in use: %w", span, ErrQueueFull)
	}
	qpn := d.tab.nextQPN
	for {
		if qpn < minQPN || qpn > limit {
			qpn = minQPN
		}
		if d.tab.qps[qpn] == nil {
			return qpn, nil
		}
		qpn++
	}
}

// usable returns why q takes no more posts or modifications (the device
// closed, the QP destroyed), or nil. Called with d.mu held.
func (q *QP) usable() error {
	if q.dev.closed {
		return ErrClosed
	}
	if q.destroyed {
		return fmt.Errorf("qp: QP %#x: %w", q.eng.QPN(), ErrDestroyed)
	}
	return nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.eng.QPN() }

// Type returns the QP's transport service (InitAttr.Type).
func (q *QP) Type() QPType { return q.eng.Type() }

// State returns the current state.
func (q *QP) State() State {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.eng.State()
}

// Query returns the attributes (ibv_query_qp).
func (q *QP) Query() Attr {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return attrOf(q.eng.Attr())
}

// Counters returns this QP's counters.
func (q *QP) Counters() Counters {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.eng.Counters
}

// SetWindow sets how many PSNs the QP's requester may have in flight
// unacknowledged (1..transport.MaxWindow; 0: rxe's 128, the default). A
// goroce extension for a sender whose messages are larger than rxe's
// window (a 128 KiB RDMA WRITE at path MTU 1024 is 128 PSNs): the RC
// responder, rxe's and goroce's alike, has no window of its own, so the
// peer needs nothing. It applies from the requester's next step (a post or
// an ACK); the counter CntWindowFull counts the steps a full window
// stopped.
func (q *QP) SetWindow(n int) error {
	if n < 0 || n > transport.MaxWindow {
		return fmt.Errorf("qp: window %d out of 0..%d: %w", n, transport.MaxWindow, ErrInvalidArgument)
	}
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.eng.SetWindow(uint32(n))
}

// Modify changes state and attributes (ibv_modify_qp). With AttrAV, the
// source GID is taken from the device's table at AV.SGIDIndex and the
// destination MAC is resolved from AV.DGID (the device's neighbour
// resolver, Config.Resolve) within ctx; when ctx has no deadline,
// Config.ResolveTimeout (default DefaultResolveTimeout) bounds it. An
// AV.DMAC that is not all zeros is used as given, without resolving: the
// Ethernet source of the peer's connection request, which the kernel's CM
// puts into the passive side's path the same way (cm_req_handler). a is
// taken by value, like every attribute set of this package; Query returns
// what the QP holds afterwards (the AV with its SGID and MACs).
func (q *QP) Modify(ctx context.Context, a Attr, mask AttrMask) error {
	d := q.dev
	d.mu.Lock()
	err := q.usable()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if mask&AttrAV != 0 {
		sgid, err := d.GID(int(a.AV.SGIDIndex))
		if err != nil {
			return fmt.Errorf("qp: modify: %w: %w", err, transport.ErrInvalidArgument)
		}
		if sgid.Unmap().Is6() && sgid.IsLinkLocalUnicast() {
			return fmt.Errorf("qp: modify: GID index %d is the link-local RoCE v1 style GID; use index 1 (%v): %w",
				a.AV.SGIDIndex, d.gids[1], transport.ErrInvalidArgument)
		}
		a.AV.SGID = sgid
		if d.cfg.RouteHopLimit != 0 {
			a.AV.HopLimit = d.cfg.RouteHopLimit
		}
		if a.AV.DMAC == ([6]byte{}) {
			mac, err := d.resolve(ctx, a.AV.DGID)
			if err != nil {
				return err
			}
			copy(a.AV.DMAC[:], mac)
		}
		a.AV.SMAC = d.mac
	}
	d.mu.Lock()
	if err := q.usable(); err != nil {
		d.mu.Unlock()
		return err
	}
	now := d.now()
	err = q.eng.Modify(a.engine(), mask, now)
	if mask&(AttrAV|AttrDestQPN) != 0 {
		d.pickQueue(q)
	}
	d.touch(q)
	d.endCall(now)
	d.unlock()
	d.drv.kick()
	return err
}

// resolveCall is one Config.Resolve call that every concurrent resolution
// of its IP waits for.
type resolveCall struct {
	done     chan struct{}
	deadline time.Time
	mac      net.HardwareAddr
	err      error
}

// resolve finds ip's MAC through Config.Resolve (or Config.Neighbors). One
// call per IP runs at a time: concurrent resolutions of the same IP (a
// burst of connections to one peer) wait for it instead of each polling
// the neighbour table. The call runs until the deadline of the context
// that started it (or ResolveTimeout), not its cancellation; a caller
// whose ctx ends first stops waiting, and one with a later deadline whose
// call ran out of time starts the next.
func (d *Device) resolve(ctx context.Context, ip GID) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	if d.cfg.Resolve != nil {
		deadline, ok := ctx.Deadline()
		if !ok {
			timeout := d.cfg.ResolveTimeout
			if timeout <= 0 {
				timeout = DefaultResolveTimeout
			}
			deadline = time.Now().Add(timeout)
		}
		for {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("qp: resolving the MAC of %v: %w", ip, err)
			}
			c := d.resolveCall(ctx, ip, deadline)
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("qp: resolving the MAC of %v: %w", ip, ctx.Err())
			}
			if c.err != nil && deadline.After(c.deadline) && time.Now().Before(deadline) {
				continue // the call's time was shorter than ours
			}
			if c.err != nil {
				return nil, fmt.Errorf("qp: resolving the MAC of %v: %w", ip, c.err)
			}
			return c.mac, nil
		}
	}
	if mac, ok := d.cfg.Neighbors[ip]; ok {
		return mac, nil
	}
	return nil, fmt.Errorf("qp: no neighbour entry for %v (wrong GID or peer address?)", ip)
}

// resolveCall returns the Config.Resolve call in progress for ip, starting
// one that runs until deadline when there is none.
func (d *Device) resolveCall(ctx context.Context, ip GID, deadline time.Time) *resolveCall {
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	if c := d.res.calls[ip]; c != nil {
		return c
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	c := &resolveCall{done: make(chan struct{}), deadline: deadline}
	if d.res.calls == nil {
		d.res.calls = map[GID]*resolveCall{}
	}
	d.res.calls[ip] = c
	go func() {
		defer cancel()
		c.mac, c.err = d.cfg.Resolve(cctx, ip)
		d.res.mu.Lock()
		delete(d.res.calls, ip)
		d.res.mu.Unlock()
		close(c.done)
	}()
	return c
}

// PostSend posts a send work request (ibv_post_send). It fails with
// ErrClosed after Device.Close, ErrDestroyed after Destroy, and
// ErrCQOverrun once the QP's send CQ overran (the QP is then in ERR).
func (q *QP) PostSend(wr *SendWR) error {
	d := q.dev
	d.mu.Lock()
	if err := q.postable(q.sendCQ); err != nil {
		d.mu.Unlock()
		return err
	}
	d.postFlush(q)
	now := d.now()
	err := q.eng.PostSend(wr.engine(), now)
	d.touch(q)
	d.endCall(now)
	d.drv.unlockPost(now)
	return err
}

// postable returns why a post to q (whose completions go to cq) must fail,
// or nil. Called with d.mu held.
func (q *QP) postable(cq *CQ) error {
	if err := q.usable(); err != nil {
		return err
	}
	if cq.failed() {
		return fmt.Errorf("qp: QP %#x is in ERR: its CQ overran: %w", q.eng.QPN(), ErrCQOverrun)
	}
	return nil
}

// PostSendList posts a list of work requests under one lock, and writes the
// frames they produce in one batch: one system call instead of one per WR
// (ibv_post_send with a chained list). It returns how many were posted; on
// an error, wrs[n] is the request that failed (ibv_post_send's bad_wr).
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	d := q.dev
	d.mu.Lock()
	if err := q.postable(q.sendCQ); err != nil {
		d.mu.Unlock()
		return 0, err
	}
	d.postFlush(q)
	now := d.now()
	n, err := q.eng.PostSendList(sendWRs(wrs), now)
	d.touch(q)
	d.endCall(now)
	d.drv.unlockPost(now)
	return n, err
}

// PostRecv posts a receive work request (ibv_post_recv). It fails like
// PostSend, with the receive CQ.
func (q *QP) PostRecv(wr *RecvWR) error {
	d := q.dev
	d.mu.Lock()
	if err := q.postable(q.recvCQ); err != nil {
		d.mu.Unlock()
		return err
	}
	err := q.eng.PostRecv(wr.engine())
	d.touch(q)
	d.endCall(d.now())
	d.unlock()
	return err
}

// PostRecvList posts a list of receive work requests under one lock
// (ibv_post_recv with a chained list). It returns how many were posted; on
// an error, wrs[n] is the request that failed (ibv_post_recv's bad_wr).
func (q *QP) PostRecvList(wrs []RecvWR) (int, error) {
	d := q.dev
	d.mu.Lock()
	if err := q.postable(q.recvCQ); err != nil {
		d.mu.Unlock()
		return 0, err
	}
	n := 0
	var err error
	for n < len(wrs) {
		if err = q.eng.PostRecv(wrs[n].engine()); err != nil {
			break
		}
		n++
	}
	d.touch(q)
	d.endCall(d.now())
	d.unlock()
	return n, err
}

// Destroy removes the QP (ibv_destroy_qp): it receives, sends and
// completes nothing more, outstanding work requests included, and its QP
// number becomes free for reuse. Later calls on it fail with ErrDestroyed.
func (q *QP) Destroy() error {
	d := q.dev
	d.mu.Lock()
	defer d.unlock()
	if q.destroyed {
		return fmt.Errorf("qp: QP %#x: %w", q.eng.QPN(), ErrDestroyed)
	}
	if q.mcast > 0 {
		return fmt.Errorf("qp: QP %#x: attached to %d multicast groups: %w", q.eng.QPN(), q.mcast, ErrQPBusy)
	}
	if q.ackHeld {
		// Its held ACK leaves (with the others), as it would have
		// before the application saw the completion it acknowledges.
		d.flushHeld()
	}
	q.destroyed = true
	if q.srq != nil {
		q.srq.users--
	}
	d.deadlines.heap.remove(q)
	delete(d.tab.qps, q.QPN())
	for i, x := range d.tab.qpList {
		if x == q {
			d.tab.qpList = append(d.tab.qpList[:i], d.tab.qpList[i+1:]...)
			break
		}
	}
	return nil
}

// Remote describes the peer of a connection, as exchanged out of band by
// rc_pingpong / perftest (QPN, PSN, GID) plus the path MTU to use.
type Remote struct {
	QPN uint32 // the peer QP's number
	PSN uint32 // the first PSN the peer sends (its SQ PSN): our RQ PSN
	GID GID    // the peer's GID (its IP address; IPv4-mapped or plain)
	MTU MTU    // path MTU; zero: the device's active MTU
}

// ConnectOptions are the local choices for Connect; zero values take the
// defaults perftest uses (PROTOCOL.md §4).
type ConnectOptions struct {
	SGIDIndex       uint8
	SQPSN           uint32
	Access          Access // QP access flags; default REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC
	MaxRdAtomic     uint8  // default 16
	MaxDestRdAtomic uint8  // default 16
	Timeout         uint8  // default 14 (≈67 ms)
	RetryCnt        uint8  // default 7
	RNRRetry        uint8  // default 7 (infinite)
	MinRNRTimer     uint8  // default 12 (640 µs)
	HopLimit        uint8  // default 64
	TrafficClass    uint8
	SetRetry        bool // use RetryCnt/RNRRetry/Timeout even when zero
}

// Connect moves the QP from RESET (or INIT) through INIT and RTR to RTS,
// the way rc_pingpong and perftest do with explicit ibv_modify_qp calls. A
// UC QP gets UC's attributes only (no ACK timeout, retry counts, READ
// depths or RNR timer), as uc_pingpong and perftest -c UC give it.
// ctx bounds the resolution of the peer's MAC (see Modify).
func (q *QP) Connect(ctx context.Context, r Remote, o ConnectOptions) error {
	if o.Access == 0 {
		o.Access = RemoteWrite | RemoteRead | RemoteAtomic
	}
	if o.MaxRdAtomic == 0 {
		o.MaxRdAtomic = 16
	}
	if o.MaxDestRdAtomic == 0 {
		o.MaxDestRdAtomic = 16
	}
	if !o.SetRetry {
		if o.Timeout == 0 {
			o.Timeout = 14
		}
		if o.RetryCnt == 0 {
			o.RetryCnt = 7
		}
		if o.RNRRetry == 0 {
			o.RNRRetry = 7
		}
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 12
	}
	if o.SGIDIndex == 0 {
		o.SGIDIndex = 1 // the RoCEv2 IPv4-mapped (or IPv6) GID; index 0 is link-local
	}
	if o.HopLimit == 0 {
		o.HopLimit = 64
	}
	if r.MTU == 0 {
		r.MTU = q.dev.maxMTU
	}
	if q.State() == StateReset {
		if err := q.Modify(ctx, Attr{State: StateInit, Port: 1, AccessFlags: o.Access},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			return err
		}
	}
	if q.eng.Type() == QPTypeUC {
		// UC takes no reliability attributes (ibv_uc_pingpong's calls).
		if err := q.Modify(ctx, Attr{State: StateRTR, PathMTU: r.MTU, DestQPN: r.QPN, RQPSN: wire.PSN(r.PSN),
			AV: AV{DGID: r.GID, SGIDIndex: o.SGIDIndex, HopLimit: o.HopLimit, TrafficClass: o.TrafficClass}},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN); err != nil {
			return err
		}
		return q.Modify(ctx, Attr{State: StateRTS, SQPSN: wire.PSN(o.SQPSN)}, AttrState|AttrSQPSN)
	}
	if err := q.Modify(ctx, Attr{State: StateRTR, PathMTU: r.MTU, DestQPN: r.QPN, RQPSN: wire.PSN(r.PSN),
		MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer,
		AV: AV{DGID: r.GID, SGIDIndex: o.SGIDIndex, HopLimit: o.HopLimit, TrafficClass: o.TrafficClass}},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|
			AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
		return err
	}
	return q.Modify(ctx, Attr{State: StateRTS, Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry,
		SQPSN: wire.PSN(o.SQPSN), MaxRdAtomic: o.MaxRdAtomic},
		AttrState|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|
			AttrMaxQPRdAtomic)
}
