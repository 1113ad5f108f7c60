package qp

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
)

// Self-driving waiters (normal mode on a nic.Waiter link).
//
// A goroutine sleeping in CQ.Wait or MR.WaitWrite while the driver
// goroutine reads the link is woken by it: the driver parses the frame,
// completes into the CQ (or places the WRITE) and readies the waiter, a
// hand-off between goroutines, and often between OS threads (futex, and
// the runtime's spinning threads' nanosleep), on every round trip. Instead,
// a waiter that finds the link without a reader reads it itself, as a
// goroutine reading a TCP socket does: it parks in the runtime poller
// (WaitReadBatch), inputs the frames, runs the due timers, writes what
// the engines produced, and returns as soon as what it waits for is there.
//
// One goroutine at a time reads the link: its owner (d.owner, under d.mu)
// is the driver goroutine, a self-driving waiter, or nobody.
//
//   - A waiter takes the link when nobody has it (tryOwn). When the driver
//     has it, the waiter sleeps as usual and counts itself in linkWaiters;
//     the driver then gives the link up after its next pass (releaseLink)
//     and signals linkFree, which sleeping waiters also select on, so one
//     of them takes over. A ping-pong therefore pays the hand-off once,
//     not per round trip.
//   - A waiter that got what it waited for gives the link up (releaseLink)
//     and returns. The link stays without a reader until the next wait, or
//     until resumeAfter passed (or the earliest engine deadline, if that
//     comes first): then the resume timer hands it back to the driver
//     goroutine, so a device nobody waits on (a target, pending timers)
//     keeps making progress. The timer is re-armed only when the resume
//     time moves earlier than the one it is set for; a ping-pong whose
//     waits follow each other within resumeAfter never wakes the driver.
//   - While a waiter drives, the deadline heap's earliest deadline is its
//     wait deadline, as the driver's is: timers fire. A context that can
//     end bounds the wait too (ctxSlice, or its deadline).
//   - Something that changes what the owner waits for from another
//     goroutine (a completion into its CQ from a post or a flush, an MR
//     deregistered, the device closed) kicks the link: the wait deadline is
//     set in the past (kickOwner), so the parked owner returns and looks again.
//     kickPending makes the kick survive a concurrent re-arm (arm), which
//     matters for links whose waits re-read the deadline (nic.MemLink).
//
// Synctest bubbles: every wait here is on a channel or a timer of the
// bubble (the in-memory link's WaitReadBatch, the resume timer), so a
// self-driving waiter is durably blocked like the driver goroutine.

// resumeAfter is how long the link may stay without a reader after a
// waiter left before the driver goroutine takes it back: longer than an
// application takes between two waits of a ping-pong.
const resumeAfter = 200 * time.Microsecond

// ctxSlice bounds one self-driving look at the link when the waiter's
// context can be cancelled, so the cancellation is seen within it.
const ctxSlice = 20 * time.Millisecond

// kickedArm is d.armed after a kick: a past time no arm call asks for, so
// the next arm sets the link's deadline again.
var kickedArm = time.Unix(1, 0)

// linkOwner is who reads the link.
type linkOwner uint8

const (
	ownerDriver linkOwner = iota // the driver goroutine
	ownerNone                    // nobody: the next waiter, or the resume timer
	ownerWaiter                  // a self-driving waiter
)

// waitFor is what a self-driving waiter waits for: an entry (or the error
// state) in cq, or more than after WRITEs into mr (or its failure).
type waitFor struct {
	cq    *CQ
	mr    *memreg.MR
	after uint64
}

func (w waitFor) ready() bool {
	if w.cq != nil {
		w.cq.mu.Lock()
		defer w.cq.mu.Unlock()
		return w.cq.n > 0 || w.cq.overrun
	}
	return w.mr.Writes() > w.after || w.mr.WriteErr() != nil
}

// selfDrives reports whether waiters may drive the device.
func (d *Device) selfDrives() bool { return d.waiter != nil }

// initSelfDrive sets self-driving up (Open, before the driver starts).
func (d *Device) initSelfDrive() {
	d.rb = newRxBatch(d.cfg.Link)
	d.linkFree = make(chan struct{}, 1)
	// A channel timer the parked driver goroutine selects on (driveLoop),
	// not an AfterFunc: a firing then readies that goroutine instead of
	// starting one (and a thread to run it) every resumeAfter of a
	// ping-pong.
	d.resumeT = time.NewTimer(time.Hour)
	d.resumeT.Stop()
	d.mrs.SetWaitHooks(memregHooks(d))
}

// tryOwn makes the calling waiter the link's owner if nobody has it.
func (d *Device) tryOwn(cq *CQ) bool {
	d.mu.Lock()
	d.flushHeld() // the application waits: its turn is over (ackhold.go)
	ok := d.owner == ownerNone && !d.closed
	if ok {
		d.owner, d.selfCQ = ownerWaiter, cq
	}
	d.unlock()
	return ok
}

// leave gives the link up after a self-driving wait.
func (d *Device) leave() {
	d.mu.Lock()
	d.releaseLink()
	d.mu.Unlock()
}

// releaseLink leaves the link without a reader (d.mu held): a sleeping
// waiter is told (linkFree), and the driver goroutine takes it back at the
// resume time unless a waiter takes it first.
func (d *Device) releaseLink() {
	d.owner, d.selfCQ = ownerNone, nil
	d.releases++
	now := time.Now()
	at := now.Add(resumeAfter)
	if e := d.earliest(); !e.IsZero() {
		if er := d.realTime(e); er.Before(at) {
			at = er
		}
	}
	d.resumeAt = at
	if d.resumeTimerAt.IsZero() || at.Before(d.resumeTimerAt) {
		d.resumeTimerAt = at
		d.resumeT.Reset(max(at.Sub(now), 0))
	}
	if d.linkWaiters.Load() > 0 {
		select {
		case d.linkFree <- struct{}{}:
		default:
		}
	}
}

// realTime converts a time on the device's clock to the real clock.
func (d *Device) realTime(t time.Time) time.Time {
	if !d.customClock {
		return t
	}
	return time.Now().Add(t.Sub(d.now()))
}

// resumeFire is the resume timer's firing, run by the parked driver
// goroutine: it reports whether the driver takes the link back (nobody has
// it by the resume time).
func (d *Device) resumeFire() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resumeTimerAt = time.Time{}
	if d.closed {
		return false
	}
	if d.owner != ownerNone {
		// A waiter reads the link. While waiters keep leaving and coming
		// back (a ping-pong), the timer re-arms itself here, so that
		// releaseLink finds it set for an earlier time and leaves it: a
		// timer set earlier than every other one of the process, on each
		// round trip, makes the runtime wake a second thread for it
		// (wakeNetPoller), a context switch per round trip. Otherwise the
		// next releaseLink sets it, and an idle device has no timer.
		if d.releases != d.releasesSeen {
			d.releasesSeen = d.releases
			d.resumeTimerAt = time.Now().Add(resumeAfter)
			d.resumeT.Reset(resumeAfter)
		}
		return false
	}
	if now := time.Now(); now.Before(d.resumeAt) {
		d.resumeTimerAt = d.resumeAt
		d.resumeT.Reset(d.resumeAt.Sub(now))
		return false
	}
	d.owner = ownerDriver
	// The leaving waiter did not arm the link for what is due after it
	// (held ACKs, selfDrive): the driver's first wait ends at the earliest
	// deadline.
	d.arm(d.earliest())
	return true
}

// deadlineMoved is endCall's hook (d.mu held): with nobody on the link,
// an earlier engine deadline brings the resume time forward.
func (d *Device) deadlineMoved() {
	if d.owner == ownerNone {
		d.releaseLink()
	}
}

// kickOwner makes the link's owner return from its wait and look again.
// Any goroutine may call it, with or without d.mu.
func (d *Device) kickOwner() {
	d.kickPending.Store(true)
	d.waiter.SetWaitDeadline(kickedArm)
}

// kicked is called by the owner after each wait (d.mu held): a pending
// kick is consumed, and the next arm sets the deadline again.
func (d *Device) kicked() {
	if d.kickPending.Swap(false) {
		d.armed = kickedArm
	}
}

// selfDrive reads the link and drives the device (the caller owns the
// link) until w is ready, ctx ends, or the device is closed.
func (d *Device) selfDrive(ctx context.Context, w waitFor) error {
	done := ctx.Done()
	b := d.rb
	d.mu.Lock()
	d.armLazy(d.ctxBound(ctx, d.earliest()))
	d.mu.Unlock()
	for {
		if w.ready() {
			return nil
		}
		if done != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		n, err := d.waiter.WaitReadBatch(b.bufs, b.sizes)
		if err != nil {
			n = 0
			if errors.Is(err, nic.ErrClosed) {
				return ErrClosed // the resume timer hands the failure to the driver
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				if d.isClosed() {
					return ErrClosed
				}
				time.Sleep(driveErrPause)
			}
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return ErrClosed
		}
		d.kicked()
		d.ownerDrive, d.holdAcks = true, true
		d.drive(b, n, true)
		d.ownerDrive, d.holdAcks = false, false
		if w.ready() {
			// Leaving: the next wait arms the link. Arming it now for
			// the held ACKs' end would modify a runtime timer (and wake a
			// thread for it) on every round trip.
			d.unlock()
			continue
		}
		// Still waiting: nothing of the application's follows soon.
		d.flushHeld()
		d.armLazy(d.ctxBound(ctx, d.earliest()))
		d.unlock()
	}
}

// ctxBound is the wait deadline of a self-driving waiter: the engines'
// next deadline, or earlier the end of ctx: its deadline, and in any case
// ctxSlice from now, since a context with a deadline can also be
// cancelled before it (context.WithCancel of a WithTimeout), and nothing
// wakes a waiter parked on the link when that happens.
func (d *Device) ctxBound(ctx context.Context, next time.Time) time.Time {
	if ctx.Done() == nil {
		return next
	}
	end := d.now().Add(ctxSlice)
	if dl, ok := ctx.Deadline(); ok {
		if e := d.now().Add(time.Until(dl)); e.Before(end) {
			end = e
		}
	}
	if next.IsZero() || end.Before(next) {
		return end
	}
	return next
}

// waitCQ is CQ.Wait's wait when the CQ is empty (cq.mu held, and held
// again on return): drive the device if nobody reads the link, else sleep
// until a completion, a free link, or the end of ctx. cq.mu is released
// before d.mu is taken (the engines complete under d.mu, then take cq.mu).
// The waiter counts itself in linkWaiters before it looks at the owner, so
// an owner leaving after that look signals linkFree.
func (cq *CQ) waitCQ(ctx context.Context) error {
	d := cq.dev
	d.linkWaiters.Add(1)
	cq.mu.Unlock()
	if d.tryOwn(cq) {
		d.linkWaiters.Add(-1)
		err := d.selfDrive(ctx, waitFor{cq: cq})
		d.leave()
		cq.mu.Lock()
		return err
	}
	cq.mu.Lock()
	if cq.n > 0 || cq.overrun {
		d.linkWaiters.Add(-1)
		return nil
	}
	cq.waiters++
	cq.mu.Unlock()
	var err error
	select {
	case <-cq.wake:
	case <-d.linkFree:
	case <-ctx.Done():
		err = ctx.Err()
	}
	d.linkWaiters.Add(-1)
	cq.mu.Lock()
	cq.waiters--
	return err
}

// memregHooks are the device's part in MR.WaitWrite.
func memregHooks(d *Device) (h memreg.WaitHooks) {
	h.Wait = d.waitWrite
	h.Kick = d.kickOwner
	return h
}

// waitWrite is MR.WaitWrite on this device's MRs: drive the device while
// nobody reads the link, else sleep on the MR until the WRITE, a free
// link, or the end of ctx.
func (d *Device) waitWrite(ctx context.Context, mr *memreg.MR, after uint64) (uint64, error) {
	for {
		if c := mr.Writes(); c > after {
			return c, nil
		}
		if err := mr.WriteErr(); err != nil {
			return mr.Writes(), err
		}
		d.linkWaiters.Add(1)
		if d.tryOwn(nil) {
			d.linkWaiters.Add(-1)
			err := d.selfDrive(ctx, waitFor{mr: mr, after: after})
			d.leave()
			if c := mr.Writes(); c > after {
				return c, nil
			}
			if err == nil {
				err = mr.WriteErr()
			}
			if err != nil {
				return mr.Writes(), err
			}
			continue
		}
		c, err := mr.SleepWrite(ctx, after, d.linkFree)
		d.linkWaiters.Add(-1)
		if err != nil || c > after {
			return c, err
		}
	}
}
