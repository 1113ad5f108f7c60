package qp

import (
	"context"
	"time"
)

// threadedDriver is ModeThreaded on a link without nic.Waiter (one that
// cannot wait in the Go runtime's network poller: a WrapLink wrapper that
// hides it, a third-party nic.Link). Two goroutines: rxLoop, blocked in
// ReadBatch, drives the device with each batch it reads, and timerLoop
// drives it at the engines' earliest deadline, recomputed whenever a call
// may have moved it (kick: after every post, modify, bind and received
// batch). CQ.Wait and MR.WaitWrite only sleep.
type threadedDriver struct {
	goroutineDriver
	wake chan struct{} // cap 1: the earliest deadline may have moved
}

func newThreadedDriver(d *Device) *threadedDriver {
	return &threadedDriver{goroutineDriver: goroutineDriver{d}, wake: make(chan struct{}, 1)}
}

func (t *threadedDriver) start() {
	t.d.wg.Add(2)
	go t.rxLoop()
	go t.timerLoop()
}

func (t *threadedDriver) stop()         {}
func (t *threadedDriver) callEnded()    {}
func (t *threadedDriver) completed(*CQ) {}
func (t *threadedDriver) unlockPost(time.Time) {
	t.d.unlock()
	t.kick()
}

func (t *threadedDriver) waitCQ(ctx context.Context, cq *CQ, wcs []WC) (int, error) {
	return cq.sleepWait(ctx, wcs, nil)
}

// kick wakes the timer goroutine to recompute the earliest deadline.
func (t *threadedDriver) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// rxLoop reads frame batches (blocking) and drives the device with each.
func (t *threadedDriver) rxLoop() {
	d := t.d
	defer d.wg.Done()
	b := d.newLinkRxBatch(d.cfg.Link)
	for {
		n, err := d.cfg.Link.ReadBatch(b.bufs, b.sizes)
		if err != nil {
			d.linkFailed(err)
			return
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.flushHeld()
		d.drive(b, n, true)
		d.unlock()
		t.kick()
	}
}

// timerLoop drives the device at the engines' deadlines, and recomputes
// the next one whenever another call may have moved it (kick).
func (t *threadedDriver) timerLoop() {
	d := t.d
	defer d.wg.Done()
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		d.mu.Lock()
		d.flushHeld()
		_, next := d.drive(nil, 0, true)
		d.unlock()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(d.now()), 0)
		}
		tm.Reset(wait)
		select {
		case <-d.done:
			return
		case <-t.wake:
			if !tm.Stop() {
				select {
				case <-tm.C:
				default:
				}
			}
		case <-tm.C:
		}
	}
}
