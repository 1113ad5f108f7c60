package qp

import (
	"context"
	"errors"
	"os"
	"runtime"
	satomic "sync/atomic"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afxdp"
)

// Self-driving waiters (selfDriver: ModeThreaded on a nic.Waiter link).
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
// One goroutine at a time reads the link: its owner (owner, under d.mu)
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
//     While waiters keep leaving and coming back, the timer fires only
//     every resumeKeep (see there), and the link may then stay without a
//     reader for up to resumeKeep after the last of them left.
//   - On AF_XDP, with GOMAXPROCS > 1, a driving waiter first spins on the
//     RX ring (spinRead, up to spinBudget, backing off after spins that
//     run out) before it parks: a peer on another CPU answers without a
//     wake-up of an idle one.
//   - While a waiter drives, the deadline heap's earliest deadline is its
//     wait deadline, as the driver's is: timers fire. A context that can
//     end kicks the owner when it ends (watch), and bounds the wait too
//     (ctxSlice, or its deadline), as a second line.
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

// resumeKeep is the resume timer's period while waiters keep leaving the
// link and coming back (a ping-pong): a firing that finds a waiter reading
// the link re-arms for resumeKeep, and a waiter leaving meanwhile leaves
// the timer as it is (releaseLink), so the link may stay without a reader
// for up to resumeKeep after the last waiter left, and what falls due
// meanwhile (a held ACK, an engine timer) waits as long: far inside the
// ACK timeouts applications set (8 ms or more). The
// waiters themselves run the engine timers while they wait (selfDrive).
//
// Why not resumeAfter: every firing readies the driver goroutine, which
// wakes an idle thread for it (wakep), and the woken thread's own search
// for work often wakes another (resetspinning); the driver then blocks on
// the timer again, which breaks the thread parked in the network poller
// out of epoll_wait (netpollBreak), and the poller's role, with the
// ping-pong's next wake-up, often moves to one of the threads just woken,
// on whichever CPU the kernel put it. perf (-g on the futex and write
// system calls of bench's sleeping AF_XDP round trip, both processes) saw
// these four wake-ups per firing, one firing per 4-5 round trips at
// resumeAfter: about one thread wake-up per round trip per process more
// than Go's TCP ping-pong, whose threads stay parked (docs/performance.md,
// "Sleeping round trip, free placement").
const resumeKeep = 2 * time.Millisecond

// ctxSlice bounds one self-driving look at the link when the waiter's
// context can be cancelled: the watch (watch) kicks the owner when the
// context ends; should a kick be missed, the cancellation is still seen
// within ctxSlice.
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

// selfDriver is the driver of ModeThreaded on a nic.Waiter link: the
// driver goroutine (driveLoop) and the self-driving waiters, one reader of
// the link at a time.
type selfDriver struct {
	goroutineDriver
	waiter nic.Waiter
	rb     *rxBatch // the link reader's buffers (one reader at a time)
	// ring: the link's TryReadBatch looks at a ring in memory (AF_XDP),
	// no system call, so a self-driving waiter may spin on it before it
	// parks (spinRead).
	ring     bool
	spinOff  int           // waits left that do not spin (owner only)
	spinNext int           // spinOff after the next spin that runs out
	spin     time.Duration // the spin budget (under d.mu; SetWaitSpin)

	// Under d.mu:
	armed         time.Time // the link's wait deadline as last set (zero: none)
	owner         linkOwner // who reads the link
	selfCQ        *CQ       // the CQ a self-driving owner waits on
	ownerDrive    bool      // that owner is in its drive pass
	resumeAt      time.Time // real clock: when the driver takes the link back
	resumeTimerAt time.Time // when resumeT fires (zero: stopped)
	releases      uint64    // releaseLink calls (resumeFire re-arms while they go on)
	releasesSeen  uint64    // releases at the resume timer's last firing
	keeping       bool      // resumeT was re-armed for resumeKeep: releaseLink leaves it
	resumeFires   uint64    // resumeFire calls (a test counts them)

	// The end of a waiter's context wakes it where it parks on the link
	// (watch). Under d.mu:
	watchDone <-chan struct{} // the Done channel watched (nil: none)
	unwatch   func() bool     // stops the watch's context.AfterFunc
	ctxEnded  func()          // s.onCtxEnd, made once

	linkWaiters satomic.Int32
	kickPending satomic.Bool
	linkFree    chan struct{} // cap 1: the link has no reader
	resumeT     *time.Timer
}

// newSelfDriver sets self-driving up (Open, before the driver starts).
func newSelfDriver(d *Device, w nic.Waiter) *selfDriver {
	s := &selfDriver{goroutineDriver: goroutineDriver{d}, waiter: w,
		rb: d.newLinkRxBatch(d.cfg.Link), linkFree: make(chan struct{}, 1)}
	if len(d.cfg.Links) > 1 {
		s.rb = d.newQueueRxBatch(d.cfg.Link) // parses outside d.mu (queues.go)
	} else {
		s.ring = ringLink(d.cfg.Link)
	}
	s.spinNext, s.spin = spinBackoffMin, spinBudget
	s.ctxEnded = s.onCtxEnd
	// A channel timer the parked driver goroutine selects on (driveLoop),
	// not an AfterFunc: a firing then readies that goroutine instead of
	// starting one (and a thread to run it) every resumeAfter of a
	// ping-pong.
	s.resumeT = time.NewTimer(time.Hour)
	s.resumeT.Stop()
	d.mrs.SetWaitHooks(memreg.WaitHooks{Wait: s.waitWrite, Kick: s.kickOwner})
	return s
}

func (s *selfDriver) start() {
	s.d.wg.Add(1)
	go s.driveLoop()
}

func (s *selfDriver) stop() {
	s.resumeT.Stop()
	if s.unwatch != nil {
		s.unwatch()
		s.unwatch, s.watchDone = nil, nil
	}
}

// watch makes the end of ctx (whose Done channel is done) kick the link's
// owner out of its park (d.mu held): without it a waiter parked on the
// link would see a cancelled context only at its wait deadline (ctxBound:
// ctxSlice at the latest). The watch stays until a wait with another
// context replaces it or the device closes, so a loop that waits with one
// context registers it once (context.AfterFunc allocates); a firing that
// finds another context's waiter parked only makes it look again.
func (s *selfDriver) watch(ctx context.Context, done <-chan struct{}) {
	if done == nil || done == s.watchDone {
		return
	}
	if s.unwatch != nil {
		s.unwatch()
	}
	s.watchDone = done
	s.unwatch = context.AfterFunc(ctx, s.ctxEnded)
}

// onCtxEnd is the watch's AfterFunc.
func (s *selfDriver) onCtxEnd() {
	d := s.d
	d.mu.Lock()
	if s.owner == ownerWaiter && !d.closed {
		s.kickOwner()
	}
	d.mu.Unlock()
}

// kick: a post writes its own frames and callEnded re-arms the link.
func (s *selfDriver) kick() {}

// completed kicks the link's owner when a completion into the CQ it waits
// on came from another goroutine than the one driving for it.
func (s *selfDriver) completed(cq *CQ) {
	if s.selfCQ == cq && !s.ownerDrive {
		s.kickOwner()
	}
}

// callEnded re-arms a link parked with a later deadline than the engines'
// earliest (d.mu held); a holding pass arms after it (selfDrive).
func (s *selfDriver) callEnded() {
	if s.d.call.holdAcks {
		return
	}
	if e := s.d.earliest(); !e.IsZero() && (s.armed.IsZero() || e.Before(s.armed)) {
		s.arm(e)
		s.deadlineMoved()
	}
}

// tryOwn makes the calling waiter the link's owner if nobody has it.
func (s *selfDriver) tryOwn(cq *CQ) bool {
	d := s.d
	d.mu.Lock()
	d.flushHeld() // the application waits: its turn is over (ackhold.go)
	ok := s.owner == ownerNone && !d.closed
	if ok {
		s.owner, s.selfCQ = ownerWaiter, cq
	}
	d.unlock()
	return ok
}

// leave gives the link up after a self-driving wait.
func (s *selfDriver) leave() {
	s.d.mu.Lock()
	s.releaseLink()
	s.d.mu.Unlock()
}

// selfDriver: ModeThreaded on a link that can wait in the Go runtime's
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
// armed one (callEnded). A later one is left armed (the driver finds nothing
// due then, and re-arms), so the common post-ACK-complete cycle costs no
// re-arm at all.

// driveErrPause bounds how fast the driver retries a link that keeps
// failing with an error other than a deadline or ErrClosed.
const driveErrPause = time.Millisecond

// arm sets the link's wait deadline (d.mu held).
func (s *selfDriver) arm(t time.Time) {
	if t.Equal(s.armed) {
		return
	}
	s.armed = t
	if !t.IsZero() && s.d.customClock {
		// The link's deadline is on the real clock.
		t = time.Now().Add(t.Sub(s.d.now()))
	}
	s.waiter.SetWaitDeadline(t)
	if s.kickPending.Load() {
		// A kick (kickOwner) raced this call: keep its past deadline,
		// so the owner's wait returns and the owner re-arms.
		s.waiter.SetWaitDeadline(kickedArm)
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
func (s *selfDriver) armLazy(t time.Time) {
	if a := s.armed; !a.IsZero() && a.After(s.d.now()) && !t.IsZero() && !t.Before(a) {
		return
	}
	s.arm(t)
}

// parked is the driver goroutine while it has given the link up: it waits
// for the resume timer, until resumeFire gives the link back (true) or the
// device closes (false).
func (s *selfDriver) parked() bool {
	for {
		select {
		case <-s.resumeT.C:
			if s.resumeFire() {
				return true
			}
		case <-s.d.done:
			return false
		}
	}
}

// driveLoop is the driver goroutine. After a pass that found waiters
// that would read the link themselves, it gives the link up and sleeps
// until the resume timer hands it back.
func (s *selfDriver) driveLoop() {
	d := s.d
	defer d.wg.Done()
	b := s.rb
	for {
		n, err := s.waiter.WaitReadBatch(b.bufs, b.sizes)
		expired := false
		if err != nil {
			n = 0
			if errors.Is(err, nic.ErrClosed) {
				d.linkFailed(err) // DEVICE_FATAL unless the device closed it
				return
			}
			expired = errors.Is(err, os.ErrDeadlineExceeded)
			if !expired {
				if d.isClosed() {
					return
				}
				time.Sleep(driveErrPause)
			}
		}
		b.preparse(d, n)
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		s.kicked()
		s.expired(expired)
		d.flushHeld()
		_, next := d.drive(b, n, true)
		s.arm(next)
		if s.linkWaiters.Load() > 0 {
			s.releaseLink()
			d.unlock()
			if !s.parked() {
				return
			}
			continue
		}
		d.unlock()
	}
}

// releaseLink leaves the link without a reader (d.mu held): a sleeping
// waiter is told (linkFree), and the driver goroutine takes it back at the
// resume time unless a waiter takes it first.
func (s *selfDriver) releaseLink() {
	s.owner, s.selfCQ = ownerNone, nil
	s.releases++
	now := time.Now()
	at := now.Add(resumeAfter)
	if e := s.d.earliest(); !e.IsZero() {
		if er := s.d.realTime(e); er.Before(at) {
			at = er
		}
	}
	s.resumeAt = at
	if !s.keeping && (s.resumeTimerAt.IsZero() || at.Before(s.resumeTimerAt)) {
		s.resumeTimerAt = at
		s.resumeT.Reset(max(at.Sub(now), 0))
	}
	if s.linkWaiters.Load() > 0 {
		select {
		case s.linkFree <- struct{}{}:
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
func (s *selfDriver) resumeFire() bool {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	s.resumeTimerAt, s.keeping = time.Time{}, false
	s.resumeFires++
	if d.closed {
		return false
	}
	now := time.Now()
	if s.releases != s.releasesSeen && s.owner == ownerWaiter {
		// Waiters keep leaving and coming back (a ping-pong), and one
		// reads the link now: the timer re-arms itself here, for
		// resumeKeep, and releaseLink leaves it (keeping). A firing that
		// finds the link without a reader re-arms for the resume time
		// instead (below), so an application that went away (to work, or
		// preempted) gets the driver back after resumeAfter, as before,
		// unless it went away just after such a firing. Re-arming it from releaseLink on every round trip
		// instead would make the runtime wake a second thread each time
		// (wakeNetPoller: a timer set earlier than every other one of the
		// process), a context switch per round trip.
		s.releasesSeen = s.releases
		s.resumeTimerAt, s.keeping = now.Add(resumeKeep), true
		s.resumeT.Reset(resumeKeep)
		return false
	}
	if s.owner != ownerNone {
		// A waiter reads the link and none left since the last firing:
		// the next releaseLink sets the timer, and an idle device has
		// none.
		return false
	}
	if now.Before(s.resumeAt) {
		s.resumeTimerAt = s.resumeAt
		s.resumeT.Reset(s.resumeAt.Sub(now))
		return false
	}
	s.owner = ownerDriver
	// The leaving waiter did not arm the link for what is due after it
	// (held ACKs, selfDrive): the driver's first wait ends at the earliest
	// deadline.
	s.arm(d.earliest())
	return true
}

// deadlineMoved is callEnded's (d.mu held): with nobody on the link, an
// earlier engine deadline brings the resume time forward.
func (s *selfDriver) deadlineMoved() {
	if s.owner == ownerNone {
		s.releaseLink()
	}
}

// kickOwner makes the link's owner return from its wait and look again.
// Any goroutine may call it, with or without d.mu.
func (s *selfDriver) kickOwner() {
	s.kickPending.Store(true)
	s.waiter.SetWaitDeadline(kickedArm)
}

// kicked is called by the owner after each wait (d.mu held): a pending
// kick is consumed, and the next arm sets the deadline again.
func (s *selfDriver) kicked() {
	if s.kickPending.Swap(false) {
		s.armed = kickedArm
	}
}

// expired is called by the owner after each wait (d.mu held), with whether
// the wait ended at its deadline: the link's deadline is then in the past
// whatever armed says, and the next arm sets it again. A kick whose
// SetWaitDeadline(kickedArm) lands after the owner consumed its
// kickPending (kicked) and re-armed leaves such a past deadline behind
// armed's back; the link's waits then fail before they look at the
// socket (the runtime poller checks the deadline first), and an arm that
// finds armed unchanged would leave the device deaf for good, its reader
// spinning.
func (s *selfDriver) expired(yes bool) {
	if yes {
		s.armed = kickedArm
	}
}

// selfDrive reads the link and drives the device (the caller owns the
// link) until w is ready, ctx ends, or the device is closed.
func (s *selfDriver) selfDrive(ctx context.Context, w waitFor) error {
	d := s.d
	done := ctx.Done()
	b := s.rb
	d.mu.Lock()
	s.armLazy(d.ctxBound(ctx, d.earliest()))
	s.watch(ctx, done)
	budget := s.spin
	d.mu.Unlock()
	var spin time.Duration
	if s.ring && budget > 0 && runtime.GOMAXPROCS(0) > 1 {
		// (With one P, a spinning waiter would hold off every other
		// goroutine of the process, the peer's too when it runs in it.)
		if s.spinOff > 0 {
			s.spinOff--
		} else {
			spin = budget
		}
	}
	for {
		if w.ready() {
			return nil
		}
		if done != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var n int
		var err error
		if spin > 0 {
			n, spin, err = s.spinRead(b, spin)
			if n == 0 && err == nil && spin <= 0 {
				// Spun out: the peer is slow, or shares our CPU and
				// waits for it. Sleep through the next waits.
				s.spinOff = s.spinNext
				s.spinNext = min(2*s.spinNext, spinBackoff)
			} else if n > 0 {
				s.spinNext = spinBackoffMin
			}
		}
		if n == 0 && err == nil {
			n, err = s.waiter.WaitReadBatch(b.bufs, b.sizes)
		}
		expired := false
		if err != nil {
			n = 0
			if errors.Is(err, nic.ErrClosed) {
				return ErrClosed // the resume timer hands the failure to the driver
			}
			expired = errors.Is(err, os.ErrDeadlineExceeded)
			if !expired {
				if d.isClosed() {
					return ErrClosed
				}
				time.Sleep(driveErrPause)
			}
		}
		b.preparse(d, n)
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return ErrClosed
		}
		s.kicked()
		s.expired(expired)
		s.ownerDrive, d.call.holdAcks = true, true
		d.flushHeld()
		d.drive(b, n, true)
		s.ownerDrive, d.call.holdAcks = false, false
		if w.ready() {
			// Leaving: the next wait arms the link. Arming it now for
			// the held ACKs' end would modify a runtime timer (and wake a
			// thread for it) on every round trip.
			d.unlock()
			continue
		}
		// Still waiting: nothing of the application's follows soon.
		d.flushHeld()
		s.armLazy(d.ctxBound(ctx, d.earliest()))
		d.unlock()
	}
}

// spinBudget is how long a self-driving wait spins on the link's ring in
// all before it parks in the runtime poller (spinRead): a little longer
// than a peer's hop of a ping-pong when both ends run on CPUs of their own
// (bench's busy-poll round trip: 10–15 µs).
//
// Why spin: a waiter parked in the runtime poller is woken by the frame's
// softirq, and when its thread's CPU went idle meanwhile, the wake-up
// costs the idle CPU's exit and a cross-CPU wake: the sleeping ping-pongs
// (TCP's, raw AF_XDP's, goroce's) took 55–134 µs per round trip pinned to
// two CPUs against 20–40 µs on one (docs/performance.md, "Sleeping round
// trip, free placement"). Left free (no pinning, GOMAXPROCS 2: what users
// get), a goroce ping-pong landed in either mode from run to run.
// Spinning through the peer's hop keeps the CPU awake and the frame is
// seen at once; a wait that spins out sleeps as before.
const spinBudget = 20 * time.Microsecond

// SetWaitSpin sets how long a sleeping wait (CQ.Wait, MR.WaitWrite) that
// reads an AF_XDP link itself spins on its RX ring before it parks, in
// all (the default spinBudget; 0 turns the spin off). It exists to
// measure the spin against other budgets (bench -wait-spin:
// docs/performance.md, "Sleeping round trip, free placement"); other
// links and devices do not spin, and neither does a process with
// GOMAXPROCS 1.
func (d *Device) SetWaitSpin(budget time.Duration) {
	if s, ok := d.drv.(*selfDriver); ok {
		d.mu.Lock()
		s.spin = max(budget, 0)
		d.mu.Unlock()
	}
}

// spinBackoffMin and spinBackoff bound how many of the following waits
// do not spin after a spin ran out (doubling from the first to the second
// while spins keep running out, back to the first after a spin that saw
// frames): a peer that shares our CPU cannot run while we spin, nor can
// another goroutine of ours, so there the spin only costs the budget, once
// per up to spinBackoff waits.
const (
	spinBackoffMin = 16
	spinBackoff    = 1024
)

// spinLooks is how many empty looks of a spin pass between two looks at
// the clock.
const spinLooks = 8

// spinRead looks at the link's ring without blocking until frames are
// there, a kick is pending (the wait must look again), or the budget is
// spent, and returns the frames and the budget left. It does not yield
// the OS thread: a yield hands the CPU to any other runnable thread for
// its whole time slice, which on a loaded machine is milliseconds.
func (s *selfDriver) spinRead(b *rxBatch, budget time.Duration) (int, time.Duration, error) {
	t0 := time.Now()
	for looks := 1; ; looks++ {
		n, err := s.waiter.TryReadBatch(b.bufs, b.sizes)
		if n > 0 || err != nil || s.kickPending.Load() {
			return n, budget - time.Since(t0), err
		}
		if looks%spinLooks == 0 && time.Since(t0) >= budget {
			return 0, 0, nil
		}
	}
}

// ringLink reports whether l, under qp's own wrappers, is an AF_XDP link,
// whose TryReadBatch looks at its RX ring in memory.
func ringLink(l nic.Link) bool {
	for {
		switch w := l.(type) {
		case *waitedLink:
			l = w.ownedLink.Link
		case *ownedLink:
			l = w.Link
		case *afxdp.Link:
			return true
		default:
			return false
		}
	}
}

// ctxBound is the wait deadline of a self-driving waiter: the engines'
// next deadline, or earlier the end of ctx: its deadline, and in any case
// ctxSlice from now, since a context with a deadline can also be
// cancelled before it (context.WithCancel of a WithTimeout): the watch
// (watch) wakes the parked waiter then, and the slice is its second line.
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

// waitCQ is CQ.Wait: a passive CQ (the GSI's) only sleeps; the others
// drive the device while they wait when nobody else reads the link.
func (s *selfDriver) waitCQ(ctx context.Context, cq *CQ, wcs []WC) (int, error) {
	if cq.passive {
		return cq.sleepWait(ctx, wcs, nil)
	}
	return cq.sleepWait(ctx, wcs, s.waitEmpty)
}

// waitEmpty is CQ.Wait's wait when the CQ is empty (cq.mu held, and held
// again on return): drive the device if nobody reads the link, else sleep
// until a completion, a free link, or the end of ctx. cq.mu is released
// before d.mu is taken (the engines complete under d.mu, then take cq.mu).
// The waiter counts itself in linkWaiters before it looks at the owner, so
// an owner leaving after that look signals linkFree.
func (s *selfDriver) waitEmpty(ctx context.Context, cq *CQ) error {
	s.linkWaiters.Add(1)
	cq.mu.Unlock()
	if s.tryOwn(cq) {
		s.linkWaiters.Add(-1)
		err := s.selfDrive(ctx, waitFor{cq: cq})
		s.leave()
		cq.mu.Lock()
		return err
	}
	cq.mu.Lock()
	if cq.n > 0 || cq.overrun {
		s.linkWaiters.Add(-1)
		return nil
	}
	cq.waiters++
	cq.mu.Unlock()
	var err error
	select {
	case <-cq.wake:
	case <-s.linkFree:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.linkWaiters.Add(-1)
	cq.mu.Lock()
	cq.waiters--
	return err
}

// waitWrite is MR.WaitWrite on this device's MRs: drive the device while
// nobody reads the link, else sleep on the MR until the WRITE, a free
// link, or the end of ctx.
func (s *selfDriver) waitWrite(ctx context.Context, mr *memreg.MR, after uint64) (uint64, error) {
	for {
		if c := mr.Writes(); c > after {
			return c, nil
		}
		if err := mr.WriteErr(); err != nil {
			return mr.Writes(), err
		}
		s.linkWaiters.Add(1)
		if s.tryOwn(nil) {
			s.linkWaiters.Add(-1)
			err := s.selfDrive(ctx, waitFor{mr: mr, after: after})
			s.leave()
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
		c, err := mr.SleepWrite(ctx, after, s.linkFree)
		s.linkWaiters.Add(-1)
		if err != nil || c > after {
			return c, err
		}
	}
}
