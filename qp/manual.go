package qp

import (
	"context"
	"time"

	"github.com/goroce/goroce/nic"
)

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
// knows whether anything happened. In the threaded mode, and on a closed
// busy-poll device, it does nothing. With a GSI (Device.GSI), it then runs
// the handlers of the MADs that arrived, outside the device's lock. In
// busy-poll mode every fourth consecutive Poll that found nothing
// yields the OS thread (sched_yield(2); busypoll.go says why).
func (d *Device) Poll() int { return d.drv.poll() }

// NextDeadline returns the earliest engine deadline of the device.
func (d *Device) NextDeadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := d.earliest()
	return next, !next.IsZero()
}

// linkPoller is what the two drivers without goroutines (manualDriver,
// busyDriver) share: the link's non-blocking read and Poll's buffers.
// Device.Poll dispatches the GSI's MADs.
type linkPoller struct {
	d      *Device
	poller nic.Poller
	rx     *rxBatch
	// more are the other queues' links of a multi-queue device
	// (queues.go), read before the first's.
	more []queuePoller
}

// newLinkPoller makes the poller of d's link; owns: the device closes the
// link (busy-poll; a manual device's link is its caller's), so its frames
// may be lent (newLinkRxBatch).
func newLinkPoller(d *Device, pl nic.Poller, owns bool) linkPoller {
	rx := newRxBatch(d.cfg.Link)
	if owns {
		rx = d.newLinkRxBatch(d.cfg.Link)
	}
	return linkPoller{d: d, poller: pl, rx: rx, more: d.queuePollers(owns)}
}

func (linkPoller) start()        {}
func (linkPoller) kick()         {}
func (linkPoller) callEnded()    {}
func (linkPoller) completed(*CQ) {}
func (linkPoller) startGSI(*GSI) {}

// readLink reads the frames on the link (d.mu held), at most maxBatches
// batches of them (0: until the link is empty), drives the device with
// each, and runs the expired timers after the last. It returns the frames
// and timer expiries handled.
func (p *linkPoller) readLink(maxBatches int) int {
	if p.more == nil {
		return p.readQueue(p.poller, p.rx, maxBatches, true)
	}
	events := 0
	for _, q := range p.more {
		events += p.readQueue(q.poller, q.rx, maxBatches, false)
	}
	return events + p.readQueue(p.poller, p.rx, maxBatches, true)
}

// readQueue is readLink on one queue's link; with timers it runs the
// expired timers after the last batch.
func (p *linkPoller) readQueue(poller nic.Poller, rx *rxBatch, maxBatches int, timers bool) int {
	d := p.d
	events := 0
	for batches := 0; ; batches++ {
		n := 0
		if maxBatches == 0 || batches < maxBatches {
			// An error (a closed link) ends this look at the link, like
			// the receive goroutine stops on one; a transient one is
			// retried at the next poll.
			var err error
			if n, err = poller.TryReadBatch(rx.bufs, rx.sizes); err != nil {
				n = 0
			}
		}
		last := n == 0
		if maxBatches > 0 && n < len(rx.bufs) {
			// Busy-poll: a batch short of full emptied the link as good
			// as another look would (what arrives meanwhile waits for the
			// next poll), so it is the last, and the timers run in its
			// drive: one clock read and one look less per poll that found
			// frames, on the busy-poll round trip's path.
			last = true
		}
		if last && !timers {
			if n > 0 {
				events += n
				d.drive(rx, n, false)
			}
			return events
		}
		k, _ := d.drive(rx, n, last)
		events += k
		if last {
			return events
		}
		d.flushTxLocked() // each batch's answers leave before the next is read
	}
}

// dispatchGSI runs the handlers of the MADs that arrived (no lock).
func (p *linkPoller) dispatchGSI() {
	if g := p.d.gsi.Load(); g != nil {
		g.dispatchPending()
	}
}

// manualDriver is ModeManual's driver: only the caller's Device.Poll
// drives the device, on the caller's clock (the simulator's). CQs never
// drive it, their waits only sleep, and Close leaves the link to its
// owner.
type manualDriver struct{ linkPoller }

// poll is Device.Poll in manual mode: every frame due on the link.
func (m *manualDriver) poll() int {
	d := m.d
	d.mu.Lock()
	d.flushHeld()
	n := m.readLink(0)
	d.unlock()
	m.dispatchGSI()
	return n
}

func (m *manualDriver) pollCQ()                        {}
func (m *manualDriver) progress(context.Context) error { return errNotBusy }
func (m *manualDriver) unlockPost(time.Time)           { m.d.unlock() }
func (m *manualDriver) acksHeld()                      {}
func (m *manualDriver) stop()                          {}
func (m *manualDriver) waitEvent(ctx context.Context, cq *CQ) error {
	return cq.sleepEvent(ctx)
}
func (m *manualDriver) waitCQ(ctx context.Context, cq *CQ, wcs []WC) (int, error) {
	return cq.sleepWait(ctx, wcs, nil)
}

// closeLink leaves the link open: the simulator owns the links.
func (m *manualDriver) closeLink() error {
	if p := m.d.pcap.Load(); p != nil {
		p.Flush()
	}
	return nil
}
