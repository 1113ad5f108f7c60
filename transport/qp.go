package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/atomic"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// Output receives the frames an engine sends. Frame returns a buffer for the
// next frame (at least MaxFrameLen bytes); Send marks its first n bytes as a
// complete frame. The owner transmits frames in batches, in order.
type Output interface {
	Frame() []byte
	Send(n int)
}

// CompletionQueue receives work completions. Complete must not call back
// into the engine, and must not keep wc: it points into the engine, which
// reuses it for the next completion.
type CompletionQueue interface {
	Complete(wc *WC)
}

// Defaults and limits, mostly rxe's (rxe_param.h, rxe_req.c).
const (
	// MaxUnackedPSNs is the requester window (RXE_MAX_UNACKED_PSNS), the
	// default of QP.SetWindow.
	MaxUnackedPSNs = 128
	// MaxWindow bounds QP.SetWindow: far below the 2^23 PSN distance an RC
	// responder tells apart from a duplicate.
	MaxWindow = 1 << 16
	// MaxPktPerAck: inside long messages AckReq is set on every
	// (MaxPktPerAck+2)th packet, as rxe's `noack_pkts++ > RXE_MAX_PKT_PER_ACK`.
	MaxPktPerAck = 64
	// MaxInlineData is the largest SendInline payload: rxe's
	// RXE_MAX_INLINE_DATA, so a QP created for rxe's limit works here too.
	MaxInlineData = 400
	// MaxRdAtomic bounds max_rd_atomic / max_dest_rd_atomic (rxe: 128).
	MaxRdAtomic = 128
	// MaxMessageLen bounds a message (RETH DMA length ≤ 2^31).
	MaxMessageLen = 1 << 31
)

// Config fixes a QP's identity and environment at creation.
type Config struct {
	QPN     uint32
	PD      *memreg.PD
	MRs     *memreg.Table
	Atomics *atomic.Executor
	Caps    Caps
	// SQSigAll: every send WR generates a completion (ibv_qp_init_attr.sq_sig_all).
	SQSigAll bool
	SendCQ   CompletionQueue
	RecvCQ   CompletionQueue
	Out      Output
	// PortMaxMTU is the largest path MTU the port allows (from the netdev MTU).
	PortMaxMTU MTU
	// RetryCnt7Infinite selects rxe's behaviour, where retry_cnt == 7 retries
	// forever. The default (false) follows IBTA and mlx5: 7 means 7 retries.
	RetryCnt7Infinite bool
	// DeviceCounters, when set, is incremented along with the QP's own counters.
	DeviceCounters *Counters
	// SRQ, when set, is the shared receive queue the responder takes its
	// receive WQEs from; the QP has no receive queue of its own (Caps'
	// MaxRecvWR and MaxRecvSGE are ignored) and PostRecv fails.
	SRQ *SRQ
	// Events, when set, receives the QP's events (events.go): its
	// affiliated errors, COMM_EST, SQ_DRAINED, the SRQ limit and Last WQE
	// Reached.
	Events EventSink
	// Type is the transport service: RC (the zero value), UC (uc.go) or
	// UD (ud.go).
	Type QPType
	// CC, when set, turns congestion control on for an RC QP (cc.go):
	// ECT(0) on every frame, DCQCN pacing of the requester. The QP only
	// reads it.
	CC *DCQCNParams
}

// QP is the RC engine of one queue pair. It is a deterministic state
// machine: its inputs are work requests, received packets and the current
// time; its outputs are frames (Output), completions (CompletionQueue),
// events (EventSink) and its next deadline. It has no goroutine, no timer and no lock: its owner
// serialises every call. See the package documentation for the model.
type QP struct {
	cfg  Config
	attr Attr
	mtu  uint32
	// path4 is the IPv4 header's source and destination address bytes
	// (offsets 12-19) a packet on attr.AV carries, when both of its GIDs
	// are IPv4 (path4ok): Receive's address check compares them at once.
	path4   [8]byte
	path4ok bool

	sq   sendQueue
	out  emitter
	req  requester
	comp completer
	resp responder
	ud   udState

	// wc is the completion handed to a CompletionQueue (see completion).
	wc WC
	// pace is the DCQCN reaction point and pacer; nil without Config.CC.
	pace *pacer

	// sqDraining is set on entering SQD and cleared when EventSQDrained
	// reports the drain (rxe attr.sq_draining).
	sqDraining bool
	// commEstDone: EventCommEst was reported, or the QP went past RTR
	// without it.
	commEstDone bool
	// window is the requester window (SetWindow); 0 means MaxUnackedPSNs.
	window uint32

	Counters Counters
}

// SetWindow sets the requester window, the PSNs the QP may have sent and
// not yet seen acknowledged, to n (1..MaxWindow; 0 restores
// MaxUnackedPSNs, rxe's window, the default). A goroce extension: rxe's
// window limits its own requester only, and an RC responder (rxe_resp.c
// check_psn, IBTA 9.7.5.1) takes any request PSN ahead of the expected one
// as out of sequence and any behind it as a duplicate, without a window of
// its own, so a larger window on this side needs nothing of the peer.
//
// Every packet sent after a lost one until the peer's NAK or the ACK
// timeout is sent again (go-back-N), so a window wider than
// MaxUnackedPSNs narrows to it at each go-back-N and widens again once
// the PSNs then in flight and a whole wide window after them were
// acknowledged without another: on a lossy path the QP sends as rxe does.
// The window takes effect at the requester's next step; a window smaller
// than what is in flight only stops new packets.
func (q *QP) SetWindow(n uint32) error {
	if n > MaxWindow {
		return fmt.Errorf("transport: window %d beyond %d: %w", n, MaxWindow, ErrInvalidArgument)
	}
	q.window = n
	q.req.narrow = false
	return nil
}

// Window returns the requester window in force now (SetWindow).
func (q *QP) Window() uint32 {
	r := &q.req
	if q.window == 0 {
		return MaxUnackedPSNs
	}
	if r.narrow {
		if r.comp.compPSN.Before(r.narrowUntil) {
			return MaxUnackedPSNs
		}
		r.narrow = false
	}
	return q.window
}

// completion delivers *wc to cq. The CQE passes through q.wc: a pointer to
// a local WC given to the CompletionQueue interface would escape, one heap
// allocation per completion on the data path.
func (q *QP) completion(cq CompletionQueue, wc *WC) {
	q.wc = *wc
	cq.Complete(&q.wc)
}

// New creates a QP in the RESET state.
func New(cfg Config) (*QP, error) {
	if cfg.PD == nil || cfg.MRs == nil || cfg.Out == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("transport: new QP: PD, MR table, output and both CQs are required: %w", ErrInvalidArgument)
	}
	if cfg.QPN == 0 || cfg.QPN > 0xFFFFFF {
		return nil, fmt.Errorf("transport: new QP: QPN %#x out of range: %w", cfg.QPN, ErrInvalidArgument)
	}
	c := &cfg.Caps
	if cfg.SRQ != nil {
		// No receive queue: the SRQ's sizes apply (Caps reports zeros).
		c.MaxRecvWR, c.MaxRecvSGE = 1, 1
	}
	if c.MaxSendWR <= 0 || c.MaxRecvWR <= 0 || c.MaxSendWR > 1<<16 || c.MaxRecvWR > 1<<16 {
		return nil, fmt.Errorf("transport: new QP: queue sizes %d/%d out of range 1..65536: %w", c.MaxSendWR, c.MaxRecvWR, ErrInvalidArgument)
	}
	if c.MaxSendSGE <= 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE <= 0 {
		c.MaxRecvSGE = 1
	}
	if c.MaxSendSGE > MaxSGE || c.MaxRecvSGE > MaxSGE {
		return nil, fmt.Errorf("transport: new QP: at most %d SGEs: %w", MaxSGE, ErrInvalidArgument)
	}
	if cfg.Atomics == nil {
		cfg.Atomics = atomic.NewExecutor()
	}
	if cfg.PortMaxMTU == 0 {
		cfg.PortMaxMTU = MTU4096
	}
	q := &QP{cfg: cfg}
	if cfg.CC != nil && cfg.Type == QPTypeRC {
		// DCQCN here is RC's: UD datagrams go out unmarked and unpaced.
		if err := cfg.CC.Check(); err != nil {
			return nil, fmt.Errorf("transport: new QP: %w", err)
		}
		q.pace = &pacer{cc: newDCQCN(cfg.CC)}
	}
	q.sq.ring = make([]sendWQE, c.MaxSendWR)
	q.out = emitter{qp: q, out: cfg.Out}
	q.req = requester{qp: q, sq: &q.sq, out: &q.out, comp: &q.comp}
	q.comp = completer{qp: q, sq: &q.sq, req: &q.req}
	rqLen := c.MaxRecvWR
	if cfg.SRQ != nil {
		rqLen, c.MaxRecvWR, c.MaxRecvSGE = 0, 0, 0
	}
	q.resp = responder{qp: q, out: &q.out, rq: make([]recvWQE, rqLen), respOpcode: -1, pend: make([]pending, 4)}
	q.attr.State = StateReset
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.cfg.QPN }

// State returns the current state.
func (q *QP) State() State { return q.attr.State }

// Attr returns a copy of the current attributes (ibv_query_qp).
func (q *QP) Attr() Attr {
	a := q.attr
	a.SQPSN = q.req.nextPSN
	a.RQPSN = q.resp.expPSN
	return a
}

// Caps returns the queue capacities.
func (q *QP) Caps() Caps { return q.cfg.Caps }

// Modify changes the state and attributes like ibv_modify_qp: the mask must
// hold exactly the attributes the transition requires, plus optional ones.
func (q *QP) Modify(a *Attr, mask AttrMask, now time.Time) error {
	cur := q.attr.State
	if mask&AttrCurState != 0 && a.CurState != cur {
		return &ModifyError{From: cur, To: a.State, Reason: fmt.Sprintf("cur_state %v does not match %v", a.CurState, cur)}
	}
	next := cur
	if mask&AttrState != 0 {
		next = a.State
	}
	check := checkTransition
	switch q.cfg.Type {
	case QPTypeUD:
		check = checkUDTransition
	case QPTypeUC:
		check = checkUCTransition
	}
	if err := check(cur, next, mask); err != nil {
		return err
	}
	if err := q.checkValues(a, mask, cur, next); err != nil {
		return err
	}
	if mask&AttrAccessFlags != 0 {
		q.attr.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		q.attr.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		q.attr.Port = a.Port
	}
	if mask&AttrQKey != 0 {
		q.attr.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		q.attr.AV = a.AV
		q.setPath4()
	}
	if mask&AttrPathMTU != 0 {
		q.attr.PathMTU = a.PathMTU
		q.mtu = uint32(a.PathMTU.Bytes())
	}
	if mask&AttrDestQPN != 0 {
		q.attr.DestQPN = a.DestQPN
	}
	if mask&AttrRQPSN != 0 {
		q.attr.RQPSN = a.RQPSN
		q.resp.setPSN(a.RQPSN)
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		q.resp.setResources(a.MaxDestRdAtomic)
	}
	if mask&AttrMinRNRTimer != 0 {
		q.attr.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		q.attr.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		q.attr.RetryCnt = a.RetryCnt
		q.comp.retryLeft = int(a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 {
		q.attr.RNRRetry = a.RNRRetry
		q.comp.rnrLeft = int(a.RNRRetry)
	}
	if mask&AttrSQPSN != 0 {
		q.attr.SQPSN = a.SQPSN
		q.req.setPSN(a.SQPSN)
		q.comp.compPSN = a.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		q.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&(AttrAV|AttrDestQPN) != 0 {
		q.out.setPath(&q.attr.AV, q.cfg.QPN, q.attr.DestQPN)
	}
	if next != cur {
		q.enter(next, now)
	}
	return nil
}

func (q *QP) checkValues(a *Attr, mask AttrMask, cur, next State) error {
	bad := func(format string, args ...any) error {
		return &ModifyError{From: cur, To: next, Reason: fmt.Sprintf(format, args...)}
	}
	if mask&AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU > q.cfg.PortMaxMTU) {
		return bad("path_mtu %d not in 256..%d", a.PathMTU.Bytes(), q.cfg.PortMaxMTU.Bytes())
	}
	if mask&AttrDestQPN != 0 && (a.DestQPN == 0 || a.DestQPN > 0xFFFFFF) {
		return bad("dest_qp_num %#x out of range", a.DestQPN)
	}
	if mask&AttrRQPSN != 0 && !a.RQPSN.Valid() {
		return bad("rq_psn %#x is not 24 bits", uint32(a.RQPSN))
	}
	if mask&AttrSQPSN != 0 && !a.SQPSN.Valid() {
		return bad("sq_psn %#x is not 24 bits", uint32(a.SQPSN))
	}
	if mask&AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad("retry_cnt %d > 7", a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("rnr_retry %d > 7", a.RNRRetry)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout %d > 31", a.Timeout)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min_rnr_timer %d > 31", a.MinRNRTimer)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic {
		return bad("max_rd_atomic %d > %d", a.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic {
		return bad("max_dest_rd_atomic %d > %d", a.MaxDestRdAtomic, MaxRdAtomic)
	}
	if mask&AttrAV != 0 {
		av := &a.AV
		if !av.DGID.IsValid() || !av.SGID.IsValid() {
			return bad("address vector needs a GRH with source and destination GIDs (RoCE)")
		}
		if av.DGID.Unmap().Is4() != av.SGID.Unmap().Is4() {
			return bad("source GID %v and destination GID %v are of different types", av.SGID, av.DGID)
		}
	}
	if mask&AttrPort != 0 && a.Port != 1 {
		return bad("port %d does not exist (goroce devices have port 1)", a.Port)
	}
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return bad("pkey_index %d does not exist (only index 0, P_Key 0xFFFF)", a.PKeyIndex)
	}
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead|memreg.RemoteAtomic|
		memreg.FlushGlobal|memreg.FlushPersistent) != 0 {
		return bad("qp_access_flags %v not supported", a.AccessFlags)
	}
	return nil
}

// enter performs the side effects of a state change.
func (q *QP) enter(next State, now time.Time) {
	prev := q.attr.State
	q.attr.State = next
	if next > StateRTR {
		q.commEstDone = true
	}
	switch next {
	case StateReset:
		q.resetQueues()
	case StateErr:
		if prev != StateErr {
			q.flushAll()
			q.lastWQE()
		}
	case StateRTS:
		if prev == StateSQD {
			q.req.pump(now)
		}
	case StateSQD:
		if prev != StateSQD {
			q.sqDraining = true
			q.sqdCheck()
		}
	}
	if next != StateSQD {
		q.sqDraining = false
	}
}

func (q *QP) resetQueues() {
	q.sq.reset()
	q.req.reset()
	q.comp.reset()
	q.resp.reset()
	if q.pace != nil {
		*q.pace = pacer{cc: newDCQCN(q.cfg.CC)}
	}
	a := q.attr
	q.attr = Attr{State: StateReset, AccessFlags: a.AccessFlags}
	q.setPath4()
}

// setPath4 derives path4 from attr.AV.
func (q *QP) setPath4() {
	src, dst := q.attr.AV.DGID.Unmap(), q.attr.AV.SGID.Unmap()
	q.path4ok = src.Is4() && dst.Is4()
	if q.path4ok {
		s4, d4 := src.As4(), dst.As4()
		copy(q.path4[:4], s4[:])
		copy(q.path4[4:], d4[:])
	}
}

// toErr moves the QP to ERR after a failure in one of its roles (fail
// reports the failure first).
func (q *QP) toErr() {
	prev := q.attr.State
	q.attr.State = StateErr
	q.commEstDone = true
	q.flushAll()
	if prev != StateErr {
		q.lastWQE()
	}
}

// flushAll completes every outstanding send and receive WQE with
// WR_FLUSH_ERR (the QP is in ERR) and stops every timer.
func (q *QP) flushAll() {
	q.comp.flush()
	q.resp.flush()
	q.resp.dropPending()
	q.comp.retryDeadline, q.req.rnrDeadline = time.Time{}, time.Time{}
	if q.pace != nil {
		q.pace.wait = false
	}
}

// lastWQE reports, on a QP with an SRQ that just entered ERR, that it
// takes no more WQEs from the SRQ (EventLastWQE).
func (q *QP) lastWQE() {
	if q.cfg.SRQ != nil {
		q.emit(Event{Kind: EventLastWQE})
	}
}

// Deadline returns the next time Tick must be called, if any: the earliest
// deadline of the three roles.
func (q *QP) Deadline() (time.Time, bool) {
	d, ok := q.req.deadline()
	if t, has := q.comp.deadline(); has && (!ok || t.Before(d)) {
		d, ok = t, true
	}
	if t, has := q.resp.deadline(); has && (!ok || t.Before(d)) {
		d, ok = t, true
	}
	return d, ok
}

// Tick runs the timers that expired at now: each role whose deadline has
// passed handles its timeout. The sending roles run in RTS and SQD, the
// responder from RTR on.
func (q *QP) Tick(now time.Time) {
	if st := q.attr.State; st == StateRTS || st == StateSQD {
		if d, ok := q.req.deadline(); ok && !now.Before(d) {
			q.req.onTimeout(now)
		}
		if d, ok := q.comp.deadline(); ok && !now.Before(d) {
			q.comp.onTimeout(now)
		}
	}
	if st := q.attr.State; st >= StateRTR && st != StateErr {
		if d, ok := q.resp.deadline(); ok && !now.Before(d) {
			q.resp.onTimeout(now)
		}
	}
}

// EndBatch ends a batch of received packets: the responder sends the one
// cumulative ACK it owes for the requests of the batch that asked for one
// (AckReq). The owner calls it after handing a batch of received frames to
// its QPs and before writing out the frames they produced, so the ACK
// leaves in the same write as the requests of that pass. An owner that
// never calls it loses nothing: an owed ACK makes Deadline the time of the
// last call, and Tick sends it.
func (q *QP) EndBatch(now time.Time) {
	if st := q.attr.State; st >= StateRTR && st != StateErr {
		q.resp.endBatch(now)
	}
}

// HoldAck ends a batch of received packets like EndBatch, but an owed ACK
// that nothing else is queued before waits: it leaves with the owner's next
// EndBatch (typically in the same transmit batch as the next request the
// application posts, so the peer gets both in one wake-up), or by until,
// when Deadline makes the owner's Tick send it; a later HoldAck never
// extends the wait. It reports whether an ACK is held. An ACK acknowledges
// every earlier request, so holding it only delays the requester's
// completions, by at most until - now; NAKs, ATOMIC ACKs and READ
// responses are never held.
func (q *QP) HoldAck(now, until time.Time) bool {
	if st := q.attr.State; st >= StateRTR && st != StateErr {
		return q.resp.holdAck(now, until)
	}
	return false
}

// PostSend queues a send work request (ibv_post_send) and transmits what
// the window allows. In the ERR state the request is completed at once with
// WR_FLUSH_ERR, as rxe does.
func (q *QP) PostSend(wr *SendWR, now time.Time) error {
	if q.cfg.Type == QPTypeUD {
		err := q.udPostSend(wr, now)
		if err == nil {
			q.countSend(wr.Opcode)
		}
		return err
	}
	st := q.attr.State
	if st != StateRTS && st != StateSQD && st != StateErr {
		return fmt.Errorf("post send in state %v: %w", st, ErrInvalidArgument)
	}
	if err := q.req.post(wr); err != nil {
		return err
	}
	q.countSend(wr.Opcode)
	if st == StateErr {
		q.comp.flush()
		return nil
	}
	q.req.pump(now)
	return nil
}

// PostSendList posts wrs in order and then sends what they allow in one
// pass, where PostSend sends after each: the requester's per-pass work
// (state checks, ACK timer, retiring) is paid once per list. It returns how
// many were posted; on an error wrs[n] is the request that failed. A send
// queue that fills up in the middle of the list is pumped once (a UC WRITE
// completes when sent, freeing its slot) before the post fails.
func (q *QP) PostSendList(wrs []SendWR, now time.Time) (int, error) {
	if q.cfg.Type == QPTypeUD {
		for n := range wrs {
			if err := q.PostSend(&wrs[n], now); err != nil {
				return n, err
			}
		}
		return len(wrs), nil
	}
	st := q.attr.State
	if st != StateRTS && st != StateSQD && st != StateErr {
		return 0, fmt.Errorf("post send in state %v: %w", st, ErrInvalidArgument)
	}
	n, pumped := 0, 0
	var err error
	for n < len(wrs) {
		wr := &wrs[n]
		if err = q.req.post(wr); err != nil {
			if errors.Is(err, ErrQueueFull) && n > pumped && st != StateErr {
				q.req.pump(now)
				pumped = n
				continue
			}
			break
		}
		q.countSend(wr.Opcode)
		n++
	}
	if n == 0 {
		return 0, err
	}
	if st == StateErr {
		q.comp.flush()
		return n, err
	}
	q.req.pump(now)
	return n, err
}

// PostRecv queues a receive work request (ibv_post_recv). Allowed from INIT
// on; in ERR the request is flushed at once.
func (q *QP) PostRecv(wr *RecvWR) error { return q.resp.post(wr) }

// Receive processes one received, parsed and ICRC-checked packet addressed
// to this QP: requests go to the responder, responses to the completer.
func (q *QP) Receive(p *wire.Packet, now time.Time) {
	if q.cfg.Type == QPTypeUD {
		q.udReceive(p)
		return
	}
	// rxe_recv.c check_addr: the IP addresses must match the QP's path.
	if ip := p.IPv4; q.path4ok && len(ip) >= wire.IPv4Len {
		if [8]byte(ip[12:20]) != q.path4 {
			q.inc(CntRcvdBadAddr)
			return
		}
	} else if av := &q.attr.AV; p.SrcIP() != av.DGID.Unmap() || p.DstIP() != av.SGID.Unmap() {
		q.inc(CntRcvdBadAddr)
		return
	}
	if p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		q.inc(CntRcvdBadPKey)
		return
	}
	op := p.Opcode()
	info := op.Info()
	if q.cfg.Type == QPTypeUC {
		// A UC QP takes UC requests only; nothing answers them (uc.go).
		if op.Transport() != wire.TransportUC || !info.Valid || !info.Request {
			q.inc(CntRcvdBadOpcode)
			return
		}
		if q.attr.State < StateRTR || q.attr.State == StateErr {
			q.inc(CntRcvdWrongState)
			return
		}
		q.inc(CntRcvdPkts)
		q.resp.ucReceive(p, now)
		q.commEst()
		return
	}
	if op.Transport() != wire.TransportRC || !info.Valid {
		q.inc(CntRcvdBadOpcode)
		return
	}
	if info.Request {
		if q.attr.State < StateRTR || q.attr.State == StateErr {
			q.inc(CntRcvdWrongState)
			return
		}
		// rcvd_pkts counts what passed these checks, as rxe_rcv counts
		// RXE_CNT_RCVD_PKTS only after hdr_check (state, addresses, P_Key).
		q.inc(CntRcvdPkts)
		q.resp.receive(p, now)
		q.commEst()
	} else {
		if q.attr.State != StateRTS && q.attr.State != StateSQD {
			q.inc(CntRcvdWrongState)
			return
		}
		q.inc(CntRcvdPkts)
		q.comp.receive(p, now)
	}
}

func (q *QP) inc(c Counter) {
	q.Counters[c]++
	if q.cfg.DeviceCounters != nil {
		q.cfg.DeviceCounters[c]++
	}
}

// countSend counts a posted SEND work request (rdma_sends; see
// docs/metrics.md for how this differs from rxe, which counts at
// completion).
func (q *QP) countSend(op WROpcode) {
	switch op {
	case WRSend, WRSendWithImm, WRSendWithInv:
		q.inc(CntRDMASends)
	}
}

// recvCompletion delivers a receive completion to Config.RecvCQ, counting
// a successful one (rdma_recvs, as rxe_resp.c do_complete counts
// RXE_CNT_RDMA_RECV).
func (q *QP) recvCompletion(wc *WC) {
	if wc.Status == WCSuccess {
		q.inc(CntRDMARecvs)
	}
	q.completion(q.cfg.RecvCQ, wc)
}

// walkSGL resolves the byte range [off, off+n) of an SGL, region by region,
// and calls fn with each piece and its position inside the range.
func (q *QP) walkSGL(sgl []SGE, off, n uint32, write bool, fn func(mem []byte, pos uint32)) error {
	pos := uint32(0)
	for _, s := range sgl {
		if n == 0 {
			break
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		take := min(s.Length-off, n)
		mem, err := q.cfg.MRs.Local(s.LKey, q.cfg.PD, write, s.Addr+uint64(off), take)
		if err != nil {
			return err
		}
		fn(mem, pos)
		pos += take
		n -= take
		off = 0
	}
	if n != 0 {
		return errSGLShort
	}
	return nil
}

var errSGLShort = errors.New("scatter/gather list shorter than the data")
