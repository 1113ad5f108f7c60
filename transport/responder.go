package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/atomic"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// PostRecv queues a receive work request (ibv_post_recv). Allowed from INIT
// on; in ERR the request is flushed at once.
func (q *QP) PostRecv(wr *RecvWR) error {
	st := q.attr.State
	if st == StateReset {
		return fmt.Errorf("post recv in state RESET: %w", ErrInvalidArgument)
	}
	if q.rqTail-q.rqHead >= uint64(len(q.rq)) {
		return fmt.Errorf("post recv: %d WRs outstanding: %w", len(q.rq), ErrQueueFull)
	}
	if len(wr.SGL) > q.cfg.Caps.MaxRecvSGE {
		return fmt.Errorf("post recv: %d SGEs > max_recv_sge %d: %w", len(wr.SGL), q.cfg.Caps.MaxRecvSGE, ErrInvalidArgument)
	}
	r := &q.rq[q.rqTail%uint64(len(q.rq))]
	r.wrID = wr.WRID
	r.nsge = copy(r.sgl[:], wr.SGL)
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	r.length = uint32(min(n, MaxMessageLen))
	q.rqTail++
	if st == StateErr {
		q.flushRecv()
	}
	return nil
}

// respond handles a request packet (rxe_resp.c): PSN check, opcode
// sequence, access flags, resources, length, R_Key, execute, acknowledge.
func (q *QP) respond(p *wire.Packet, now time.Time) {
	psn := p.BTH.PSN()
	switch d := psn.Diff(q.expPSN); {
	case d > 0:
		// Out of sequence: one NAK per gap, carrying the expected PSN (C9-110).
		// out_of_seq_request counts those NAKs, as rxe's check_psn does (it
		// increments RXE_CNT_OUT_OF_SEQ_REQ only when it sends the NAK).
		if !q.nakSent {
			q.nakSent = true
			q.inc(CntOutOfSeqRequest)
			q.sendNAK(q.expPSN, wire.NAKPSNSequenceError)
		}
		return
	case d < 0:
		q.inc(CntDuplicateRequest)
		q.duplicate(p, psn)
		return
	}
	q.nakSent = false
	op := p.Opcode()

	// Opcode sequence (rxe check_op_seq).
	if !q.seqOK(op) {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	// QP access flags (rxe check_op_valid): a failure is an invalid request.
	switch {
	case op.IsWrite() && q.attr.AccessFlags&memreg.RemoteWrite == 0,
		op.IsRead() && q.attr.AccessFlags&memreg.RemoteRead == 0,
		op.IsAtomic() && q.attr.AccessFlags&memreg.RemoteAtomic == 0:
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	switch {
	case op.IsSend():
		q.execSend(p, op, psn)
	case op.IsWrite():
		q.execWrite(p, op, psn)
	case op.IsRead():
		q.execRead(p, psn)
	case op.IsAtomic():
		q.execAtomic(p, op, psn)
	default:
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
	}
}

// seqOK checks that op may follow the previous packet (C9-21..C9-24).
func (q *QP) seqOK(op wire.Opcode) bool {
	pos := op.Info().Pos
	prev := q.respOpcode
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

func (q *QP) checkLen(op wire.Opcode, n int) bool {
	switch op.Info().Pos {
	case wire.PosOnly:
		return n <= int(q.mtu)
	case wire.PosFirst, wire.PosMiddle:
		return n == int(q.mtu)
	case wire.PosLast:
		return n >= 1 && n <= int(q.mtu)
	}
	return false
}

func (q *QP) execSend(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	pos := op.Info().Pos
	// rxe checks resources (check_resource: a RECV WQE, else RNR) before the
	// packet length (check_length): a bad-length FIRST/ONLY without a RECV
	// is RNR NAKed, and with one the RECV completes with the error.
	if pos == wire.PosFirst || pos == wire.PosOnly {
		if q.rqHead == q.rqTail {
			q.sendRNR(psn)
			return
		}
		q.recvActive, q.recvOff = true, 0
	}
	if !q.checkLen(op, len(p.Payload)) {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	r := &q.rq[q.rqHead%uint64(len(q.rq))]
	n := uint32(len(p.Payload))
	if q.recvOff+n > r.length {
		// The RECV buffer is too small (rxe RESPST_ERR_LENGTH).
		q.classC(wire.NAKInvalidRequest, WCLocLenErr, psn)
		return
	}
	if n > 0 {
		payload := p.Payload
		if err := q.walkSGL(r.sgl[:r.nsge], q.recvOff, n, true, func(mem []byte, at uint32) { copy(mem, payload[at:]) }); err != nil {
			// Bad lkey or access in the RECV WQE (RESPST_ERR_MALFORMED_WQE).
			q.classC(wire.NAKRemoteOperationalError, WCLocQPOpErr, psn)
			return
		}
	}
	q.recvOff += n
	if pos == wire.PosFirst || pos == wire.PosMiddle {
		q.respOpcode = int(op)
		q.acceptPacket(p, psn)
		return
	}
	wc := WC{WRID: r.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: q.recvOff, QPNum: q.cfg.QPN}
	if op.HasImm() {
		wc.Flags |= WCWithImm
		wc.Imm = p.ImmDt.Imm()
	}
	if p.BTH.SE() {
		wc.Flags |= WCSolicited
	}
	if op.HasInv() {
		rkey := p.IETH.RKey()
		if err := q.cfg.MRs.Invalidate(rkey, q.cfg.PD); err != nil {
			// rxe (class J): no NAK; the QP goes to ERR and the RECV
			// completes in error. execute returns before counting the
			// message, so the ACK still sent for AckReq carries the MSN
			// without it.
			q.respOpcode = -1
			q.acceptPacket(p, psn)
			q.rqHead++
			q.recvActive = false
			wc.Status = WCRemInvReqErr
			q.completion(q.cfg.RecvCQ, &wc)
			q.attr.State = StateErr
			q.flushAll()
			return
		}
		wc.Flags |= WCWithInv
		wc.InvRKey = rkey
	}
	q.rqHead++
	q.recvActive = false
	q.finishMessage(p, psn)
	q.completion(q.cfg.RecvCQ, &wc)
}

// acceptPacket advances the expected PSN after an in-sequence packet and
// acknowledges it when the requester asked for it.
func (q *QP) acceptPacket(p *wire.Packet, psn wire.PSN) {
	q.expPSN = psn.Add(1)
	q.ackPSN = q.expPSN
	if p.BTH.AckReq() {
		q.sendAck(psn, wire.SyndromeACKNoCredit)
	} else {
		q.inc(CntAckDeferred)
	}
}

// finishMessage ends a SEND/WRITE message: the MSN counts it.
func (q *QP) finishMessage(p *wire.Packet, psn wire.PSN) {
	q.respOpcode = -1
	q.msn++
	q.acceptPacket(p, psn)
}

func (q *QP) execWrite(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	pos := op.Info().Pos
	if op.HasImm() {
		// WRITE_WITH_IMM consumes a RECV at its ONLY/LAST packet (rxe
		// RXE_RWR_MASK), checked before the length and the R_Key as rxe's
		// check_resource is: none posted is RNR; once taken, an error of this
		// packet completes that RECV with the error status (classC).
		if q.rqHead == q.rqTail {
			q.sendRNR(psn)
			return
		}
		q.recvActive = true
	}
	if !q.checkLen(op, len(p.Payload)) {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	if pos == wire.PosFirst || pos == wire.PosOnly {
		q.wrVA, q.wrRKey, q.wrLen, q.wrOff = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen(), 0
		if q.wrLen > MaxMessageLen {
			q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
			return
		}
		// rxe check_rkey validates the whole RETH range [va, va+len) once,
		// on the FIRST/ONLY packet: a WRITE that runs past the MR is NAKed at
		// its first PSN before any byte is placed. (Checking each packet's
		// piece alone placed the leading packets and NAKed a later PSN.)
		// Zero-length writes skip the check (rxe check_rkey).
		if q.wrLen > 0 {
			if _, err := q.cfg.MRs.Remote(q.wrRKey, q.cfg.PD, memreg.RemoteWrite, q.wrVA, q.wrLen); err != nil {
				q.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
				return
			}
		}
	}
	n := uint32(len(p.Payload))
	// The payload against the RETH length, after the R_Key and range as in
	// rxe's check_rkey (a WRITE_ONLY whose payload differs from its RETH
	// length and whose R_Key is bad gets NAK 0x62, not 0x61).
	if q.wrOff+n > q.wrLen || (pos == wire.PosLast || pos == wire.PosOnly) && q.wrOff+n != q.wrLen {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	if n > 0 {
		// Zero-length writes skip the R_Key check (rxe check_rkey).
		mem, err := q.cfg.MRs.Remote(q.wrRKey, q.cfg.PD, memreg.RemoteWrite, q.wrVA+uint64(q.wrOff), n)
		if err != nil {
			q.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
			return
		}
		copy(mem, p.Payload)
		q.wrOff += n
	}
	if pos == wire.PosFirst || pos == wire.PosMiddle {
		q.respOpcode = int(op)
		q.acceptPacket(p, psn)
		return
	}
	if op.HasImm() {
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.rqHead++
		q.recvActive = false
		wc := WC{WRID: r.wrID, Status: WCSuccess, Opcode: WCRecvRDMAWithImm, ByteLen: q.wrLen,
			QPNum: q.cfg.QPN, Flags: WCWithImm, Imm: p.ImmDt.Imm()}
		if p.BTH.SE() {
			wc.Flags |= WCSolicited
		}
		q.finishMessage(p, psn)
		q.completion(q.cfg.RecvCQ, &wc)
		return
	}
	q.finishMessage(p, psn)
}

func (q *QP) execRead(p *wire.Packet, psn wire.PSN) {
	if q.attr.MaxDestRdAtomic == 0 {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	va, rkey, length := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	if length > MaxMessageLen {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	if length > 0 {
		if _, err := q.cfg.MRs.Remote(rkey, q.cfg.PD, memreg.RemoteRead, va, length); err != nil {
			q.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
			return
		}
	}
	npkts := uint32(1)
	if length > q.mtu {
		npkts = (length + q.mtu - 1) / q.mtu
	}
	r := q.newResource()
	*r = resource{valid: true, firstPSN: psn, lastPSN: psn.Add(npkts - 1), va: va, rkey: rkey, length: length}
	// The MSN counts a READ when it is accepted (C9-148).
	q.msn++
	q.respOpcode = -1
	q.expPSN = psn.Add(npkts)
	q.sendReadResponses(psn, va, rkey, length, false)
}

// sendReadResponses sends the READ response packets for [va, va+length)
// starting at psn. midStart marks a replay that starts inside the original
// range: rxe then begins with READ_RESPONSE_MIDDLE (or LAST), and its
// requester expects exactly that.
func (q *QP) sendReadResponses(psn wire.PSN, va uint64, rkey uint32, length uint32, midStart bool) {
	npkts := uint32(1)
	if length > q.mtu {
		npkts = (length + q.mtu - 1) / q.mtu
	}
	off := uint32(0)
	for i := uint32(0); i < npkts; i++ {
		n := min(length-off, q.mtu)
		first, last := i == 0 && !midStart, i == npkts-1
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
		f := q.frame(op, psn.Add(i))
		f.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: q.msn & wire.PSNMask}
		buf := q.cfg.Out.Frame()
		if n > 0 {
			mem, err := q.cfg.MRs.Remote(rkey, q.cfg.PD, memreg.RemoteRead, va+uint64(off), n)
			if err != nil {
				// The region went away while we answered (rxe_recheck_mr).
				q.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn.Add(i))
				return
			}
			hl := f.HeaderLen()
			copy(buf[hl:hl+int(n)], mem)
		}
		q.emit(buf, f, int(n))
		off += n
	}
}

func (q *QP) execAtomic(p *wire.Packet, op wire.Opcode, psn wire.PSN) {
	if q.attr.MaxDestRdAtomic == 0 {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	a := p.AtomicETH
	va, rkey := a.VA(), a.RKey()
	// rxe checks the R_Key and range (check_rkey: NAK 0x62) before the
	// alignment (rxe_mr_do_atomic_op: NAK 0x61).
	mem, err := q.cfg.MRs.Remote(rkey, q.cfg.PD, memreg.RemoteAtomic, va, 8)
	if err != nil {
		q.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
		return
	}
	if va&7 != 0 {
		q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		return
	}
	var orig uint64
	if op == wire.RCFetchAdd {
		orig, err = q.cfg.Atomics.FetchAdd(mem, va, a.SwapAdd())
	} else {
		orig, err = q.cfg.Atomics.CompareSwap(mem, va, a.Compare(), a.SwapAdd())
	}
	if err != nil {
		if errors.Is(err, atomic.ErrMisaligned) || errors.Is(err, atomic.ErrShort) {
			q.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		} else {
			q.classC(wire.NAKRemoteOperationalError, WCRemOpErr, psn)
		}
		return
	}
	q.atomicHist.Record(psn, va, rkey, orig)
	q.msn++
	q.respOpcode = -1
	q.expPSN = psn.Add(1)
	q.ackPSN = q.expPSN
	q.sendAtomicAck(psn, orig)
}

func (q *QP) sendAtomicAck(psn wire.PSN, orig uint64) {
	f := q.frame(wire.RCAtomicAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: q.msn & wire.PSNMask}
	f.AtomicAckETH = orig
	q.emit(q.cfg.Out.Frame(), f, 0)
}

func (q *QP) newResource() *resource {
	r := &q.res[q.resNext]
	q.resNext = (q.resNext + 1) % len(q.res)
	return r
}

// duplicate answers a request whose PSN is before the expected one
// (rxe duplicate_request, C9-105..C9-108).
func (q *QP) duplicate(p *wire.Packet, psn wire.PSN) {
	op := p.Opcode()
	switch {
	case op.IsSend() || op.IsWrite():
		// Acknowledge again; nothing is executed twice. The ACK carries
		// the PSN of the last SEND/WRITE/atomic packet executed, as rxe's
		// duplicate_request does (resp.ack_psn - 1): a READ executed since
		// does not count, so the ACK cannot pass a READ whose responses the
		// requester may still miss (which would make it retry).
		q.sendAck(q.ackPSN.Sub(1), wire.SyndromeACKNoCredit)
	case op.IsRead():
		va, rkey, length := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		for i := range q.res {
			r := &q.res[i]
			if !r.valid || psn.Before(r.firstPSN) || psn.After(r.lastPSN) {
				continue
			}
			// The request must be a sub-range of the original one.
			if rkey != r.rkey || va < r.va || va+uint64(length) > r.va+uint64(r.length) {
				return
			}
			q.sendReadResponses(psn, va, rkey, length, psn != r.firstPSN)
			return
		}
		// No matching resource: dropped silently (rxe).
	case op.IsAtomic():
		// Answered from the saved original value, never executed again.
		if rec, ok := q.atomicHist.Lookup(psn); ok && rec.VA == p.AtomicETH.VA() && rec.RKey == p.AtomicETH.RKey() {
			q.sendAtomicAck(psn, rec.Orig)
		}
	}
}

func (q *QP) sendNAK(psn wire.PSN, code wire.NAKCode) {
	q.inc(CntSentNAKs)
	q.sendAck(psn, wire.NAKSyndrome(code))
}

func (q *QP) sendRNR(psn wire.PSN) {
	q.inc(CntSendRNRErr)
	q.inc(CntSentNAKs)
	q.sendAck(psn, wire.RNRNAKSyndrome(q.attr.MinRNRTimer))
}

// classC handles a responder error of class C (IBTA 9.9.3.1.3, rxe
// do_class_ac_error): NAK the packet, complete the RECV WQE in progress (if
// any) with status, and move the QP to ERR.
func (q *QP) classC(code wire.NAKCode, status WCStatus, psn wire.PSN) {
	q.sendNAK(psn, code)
	if q.recvActive && q.rqHead < q.rqTail {
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.rqHead++
		wc := WC{WRID: r.wrID, Status: status, Opcode: WCRecv, QPNum: q.cfg.QPN}
		q.completion(q.cfg.RecvCQ, &wc)
	} else if status == WCLocLenErr || status == WCLocQPOpErr {
		// The failing packet started a message (FIRST/ONLY): its WQE is the head.
		if q.rqHead < q.rqTail {
			r := &q.rq[q.rqHead%uint64(len(q.rq))]
			q.rqHead++
			wc := WC{WRID: r.wrID, Status: status, Opcode: WCRecv, QPNum: q.cfg.QPN}
			q.completion(q.cfg.RecvCQ, &wc)
		}
	}
	q.recvActive = false
	q.attr.State = StateErr
	q.flushAll()
}

var _ = binary.BigEndian
