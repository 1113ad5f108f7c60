package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// ErrQueueFull is returned when a work queue has no free slot (ENOMEM).
var ErrQueueFull = errors.New("work queue full")

// PostSend queues a send work request (ibv_post_send) and transmits what
// the window allows. In the ERR state the request is completed at once with
// WR_FLUSH_ERR, as rxe does.
func (q *QP) PostSend(wr *SendWR, now time.Time) error {
	st := q.attr.State
	if st != StateRTS && st != StateSQD && st != StateErr {
		return fmt.Errorf("post send in state %v: %w", st, ErrInvalidArgument)
	}
	if q.sqTail-q.sqHead >= uint64(len(q.sq)) {
		return fmt.Errorf("post send: %d WRs outstanding: %w", len(q.sq), ErrQueueFull)
	}
	if len(wr.SGL) > q.cfg.Caps.MaxSendSGE {
		return fmt.Errorf("post send: %d SGEs > max_send_sge %d: %w", len(wr.SGL), q.cfg.Caps.MaxSendSGE, ErrInvalidArgument)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	if length > MaxMessageLen {
		return fmt.Errorf("post send: message of %d bytes > 2^31: %w", length, ErrInvalidArgument)
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRLocalInv:
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
	inline := wr.Flags&SendInline != 0 && wr.Opcode != WRRDMARead && !wr.Opcode.isAtomic()
	if inline && length > MaxInlineData {
		return fmt.Errorf("post send: %d inline bytes > %d: %w", length, MaxInlineData, ErrInvalidArgument)
	}
	w := &q.sq[q.sqTail%uint64(len(q.sq))]
	*w = sendWQE{wr: *wr, length: uint32(length), inline: w.inline[:0]}
	n := copy(w.sgl[:], wr.SGL)
	w.wr.SGL = w.sgl[:n]
	if inline {
		// Inline data is copied now: the application may reuse its buffer
		// as soon as PostSend returns.
		for _, s := range w.wr.SGL {
			mem, err := q.cfg.MRs.Local(s.LKey, q.cfg.PD, false, s.Addr, s.Length)
			if err != nil {
				return fmt.Errorf("post send: inline SGE: %w", err)
			}
			w.inline = append(w.inline, mem...)
		}
	}
	q.sqTail++
	if st == StateErr {
		q.flushSend()
		return nil
	}
	q.pump(now)
	return nil
}

// pump sends as many packets as the window, the read/atomic credits and the
// RNR back-off allow.
func (q *QP) pump(now time.Time) {
	if q.attr.State != StateRTS && q.attr.State != StateSQD {
		return
	}
	if !q.rnrDeadline.IsZero() {
		return
	}
	sent := false
	for q.sqReq < q.sqTail {
		w := &q.sq[q.sqReq%uint64(len(q.sq))]
		if w.state == wqeComplete {
			// A LOCAL_INV executed in order, or a WQE that was already
			// acknowledged while go-back-N rewound past it.
			if w.npkts > 0 && !q.nextPSN.After(w.lastPSN) {
				q.nextPSN = w.lastPSN.Add(1)
			}
			q.sqReq++
			continue
		}
		if w.state == wqePosted {
			if q.attr.State == StateSQD {
				break // draining: start nothing new
			}
			if w.wr.Opcode.isReadOrAtomic() && q.rdAtomic >= max(int(q.attr.MaxRdAtomic), 1) {
				break
			}
			if w.wr.Flags&SendFence != 0 && q.rdAtomicBefore(q.sqReq) {
				break
			}
			if w.wr.Opcode == WRLocalInv {
				if q.sqReq != q.sqHead {
					break // executes in order, when everything before it completed
				}
				if !q.localInvalidate(w) {
					return // failed: the QP is in ERR now
				}
				q.sqReq++
				continue
			}
			q.assign(w)
		}
		// rxe_requester stalls when psn_compare(req.psn, comp.psn +
		// RXE_MAX_UNACKED_PSNS) > 0: comp.psn+128 itself is still sent, so
		// 129 PSNs may be outstanding (">=" here stopped one short).
		if q.nextPSN.Diff(q.compPSN) > MaxUnackedPSNs {
			break // window full (rxe: req.psn > comp.psn + RXE_MAX_UNACKED_PSNS)
		}
		if !q.sendNext(w) {
			return // the WQE failed locally; the QP is in ERR now
		}
		sent = true
		if q.nextPSN.After(w.lastPSN) {
			q.sqReq++
		}
	}
	if sent && q.retryDeadline.IsZero() {
		if d := q.ackTimeout(); d > 0 {
			q.retryDeadline = now.Add(d)
		}
	}
	q.retire()
}

// rdAtomicBefore reports whether an uncompleted READ or atomic precedes idx.
func (q *QP) rdAtomicBefore(idx uint64) bool {
	for i := q.sqHead; i < idx; i++ {
		w := &q.sq[i%uint64(len(q.sq))]
		if w.state != wqeComplete && w.wr.Opcode.isReadOrAtomic() {
			return true
		}
	}
	return false
}

// assign gives a WQE its PSN range. A READ of N response packets uses N
// PSNs; everything else one PSN per request packet.
func (q *QP) assign(w *sendWQE) {
	n := uint32(1)
	if w.length > q.mtu && !w.wr.Opcode.isAtomic() {
		n = (w.length + q.mtu - 1) / q.mtu
	}
	w.npkts = n
	w.firstPSN = q.nextPSN
	w.lastPSN = q.nextPSN.Add(n - 1)
	w.state = wqeSending
	q.psnEnd = w.lastPSN.Add(1)
	if w.wr.Opcode.isReadOrAtomic() {
		q.rdAtomic++
	}
}

// localInvalidate executes a LOCAL_INV. A key that cannot be invalidated
// fails the WR with LOC_QP_OP_ERR and moves the QP to ERR, as rxe's
// rxe_do_local_ops does (it used to complete with MW_BIND_ERR and leave the
// QP in RTS, sending the WRs behind it).
func (q *QP) localInvalidate(w *sendWQE) bool {
	if err := q.cfg.MRs.Invalidate(w.wr.InvRKey, q.cfg.PD); err != nil {
		q.fail(w, WCLocQPOpErr)
		return false
	}
	w.state = wqeComplete
	w.status = WCSuccess
	return true
}

// sendNext transmits the packet of w at q.nextPSN and advances. It returns
// false if the WQE failed locally.
func (q *QP) sendNext(w *sendWQE) bool {
	psn := q.nextPSN
	if psn.Before(w.firstPSN) || psn.After(w.lastPSN) {
		// Cannot happen: goBack positions nextPSN inside the WQE.
		q.fail(w, WCLocQPOpErr)
		return false
	}
	idx := uint32(psn.Diff(w.firstPSN))
	if psn.Before(q.sentEnd) {
		q.inc(CntRetransmittedPkts)
	}
	defer func() {
		if q.sentEnd.Before(q.nextPSN) {
			q.sentEnd = q.nextPSN
		}
	}()
	switch w.wr.Opcode {
	case WRRDMARead:
		q.sendReadRequest(w, idx)
		q.nextPSN = w.lastPSN.Add(1)
		w.state = wqeSent
		return true
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		q.sendAtomic(w)
		q.nextPSN = psn.Add(1)
		w.state = wqeSent
		return true
	}
	off := idx * q.mtu
	n := min(w.length-off, q.mtu)
	first, last := idx == 0, off+n == w.length
	op := requestOpcode(w.wr.Opcode, first, last)
	f := q.frame(op, psn)
	if first && (op == wire.RCRDMAWriteFirst || op == wire.RCRDMAWriteOnly || op == wire.RCRDMAWriteOnlyWithImm) {
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
	if last || q.noackPkts > MaxPktPerAck {
		f.BTH.AckReq = true
		q.noackPkts = 0
	} else {
		q.noackPkts++
	}
	buf := q.cfg.Out.Frame()
	hl := f.HeaderLen()
	if err := q.gather(w, off, buf[hl:hl+int(n)]); err != nil {
		q.fail(w, WCLocProtErr)
		return false
	}
	q.emit(buf, f, int(n))
	q.nextPSN = psn.Add(1)
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
func (q *QP) sendReadRequest(w *sendWQE, idx uint32) {
	done := idx * q.mtu
	f := q.frame(wire.RCRDMAReadRequest, w.firstPSN.Add(idx))
	f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + uint64(done), RKey: w.wr.RKey, DMALen: w.length - done}
	f.BTH.AckReq = true
	q.noackPkts = 0
	q.emit(q.cfg.Out.Frame(), f, 0)
}

func (q *QP) sendAtomic(w *sendWQE) {
	op := wire.RCFetchAdd
	if w.wr.Opcode == WRAtomicCmpAndSwp {
		op = wire.RCCompareSwap
	}
	f := q.frame(op, w.firstPSN)
	f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	if op == wire.RCCompareSwap {
		f.AtomicETH.SwapAdd, f.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
	}
	f.BTH.AckReq = true
	q.noackPkts = 0
	q.emit(q.cfg.Out.Frame(), f, 0)
}

// gather copies len(dst) bytes of w's message, starting at off, into dst.
func (q *QP) gather(w *sendWQE, off uint32, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if w.wr.Flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return nil
	}
	return q.walkSGL(w.wr.SGL, off, uint32(len(dst)), false, func(mem []byte, pos uint32) {
		copy(dst[pos:], mem)
	})
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

// goBack restarts transmission at psn (go-back-N): the requester returns to
// the WQE that holds psn and resends from there, resuming a partly
// acknowledged SEND/WRITE with its MIDDLE/LAST packets and re-issuing a
// partly answered READ for the remaining bytes.
func (q *QP) goBack(psn wire.PSN) {
	for i := q.sqHead; i < q.sqTail; i++ {
		w := &q.sq[i%uint64(len(q.sq))]
		if w.state == wqePosted {
			break
		}
		if w.state == wqeComplete || w.lastPSN.Before(psn) {
			continue
		}
		if psn.Before(w.firstPSN) {
			psn = w.firstPSN
		}
		q.sqReq = i
		q.nextPSN = psn
		// noackPkts runs on: rxe's req_retry does not reset noack_pkts, so
		// AckReq inside resent messages falls where rxe puts it.
		if w.wr.Opcode == WRRDMARead {
			// Bytes already placed stay placed; ask for the rest only.
			q.nextPSN = w.firstPSN.Add(w.readDone / q.mtu)
		}
		w.state = wqeSending
		return
	}
	// Nothing outstanding: continue with new WQEs.
	q.nextPSN = q.psnEnd
}

// onTimeout handles the local ACK timeout (rxe rxe_comp.c, COMPST_ERROR_RETRY).
func (q *QP) onTimeout(now time.Time) {
	if !q.outstanding() {
		return
	}
	q.inc(CntLocalAckTimeoutErr)
	q.retry(now)
}

// retry starts go-back-N from compPSN if the retry budget allows, and fails
// the oldest WQE with RETRY_EXC_ERR otherwise.
func (q *QP) retry(now time.Time) {
	if q.retryLeft == 0 {
		q.inc(CntRetryExceededErr)
		q.fail(q.headWQE(), WCRetryExcErr)
		return
	}
	if !(q.attr.RetryCnt == 7 && q.cfg.RetryCnt7Infinite) {
		q.retryLeft--
	}
	q.inc(CntCompleterRetryErr)
	q.goBack(q.compPSN)
	q.retryDeadline = time.Time{}
	q.pump(now)
	if q.retryDeadline.IsZero() && q.outstanding() {
		if d := q.ackTimeout(); d > 0 {
			q.retryDeadline = now.Add(d)
		}
	}
}

// outstanding reports whether some sent PSN is not acknowledged yet.
func (q *QP) outstanding() bool { return q.compPSN.Before(q.psnEnd) }

// headWQE returns the oldest uncompleted send WQE, or nil.
func (q *QP) headWQE() *sendWQE {
	for i := q.sqHead; i < q.sqTail; i++ {
		w := &q.sq[i%uint64(len(q.sq))]
		if w.state != wqeComplete {
			return w
		}
	}
	return nil
}

// putAtomicResult stores an ATOMIC_ACK's original value in the first 8
// bytes of the SGL, in host order as rxe does.
func (q *QP) putAtomicResult(w *sendWQE, orig uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	return q.walkSGL(w.wr.SGL, 0, 8, true, func(mem []byte, pos uint32) { copy(mem, b[pos:]) })
}

var _ = memreg.LocalWrite
