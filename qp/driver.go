package qp

import (
	"errors"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
)

// The normal mode's progress, on a link that can wait in the Go runtime's
// network poller (nic.Waiter: the udp, afpacket, afxdp and in-memory links):
// one driver goroutine per device, and no other. It reads the link
// (WaitReadBatch) and, when nothing is waiting, parks in the runtime poller
// with the link's wait deadline set to the engines' earliest deadline
// (armed), so a frame or that deadline wakes it, whichever comes first;
// then it inputs the frames, runs the due timers and writes what the
// engines produced. No OS thread blocks in a system call for it, and no
// goroutine is woken when the application posts: PostSend and the others
// run the engine and write its frames themselves, and re-arm the wait
// deadline only when the engines' earliest deadline moved before the
// armed one (endCall). A later one is left armed (the driver finds nothing
// due then, and re-arms), so the common post-ACK-complete cycle costs no
// re-arm at all.
//
// Links without nic.Waiter keep two goroutines: rxLoop, blocked in
// ReadBatch, and timerLoop, woken by kick after every post.

// driveErrPause bounds how fast the driver retries a link that keeps
// failing with an error other than a deadline or ErrClosed.
const driveErrPause = time.Millisecond

// arm sets the driver's wait deadline (d.mu held).
func (d *Device) arm(t time.Time) {
	if t.Equal(d.armed) {
		return
	}
	d.armed = t
	if !t.IsZero() && d.customClock {
		// The link's deadline is on the real clock.
		t = time.Now().Add(t.Sub(d.now()))
	}
	d.waiter.SetWaitDeadline(t)
	if d.kickPending.Load() {
		// A kick (selfdrive.go) raced this call: keep its past deadline,
		// so the owner's wait returns and the owner re-arms.
		d.waiter.SetWaitDeadline(kickedArm)
	}
}

// armLazy is arm for a self-driving waiter (d.mu held): a deadline still
// ahead and no later than t is left as it is. The waiter then wakes at
// that deadline, finds nothing due and arms again: one spurious wake-up per
// kept deadline (an ACK timeout, or ctxSlice for a cancellable context); arming
// for the new WRITE's later ACK timeout on every post of a ping-pong
// would modify a runtime timer on every round trip, and the runtime wakes
// a second thread for each such change when none waits in the poller
// (wakeNetPoller), a context switch per round trip on a 2-CPU guest.
func (d *Device) armLazy(t time.Time) {
	if a := d.armed; !a.IsZero() && a.After(d.now()) && !t.IsZero() && !t.Before(a) {
		return
	}
	d.arm(t)
}

// parked is the driver goroutine while it has given the link up: it waits
// for the resume timer, until resumeFire gives the link back (true) or the
// device closes (false).
func (d *Device) parked() bool {
	for {
		select {
		case <-d.resumeT.C:
			if d.resumeFire() {
				return true
			}
		case <-d.done:
			return false
		}
	}
}

// driveLoop is the driver goroutine. After a pass that found waiters
// that would read the link themselves, it gives the link up and sleeps
// until the resume timer hands it back (selfdrive.go).
func (d *Device) driveLoop() {
	defer d.wg.Done()
	b := d.rb
	for {
		n, err := d.waiter.WaitReadBatch(b.bufs, b.sizes)
		if err != nil {
			n = 0
			if errors.Is(err, nic.ErrClosed) {
				d.linkFailed(err) // DEVICE_FATAL unless the device closed it
				return
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				if d.isClosed() {
					return
				}
				time.Sleep(driveErrPause)
			}
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.kicked()
		_, next := d.drive(b, n, true)
		d.arm(next)
		if d.linkWaiters.Load() > 0 {
			d.releaseLink()
			d.unlock()
			if !d.parked() {
				return
			}
			continue
		}
		d.unlock()
	}
}
