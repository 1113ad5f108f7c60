package qp

import (
	"context"
	"runtime"
	"time"
)

// pendingLink is implemented by links that can say how many frames are
// queued towards them and not yet handed to their reader (nic.MemLink).
type pendingLink interface{ Pending() int }

// settleSpins is how many times Settle yields before it starts sleeping
// between looks.
const settleSpins = 64

// settleNap is Settle's sleep between looks once yielding did not do.
const settleNap = 50 * time.Microsecond

// Settle returns once the device has processed every frame that had
// reached its link when Settle was called: their writes are in memory,
// their completions in their CQs, their answers written. It is the
// barrier a receiver needs when the sender's completion does not mean
// arrival (a UC WRITE completes when its frames leave; a test that then
// compares the target's memory must Settle first), and it is how a
// program learns that a link has gone quiet.
//
// "Reached" means handed out by the link, or queued towards it where the
// link can say so (the in-memory link's Pending); frames still in the
// kernel or on the wire have not reached it. In ModeBusyPoll Settle drives
// the device itself; in ModeManual it runs Poll, in the caller's goroutine,
// until nothing due is left (frames not yet due at the device's clock have
// not arrived). It returns ctx's error if the device does not settle in
// time (a link wrapper that drops frames it received can keep it from
// settling), or ErrClosed.
func (d *Device) Settle(ctx context.Context) error {
	for look := 0; ; look++ {
		if d.isClosed() {
			return ErrClosed
		}
		if d.cfg.Mode == ModeManual {
			if d.drv.poll() == 0 {
				return nil
			}
			continue
		}
		if d.cfg.Mode == ModeBusyPoll {
			d.drv.poll()
		}
		// Pending before the link's count, and that before the device's:
		// a frame handed out between two looks is then in the second
		// count and not yet in the third, and Settle looks again.
		queued := 0
		for _, l := range d.settleLinks() {
			if pend, ok := l.(pendingLink); ok {
				queued += pend.Pending()
			}
		}
		handed := d.linkStats().RxFrames // every queue's
		if queued == 0 && d.RxStats().Frames >= handed {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if look < settleSpins {
			runtime.Gosched()
			continue
		}
		t := time.NewTimer(settleNap)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
