package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/atomic"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// responder executes the requests the peer's requester sends (rxe_resp.c):
// it checks each request's PSN, opcode sequence, access, resources, length
// and R_Key in rxe's order, places SEND payloads into the receive queue's
// buffers and WRITE payloads into registered memory, answers READs and
// atomics, and acknowledges. Duplicates are answered without executing
// anything twice: READs are replayed from memory (res), atomics from their
// saved results (atomicHist). The responder has no timer: every answer goes
// out while the request is handled.
type responder struct {
	qp  *QP
	out *emitter

	// Receive queue: a ring indexed by monotonically increasing counters;
	// [rqHead, rqTail) are posted, rqHead is the WQE the next SEND (or
	// WRITE_WITH_IMM) consumes.
	rq             []recvWQE
	rqHead, rqTail uint64
	// On a QP created with an SRQ: the WQE taken from it for the current
	// message (srq.go).
	srqWQE  recvWQE
	srqHeld bool

	expPSN     wire.PSN // PSN of the next new request
	ackPSN     wire.PSN // one past the last SEND/WRITE/atomic packet executed (rxe resp.ack_psn); READs leave it
	msn        uint32   // AETH MSN: SEND/WRITE messages completed, READs and atomics accepted
	nakSent    bool     // a PSN sequence NAK is outstanding for the current gap
	respOpcode int      // opcode of the last accepted packet of an unfinished message, -1 if none
	recvOff    uint32   // bytes of the current SEND placed so far
	recvActive bool     // the WQE at rqHead belongs to the current message
	wrVA       uint64   // RETH of the current WRITE
	wrRKey     uint32
	wrLen      uint32
	wrOff      uint32          // bytes of the current WRITE placed so far
	ucDrop     bool            // UC: the rest of the current message is dropped (rxe resp.drop_msg)
	res        []resource      // READ replay records (rxe resp_res)
	resNext    int             // next res entry to reuse
	atomicHist *atomic.History // executed atomics, for duplicate replay

	// The ACK owed (coalescing): the latest one asked for, cumulative.
	ackOwed    bool
	ackOwedPSN wire.PSN
	ackOwedMSN uint32
	// ackHold is when a held owed ACK must leave (QP.HoldAck); zero when
	// the owed ACK is not held. Meaningful only while ackOwed.
	ackHold time.Time
	// pend holds, in PSN order, the responses that wait behind a READ
	// response in progress (at pendHead): a ring indexed by growing
	// counters, sized with the READ resources.
	pend               []pending
	pendHead, pendTail uint64
	now                time.Time // of the last call: the deadline while work waits
}

// ResponseBudget bounds the READ response packets one QP sends in one
// engine call (Receive, Tick), like rxe's responder task, which sends one
// response packet per iteration and yields after RXE_MAX_ITERATIONS (1024,
// rxe_param.h; rxe_task.c do_task) to let other work run. goroce's budget
// is smaller: between two calls the owner reads the link, so a READ retried
// after a lost response (the requester's go-back-N) replaces the rest of
// the old response after at most this many packets instead of after the
// whole message.
const ResponseBudget = 64

type pendKind uint8

const (
	pendRead   pendKind = iota // READ response packets from psn
	pendAck                    // one ACKNOWLEDGE (ACK or NAK)
	pendAtomic                 // one ATOMIC_ACKNOWLEDGE
	pendPlaced                 // the READ RESPONSE ONLY of a FLUSH or ATOMIC_WRITE (flush.go)
)

// pending is one response waiting in the responder's queue.
type pending struct {
	kind pendKind
	psn  wire.PSN // the next (READ) or only packet's PSN
	syn  wire.Syndrome
	msn  uint32
	orig uint64 // pendAtomic: the original value
	// pendRead: the resource's PSN range (to recognise a retry inside it),
	// the next byte, the bytes and packets left, and whether the next
	// packet continues the response (MIDDLE/LAST) or starts it.
	first, last wire.PSN
	va          uint64
	rkey        uint32
	left, pkts  uint32
	started     bool
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

// covers reports whether [va, va+length) lies inside the READ's range.
// rxe's check (iova + resid > va_org + length) wraps past 2^64 for a VA near
// the top; this form has no sum that can overflow.
func (res *resource) covers(va uint64, length uint32) bool {
	return va >= res.va && length <= res.length && va-res.va <= uint64(res.length-length)
}

// setPSN sets the PSN of the first request expected (rq_psn).
func (r *responder) setPSN(psn wire.PSN) { r.expPSN, r.ackPSN = psn, psn }

// setResources sizes the READ and atomic replay records for
// max_dest_rd_atomic n. rxe sizes its responder resources
// roundup_pow_of_two(max_dest_rd_atomic) (rxe_qp_from_attr), and its
// requester rounds max_rd_atomic the same way: an rxe peer set to 3 keeps 4
// READs/atomics in flight.
func (r *responder) setResources(n uint8) {
	size := 1
	for size < int(n) {
		size <<= 1
	}
	r.res = make([]resource, size)
	r.resNext = 0
	r.atomicHist = atomic.NewHistory(size)
	// A conforming requester has at most size READs and atomics in flight,
	// each with an ACK or NAK before it: 2·size+2 entries never fill.
	r.pump(-1)
	r.pend = make([]pending, 2*size+2)
	r.pendHead, r.pendTail = 0, 0
}

func (r *responder) reset() {
	clear(r.rq)
	r.rqHead, r.rqTail = 0, 0
	r.srqHeld = false
	r.msn, r.nakSent, r.respOpcode, r.recvActive = 0, false, -1, false
	r.ucDrop = false
	clear(r.res)
	if r.atomicHist != nil {
		r.atomicHist.Reset()
	}
	r.dropPending()
}

// dropPending forgets every response not sent yet (the QP is in ERR or
// RESET, where it sends nothing).
func (r *responder) dropPending() {
	r.ackOwed = false
	r.pendHead = r.pendTail
}

// deadline reports the time of the last call while an ACK is owed or a
// response waits: the owner's next Tick sends them (EndBatch sends an owed
// ACK sooner).
func (r *responder) deadline() (time.Time, bool) {
	if r.busy() {
		return r.now, true
	}
	if r.ackOwed {
		if !r.ackHold.IsZero() {
			return r.ackHold, true
		}
		return r.now, true
	}
	return time.Time{}, false
}

// holdAck ends a receive batch like endBatch, except that an owed ACK with
// nothing queued before it stays owed until until (or an earlier hold's
// end, or the owner's next EndBatch), and reports whether it does.
func (r *responder) holdAck(now, until time.Time) bool {
	r.now = now
	if !r.ackOwed || r.busy() {
		return false
	}
	if r.ackHold.IsZero() || until.Before(r.ackHold) {
		r.ackHold = until
	}
	return true
}

// onTimeout sends what waits: the next ResponseBudget packets of the
// queue, then the owed ACK once nothing is queued before it.
func (r *responder) onTimeout(now time.Time) {
	r.now = now
	r.pump(ResponseBudget)
	r.endBatch(now)
}

// endBatch sends the owed ACK, unless responses for earlier PSNs still
// wait (it follows them).
func (r *responder) endBatch(now time.Time) {
	r.now = now
	if r.ackOwed && !r.busy() {
		r.ackOwed = false
		r.out.ack(r.ackOwedPSN, wire.SyndromeACKNoCredit, r.ackOwedMSN)
	}
}

// busy reports whether responses wait in the queue.
func (r *responder) busy() bool { return r.pendHead != r.pendTail }

// owe records that an ACK for psn is owed. Coalescing is legal because RC
// ACKs are cumulative: an ACK acknowledges every request before its PSN,
// and the requester completes every earlier SEND/WRITE on it (PROTOCOL.md
// §3.3 and §3.4; IBTA's text calls these coalesced acknowledgements).
// mlx5 coalesces, and hfi1 defers an ACK to the end of the receive
// interrupt (rc_defer_ack), as EndBatch does here.
func (r *responder) owe(psn wire.PSN, msn uint32) {
	if r.ackOwed {
		r.qp.inc(CntAckCoalesced)
	} else {
		r.ackHold = time.Time{}
	}
	r.ackOwed, r.ackOwedPSN, r.ackOwedMSN = true, psn, msn
}

// settleAck puts the owed ACK in front of a response that is about to be
// sent or queued: responses leave in PSN order, so an ACK never follows a
// later NAK.
func (r *responder) settleAck() {
	if !r.ackOwed {
		return
	}
	r.ackOwed = false
	r.respond(pending{kind: pendAck, psn: r.ackOwedPSN, syn: wire.SyndromeACKNoCredit, msn: r.ackOwedMSN})
}

// respond sends a one-packet response (ACK, NAK, ATOMIC ACK) now, or queues
// it behind the READ response in progress.
func (r *responder) respond(p pending) {
	if r.busy() {
		r.push(p)
		return
	}
	r.send(&p)
}

func (r *responder) send(p *pending) {
	switch p.kind {
	case pendAtomic:
		r.out.atomicAck(p.psn, p.orig, p.msn)
	case pendPlaced:
		r.out.placedAck(p.psn, p.msn)
	default:
		r.out.ack(p.psn, p.syn, p.msn)
	}
}

// push queues p. A full queue (a requester beyond max_dest_rd_atomic) is
// made room in by finishing the response at its head.
func (r *responder) push(p pending) {
	if r.pendTail-r.pendHead == uint64(len(r.pend)) {
		r.pump(-1)
	}
	r.pend[r.pendTail%uint64(len(r.pend))] = p
	r.pendTail++
}

// pump sends up to budget packets from the queue (all of it when budget < 0).
func (r *responder) pump(budget int) {
	for budget != 0 && r.busy() {
		budget--
		e := &r.pend[r.pendHead%uint64(len(r.pend))]
		if e.kind != pendRead {
			r.pendHead++
			r.send(e)
			continue
		}
		if !r.readPacket(e) {
			return
		}
		if e.pkts == 0 {
			r.pendHead++
		}
	}
}

// finish sends everything waiting, the owed ACK last.
func (r *responder) finish() {
	r.pump(-1)
	r.endBatch(r.now)
}

// post queues a receive work request at the tail of the receive queue.
func (r *responder) post(wr *RecvWR) error {
	st := r.qp.attr.State
	if r.qp.cfg.SRQ != nil {
		// rxe_post_recv: "qp has srq, use post_srq_recv instead".
		return fmt.Errorf("post recv: the QP receives from its SRQ: %w", ErrInvalidArgument)
	}
	if st == StateReset {
		return fmt.Errorf("post recv in state RESET: %w", ErrInvalidArgument)
	}
	if r.rqTail-r.rqHead >= uint64(len(r.rq)) {
		return fmt.Errorf("post recv: %d WRs outstanding: %w", len(r.rq), ErrQueueFull)
	}
	if len(wr.SGL) > r.qp.cfg.Caps.MaxRecvSGE {
		return fmt.Errorf("post recv: %d SGEs > max_recv_sge %d: %w", len(wr.SGL), r.qp.cfg.Caps.MaxRecvSGE, ErrInvalidArgument)
	}
	r.rq[r.rqTail%uint64(len(r.rq))].fill(wr)
	r.rqTail++
	if st == StateErr {
		r.flush()
	}
	return nil
}

// flush completes every posted receive WQE with WR_FLUSH_ERR.
func (r *responder) flush() {
	for ; r.rqHead < r.rqTail; r.rqHead++ {
		w := &r.rq[r.rqHead%uint64(len(r.rq))]
		wc := WC{WRID: w.wrID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: r.qp.cfg.QPN}
		r.qp.recvCompletion(&wc)
	}
	r.flushSRQ()
	r.recvActive = false
}

// receive handles a request packet (rxe_resp.c): PSN check, opcode
// sequence, access flags, resources, length, R_Key, execute, acknowledge.
func (r *responder) receive(p *wire.Packet, now time.Time) {
	r.now = now
	psn := p.BTH.PSN()
	switch d := psn.Diff(r.expPSN); {
	case d > 0:
		// Out of sequence: one NAK per gap, carrying the expected PSN (C9-110).
		// out_of_seq_request counts those NAKs, as rxe's check_psn does (it
		// increments RXE_CNT_OUT_OF_SEQ_REQ only when it sends the NAK).
		if !r.nakSent {
			r.nakSent = true
			r.qp.inc(CntOutOfSeqRequest)
			r.sendNAK(r.expPSN, wire.NAKPSNSequenceError)
		}
		return
	case d < 0:
		r.qp.inc(CntDuplicateRequest)
		r.duplicate(p, psn)
		return
	}
	r.nakSent = false
	op := p.Opcode()

	// Opcode sequence (rxe check_op_seq).
	if !r.seqOK(op) {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	// QP access flags (rxe check_op_valid): a failure is an invalid request.
	switch {
	case op.IsWrite() && r.qp.attr.AccessFlags&memreg.RemoteWrite == 0,
		op.IsRead() && r.qp.attr.AccessFlags&memreg.RemoteRead == 0,
		op.IsAtomic() && r.qp.attr.AccessFlags&memreg.RemoteAtomic == 0,
		(op.IsFlush() || op.IsAtomicWrite()) && !r.placementAccessOK(p):
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	switch {
	case op.IsSend():
		r.execSend(p, op, psn)
	case op.IsWrite():
		r.execWrite(p, op, psn)
	case op.IsRead():
		r.execRead(p, psn)
	case op.IsAtomic():
		r.execAtomic(p, op, psn)
	case op.IsFlush():
		r.execFlush(p, psn)
	case op.IsAtomicWrite():
		r.execAtomicWrite(p, psn)
	default:
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
	}
}

// seqOK checks that op may follow the previous packet (C9-21..C9-24).
func (r *responder) seqOK(op wire.Opcode) bool {
	pos := op.Info().Pos
	prev := r.respOpcode
	if prev < 0 {
		// Not inside a message: only FIRST or ONLY may come.
		return pos == wire.PosFirst || pos == wire.PosOnly
	}
	inSend := wire.Opcode(prev).IsSend()
	if inSend != op.IsSend() || (!inSend && !op.IsWrite()) {
		return false
	}
	return pos == wire.PosMiddle || pos == wire.PosLast
}

func (r *responder) checkLen(op wire.Opcode, n int) bool {
	switch op.Info().Pos {
	case wire.PosOnly:
		return n <= int(r.qp.mtu)
	case wire.PosFirst, wire.PosMiddle:
		return n == int(r.qp.mtu)
	case wire.PosLast:
		return n >= 1 && n <= int(r.qp.mtu)
	}
	return false
}

func (r *responder) execSend(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	pos := op.Info().Pos
	// rxe checks resources (check_resource: a RECV WQE, else RNR) before the
	// packet length (check_length): a bad-length FIRST/ONLY without a RECV
	// is RNR NAKed, and with one the RECV completes with the error.
	if pos == wire.PosFirst || pos == wire.PosOnly {
		if !r.recvReady() {
			r.sendRNR(psn)
			return
		}
		r.recvActive, r.recvOff = true, 0
	}
	if !r.checkLen(op, len(p.Payload)) {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	w := r.recvHead()
	n := uint32(len(p.Payload))
	if r.recvOff+n > w.length {
		// The RECV buffer is too small (rxe RESPST_ERR_LENGTH).
		r.classC(wire.NAKInvalidRequest, WCLocLenErr, psn)
		return
	}
	if n > 0 {
		payload := p.Payload
		if err := r.qp.walkSGL(w.sgl[:w.nsge], r.recvOff, n, true, func(mem []byte, at uint32) { copy(mem, payload[at:]) }); err != nil {
			// Bad lkey or access in the RECV WQE (RESPST_ERR_MALFORMED_WQE).
			r.classC(wire.NAKRemoteOperationalError, WCLocQPOpErr, psn)
			return
		}
	}
	r.recvOff += n
	if pos == wire.PosFirst || pos == wire.PosMiddle {
		r.respOpcode = int(op)
		r.acceptPacket(p, psn)
		return
	}
	wc := WC{WRID: w.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: r.recvOff, QPNum: r.qp.cfg.QPN}
	if op.HasImm() {
		wc.Flags |= WCWithImm
		wc.Imm = p.ImmDt.Imm()
	}
	if p.BTH.SE() {
		wc.Flags |= WCSolicited
	}
	if op.HasInv() {
		rkey := p.IETH.RKey()
		if !r.drainReadsOf(rkey) {
			return
		}
		if err := r.qp.cfg.MRs.Invalidate(rkey, r.qp.cfg.PD); err != nil {
			// rxe (class J): no NAK; the QP goes to ERR and the RECV
			// completes in error. execute returns before counting the
			// message, so the ACK still sent for AckReq carries the MSN
			// without it; it leaves before the QP goes to ERR.
			r.respOpcode = -1
			r.acceptPacket(p, psn)
			r.finish()
			r.recvPop()
			r.recvActive = false
			wc.Status = WCRemInvReqErr
			r.qp.recvCompletion(&wc)
			r.qp.fail(Event{Status: WCRemInvReqErr})
			return
		}
		wc.Flags |= WCWithInv
		wc.InvRKey = rkey
	}
	r.recvPop()
	r.recvActive = false
	r.finishMessage(p, psn)
	r.qp.inc(CntRxSendRequests)
	r.qp.recvCompletion(&wc)
}

// acceptPacket advances the expected PSN after an in-sequence packet and
// owes an ACK for it when the requester asked for one.
func (r *responder) acceptPacket(p *wire.Packet, psn wire.PSN) {
	r.expPSN = psn.Add(1)
	r.ackPSN = r.expPSN
	if r.qp.cfg.Type == QPTypeUC {
		return // nothing is acknowledged on UC, whatever AckReq says
	}
	if p.BTH.AckReq() {
		r.owe(psn, r.msn)
	} else {
		r.qp.inc(CntAckDeferred)
	}
}

// finishMessage ends a SEND/WRITE message: the MSN counts it.
func (r *responder) finishMessage(p *wire.Packet, psn wire.PSN) {
	r.respOpcode = -1
	r.msn++
	r.acceptPacket(p, psn)
}

func (r *responder) execWrite(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	pos := op.Info().Pos
	if op.HasImm() {
		// WRITE_WITH_IMM consumes a RECV at its ONLY/LAST packet (rxe
		// RXE_RWR_MASK), checked before the length and the R_Key as rxe's
		// check_resource is: none posted is RNR; once taken, an error of this
		// packet completes that RECV with the error status (classC).
		if !r.recvReady() {
			r.sendRNR(psn)
			return
		}
		r.recvActive = true
	}
	if !r.checkLen(op, len(p.Payload)) {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	// whole is the RETH's range [va, va+len) as the range check returned
	// it; an ONLY packet's payload goes there, without a second lookup.
	var whole []byte
	if pos == wire.PosFirst || pos == wire.PosOnly {
		r.wrVA, r.wrRKey, r.wrLen, r.wrOff = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen(), 0
		if r.wrLen > MaxMessageLen {
			r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
			return
		}
		// rxe check_rkey validates the whole RETH range [va, va+len) once,
		// on the FIRST/ONLY packet: a WRITE that runs past the MR is NAKed at
		// its first PSN before any byte is placed (checking each packet's
		// piece alone would place the leading packets and NAK a later PSN).
		// Zero-length writes skip the check (rxe check_rkey).
		if r.wrLen > 0 {
			mem, err := r.qp.remote(r.wrRKey, memreg.RemoteWrite, r.wrVA, r.wrLen)
			if err != nil {
				r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
				return
			}
			whole = mem
		}
	}
	n := uint32(len(p.Payload))
	// The payload against the RETH length, after the R_Key and range as in
	// rxe's check_rkey (a WRITE_ONLY whose payload differs from its RETH
	// length and whose R_Key is bad gets NAK 0x62, not 0x61).
	if r.wrOff+n > r.wrLen || (pos == wire.PosLast || pos == wire.PosOnly) && r.wrOff+n != r.wrLen {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	if n > 0 {
		// Zero-length writes skip the R_Key check (rxe check_rkey).
		mem := whole
		if pos != wire.PosOnly || uint32(len(mem)) != n {
			var err error
			mem, err = r.qp.remote(r.wrRKey, memreg.RemoteWrite, r.wrVA+uint64(r.wrOff), n)
			if err != nil {
				r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
				return
			}
		}
		copy(mem, p.Payload)
		r.wrOff += n
	}
	if pos == wire.PosFirst || pos == wire.PosMiddle {
		r.respOpcode = int(op)
		r.acceptPacket(p, psn)
		return
	}
	if op.HasImm() {
		w := r.recvHead()
		r.recvPop()
		r.recvActive = false
		wc := WC{WRID: w.wrID, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: r.wrLen,
			QPNum: r.qp.cfg.QPN, Flags: WCWithImm, Imm: p.ImmDt.Imm()}
		if p.BTH.SE() {
			wc.Flags |= WCSolicited
		}
		r.finishMessage(p, psn)
		r.qp.inc(CntRxWriteRequests)
		r.writeDone()
		r.qp.recvCompletion(&wc)
		return
	}
	r.finishMessage(p, psn)
	r.qp.inc(CntRxWriteRequests)
	r.writeDone()
}

// writeDone tells the MR table that a WRITE message was placed (its
// waiters, memreg.MR.WaitWrite); a zero-length WRITE names no memory.
func (r *responder) writeDone() {
	if r.wrLen > 0 {
		r.qp.cfg.MRs.WriteDone(r.wrRKey)
	}
}

func (r *responder) execRead(p *wire.Packet, psn wire.PSN) {
	if r.qp.attr.MaxDestRdAtomic == 0 {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	va, rkey, length := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	if length > MaxMessageLen {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	if length > 0 {
		if _, err := r.qp.remote(rkey, memreg.RemoteRead, va, length); err != nil {
			r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
			return
		}
	}
	npkts := uint32(1)
	if length > r.qp.mtu {
		npkts = (length + r.qp.mtu - 1) / r.qp.mtu
	}
	res := r.newResource()
	*res = resource{valid: true, firstPSN: psn, lastPSN: psn.Add(npkts - 1), va: va, rkey: rkey, length: length}
	// The MSN counts a READ when it is accepted (C9-148).
	r.msn++
	r.qp.inc(CntRxReadRequests)
	r.respOpcode = -1
	r.expPSN = psn.Add(npkts)
	r.startRead(res, psn, va, length, false)
}

// startRead queues the READ response packets for [va, va+length) from psn,
// of the READ recorded in res, behind every response owed before it, and
// sends the first ResponseBudget packets of the queue. midStart marks a
// replay that starts inside the original range: rxe then begins with
// READ_RESPONSE_MIDDLE (or LAST), and its requester expects exactly that.
func (r *responder) startRead(res *resource, psn wire.PSN, va uint64, length uint32, midStart bool) {
	r.settleAck()
	r.push(r.readEntry(res, psn, va, length, midStart))
	r.pump(ResponseBudget)
}

func (r *responder) readEntry(res *resource, psn wire.PSN, va uint64, length uint32, midStart bool) pending {
	npkts := uint32(1)
	if length > r.qp.mtu {
		npkts = (length + r.qp.mtu - 1) / r.qp.mtu
	}
	return pending{kind: pendRead, psn: psn, msn: r.msn, first: res.firstPSN, last: res.lastPSN,
		va: va, rkey: res.rkey, left: length, pkts: npkts, started: midStart}
}

// readPacket sends the next READ response packet of e. It reports false
// when the region went away meanwhile (rxe_recheck_mr): the READ ends with
// a NAK and the QP goes to ERR.
func (r *responder) readPacket(e *pending) bool {
	n := min(e.left, r.qp.mtu)
	first, last := !e.started, e.pkts == 1
	var op wire.Opcode
	switch {
	case first && last:
		op = wire.RCRDMAReadResponseOnly
	case first:
		op = wire.RCRDMAReadResponseFirst
	case last:
		op = wire.RCRDMAReadResponseLast
	default:
		op = wire.RCRDMAReadResponseMiddle
	}
	f := r.out.frame(op, e.psn)
	f.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: e.msn & wire.PSNMask}
	buf := r.out.buffer()
	if n > 0 {
		mem, err := r.qp.remote(e.rkey, memreg.RemoteRead, e.va, n)
		if err != nil {
			// Nothing queued behind the failed READ matters any more: the
			// QP goes to ERR after the NAK.
			psn := e.psn
			r.dropPending()
			r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
			return false
		}
		hl := f.HeaderLen()
		copy(buf[hl:hl+int(n)], mem)
	}
	r.out.emit(buf, f, int(n))
	e.psn = e.psn.Add(1)
	e.va += uint64(n)
	e.left -= n
	e.pkts--
	e.started = true
	return true
}

func (r *responder) execAtomic(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	if r.qp.attr.MaxDestRdAtomic == 0 {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	a := p.AtomicETH
	va, rkey := a.VA(), a.RKey()
	// rxe checks the R_Key and range (check_rkey: NAK 0x62) before the
	// alignment (rxe_mr_do_atomic_op: NAK 0x61).
	mem, err := r.qp.remote(rkey, memreg.RemoteAtomic, va, 8)
	if err != nil {
		r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
		return
	}
	if va&7 != 0 {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	var orig uint64
	if op == wire.RCFetchAdd {
		orig, err = r.qp.cfg.Atomics.FetchAdd(mem, va, a.SwapAdd())
	} else {
		orig, err = r.qp.cfg.Atomics.CompareSwap(mem, va, a.Compare(), a.SwapAdd())
	}
	if err != nil {
		if errors.Is(err, atomic.ErrMisaligned) || errors.Is(err, atomic.ErrShort) {
			r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		} else {
			r.classC(wire.NAKRemoteOperationalError, WCRemOpErr, psn)
		}
		return
	}
	r.atomicHist.Record(psn, va, rkey, orig)
	r.qp.inc(CntRxAtomicRequests)
	r.msn++
	r.respOpcode = -1
	r.expPSN = psn.Add(1)
	r.ackPSN = r.expPSN
	r.settleAck()
	r.respond(pending{kind: pendAtomic, psn: psn, orig: orig, msn: r.msn})
}

func (r *responder) newResource() *resource {
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// duplicate answers a request whose PSN is before the expected one
// (rxe duplicate_request, C9-105..C9-108).
func (r *responder) duplicate(p *wire.Packet, psn wire.PSN) {
	op := p.Opcode()
	switch {
	case op.IsSend() || op.IsWrite():
		// Acknowledge again; nothing is executed twice. The ACK carries
		// the PSN of the last SEND/WRITE/atomic packet executed, as rxe's
		// duplicate_request does (resp.ack_psn - 1): a READ executed since
		// does not count, so the ACK cannot pass a READ whose responses the
		// requester may still miss (which would make it retry). It is
		// owed like any ACK, and coalesces with the others.
		r.owe(r.ackPSN.Sub(1), r.msn)
	case op.IsRead():
		va, rkey, length := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || psn.Before(res.firstPSN) || psn.After(res.lastPSN) {
				continue
			}
			// The request must be the original one or a sub-range of it, with
			// the same R_Key; anything else is dropped (rxe, class D).
			if rkey != res.rkey || !res.covers(va, length) {
				return
			}
			r.replayRead(res, psn, va, length)
			return
		}
		// No matching resource: dropped silently (rxe).
	case op.IsFlush() || op.IsAtomicWrite():
		r.duplicatePlacement(p, psn)
	case op.IsAtomic():
		// Answered from the saved original value, never executed again.
		if rec, ok := r.atomicHist.Lookup(psn); ok && rec.VA == p.AtomicETH.VA() && rec.RKey == p.AtomicETH.RKey() {
			r.settleAck()
			r.respond(pending{kind: pendAtomic, psn: psn, orig: rec.Orig, msn: r.msn})
		}
	}
}

// replayRead answers a duplicate READ for [psn, …] of res. A retry inside
// the response in progress (the requester's go-back-N after a lost
// response packet) abandons the rest of that response and continues from
// psn: the new request asks for everything the old one still had to send.
// A request for a READ queued and not started yet is answered by the queue
// already. Any other is queued for replay, as rxe replays the resource
// (duplicate_request: res->cur_psn = psn).
func (r *responder) replayRead(res *resource, psn wire.PSN, va uint64, length uint32) {
	mid := psn != res.firstPSN
	for i := r.pendHead; i < r.pendTail; i++ {
		e := &r.pend[i%uint64(len(r.pend))]
		if e.kind != pendRead || psn.Before(e.first) || psn.After(e.last) {
			continue
		}
		if i == r.pendHead {
			r.qp.inc(CntReadRestarted)
			*e = r.readEntry(res, psn, va, length, mid)
			r.pump(ResponseBudget)
			return
		}
		if !e.started {
			return
		}
	}
	r.startRead(res, psn, va, length, mid)
}

// drainReadsOf sends the queued responses of every earlier READ that
// reads through rkey before a SEND_WITH_INV invalidates it. rxe answers a
// READ (new or replayed) whole before it takes the next request (get_req
// continues qp->resp.res first), so an invalidation never overtakes the
// responses of a READ that arrived before it; the pacing here
// (ResponseBudget) must not let it either, or the rest of that READ — a
// duplicate replayed after the requester's retry, say — meets a dead key,
// is NAKed and the QP goes to ERR. It reports false when one of those
// responses failed anyway (the QP is then in ERR).
func (r *responder) drainReadsOf(rkey uint32) bool {
	for i := r.pendHead; i < r.pendTail; i++ {
		e := &r.pend[i%uint64(len(r.pend))]
		if e.kind == pendRead && e.rkey == rkey {
			r.pump(-1)
			return r.qp.attr.State != StateErr
		}
	}
	return true
}

func (r *responder) sendNAK(psn wire.PSN, code wire.NAKCode) {
	r.qp.inc(CntSentNAKs)
	r.settleAck()
	r.respond(pending{kind: pendAck, psn: psn, syn: wire.NAKSyndrome(code), msn: r.msn})
}

func (r *responder) sendRNR(psn wire.PSN) {
	if r.qp.cfg.Type == QPTypeUC {
		// No receive posted: UC drops the message (class D), no RNR NAK.
		r.ucFail(wire.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	r.qp.inc(CntSendRNRErr)
	r.qp.inc(CntSentNAKs)
	r.settleAck()
	r.respond(pending{kind: pendAck, psn: psn, syn: wire.RNRNAKSyndrome(r.qp.attr.MinRNRTimer), msn: r.msn})
}

// classC handles a responder error of class C (IBTA 9.9.3.1.3, rxe
// do_class_ac_error): NAK the packet, complete the RECV WQE in progress (if
// any) with status, and move the QP to ERR.
func (r *responder) classC(code wire.NAKCode, status WCStatus, psn wire.PSN) {
	if r.qp.cfg.Type == QPTypeUC {
		r.ucFail(code, status)
		return
	}
	// The QP sends nothing in ERR: what is owed before the NAK goes first.
	r.finish()
	if r.qp.attr.State == StateErr {
		return
	}
	r.sendNAK(psn, code)
	if r.recvActive && r.recvHeld() {
		w := r.recvHead()
		r.recvPop()
		wc := WC{WRID: w.wrID, Status: status, Opcode: WCRecv, QPNum: r.qp.cfg.QPN}
		r.qp.recvCompletion(&wc)
	} else if status == WCLocLenErr || status == WCLocQPOpErr {
		// The failing packet started a message (FIRST/ONLY): its WQE is the head.
		if r.recvHeld() {
			w := r.recvHead()
			r.recvPop()
			wc := WC{WRID: w.wrID, Status: status, Opcode: WCRecv, QPNum: r.qp.cfg.QPN}
			r.qp.recvCompletion(&wc)
		}
	}
	r.recvActive = false
	r.qp.fail(Event{Class: nakClass(code), Status: status, NAK: NAKSent, Syndrome: wire.NAKSyndrome(code)})
}
