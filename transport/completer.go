package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/wire"
)

// completer handles the responses to the requester's packets (rxe_comp.c):
// ACKs and NAKs, READ responses (placed into the WQE's SGL) and ATOMIC
// ACKs. It moves compPSN, completes WQEs, retires them in posting order
// into the send CQ, and decides on retries: it owns the local ACK timer and
// the retry and RNR budgets, and tells the requester where to go back to.
type completer struct {
	qp  *QP
	sq  *sendQueue
	req *requester

	compPSN       wire.PSN  // oldest PSN not yet acknowledged
	retryLeft     int       // retries left (retry_cnt) before RETRY_EXC_ERR
	rnrLeft       int       // RNR retries left (rnr_retry) before RNR_RETRY_EXC_ERR
	retryDeadline time.Time // local ACK timeout; zero = not armed
	gapRetryPSN   wire.PSN  // compPSN at which a response gap started a retry
	gapRetried    bool
}

func (c *completer) reset() {
	c.retryDeadline = time.Time{}
	c.gapRetried = false
}

// deadline reports the local ACK timeout.
func (c *completer) deadline() (time.Time, bool) { return c.retryDeadline, !c.retryDeadline.IsZero() }

// onTimeout handles the local ACK timeout (rxe rxe_comp.c,
// COMPST_ERROR_RETRY): go-back-N from compPSN while the budget lasts.
func (c *completer) onTimeout(now time.Time) {
	c.retryDeadline = time.Time{}
	if !c.outstanding() || c.paceHeld(now) {
		return
	}
	c.qp.inc(CntLocalAckTimeoutErr)
	c.retry(now)
}

// ackTimeout is the local ACK timeout: 4.096 µs × 2^timeout.
func (c *completer) ackTimeout() time.Duration {
	if c.qp.attr.Timeout == 0 {
		return 0
	}
	return time.Duration(4096<<c.qp.attr.Timeout) * time.Nanosecond
}

// startAckTimer arms the ACK timer if it is not running (the requester sent
// a packet).
func (c *completer) startAckTimer(now time.Time) {
	if c.retryDeadline.IsZero() {
		if d := c.ackTimeout(); d > 0 {
			c.retryDeadline = now.Add(d)
		}
	}
}

// outstanding reports whether some sent PSN is not acknowledged yet.
func (c *completer) outstanding() bool {
	if c.qp.pace != nil {
		// PSNs the pacer holds back were never sent: no ACK is late for
		// them (cc.go).
		return c.compPSN.Before(c.req.sentEnd)
	}
	return c.compPSN.Before(c.req.psnEnd)
}

// receive handles a response packet (ACK, NAK, READ response, ATOMIC ACK).
func (c *completer) receive(p *wire.Packet, now time.Time) {
	psn := p.BTH.PSN()
	if !psn.Before(c.req.sentEnd) {
		// Never sent: a stray or forged response. PSNs assigned to a WQE but
		// not sent yet count too: an ACK for them would complete a WQE whose
		// packets never left (rxe completes a WQE only once it is pending,
		// every packet sent).
		c.qp.inc(CntRcvdUnknownPSN)
		return
	}
	if psn.Before(c.compPSN) && !c.readErrorNAK(p, psn) {
		// Already acknowledged: a late, duplicated or re-sent response.
		c.qp.inc(CntRcvdStaleResponse)
		return
	}
	switch op := p.Opcode(); {
	case op == wire.RCAcknowledge:
		c.onAck(p, psn, now)
	case op.IsReadResponse():
		c.onReadResponse(p, psn, now)
	case op == wire.RCAtomicAcknowledge:
		c.onAtomicAck(p, psn, now)
	}
	c.retire()
	c.req.pump(now)
}

func (c *completer) onAck(p *wire.Packet, psn wire.PSN, now time.Time) {
	q := c.qp
	syn := p.AETH.Syndrome()
	switch syn.Kind() {
	case wire.SynACK:
		if c.ackThrough(psn, now) {
			c.retryOnce(now)
		}
	case wire.SynRNRNAK:
		q.inc(CntRcvdRNRErr)
		q.inc(CntRcvdNAKs)
		if c.ackThrough(psn.Sub(1), now) {
			c.retryOnce(now)
			return
		}
		if c.rnrLeft == 0 {
			q.inc(CntRetryRNRExceededErr)
			c.failBy(c.sq.oldest(), Event{Status: WCRNRRetryExcErr, NAK: NAKRcvd, Syndrome: syn})
			return
		}
		if q.attr.RNRRetry != 7 {
			c.rnrLeft--
		}
		c.compPSN = psn
		c.retryDeadline = time.Time{}
		c.req.waitRNR(now.Add(wire.RNRTimerDuration(syn.RNRTimer())))
	case wire.SynNAK:
		q.inc(CntRcvdNAKs)
		if syn.NAK() != wire.NAKPSNSequenceError && c.headIsReadAt(psn) {
			// An error NAK inside the READ at the head: the responder failed
			// while answering it (rxe read_reply → class C NAK at the request's
			// PSN). It ends the READ with the NAK's status; retrying it could
			// only time out (rxe check_psn/check_ack, "Handle remote errors in
			// the midst of a Read reply"). Beyond compPSN rxe ignores it.
			if psn.After(c.compPSN) {
				q.inc(CntRcvdStaleResponse)
				return
			}
			c.failBy(c.sq.oldest(), Event{Status: nakStatus(syn.NAK()), NAK: NAKRcvd, Syndrome: syn})
			return
		}
		readMissing := c.ackThrough(psn.Sub(1), now)
		if syn.NAK() == wire.NAKPSNSequenceError {
			q.inc(CntRcvdSeqErr)
			if !readMissing && c.compPSN.Before(psn) {
				// The NAK acknowledges everything before its PSN (C9-106).
				c.compPSN = psn
			}
			// Retries are not stacked (rxe COMPST_ERROR_RETRY: started_retry):
			// a copy of a NAK already acted on, with nothing acknowledged
			// since, starts no second go-back-N; a NAK for a new gap
			// acknowledged something and does.
			c.retryOnce(now)
			return
		}
		if readMissing {
			c.retryOnce(now)
			return
		}
		c.failBy(c.sq.oldest(), Event{Status: nakStatus(syn.NAK()), NAK: NAKRcvd, Syndrome: syn})
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
func (c *completer) readErrorNAK(p *wire.Packet, psn wire.PSN) bool {
	if p.Opcode() != wire.RCAcknowledge || p.AETH == nil {
		return false
	}
	syn := p.AETH.Syndrome()
	return syn.Kind() == wire.SynNAK && syn.NAK() != wire.NAKPSNSequenceError && c.headIsReadAt(psn)
}

// ackThrough completes, in order, every SEND/WRITE WQE whose last PSN is at
// or before psn, and advances compPSN. It stops at a READ or atomic whose
// response has not arrived and reports it (missing=true) when psn lies at or
// beyond it: responses arrive in order, so the response was lost and the
// request must be retried (rxe check_psn → COMPST_ERROR_RETRY).
func (c *completer) ackThrough(psn wire.PSN, now time.Time) (missing bool) {
	old := c.compPSN
	defer func() {
		if c.compPSN != old {
			c.progress(now)
		}
	}()
	sq := c.sq
	for i := sq.head; i < sq.tail; i++ {
		w := sq.at(i)
		if w.state == wqeComplete {
			continue
		}
		if w.state == wqePosted || psn.Before(w.firstPSN) {
			return false
		}
		if w.wr.Opcode.answered() {
			return true
		}
		if psn.Before(w.lastPSN) {
			// Part of a long message is acknowledged (AckReq every 64 packets).
			if !psn.Before(c.compPSN) {
				c.compPSN = psn.Add(1)
			}
			return false
		}
		sq.complete(w, WCSuccess)
		c.compPSN = w.lastPSN.Add(1)
	}
	return false
}

// progress is called when compPSN moved forward: the retry budgets are
// restored and the ACK timer restarts.
func (c *completer) progress(now time.Time) {
	c.retryLeft = int(c.qp.attr.RetryCnt)
	c.rnrLeft = int(c.qp.attr.RNRRetry)
	c.gapRetried = false
	c.retryDeadline = time.Time{}
	if c.outstanding() {
		if d := c.ackTimeout(); d > 0 {
			c.retryDeadline = now.Add(d)
		}
	}
}

// retry starts go-back-N from compPSN if the retry budget allows, and fails
// the oldest WQE with RETRY_EXC_ERR otherwise.
func (c *completer) retry(now time.Time) {
	q := c.qp
	if c.retryLeft == 0 {
		q.inc(CntRetryExceededErr)
		c.fail(c.sq.oldest(), WCRetryExcErr)
		return
	}
	if !(q.attr.RetryCnt == 7 && q.cfg.RetryCnt7Infinite) {
		c.retryLeft--
	}
	q.inc(CntCompleterRetryErr)
	c.req.goBack(c.compPSN)
	c.retryDeadline = time.Time{}
	c.req.pump(now)
	if c.retryDeadline.IsZero() && c.outstanding() {
		if d := c.ackTimeout(); d > 0 {
			c.retryDeadline = now.Add(d)
		}
	}
}

// retryOnce starts one go-back-N for a gap in the responses; more retries
// for the same gap only come from the ACK timer ("retries are not stacked").
func (c *completer) retryOnce(now time.Time) {
	if c.gapRetried && c.gapRetryPSN == c.compPSN {
		return
	}
	c.gapRetried, c.gapRetryPSN = true, c.compPSN
	c.retry(now)
}

func (c *completer) onReadResponse(p *wire.Packet, psn wire.PSN, now time.Time) {
	if c.ackThrough(psn.Sub(1), now) && !c.headIsReadAt(psn) && !c.headIsPlacementAt(psn) {
		c.retryOnce(now)
		return
	}
	w := c.sq.oldest()
	if c.headIsPlacementAt(psn) {
		c.onPlacementResponse(w, p, psn, now)
		return
	}
	if w != nil && w.wr.Opcode != WRRDMARead && w.state != wqePosted && !psn.Before(w.firstPSN) &&
		!psn.After(w.lastPSN) && !psn.Before(c.compPSN) {
		// A READ response for a SEND/WRITE/atomic: rxe check_ack completes
		// the WQE with FATAL_ERR and moves the QP to ERR.
		c.fail(w, WCFatalErr)
		return
	}
	if w == nil || w.wr.Opcode != WRRDMARead || w.state == wqePosted || psn.Before(w.firstPSN) || psn.After(w.lastPSN) {
		c.qp.inc(CntRcvdStaleResponse)
		return
	}
	if psn != c.compPSN {
		// An earlier response packet of this READ was lost.
		c.retryOnce(now)
		return
	}
	if p.AETH != nil && p.AETH.Syndrome().Kind() != wire.SynACK {
		c.fail(w, WCBadRespErr)
		return
	}
	mtu := c.qp.mtu
	idx := uint32(psn.Diff(w.firstPSN))
	off := idx * mtu
	n := uint32(len(p.Payload))
	if off+n > w.length || (off+n < w.length && n != mtu) {
		c.fail(w, WCBadRespErr)
		return
	}
	if n > 0 {
		payload := p.Payload
		if err := c.qp.walkSGL(w.wr.SGL, off, n, true, func(mem []byte, pos uint32) { copy(mem, payload[pos:]) }); err != nil {
			c.fail(w, WCLocProtErr)
			return
		}
	}
	w.readDone = off + n
	c.compPSN = psn.Add(1)
	if off+n == w.length {
		c.sq.complete(w, WCSuccess)
		c.compPSN = w.lastPSN.Add(1)
	}
	c.progress(now)
}

// headIsPlacementAt reports whether the oldest WQE is a FLUSH or an
// ATOMIC_WRITE at psn: rxe answers both with an RDMA READ RESPONSE ONLY
// without payload (rxe_resp.c send_read_response_ack).
func (c *completer) headIsPlacementAt(psn wire.PSN) bool {
	w := c.sq.oldest()
	return w != nil && (w.wr.Opcode == WRFlush || w.wr.Opcode == WRAtomicWrite) && w.state != wqePosted && psn == w.firstPSN
}

// onPlacementResponse completes the FLUSH or ATOMIC_WRITE w on its READ
// RESPONSE ONLY (rxe_comp.c check_ack: an ATOMIC_WRITE completes like a
// WRITE once the AETH says ACK; a FLUSH goes the READ way with nothing to
// place). A FIRST, MIDDLE or LAST, a payload, or a NAK syndrome in it is a
// bad response.
func (c *completer) onPlacementResponse(w *sendWQE, p *wire.Packet, psn wire.PSN, now time.Time) {
	if psn != c.compPSN {
		c.retryOnce(now)
		return
	}
	if p.Opcode() != wire.RCRDMAReadResponseOnly || len(p.Payload) != 0 || p.AETH.Syndrome().Kind() != wire.SynACK {
		c.fail(w, WCBadRespErr)
		return
	}
	c.sq.complete(w, WCSuccess)
	c.compPSN = psn.Add(1)
	c.progress(now)
}

func (c *completer) headIsReadAt(psn wire.PSN) bool {
	w := c.sq.oldest()
	return w != nil && w.wr.Opcode == WRRDMARead && w.state != wqePosted && !psn.Before(w.firstPSN) && !psn.After(w.lastPSN)
}

func (c *completer) onAtomicAck(p *wire.Packet, psn wire.PSN, now time.Time) {
	if c.ackThrough(psn.Sub(1), now) {
		if w := c.sq.oldest(); w == nil || !w.wr.Opcode.isAtomic() || w.firstPSN != psn {
			c.retryOnce(now)
			return
		}
	}
	w := c.sq.oldest()
	if w == nil || !w.wr.Opcode.isAtomic() || w.state == wqePosted || w.firstPSN != psn || psn != c.compPSN {
		c.qp.inc(CntRcvdStaleResponse)
		return
	}
	if p.AETH.Syndrome().Kind() != wire.SynACK {
		c.fail(w, WCBadRespErr)
		return
	}
	if err := c.putAtomicResult(w, p.AtomicAckETH.OrigValue()); err != nil {
		c.fail(w, WCLocProtErr)
		return
	}
	c.sq.complete(w, WCSuccess)
	c.compPSN = psn.Add(1)
	c.progress(now)
}

// putAtomicResult stores an ATOMIC_ACK's original value in the first 8
// bytes of the SGL, in host order as rxe does.
func (c *completer) putAtomicResult(w *sendWQE, orig uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], orig)
	return c.qp.walkSGL(w.wr.SGL, 0, 8, true, func(mem []byte, pos uint32) { copy(mem, b[pos:]) })
}

// retire delivers the completions of the WQEs at the head of the send queue
// that are complete, in posting order. A CQE is made for signalled WRs (or
// with sq_sig_all) and always for errors.
func (c *completer) retire() {
	q, sq := c.qp, c.sq
	for sq.head < sq.tail {
		w := sq.at(sq.head)
		if w.state != wqeComplete {
			break
		}
		if q.cfg.SQSigAll || w.wr.Flags&SendSignaled != 0 || w.status != WCSuccess {
			wc := WC{WRID: w.wr.WRID, Status: w.status, Opcode: sendWCOpcode(w.wr.Opcode), QPNum: q.cfg.QPN}
			// rxe make_send_cqe: a successful send CQE carries the message
			// length for every opcode and IBV_WC_WITH_IMM for the *_WITH_IMM
			// opcodes (mlx5 sets WITH_IMM too).
			if w.status == WCSuccess {
				wc.ByteLen = w.length
				if w.wr.Opcode == WRSendWithImm || w.wr.Opcode == WRRDMAWriteWithImm {
					wc.Flags |= WCWithImm
				}
			}
			q.completion(q.cfg.SendCQ, &wc)
		}
		sq.head++
		if sq.req < sq.head {
			sq.req = sq.head
		}
	}
	if sq.head == sq.tail && !c.outstanding() {
		c.retryDeadline = time.Time{}
	}
	if q.sqDraining {
		q.sqdCheck()
	}
}

func sendWCOpcode(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// fail completes w (may be nil) with an error status and moves the QP to
// ERR, which flushes every other outstanding WQE.
func (c *completer) fail(w *sendWQE, status WCStatus) {
	c.failBy(w, Event{Status: status})
}

// failBy is fail with the cause EventError reports (a NAK received).
func (c *completer) failBy(w *sendWQE, cause Event) {
	if w != nil {
		c.sq.complete(w, cause.Status)
	}
	c.qp.fail(cause)
}

// flush completes every WQE of the send queue with WR_FLUSH_ERR and
// retires them; nothing is outstanding afterwards.
func (c *completer) flush() {
	c.sq.flush()
	c.retire()
	c.compPSN = c.req.psnEnd
	c.req.nextPSN = c.req.psnEnd
}
