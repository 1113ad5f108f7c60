package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/wire"
)

// ErrQueueFull is returned when a work queue has no free slot (ENOMEM).
var ErrQueueFull = errors.New("work queue full")

// requester turns send WQEs into request packets (rxe_req.c): it assigns
// PSNs, segments messages at the path MTU, keeps the window and the
// READ/atomic credits, and resends from a PSN when the completer asks for
// go-back-N. Its only timer is the RNR back-off: after an RNR NAK it sends
// nothing until the deadline, then resumes at the completer's PSN.
type requester struct {
	qp   *QP
	sq   *sendQueue
	out  *emitter
	comp *completer // window base (compPSN), ACK timer, CQE delivery

	nextPSN     wire.PSN  // PSN of the next packet to send
	psnEnd      wire.PSN  // one past the last PSN assigned to any WQE
	sentEnd     wire.PSN  // one past the highest PSN sent so far
	noackPkts   int       // packets sent since the last one with AckReq
	rnrDeadline time.Time // end of the RNR back-off; zero = not waiting
	// narrow: a go-back-N narrowed a wide window (QP.SetWindow) to
	// MaxUnackedPSNs until compPSN reaches narrowUntil.
	narrow      bool
	narrowUntil wire.PSN
}

// setPSN sets the first PSN the requester sends (sq_psn).
func (r *requester) setPSN(psn wire.PSN) {
	r.nextPSN, r.psnEnd, r.sentEnd = psn, psn, psn
}

func (r *requester) reset() {
	r.noackPkts = 0
	r.narrow = false
	r.rnrDeadline = time.Time{}
}

// deadline reports the end of the RNR back-off or, with congestion
// control, when the pacer lets the next packet go.
func (r *requester) deadline() (time.Time, bool) {
	if !r.rnrDeadline.IsZero() {
		return r.rnrDeadline, true
	}
	return r.paceDeadline()
}

// onTimeout ends the RNR back-off, and the requester resends from the PSN
// the RNR NAK named (the completer's compPSN); or the pacer's wait ended.
func (r *requester) onTimeout(now time.Time) {
	if !r.rnrDeadline.IsZero() && !now.Before(r.rnrDeadline) {
		r.rnrDeadline = time.Time{}
		r.goBack(r.comp.compPSN)
	}
	r.pump(now)
}

// waitRNR stops sending until deadline (an RNR NAK arrived).
func (r *requester) waitRNR(deadline time.Time) { r.rnrDeadline = deadline }

// post validates wr like rxe's validate_send_wr and queues it at the tail
// of the send queue. It sends nothing.
func (r *requester) post(wr *SendWR) error {
	cfg := &r.qp.cfg
	if r.sq.full() {
		return fmt.Errorf("post send: %d WRs outstanding: %w", len(r.sq.ring), ErrQueueFull)
	}
	if len(wr.SGL) > cfg.Caps.MaxSendSGE {
		return fmt.Errorf("post send: %d SGEs > max_send_sge %d: %w", len(wr.SGL), cfg.Caps.MaxSendSGE, ErrInvalidArgument)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	if length > MaxMessageLen {
		return fmt.Errorf("post send: message of %d bytes > 2^31: %w", length, ErrInvalidArgument)
	}
	if cfg.Type == QPTypeUC {
		// UC has SEND and RDMA WRITE (with immediate) only: no READ,
		// atomics or SEND_WITH_INV exist on it (IBTA table 38; rxe's
		// rxe_wr_opcode_info has no UC mask for them). Local operations
		// are the QP's own and work as on RC.
		switch wr.Opcode {
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRLocalInv, WRBindMW:
		default:
			return fmt.Errorf("post send: opcode %v not supported on UC: %w", wr.Opcode, ErrInvalidArgument)
		}
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRLocalInv:
	case WRBindMW:
		if err := validateBindMW(wr, length); err != nil {
			return err
		}
	case WRFlush, WRAtomicWrite:
		if err := validatePlacement(wr, cfg.Type); err != nil {
			return err
		}
		length = placementLen(wr)
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		// rxe validate_send_wr: atomics need 8 bytes and an 8-aligned target.
		if length < 8 || wr.RemoteAddr&7 != 0 {
			return fmt.Errorf("post send: atomic needs an 8-byte local buffer and an 8-byte aligned remote address (len %d, addr %#x): %w",
				length, wr.RemoteAddr, ErrInvalidArgument)
		}
		length = 8
	default:
		return fmt.Errorf("post send: opcode %v not supported on RC: %w", wr.Opcode, ErrInvalidArgument)
	}
	inline := wr.Flags&SendInline != 0 && wr.Opcode != WRRDMARead && !wr.Opcode.isAtomic() && !wr.Opcode.placement()
	if inline && length > MaxInlineData {
		return fmt.Errorf("post send: %d inline bytes > %d: %w", length, MaxInlineData, ErrInvalidArgument)
	}
	w := r.sq.at(r.sq.tail)
	// Field by field: a composite literal would zero and copy the whole
	// WQE (its 16-entry SGL array too) through a temporary on every post.
	w.wr = *wr
	w.length = uint32(length)
	w.inline = w.inline[:0]
	w.state, w.firstPSN, w.lastPSN, w.npkts, w.readDone, w.status = wqePosted, 0, 0, 0, 0, 0
	n := copy(w.sgl[:], wr.SGL)
	w.wr.SGL = w.sgl[:n]
	if inline {
		// Inline data is copied now: the application may reuse its buffer
		// as soon as PostSend returns.
		for _, s := range w.wr.SGL {
			mem, err := cfg.MRs.Local(s.LKey, cfg.PD, false, s.Addr, s.Length)
			if err != nil {
				return fmt.Errorf("post send: inline SGE: %w", err)
			}
			w.inline = append(w.inline, mem...)
		}
	}
	r.sq.tail++
	return nil
}

// pump sends as many packets as the window, the read/atomic credits and the
// RNR back-off allow.
func (r *requester) pump(now time.Time) {
	q, sq := r.qp, r.sq
	if q.pace != nil {
		q.pace.wait = false
	}
	if q.attr.State != StateRTS && q.attr.State != StateSQD {
		return
	}
	if !r.rnrDeadline.IsZero() {
		return
	}
	sent := false
	for sq.req < sq.tail {
		w := sq.at(sq.req)
		if w.state == wqeComplete {
			// A LOCAL_INV executed in order, or a WQE that was already
			// acknowledged while go-back-N rewound past it.
			if w.npkts > 0 && !r.nextPSN.After(w.lastPSN) {
				r.nextPSN = w.lastPSN.Add(1)
			}
			sq.req++
			continue
		}
		if w.state == wqePosted {
			if q.attr.State == StateSQD {
				break // draining: start nothing new
			}
			if w.wr.Opcode.isReadOrAtomic() && sq.rdAtomic >= max(int(q.attr.MaxRdAtomic), 1) {
				break
			}
			if w.wr.Flags&SendFence != 0 && sq.rdAtomicBefore(sq.req) {
				break
			}
			if w.wr.Opcode == WRBindMW {
				// rxe_requester runs a bind as soon as it reaches it, in
				// posting order; unlike LOCAL_INV it is not fenced.
				if !r.bindMW(w) {
					return // failed: the QP is in ERR now
				}
				sq.req++
				continue
			}
			if w.wr.Opcode == WRLocalInv {
				if sq.req != sq.head {
					break // executes in order, when everything before it completed
				}
				if !r.localInvalidate(w) {
					return // failed: the QP is in ERR now
				}
				sq.req++
				continue
			}
			r.assign(w)
		}
		// rxe_requester stalls when psn_compare(req.psn, comp.psn +
		// RXE_MAX_UNACKED_PSNS) > 0 (the window: QP.SetWindow): comp.psn+128 itself is still sent, so
		// 129 PSNs may be outstanding. UC has no window (nothing is ever
		// acknowledged; rxe checks it for RC only).
		if q.cfg.Type != QPTypeUC && r.nextPSN.Diff(r.comp.compPSN) > int32(q.Window()) {
			q.inc(CntWindowFull)
			break // window full
		}
		if r.paceBlocked(now) {
			break // the pacer's deadline resumes it
		}
		if !r.sendNext(w) {
			return // the WQE failed locally; the QP is in ERR now
		}
		r.paced(now)
		sent = true
		if r.nextPSN.After(w.lastPSN) {
			sq.req++
			if q.cfg.Type == QPTypeUC {
				// A UC send completes once its last packet is sent
				// (rxe_xmit_packet: END of a non-RC QP → wqe_state_done).
				r.ucSent(w)
			}
		}
	}
	if sent && q.cfg.Type != QPTypeUC {
		r.comp.startAckTimer(now)
	}
	// A LOCAL_INV completes here, in the requester; the completer delivers
	// its CQE (rxe's requester schedules the completer for the same reason).
	r.comp.retire()
}

// assign gives a WQE its PSN range. A READ of N response packets uses N
// PSNs; everything else one PSN per request packet.
func (r *requester) assign(w *sendWQE) {
	mtu := r.qp.mtu
	n := uint32(1)
	if w.length > mtu && !w.wr.Opcode.isAtomic() && !w.wr.Opcode.placement() {
		n = (w.length + mtu - 1) / mtu
	}
	r.sq.begin(w, r.nextPSN, n)
	r.psnEnd = w.lastPSN.Add(1)
}

// localInvalidate executes a LOCAL_INV. A key that cannot be invalidated
// fails the WR with LOC_QP_OP_ERR and moves the QP to ERR, as rxe's
// rxe_do_local_ops does.
func (r *requester) localInvalidate(w *sendWQE) bool {
	cfg := &r.qp.cfg
	if err := cfg.MRs.Invalidate(w.wr.InvRKey, cfg.PD); err != nil {
		r.comp.fail(w, WCLocQPOpErr)
		return false
	}
	w.state = wqeComplete
	w.status = WCSuccess
	return true
}

// sendNext transmits the packet of w at nextPSN and advances. It returns
// false if the WQE failed locally.
func (r *requester) sendNext(w *sendWQE) bool {
	ok := r.sendPacket(w)
	if r.sentEnd.Before(r.nextPSN) {
		r.sentEnd = r.nextPSN
	}
	return ok
}

// sendPacket is sendNext without the sentEnd update.
func (r *requester) sendPacket(w *sendWQE) bool {
	psn := r.nextPSN
	if psn.Before(w.firstPSN) || psn.After(w.lastPSN) {
		// Cannot happen: goBack positions nextPSN inside the WQE.
		r.comp.fail(w, WCLocQPOpErr)
		return false
	}
	idx := uint32(psn.Diff(w.firstPSN))
	if psn.Before(r.sentEnd) {
		r.qp.inc(CntRetransmittedPkts)
	} else if idx == 0 {
		r.qp.countTxRequest(w.wr.Opcode)
	}
	switch w.wr.Opcode {
	case WRRDMARead:
		r.sendReadRequest(w, idx)
		r.nextPSN = w.lastPSN.Add(1)
		w.state = wqeSent
		return true
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		r.sendAtomic(w)
		r.nextPSN = psn.Add(1)
		w.state = wqeSent
		return true
	case WRFlush, WRAtomicWrite:
		r.sendPlacement(w)
		r.nextPSN = psn.Add(1)
		w.state = wqeSent
		return true
	}
	mtu := r.qp.mtu
	off := idx * mtu
	n := min(w.length-off, mtu)
	first, last := idx == 0, off+n == w.length
	op := requestOpcode(w.wr.Opcode, first, last)
	uc := r.qp.cfg.Type == QPTypeUC
	reth := first && (op == wire.RCRDMAWriteFirst || op == wire.RCRDMAWriteOnly || op == wire.RCRDMAWriteOnlyWithImm)
	if uc {
		// UC's SEND and WRITE opcodes are RC's with the transport bits 001
		// (0x20-0x2B), the same headers in the same places.
		op |= wire.TransportUC
	}
	f := r.out.frame(op, psn)
	if reth {
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
	}
	if last {
		f.ImmDt = w.wr.Imm
		f.IETH = w.wr.InvRKey
		if w.wr.Flags&SendSolicited != 0 && w.wr.Opcode != WRRDMAWrite {
			f.BTH.SE = true
		}
	}
	// rxe init_req_packet: ack_req = END || (noack_pkts++ > RXE_MAX_PKT_PER_ACK).
	// The comparison sees the count before the increment, and an END packet
	// short-circuits it, so inside a long message AckReq falls on the 66th
	// packet after the previous one, not the 65th.
	if uc {
		// No AckReq on UC: nothing acknowledges it (rxe's init_req_packet
		// sets ack_req for RC only).
	} else if last || r.noackPkts > MaxPktPerAck || r.paceAckReq() {
		f.BTH.AckReq = true
		r.noackPkts = 0
		r.paceAcked()
	} else {
		r.noackPkts++
	}
	buf := r.out.buffer()
	hl := f.HeaderLen()
	if err := r.gather(w, off, buf[hl:hl+int(n)]); err != nil {
		r.comp.fail(w, WCLocProtErr)
		return false
	}
	r.out.emit(buf, f, int(n))
	r.nextPSN = psn.Add(1)
	if last {
		w.state = wqeSent
	}
	return true
}

// requestOpcode picks the RC opcode of one packet of a SEND/WRITE message.
func requestOpcode(op WROpcode, first, last bool) wire.Opcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		switch {
		case first && last:
			if op == WRRDMAWriteWithImm {
				return wire.RCRDMAWriteOnlyWithImm
			}
			return wire.RCRDMAWriteOnly
		case first:
			return wire.RCRDMAWriteFirst
		case last:
			if op == WRRDMAWriteWithImm {
				return wire.RCRDMAWriteLastWithImm
			}
			return wire.RCRDMAWriteLast
		}
		return wire.RCRDMAWriteMiddle
	}
	switch {
	case first && last:
		switch op {
		case WRSendWithImm:
			return wire.RCSendOnlyWithImmediate
		case WRSendWithInv:
			return wire.RCSendOnlyWithInvalidate
		}
		return wire.RCSendOnly
	case first:
		return wire.RCSendFirst
	case last:
		switch op {
		case WRSendWithImm:
			return wire.RCSendLastWithImmediate
		case WRSendWithInv:
			return wire.RCSendLastWithInvalidate
		}
		return wire.RCSendLast
	}
	return wire.RCSendMiddle
}

// sendReadRequest sends the READ request for the part of w that has not
// been answered yet: a re-issued READ asks for the remaining bytes at the
// PSN of the first missing response (rxe req_retry).
func (r *requester) sendReadRequest(w *sendWQE, idx uint32) {
	done := idx * r.qp.mtu
	f := r.out.frame(wire.RCRDMAReadRequest, w.firstPSN.Add(idx))
	f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + uint64(done), RKey: w.wr.RKey, DMALen: w.length - done}
	f.BTH.AckReq = true
	r.noackPkts = 0
	r.out.emit(r.out.buffer(), f, 0)
}

func (r *requester) sendAtomic(w *sendWQE) {
	op := wire.RCFetchAdd
	if w.wr.Opcode == WRAtomicCmpAndSwp {
		op = wire.RCCompareSwap
	}
	f := r.out.frame(op, w.firstPSN)
	f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	if op == wire.RCCompareSwap {
		f.AtomicETH.SwapAdd, f.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
	}
	f.BTH.AckReq = true
	r.noackPkts = 0
	r.out.emit(r.out.buffer(), f, 0)
}

// gather copies len(dst) bytes of w's message, starting at off, into dst.
func (r *requester) gather(w *sendWQE, off uint32, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if w.wr.Flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return nil
	}
	return r.qp.walkSGL(w.wr.SGL, off, uint32(len(dst)), false, func(mem []byte, pos uint32) {
		copy(dst[pos:], mem)
	})
}

// goBack restarts transmission at psn (go-back-N): the requester returns to
// the WQE that holds psn and resends from there, resuming a partly
// acknowledged SEND/WRITE with its MIDDLE/LAST packets and re-issuing a
// partly answered READ for the remaining bytes.
func (r *requester) goBack(psn wire.PSN) {
	if w := r.qp.window; w > MaxUnackedPSNs {
		r.narrow, r.narrowUntil = true, r.sentEnd.Add(w)
	}
	sq := r.sq
	for i := sq.head; i < sq.tail; i++ {
		w := sq.at(i)
		if w.state == wqePosted {
			break
		}
		if w.state == wqeComplete || w.lastPSN.Before(psn) {
			continue
		}
		if psn.Before(w.firstPSN) {
			psn = w.firstPSN
		}
		sq.req = i
		r.nextPSN = psn
		// noackPkts runs on: rxe's req_retry does not reset noack_pkts, so
		// AckReq inside resent messages falls where rxe puts it.
		if w.wr.Opcode == WRRDMARead {
			// Bytes already placed stay placed; ask for the rest only.
			r.nextPSN = w.firstPSN.Add(w.readDone / r.qp.mtu)
		}
		w.state = wqeSending
		return
	}
	// Nothing outstanding: continue with new WQEs.
	r.nextPSN = r.psnEnd
}
