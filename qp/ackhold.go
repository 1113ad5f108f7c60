package qp

import "time"

// Held ACKs: the responder's ACK and the application's next request in one
// transmit batch.
//
// A receive batch ends with one cumulative ACK per QP that owes one
// (transport.QP.EndBatch). When the batch was read by the application's
// own goroutine (a self-driving CQ.Wait or MR.WaitWrite that returns with
// what it waited for, or a busy-poll Device.Poll), the application is
// about to run, and in a request/response exchange it answers at once: an
// ACK sent at the end of the batch would leave in a transmit kick of its
// own, and the peer would wake once for the ACK and once more for the
// answer. Such a batch holds its owed ACKs instead (transport.QP.HoldAck),
// and they leave with the first of:
//
//   - the application's next post (PostSend, PostSendList): the ACK goes
//     first in the same batch as the request, one kick for both, and the
//     peer reads both in one wake-up;
//   - its next wait that sleeps or reads the link (tryOwn), or, in
//     busy-poll mode, its next Device.Poll;
//   - the next pass of the driver goroutine (or of anyone else's drive);
//   - ackHold after the batch: the responder's deadline, so a timer or the
//     resume timer of the self-driving waiters sends it even when nobody
//     calls again (at the resume timer's next firing, up to resumeKeep
//     later, when the application stops after a ping-pong: selfdrive.go);
//   - in busy-poll mode, which has no timers of its own, busyHoldCheck
//     after the hold at the latest: the busy-poll driver's hold timer (holdT) sends
//     what is still held then. An application that stops polling after
//     its last completion (perftest's and rc_pingpong's loops do, before
//     their final exchange over TCP) must not leave the peer retrying the
//     request that completion answered.
//
// A QP whose held ACK was not answered, that is, left by anything but a
// post (a wait, a timer, the driver), is a one-sided target: its
// application takes what arrives and does not answer (a WRITE stream's
// sink waiting for a flag, a receiver that only reposts receives), and the
// hold would only delay the peer's completion, by up to ackHold when the
// application does something else first. Its next batches send their ACKs
// at once (holdSkip) until the application posts on it again
// (docs/performance.md, "Held ACK": measured with and without).
//
// An ACK acknowledges every earlier request, so holding it changes only
// when the peer's requests complete, by at most ackHold, far inside any
// ACK timeout (4.096 µs × 2^timeout, 8 ms or more as perftest and rping
// set it). NAKs, ATOMIC ACKs and READ responses are never held.

// ackHold bounds how long an owed ACK waits for the application's next
// request: resumeAfter, so the resume timer of a ping-pong that holds its
// ACKs is set no earlier than without them.
const ackHold = resumeAfter

// busyHoldCheck is how long after a busy-poll hold the hold timer sends
// what is still held: a polling application sends its held ACKs within a
// poll, so the timer only matters when polling stopped. While holds go on
// it fires once per busyHoldCheck, and each firing runs a goroutine that
// may wake a thread, which on a 2-CPU machine takes the peer's CPU: at
// 1 ms (one firing per ~100 busy round trips on AF_XDP) the busy round
// trip's p99 went from 30–36 µs to 46–58 µs; at 4 ms it stays at 33–36 µs
// (go run ./bench -latency -backends afxdp, interleaved runs of builds
// with either value). It stays inside the ACK timeouts
// applications set (8 ms or more, above).
const busyHoldCheck = 4 * time.Millisecond

// SetAckHold turns the held ACK on (the default) or off. Off, every
// receive batch sends its owed ACKs at its end (transport.QP.EndBatch),
// whoever read it, as the driver goroutine's batches always do. It exists
// to measure what the hold costs or saves (bench's heldack cell:
// docs/performance.md, "Held ACK"); an application has no reason to turn
// it off. ACKs held at the call leave at their usual bounds.
func (d *Device) SetAckHold(on bool) {
	d.mu.Lock()
	d.call.noHold = !on
	d.mu.Unlock()
}

// holdTouched ends the receive batch of every touched QP, holding the owed
// ACKs (d.mu held): drive's ending when d.call.holdAcks is set.
func (d *Device) holdTouched(now time.Time) {
	if d.call.noHold {
		for _, q := range d.call.touched {
			q.eng.EndBatch(now)
			d.touch(q)
		}
		return
	}
	until := now.Add(ackHold)
	for _, q := range d.call.touched {
		if q.holdSkip {
			q.eng.EndBatch(now)
			d.touch(q)
			continue
		}
		if q.eng.HoldAck(now, until) && !q.ackHeld {
			q.ackHeld = true
			d.call.held = append(d.call.held, q)
		}
		d.touch(q)
	}
	if len(d.call.held) > 0 {
		d.drv.acksHeld()
	}
}

// flushHeld sends every held ACK (d.mu held); they leave when the caller
// unlocks, ahead of what the same call produces after it. Nobody posted:
// their QPs hold no more until their next post (holdSkip).
func (d *Device) flushHeld() { d.flush(true) }

// postFlush is flushHeld for a post on q: the held ACKs leave first, and q
// holds again.
func (d *Device) postFlush(q *QP) {
	d.flush(false)
	q.holdSkip = false
}

func (d *Device) flush(unanswered bool) {
	if len(d.call.held) == 0 {
		return
	}
	now := d.now()
	for _, q := range d.call.held {
		q.ackHeld = false
		q.holdSkip = unanswered
		if q.destroyed {
			continue
		}
		q.eng.EndBatch(now)
		d.touch(q)
	}
	clear(d.call.held)
	d.call.held = d.call.held[:0]
}
