package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/wire"
)

// complete handles a response packet (ACK, NAK, READ response, ATOMIC ACK)
// on the requester side (rxe_comp.c).
func (q *QP) complete(p *wire.Packet, now time.Time) {
	psn := p.BTH.PSN()
	if !psn.Before(q.psnEnd) {
		// Never sent: a stray or forged response (rxe drops it too).
		q.inc(CntRcvdUnknownPSN)
		return
	}
	if psn.Before(q.compPSN) && !q.readErrorNAK(p, psn) {
		// Already acknowledged: a late, duplicated or re-sent response.
		q.inc(CntRcvdStaleResponse)
		return
	}
	switch op := p.Opcode(); {
	case op == wire.RCAcknowledge:
		q.onAck(p, psn, now)
	case op.IsReadResponse():
		q.onReadResponse(p, psn, now)
	case op == wire.RCAtomicAcknowledge:
		q.onAtomicAck(p, psn, now)
	}
	q.retire()
	q.pump(now)
}

func (q *QP) onAck(p *wire.Packet, psn wire.PSN, now time.Time) {
	syn := p.AETH.Syndrome()
	switch syn.Kind() {
	case wire.SynACK:
		if q.ackThrough(psn, now) {
			q.retryOnce(now)
		}
	case wire.SynRNRNAK:
		q.inc(CntRcvdRNRErr)
		q.inc(CntRcvdNAKs)
		if q.ackThrough(psn.Sub(1), now) {
			q.retryOnce(now)
			return
		}
		if q.rnrLeft == 0 {
			q.inc(CntRetryRNRExceededErr)
			q.fail(q.headWQE(), WCRNRRetryExcErr)
			return
		}
		if q.attr.RNRRetry != 7 {
			q.rnrLeft--
		}
		q.compPSN = psn
		q.retryDeadline = time.Time{}
		q.rnrDeadline = now.Add(wire.RNRTimerDuration(syn.RNRTimer()))
	case wire.SynNAK:
		q.inc(CntRcvdNAKs)
		if syn.NAK() != wire.NAKPSNSequenceError && q.headIsReadAt(psn) {
			// An error NAK inside the READ at the head: the responder failed
			// while answering it (rxe read_reply → class C NAK at the request's
			// PSN). It ends the READ with the NAK's status; retrying it could
			// only time out (rxe check_psn/check_ack, "Handle remote errors in
			// the midst of a Read reply"). Beyond compPSN rxe ignores it.
			if psn.After(q.compPSN) {
				q.inc(CntRcvdStaleResponse)
				return
			}
			q.fail(q.headWQE(), nakStatus(syn.NAK()))
			return
		}
		readMissing := q.ackThrough(psn.Sub(1), now)
		if syn.NAK() == wire.NAKPSNSequenceError {
			q.inc(CntRcvdSeqErr)
			if !readMissing && q.compPSN.Before(psn) {
				// The NAK acknowledges everything before its PSN (C9-106).
				q.compPSN = psn
			}
			// Retries are not stacked (rxe COMPST_ERROR_RETRY: started_retry):
			// a copy of a NAK already acted on, with nothing acknowledged
			// since, starts no second go-back-N; a NAK for a new gap
			// acknowledged something and does.
			q.retryOnce(now)
			return
		}
		if readMissing {
			q.retryOnce(now)
			return
		}
		q.fail(q.headWQE(), nakStatus(syn.NAK()))
	default:
		q.inc(CntRcvdBadOpcode)
	}
}

// nakStatus maps a NAK code to the requester's completion status (rxe
// check_ack): unknown codes are REM_OP_ERR.
func nakStatus(c wire.NAKCode) WCStatus {
	switch c {
	case wire.NAKInvalidRequest:
		return WCRemInvReqErr
	case wire.NAKRemoteAccessError:
		return WCRemAccessErr
	case wire.NAKInvalidRDRequest:
		return WCRemInvRDReqErr
	}
	return WCRemOpErr
}

// readErrorNAK reports whether p, whose PSN is before compPSN, is an error
// NAK for the partly answered READ at the head. rxe's responder NAKs a READ
// that fails mid-way at the READ request's PSN, which the responses already
// received have passed; rxe's check_psn lets such a NAK through while a READ
// response sequence is open (comp.opcode FIRST/MIDDLE).
func (q *QP) readErrorNAK(p *wire.Packet, psn wire.PSN) bool {
	if p.Opcode() != wire.RCAcknowledge || p.AETH == nil {
		return false
	}
	syn := p.AETH.Syndrome()
	return syn.Kind() == wire.SynNAK && syn.NAK() != wire.NAKPSNSequenceError && q.headIsReadAt(psn)
}

// ackThrough completes, in order, every SEND/WRITE WQE whose last PSN is at
// or before psn, and advances compPSN. It stops at a READ or atomic whose
// response has not arrived and reports it (missing=true) when psn lies at or
// beyond it: responses arrive in order, so the response was lost and the
// request must be retried (rxe check_psn → COMPST_ERROR_RETRY).
func (q *QP) ackThrough(psn wire.PSN, now time.Time) (missing bool) {
	old := q.compPSN
	defer func() {
		if q.compPSN != old {
			q.progress(now)
		}
	}()
	for i := q.sqHead; i < q.sqTail; i++ {
		w := &q.sq[i%uint64(len(q.sq))]
		if w.state == wqeComplete {
			continue
		}
		if w.state == wqePosted || psn.Before(w.firstPSN) {
			return false
		}
		if w.wr.Opcode.isReadOrAtomic() {
			return true
		}
		if psn.Before(w.lastPSN) {
			// Part of a long message is acknowledged (AckReq every 64 packets).
			if !psn.Before(q.compPSN) {
				q.compPSN = psn.Add(1)
			}
			return false
		}
		q.completeWQE(w, WCSuccess)
		q.compPSN = w.lastPSN.Add(1)
	}
	return false
}

// progress is called when compPSN moved forward: the retry budgets are
// restored and the ACK timer restarts.
func (q *QP) progress(now time.Time) {
	q.retryLeft = int(q.attr.RetryCnt)
	q.rnrLeft = int(q.attr.RNRRetry)
	q.gapRetried = false
	q.retryDeadline = time.Time{}
	if q.outstanding() {
		if d := q.ackTimeout(); d > 0 {
			q.retryDeadline = now.Add(d)
		}
	}
}

// retryOnce starts one go-back-N for a gap in the responses; more retries
// for the same gap only come from the ACK timer ("retries are not stacked").
func (q *QP) retryOnce(now time.Time) {
	if q.gapRetried && q.gapRetryPSN == q.compPSN {
		return
	}
	q.gapRetried, q.gapRetryPSN = true, q.compPSN
	q.retry(now)
}

func (q *QP) onReadResponse(p *wire.Packet, psn wire.PSN, now time.Time) {
	if q.ackThrough(psn.Sub(1), now) && !q.headIsReadAt(psn) {
		q.retryOnce(now)
		return
	}
	w := q.headWQE()
	if w != nil && w.wr.Opcode != WRRDMARead && w.state != wqePosted && !psn.Before(w.firstPSN) &&
		!psn.After(w.lastPSN) && !psn.Before(q.compPSN) {
		// A READ response for a SEND/WRITE/atomic: rxe check_ack completes
		// the WQE with FATAL_ERR and moves the QP to ERR.
		q.fail(w, WCFatalErr)
		return
	}
	if w == nil || w.wr.Opcode != WRRDMARead || w.state == wqePosted || psn.Before(w.firstPSN) || psn.After(w.lastPSN) {
		q.inc(CntRcvdStaleResponse)
		return
	}
	if psn != q.compPSN {
		// An earlier response packet of this READ was lost.
		q.retryOnce(now)
		return
	}
	if p.AETH != nil && p.AETH.Syndrome().Kind() != wire.SynACK {
		q.fail(w, WCBadRespErr)
		return
	}
	idx := uint32(psn.Diff(w.firstPSN))
	off := idx * q.mtu
	n := uint32(len(p.Payload))
	if off+n > w.length || (off+n < w.length && n != q.mtu) {
		q.fail(w, WCBadRespErr)
		return
	}
	if n > 0 {
		payload := p.Payload
		if err := q.walkSGL(w.wr.SGL, off, n, true, func(mem []byte, pos uint32) { copy(mem, payload[pos:]) }); err != nil {
			q.fail(w, WCLocProtErr)
			return
		}
	}
	w.readDone = off + n
	q.compPSN = psn.Add(1)
	if off+n == w.length {
		q.completeWQE(w, WCSuccess)
		q.compPSN = w.lastPSN.Add(1)
	}
	q.progress(now)
}

func (q *QP) headIsReadAt(psn wire.PSN) bool {
	w := q.headWQE()
	return w != nil && w.wr.Opcode == WRRDMARead && w.state != wqePosted && !psn.Before(w.firstPSN) && !psn.After(w.lastPSN)
}

func (q *QP) onAtomicAck(p *wire.Packet, psn wire.PSN, now time.Time) {
	if q.ackThrough(psn.Sub(1), now) {
		if w := q.headWQE(); w == nil || !w.wr.Opcode.isAtomic() || w.firstPSN != psn {
			q.retryOnce(now)
			return
		}
	}
	w := q.headWQE()
	if w == nil || !w.wr.Opcode.isAtomic() || w.state == wqePosted || w.firstPSN != psn || psn != q.compPSN {
		q.inc(CntRcvdStaleResponse)
		return
	}
	if p.AETH.Syndrome().Kind() != wire.SynACK {
		q.fail(w, WCBadRespErr)
		return
	}
	if err := q.putAtomicResult(w, p.AtomicAckETH.OrigValue()); err != nil {
		q.fail(w, WCLocProtErr)
		return
	}
	q.completeWQE(w, WCSuccess)
	q.compPSN = psn.Add(1)
	q.progress(now)
}

// completeWQE marks w complete; retire delivers completions in order.
func (q *QP) completeWQE(w *sendWQE, status WCStatus) {
	if w.state == wqeComplete {
		return
	}
	if w.state != wqePosted && w.wr.Opcode.isReadOrAtomic() {
		q.rdAtomic--
	}
	w.state = wqeComplete
	w.status = status
}

// retire delivers the completions of the WQEs at the head of the send queue
// that are complete, in posting order. A CQE is made for signalled WRs (or
// with sq_sig_all) and always for errors.
func (q *QP) retire() {
	for q.sqHead < q.sqTail {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		if w.state != wqeComplete {
			break
		}
		if q.cfg.SQSigAll || w.wr.Flags&SendSignaled != 0 || w.status != WCSuccess {
			wc := WC{WRID: w.wr.WRID, Status: w.status, Opcode: sendWCOpcode(w.wr.Opcode), QPNum: q.cfg.QPN}
			// rxe make_send_cqe: a successful send CQE carries the message
			// length for every opcode and IBV_WC_WITH_IMM for the *_WITH_IMM
			// opcodes (mlx5 sets WITH_IMM too). Only READ/atomics had them.
			if w.status == WCSuccess {
				wc.ByteLen = w.length
				if w.wr.Opcode == WRSendWithImm || w.wr.Opcode == WRRDMAWriteWithImm {
					wc.Flags |= WCWithImm
				}
			}
			q.completion(q.cfg.SendCQ, &wc)
		}
		q.sqHead++
		if q.sqReq < q.sqHead {
			q.sqReq = q.sqHead
		}
	}
	if q.sqHead == q.sqTail && !q.outstanding() {
		q.retryDeadline = time.Time{}
	}
}

func sendWCOpcode(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	}
	return WCSend
}

// fail completes w (may be nil) with an error status and moves the QP to
// ERR, which flushes every other outstanding WQE.
func (q *QP) fail(w *sendWQE, status WCStatus) {
	if w != nil {
		q.completeWQE(w, status)
	}
	q.attr.State = StateErr
	q.flushAll()
}

// flushAll completes every outstanding send and receive WQE with
// WR_FLUSH_ERR (the QP is in ERR).
func (q *QP) flushAll() {
	q.flushSend()
	q.flushRecv()
	q.retryDeadline, q.rnrDeadline = time.Time{}, time.Time{}
}

func (q *QP) flushSend() {
	for i := q.sqHead; i < q.sqTail; i++ {
		q.completeWQE(&q.sq[i%uint64(len(q.sq))], WCWRFlushErr)
	}
	q.rdAtomic = 0
	q.retire()
	q.compPSN = q.psnEnd
	q.nextPSN = q.psnEnd
}

func (q *QP) flushRecv() {
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		wc := WC{WRID: r.wrID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: q.cfg.QPN}
		q.completion(q.cfg.RecvCQ, &wc)
	}
	q.recvActive = false
}

var _ = binary.BigEndian
