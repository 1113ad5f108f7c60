package qp

import "time"

// busyPollBatches bounds the link batches one busy-poll Device.Poll reads:
// it holds the device mutex, so a peer flooding the link must not keep
// posts and other pollers out; the rest waits for the next poll.
const busyPollBatches = 4

// Poll (manual and busy-poll modes) processes the frames that are due on
// the link and every engine deadline that has passed at the device clock's
// current time: in manual mode every due frame (the simulator's clock
// stands still meanwhile, so there is an end), in busy-poll mode at most
// busyPollBatches batches of them. Frames go first, timers after the
// last batch, as in one round of the receive and timer goroutines. It
// returns the number of frames and timer expiries handled, so a simulator
// knows whether anything happened. In the normal mode, and on a closed
// busy-poll device, it does nothing. With a GSI (Device.GSI), it then runs
// the handlers of the MADs that arrived, outside the device's lock. In
// busy-poll mode every fourth consecutive Poll that found nothing
// yields the OS thread (sched_yield(2); busypoll.go says why).
func (d *Device) Poll() int {
	n := d.poll()
	if d.busy {
		d.busyIdle(n)
	}
	if g := d.gsi.Load(); g != nil && d.poller != nil {
		g.dispatchPending()
	}
	return n
}

func (d *Device) poll() int {
	if d.poller == nil {
		return 0
	}
	d.mu.Lock()
	defer d.unlock()
	if d.busy && d.closed {
		return 0
	}
	if d.busy {
		// The poller is about to run: what this poll receives holds its
		// ACKs for the poller's next post (ackhold.go), and those of the
		// previous poll leave first.
		d.flushHeld()
		d.holdAcks = true
		defer func() { d.holdAcks = false }()
	}
	events := 0
	for batches := 0; ; batches++ {
		n := 0
		if !d.busy || batches < busyPollBatches {
			// An error (a closed link) ends this look at the link, like
			// the receive goroutine stops on one; a transient one is
			// retried at the next poll.
			var err error
			if n, err = d.poller.TryReadBatch(d.rx.bufs, d.rx.sizes); err != nil {
				n = 0
			}
		}
		last := n == 0
		k, _ := d.drive(d.rx, n, last)
		events += k
		if last {
			return events
		}
		d.tx.flushLocked() // each batch's answers leave before the next is read
	}
}

// NextDeadline returns the earliest engine deadline of the device.
func (d *Device) NextDeadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := d.earliest()
	return next, !next.IsZero()
}
