package transport

import (
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
	// MaxUnackedPSNs is the requester window (RXE_MAX_UNACKED_PSNS).
	MaxUnackedPSNs = 128
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
}

type wqeState uint8

const (
	wqePosted   wqeState = iota // no PSN assigned yet
	wqeSending                  // PSNs assigned, not every packet sent yet
	wqeSent                     // every packet (or the READ request) sent
	wqeComplete                 // completed or flushed; waiting to be retired in order
)

type sendWQE struct {
	wr       SendWR
	sgl      [MaxSGE]SGE
	inline   []byte // SendInline data, copied at post time
	length   uint32 // total bytes of the SGL (or the inline data)
	state    wqeState
	firstPSN wire.PSN
	lastPSN  wire.PSN
	npkts    uint32
	readDone uint32 // bytes of READ response placed so far
	status   WCStatus
}

type recvWQE struct {
	wrID   uint64
	sgl    [MaxSGE]SGE
	nsge   int
	length uint32
}

// resource is one entry of the responder's READ resource ring (rxe's
// resp_res), kept to answer duplicate READ requests. Executed atomics are
// kept in an atomic.History.
type resource struct {
	valid    bool
	firstPSN wire.PSN
	lastPSN  wire.PSN
	va       uint64
	rkey     uint32
	length   uint32
}

// QP is the RC engine of one queue pair: requester, completer and responder.
// It is a deterministic state machine: its inputs are work requests,
// received packets and the current time; its outputs are frames (Output),
// completions (CompletionQueue) and its next deadline. It has no goroutine,
// no timer and no lock: its owner serialises every call.
type QP struct {
	cfg  Config
	attr Attr
	mtu  uint32

	tmpl wire.Frame // outer headers for every frame this QP sends
	ipID uint16

	// Send queue: a ring indexed by monotonically increasing counters.
	// [sqHead, sqReq) are in flight (PSNs assigned), sqReq is the WQE the
	// requester works on, [sqReq, sqTail) still have packets to send.
	sq                    []sendWQE
	sqHead, sqReq, sqTail uint64

	// Requester.
	nextPSN   wire.PSN // PSN of the next packet the requester sends
	psnEnd    wire.PSN // one past the last PSN assigned to any WQE
	sentEnd   wire.PSN // one past the highest PSN sent so far
	noackPkts int
	rdAtomic  int // READ/atomic WQEs in flight

	// Completer.
	compPSN       wire.PSN // oldest PSN not yet acknowledged
	retryLeft     int
	rnrLeft       int
	retryDeadline time.Time // local ACK timeout; zero = not armed
	rnrDeadline   time.Time // RNR back-off; zero = not waiting
	gapRetryPSN   wire.PSN  // compPSN at which a read-response gap started a retry
	gapRetried    bool

	// Receive queue.
	rq             []recvWQE
	rqHead, rqTail uint64

	// Responder.
	expPSN     wire.PSN
	ackPSN     wire.PSN // one past the last SEND/WRITE/atomic packet executed (rxe resp.ack_psn); READs leave it
	msn        uint32
	nakSent    bool // a PSN sequence NAK is outstanding for the current gap
	respOpcode int  // opcode of the last accepted packet of an unfinished message, -1 if none
	recvOff    uint32
	recvActive bool
	wrVA       uint64
	wrRKey     uint32
	wrLen      uint32 // RETH length of the current WRITE
	wrOff      uint32
	res        []resource // READ replay records (rxe resp_res)
	resNext    int
	atomicHist *atomic.History // executed atomics, for duplicate replay

	// wc is the completion handed to a CompletionQueue (see completion).
	wc WC

	Counters Counters
}

// completion delivers *wc to cq. The CQE passes through q.wc: a pointer to
// a local WC given to the CompletionQueue interface escapes, which cost one
// heap allocation per completion on the data path.
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
	q := &QP{cfg: cfg, sq: make([]sendWQE, c.MaxSendWR), rq: make([]recvWQE, c.MaxRecvWR), respOpcode: -1}
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
	a.SQPSN = q.nextPSN
	a.RQPSN = q.expPSN
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
	if err := checkTransition(cur, next, mask); err != nil {
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
	if mask&AttrAV != 0 {
		q.attr.AV = a.AV
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
		q.expPSN, q.ackPSN = a.RQPSN, a.RQPSN
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		// rxe sizes its responder resources roundup_pow_of_two(max_dest_rd_atomic)
		// (rxe_qp_from_attr), and its requester rounds max_rd_atomic the same
		// way: an rxe peer set to 3 keeps 4 READs/atomics in flight.
		n := 1
		for n < int(a.MaxDestRdAtomic) {
			n <<= 1
		}
		q.res = make([]resource, n)
		q.resNext = 0
		q.atomicHist = atomic.NewHistory(n)
	}
	if mask&AttrMinRNRTimer != 0 {
		q.attr.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		q.attr.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		q.attr.RetryCnt = a.RetryCnt
		q.retryLeft = int(a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 {
		q.attr.RNRRetry = a.RNRRetry
		q.rnrLeft = int(a.RNRRetry)
	}
	if mask&AttrSQPSN != 0 {
		q.attr.SQPSN = a.SQPSN
		q.nextPSN, q.psnEnd, q.compPSN, q.sentEnd = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		q.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&(AttrAV|AttrDestQPN) != 0 {
		q.buildTemplate()
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
	if mask&AttrAccessFlags != 0 && a.AccessFlags&^(memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead|memreg.RemoteAtomic) != 0 {
		return bad("qp_access_flags %v not supported", a.AccessFlags)
	}
	return nil
}

func (q *QP) buildTemplate() {
	av := &q.attr.AV
	q.tmpl = wire.Frame{
		DstMAC: av.DMAC, SrcMAC: av.SMAC, HasVLAN: av.HasVLAN, VLAN: av.VLAN,
		SrcIP: av.SGID.Unmap(), DstIP: av.DGID.Unmap(),
		TrafficClass: av.TrafficClass, HopLimit: av.HopLimit,
		SrcPort: wire.RCSourcePortFL(av.FlowLabel, q.cfg.QPN, q.attr.DestQPN),
	}
	if q.tmpl.SrcIP.Is6() {
		// rxe writes flow label 0 on IPv6 (ip6_flow_hdr(..., 0)).
		q.tmpl.FlowLabel = 0
	}
}

// enter performs the side effects of a state change.
func (q *QP) enter(next State, now time.Time) {
	prev := q.attr.State
	q.attr.State = next
	switch next {
	case StateReset:
		q.resetQueues()
	case StateErr:
		if prev != StateErr {
			q.flushAll()
		}
	case StateRTS:
		if prev == StateSQD {
			q.pump(now)
		}
	}
}

func (q *QP) resetQueues() {
	clear(q.sq)
	clear(q.rq)
	q.sqHead, q.sqReq, q.sqTail, q.rqHead, q.rqTail = 0, 0, 0, 0, 0
	q.rdAtomic, q.noackPkts = 0, 0
	q.retryDeadline, q.rnrDeadline = time.Time{}, time.Time{}
	q.gapRetried = false
	q.msn, q.nakSent, q.respOpcode, q.recvActive = 0, false, -1, false
	clear(q.res)
	if q.atomicHist != nil {
		q.atomicHist.Reset()
	}
	a := q.attr
	q.attr = Attr{State: StateReset, AccessFlags: a.AccessFlags}
}

// Deadline returns the next time Tick must be called, if any.
func (q *QP) Deadline() (time.Time, bool) {
	d := q.retryDeadline
	if !q.rnrDeadline.IsZero() && (d.IsZero() || q.rnrDeadline.Before(d)) {
		d = q.rnrDeadline
	}
	return d, !d.IsZero()
}

// Tick runs the timers that expired at now.
func (q *QP) Tick(now time.Time) {
	if q.attr.State != StateRTS && q.attr.State != StateSQD {
		return
	}
	if !q.rnrDeadline.IsZero() && !now.Before(q.rnrDeadline) {
		q.rnrDeadline = time.Time{}
		q.goBack(q.compPSN)
		q.pump(now)
	}
	if !q.retryDeadline.IsZero() && !now.Before(q.retryDeadline) {
		q.retryDeadline = time.Time{}
		q.onTimeout(now)
	}
}

// ackTimeout is the local ACK timeout: 4.096 µs × 2^timeout.
func (q *QP) ackTimeout() time.Duration {
	if q.attr.Timeout == 0 {
		return 0
	}
	return time.Duration(4096<<q.attr.Timeout) * time.Nanosecond
}

// Receive processes one received, parsed and ICRC-checked packet addressed
// to this QP.
func (q *QP) Receive(p *wire.Packet, now time.Time) {
	av := &q.attr.AV
	// rxe_recv.c check_addr: the IP addresses must match the QP's path.
	if p.SrcIP() != av.DGID.Unmap() || p.DstIP() != av.SGID.Unmap() {
		q.inc(CntRcvdBadAddr)
		return
	}
	if p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		q.inc(CntRcvdBadPKey)
		return
	}
	op := p.Opcode()
	info := op.Info()
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
		q.respond(p, now)
	} else {
		if q.attr.State != StateRTS && q.attr.State != StateSQD {
			q.inc(CntRcvdWrongState)
			return
		}
		q.inc(CntRcvdPkts)
		q.complete(p, now)
	}
}

// frame prepares the template for one packet of opcode op.
func (q *QP) frame(op wire.Opcode, psn wire.PSN) *wire.Frame {
	f := &q.tmpl
	q.ipID++
	f.IPID = q.ipID
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: q.attr.DestQPN, PSN: psn}
	return f
}

// emit builds the frame whose payload (payloadLen bytes) the caller already
// placed at buf[f.HeaderLen():] and hands it to the output.
func (q *QP) emit(buf []byte, f *wire.Frame, payloadLen int) {
	n, err := wire.Build(buf, f, payloadLen)
	if err != nil {
		// Only a programming error (buffer too small) gets here.
		q.inc(CntSendErrors)
		return
	}
	q.cfg.Out.Send(n)
	q.inc(CntSentPkts)
}

// sendAck sends an ACKNOWLEDGE with the given syndrome for psn.
func (q *QP) sendAck(psn wire.PSN, syn wire.Syndrome) {
	buf := q.cfg.Out.Frame()
	f := q.frame(wire.RCAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: q.msn & wire.PSNMask}
	q.emit(buf, f, 0)
}

func (q *QP) inc(c Counter) {
	q.Counters[c]++
	if q.cfg.DeviceCounters != nil {
		q.cfg.DeviceCounters[c]++
	}
}
