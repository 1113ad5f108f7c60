package qp

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/goroce/goroce/nic"
)

// Mode is how a Device makes progress (Config.Mode): who reads its link,
// runs the engines' timers and delivers completions to waiters.
type Mode uint8

const (
	// ModeThreaded, the zero value, runs the device with goroutines of
	// its own: one driver goroutine on a link that waits in the Go
	// runtime's network poller (nic.Waiter), and a goroutine waiting in
	// CQ.Wait or MR.WaitWrite reads the link itself while the driver
	// lets it (selfdrive.go); a receive and a timer goroutine on any
	// other link. Applications need not drive anything.
	ModeThreaded Mode = iota
	// ModeBusyPoll starts no goroutines but keeps the real clock (or
	// Config.Now) and lets the application drive the device: CQ.Poll runs
	// Device.Poll first, and CQ.Wait, CQ.WaitEvent and MR.WaitWrite spin
	// on it, burning a core, instead of sleeping (busypoll.go). A device
	// nobody polls makes no progress; Device.Progress keeps one going.
	ModeBusyPoll
	// ModeManual starts no goroutines: the caller drives the device with
	// Device.Poll and Device.NextDeadline, in one goroutine, with its own
	// (fake) clock. This is how the deterministic simulator runs whole
	// devices. CQs never drive a manual device, and Close leaves its link
	// open (the simulator owns it).
	ModeManual
)

// String returns the mode's name: threaded, busy-poll or manual.
func (m Mode) String() string {
	switch m {
	case ModeThreaded:
		return "threaded"
	case ModeBusyPoll:
		return "busy-poll"
	case ModeManual:
		return "manual"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Mode returns the mode the device was opened in (Config.Mode).
func (d *Device) Mode() Mode { return d.cfg.Mode }

// driver is how a device makes progress on its link: who reads it, who runs
// the engines' timers, how a post's frames leave, how CQ.Wait,
// CQ.WaitEvent and MR.WaitWrite wait, and what Close stops. Open picks one
// driver, once, from Config.Mode and what the link can do (newDriver), as
// gVisor's fdbased link endpoint picks its packet dispatcher once; nothing
// else in the package looks at the mode. There are four:
//
//   - selfDriver (ModeThreaded on a nic.Waiter link; selfdrive.go): one
//     driver goroutine parked in the Go runtime's network poller, which
//     lends the link to goroutines waiting in CQ.Wait and MR.WaitWrite so
//     they read it themselves; posts cork while many QPs wait (cork.go).
//   - threadedDriver (ModeThreaded on any other link; threaded.go): a
//     receive goroutine blocked in ReadBatch and a timer goroutine.
//   - busyDriver (ModeBusyPoll; busypoll.go): no goroutines; CQ.Poll,
//     CQ.Wait, CQ.WaitEvent, MR.WaitWrite and Device.Progress run
//     Device.Poll, on the real clock.
//   - manualDriver (ModeManual; manual.go): no goroutines; only the caller's
//     Device.Poll drives the device, on its own clock.
//
// A driver serves one link: it owns the link's receive side (buffers, wait
// deadline, who reads it) and shares the engines, the QP table and the
// deadline heap with the rest of the device under Device.mu. A device with
// several queues (Config.Links: one link per queue, QPs spread over them by
// UDP source port, as RSS spreads flows; queues.go) has one reader per
// queue: the driver serves queue 0, each other queue has a reader
// goroutine of its own (threaded) or is read by Device.Poll (busy-poll,
// manual), each with its own link, buffers and transmit batch; what is
// per device (the engines' state under Device.mu) stays one.
//
// Methods marked "d.mu held" are called with Device.mu held; the others
// without.
type driver interface {
	// start begins the driver's work once the device is built (Open).
	start()
	// poll is Device.Poll: it handles the frames due on the link and the
	// expired timers and returns how many. Drivers with goroutines of
	// their own do nothing.
	poll() int
	// pollCQ is CQ.Poll's prologue: a busy-poll device is driven by it.
	pollCQ()
	// progress is Device.Progress: drive the device until ctx ends or it
	// closes (busy-poll mode only; the others return errNotBusy).
	progress(ctx context.Context) error
	// waitCQ is CQ.Wait (wcs not empty).
	waitCQ(ctx context.Context, cq *CQ, wcs []WC) (int, error)
	// waitEvent is CQ.WaitEvent.
	waitEvent(ctx context.Context, cq *CQ) error
	// completed is told that an engine completed into cq (d.mu held):
	// a goroutine driving the link for cq must look again.
	completed(cq *CQ)
	// callEnded is endCall's hook (d.mu held): the engines' earliest
	// deadline may have moved.
	callEnded()
	// unlockPost ends a post's call (d.mu held; endCall done): it
	// releases d.mu and writes the post's frames, or corks them (cork.go).
	unlockPost(now time.Time)
	// kick is called after a call other than a post that may have moved
	// an engine deadline, once d.mu is released.
	kick()
	// acksHeld is told that drive held owed ACKs (d.mu held; ackhold.go).
	acksHeld()
	// stop is Close's first half (d.mu held, the device just marked
	// closed): stop the driver's timers.
	stop()
	// closeLink is Close's second half (no lock): let the frames being
	// written leave, close the link (unless its owner is someone else),
	// and wait for the driver's goroutines.
	closeLink() error
	// startGSI starts the dispatch of the GSI's MADs (d.mu held): a
	// goroutine of its own, or nothing where Device.Poll dispatches them.
	startGSI(g *GSI)
}

// newDriver picks the device's driver from Config.Mode and the link (Open,
// once).
func newDriver(d *Device) (driver, error) {
	switch d.cfg.Mode {
	case ModeThreaded:
		if w, ok := nic.CanWait(d.cfg.Link); ok {
			return newSelfDriver(d, w), nil
		}
		return newThreadedDriver(d), nil
	case ModeBusyPoll, ModeManual:
		pl, ok := d.cfg.Link.(nic.Poller)
		if !ok {
			return nil, fmt.Errorf("qp: open device: %v mode needs a link with a non-blocking TryReadBatch (%T has none)", d.cfg.Mode, d.cfg.Link)
		}
		if d.cfg.Mode == ModeManual {
			return &manualDriver{linkPoller: newLinkPoller(d, pl, false)}, nil
		}
		return newBusyDriver(d, pl), nil
	}
	return nil, fmt.Errorf("qp: open device: unknown mode %v: %w", d.cfg.Mode, ErrInvalidArgument)
}

// goroutineDriver is what the two drivers with goroutines of their own
// (threadedDriver, selfDriver) share.
type goroutineDriver struct{ d *Device }

func (goroutineDriver) poll() int                                     { return 0 }
func (goroutineDriver) pollCQ()                                       {}
func (goroutineDriver) progress(context.Context) error                { return errNotBusy }
func (goroutineDriver) acksHeld()                                     {}
func (g goroutineDriver) waitEvent(ctx context.Context, cq *CQ) error { return cq.sleepEvent(ctx) }

// startGSI runs the GSI's dispatch in a goroutine of its own.
func (g goroutineDriver) startGSI(gsi *GSI) {
	var gctx context.Context
	gctx, gsi.cancel = context.WithCancel(context.Background())
	g.d.wg.Add(1)
	go gsi.dispatchLoop(gctx)
}

// closeLink lets the frames handed off before the device was marked
// closed (the ACK of what a waiter just completed, often) leave (they are
// written outside d.mu), as a NIC's last frames do, then closes the link
// and waits for the goroutines.
func (g goroutineDriver) closeLink() error { return g.d.closeOwnedLink() }
