package qp

// Busy-poll mode (ModeBusyPoll): caller-driven progress on a real link.
//
// A device normally runs a driver goroutine parked in the Go runtime's
// network poller (driver.go; two goroutines on a link without nic.Waiter).
// Every received frame then costs a wake-up of that goroutine, and every
// completion a hand-off from it to the application through the CQ. In
// busy-poll mode the device starts no goroutine. Progress is made by whoever polls:
//
//   - CQ.Poll first runs Device.Poll on the CQ's device (the device that
//     created it): it reads the frames already on the link (TryReadBatch,
//     never blocking; at most busyPollBatches batches, so a flooding peer
//     cannot hold the device mutex), hands them to the engines, runs
//     every engine whose deadline (retransmission, RNR, ACK timers) has
//     passed on the real clock, and writes what they produced, all under
//     the device mutex (Device.drive, as the goroutines of the threaded
//     mode do).
//   - CQ.Wait and CQ.WaitEvent spin on that until a completion, or the
//     event, or the end of the context. They never sleep: a waiting thread
//     burns a core, as perftest's and rc_pingpong's busy-polling loops do
//     on real hardware. They let other goroutines run (runtime.Gosched)
//     only every goschedEvery fruitless looks, not at each (see below).
//   - Every yieldEvery-th consecutive Device.Poll that found nothing, from
//     any of these or called directly, yields the OS thread (below).
//   - PostSend, PostRecv, Modify work as in the threaded mode (a post writes
//     its frames at once).
//
// The consequence: a device makes no progress while nobody polls it. Its
// QPs do not answer requests, acknowledge, or retransmit. An application
// that only serves as an RDMA target (posts nothing, polls no CQ: the
// server side of perftest's write_bw/read_bw, or a peer waiting on a TCP
// socket between phases) must keep the device going, with Device.Progress
// in a goroutine of its own, or open the device in ModeThreaded.
//
// Manual mode (ModeManual, the deterministic simulator) is different:
// the simulator alone calls Device.Poll, with its own clock, and CQ.Poll,
// CQ.Wait and CQ.WaitEvent there never drive the device, so the
// simulation's step accounting is not disturbed.

import (
	"context"
	"errors"
	"runtime"
	satomic "sync/atomic"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
)

var errNotBusy = errors.New("qp: Progress: the device is not in busy-poll mode (Config.Mode ModeBusyPoll)")

// yieldEvery is how many consecutive fruitless polls of a busy-poll device
// pass before one gives the processor back to the OS (sched_yield(2)).
const yieldEvery = 4

// goschedEvery is how many fruitless looks the busy-poll waits (CQ.Wait,
// CQ.WaitEvent, Device.Progress, MR.WaitWrite) make between two
// runtime.Gosched calls.
const goschedEvery = 64

// busyDriver is ModeBusyPoll's driver: no goroutines; whoever polls
// drives the device.
type busyDriver struct {
	linkPoller
	idle satomic.Uint32 // consecutive polls that found nothing
	// holdT sends held ACKs nobody else sent (ackhold.go); holdTArmed:
	// under d.mu, it is set.
	holdT      *time.Timer
	holdTArmed bool
}

func newBusyDriver(d *Device, pl nic.Poller) *busyDriver {
	b := &busyDriver{linkPoller: newLinkPoller(d, pl, true)}
	d.mrs.SetWaitHooks(memreg.WaitHooks{Wait: b.spinWrite})
	b.holdT = time.AfterFunc(time.Hour, b.holdFire)
	b.holdT.Stop()
	return b
}

func (b *busyDriver) stop()                { b.holdT.Stop() }
func (b *busyDriver) closeLink() error     { return b.d.closeOwnedLink() }
func (b *busyDriver) unlockPost(time.Time) { b.d.unlock() }
func (b *busyDriver) waitCQ(ctx context.Context, cq *CQ, wcs []WC) (int, error) {
	return b.spinWait(ctx, cq, wcs)
}

// pollCQ: CQ.Poll drives the device (Device.Poll, which yields the OS
// thread after yieldEvery fruitless polls in a row: idled).
func (b *busyDriver) pollCQ() { b.poll() }

// poll is Device.Poll in busy-poll mode: at most busyPollBatches batches
// of frames, holding the ACKs owed for the poller's next post; nothing on
// a closed device.
func (b *busyDriver) poll() int {
	d := b.d
	d.mu.Lock()
	n := 0
	if !d.closed {
		// The poller is about to run: what this poll receives holds its
		// ACKs for the poller's next post (ackhold.go), and those of the
		// previous poll leave first.
		d.flushHeld()
		d.call.holdAcks = true
		n = b.readLink(busyPollBatches)
		d.call.holdAcks = false
	}
	d.unlock()
	b.idled(n)
	b.dispatchGSI()
	return n
}

// acksHeld arms the hold timer (d.mu held).
func (b *busyDriver) acksHeld() {
	if !b.holdTArmed {
		b.holdTArmed = true
		b.holdT.Reset(busyHoldCheck)
	}
}

// holdFire is the hold timer's firing: whatever is held now leaves (a
// hold made just before leaves early, alone: harmless), and the next hold
// arms the timer again.
func (b *busyDriver) holdFire() {
	d := b.d
	d.mu.Lock()
	b.holdTArmed = false
	if !d.closed {
		d.flushHeld()
	}
	d.unlock()
}

// idled is Device.Poll's yield policy in busy-poll mode: n is what the
// poll handled. After yieldEvery consecutive polls that found nothing, it
// yields the OS thread (osYield), so a spinning thread cannot starve the
// kernel work the device is waiting for.
//
// Why: on veth (and any software path) a frame sent by the peer is carried
// to our socket by the kernel's softirq processing, which under load is
// left to ksoftirqd. runtime.Gosched yields only to other goroutines, never
// to other threads, so two threads spinning on the two CPUs of a loaded
// machine can hold that work off. In the bench's UDP ping-pong (load ≈ 8 on
// 2 vCPUs) without OS yields: p99 8–40 ms, and in about one run in four
// RETRY_EXC_ERR after eight 67 ms ACK timeouts in a row, while the peer's
// kernel had counted its ACKs sent and our QP never saw them. Yielding
// every 16 idle polls gave p99 ≈ 1–3 ms and no failures, every 4 a little
// better again, every poll raised the median; every 64 was about as bad as
// never. That the delay is softirq work starved by the spinning threads is
// the likely reading, not a measured one.
//
// A yield costs a system call (about 1 µs on this VM), and a context switch
// only when another thread is runnable on the CPU. Two things make threads
// runnable for nothing in a busy-poll process, and both are kept out. The
// link's socket in the runtime poller: every readiness edge (each frame in,
// each transmit completion) wakes the scheduler's idle thread parked in
// epoll_wait, so nic/internal/sockio registers it only for a sleeping wait,
// never for TryReadBatch. And runtime.Gosched at every fruitless look: each
// one wakes an idle P's thread (futex), which finds nothing and parks, so
// the busy-poll waits, bench's and cmd/goroce's loops call it only every
// 64 looks (busyPause); an application's own polling loop should do the same.
// Measured in bench's busy-poll 8 B WRITE round trip on AF_XDP (two
// processes, 2 vCPUs, perf stat over both, load 2–5 from other work): with
// both, 14 context switches, 9 epoll_pwait and 6 futex calls per round trip
// and p50 70–88 µs; the socket out of the poller, 8 context switches and 6
// futex, p50 43–45 µs; with neither, 0.1–1 context switch, no epoll_pwait
// or futex, p50 12–14 µs, with the same yield every 4 fruitless polls (5–9
// sched_yield per round trip). GOMAXPROCS 1 (no idle P, no idle thread)
// alone gave 14–20 µs. Spinning 50 µs of fruitless polls before the first
// yield gave the same p50 on a quiet machine and 120–150 µs in half the runs
// while other processes wanted the CPUs; a yield every 2 or 16 fruitless
// polls gave p50 20–22 µs, every poll 13–20: so the yields stay
// unconditional, every 4. With six CPU burners added (load 7–12) the UDP
// and AF_XDP busy round trips still completed in every run (8 runs, no
// RETRY_EXC_ERR), p50 4–29 ms and p99 36–220 ms, as with a Gosched at each
// look (p50 4–9 ms, p99 209–272 ms): under such load a busy-poll thread
// mostly waits for its turn on a CPU.
func (b *busyDriver) idled(n int) {
	if n > 0 {
		b.idle.Store(0)
		return
	}
	if b.idle.Add(1)%yieldEvery == 0 {
		osYield()
	}
}

// busyPause is what the busy-poll waits do after a fruitless look
// (the spins-th): runtime.Gosched every goschedEvery of them, so other
// goroutines of this P still run (on GOMAXPROCS 1 nothing else would, but
// for the runtime's preemption every 10 ms), but not at each: with an idle
// P, every Gosched wakes a thread for it (futex) that finds nothing to run.
func busyPause(spins int) {
	if spins%goschedEvery == 0 {
		gosched()
	}
}

// gosched is runtime.Gosched, a variable so a test can count the calls.
var gosched = runtime.Gosched

// Progress drives a busy-poll device until ctx ends or the device is
// closed, spinning on Device.Poll (which yields the OS thread now and
// then): it burns a core. Run it in its own goroutine when
// nothing else polls the device's CQs but the device must still answer its peer (an
// RDMA WRITE/READ/atomic target). It returns ctx's error, or ErrClosed.
// On a device in the normal or manual mode it returns an error at once.
func (d *Device) Progress(ctx context.Context) error { return d.drv.progress(ctx) }

func (b *busyDriver) progress(ctx context.Context) error {
	d := b.d
	done := ctx.Done()
	for spins := 1; ; spins++ {
		b.poll()
		if d.isClosed() {
			return ErrClosed
		}
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		busyPause(spins)
	}
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// spinWait is CQ.Wait in busy-poll mode: Poll (which drives the device)
// until a completion arrives or ctx ends.
func (b *busyDriver) spinWait(ctx context.Context, cq *CQ, wcs []WC) (int, error) {
	done := ctx.Done()
	for spins := 1; ; spins++ {
		n, err := cq.Poll(wcs)
		if n > 0 || err != nil {
			return n, err
		}
		select {
		case <-done:
			return 0, ctx.Err()
		default:
		}
		if b.d.isClosed() {
			return 0, ErrClosed
		}
		busyPause(spins)
	}
}

// waitEvent is CQ.WaitEvent in busy-poll mode: drive the device until the
// armed notification fires or ctx ends.
func (b *busyDriver) waitEvent(ctx context.Context, cq *CQ) error {
	done := ctx.Done()
	for spins := 1; ; spins++ {
		b.poll()
		select {
		case <-cq.event:
			return nil
		case <-done:
			return ctx.Err()
		default:
		}
		if b.d.isClosed() {
			return ErrClosed
		}
		busyPause(spins)
	}
}
