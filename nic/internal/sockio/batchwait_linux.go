//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/nic"
)

// BatchWait is a link's nic.Waiter machinery: the Parker on its socket, and
// the arguments and results of the one wait in progress (the link
// serialises waits, under its receive lock), read by a ready func made once
// at Init, so a wait allocates nothing.
//
// The socket joins the runtime poller only at the first Wait or
// SetDeadline. A link that is only ever polled (TryReadBatch: qp's
// busy-poll mode, bench's raw ping-pong) then stays out of the poller, and
// that matters: the poller's epoll is edge-triggered on the socket's
// readiness, and an idle thread of the Go scheduler parked in epoll_wait
// (any process with a timer pending) wakes at every edge, each frame
// received or transmit completion, even with no goroutine waiting on the
// socket. On a 2-vCPU machine that thread took the CPU the peer and the
// kernel's receive path needed: in bench's busy-poll 8 B WRITE round trip
// on AF_XDP, 9 epoll_pwait wake-ups and 14 context switches per round trip
// with the socket registered, none without (perf stat, both processes).
type BatchWait struct {
	name   string
	fd     int
	ready  func(uintptr) bool
	look   func(bufs [][]byte, sizes []int) (int, error)
	closed func() bool

	mu   sync.Mutex             // serialises the Parker's creation with Close
	shut bool                   // Close ran: no Parker is made any more
	park atomic.Pointer[Parker] // nil until the first Wait or SetDeadline

	bufs  [][]byte
	sizes []int
	n     int
	err   error
	looks int
}

// Init prepares waits on fd (a non-blocking socket), checking that the
// runtime poller accepts it; the registration the waits use is made at the
// first Wait or SetDeadline. look reads the frames that are waiting
// without blocking (a ring check or a non-blocking receive); closed
// reports that the link was closed, which ends a wait.
func (w *BatchWait) Init(fd int, name string, look func(bufs [][]byte, sizes []int) (int, error), closed func() bool) error {
	probe, err := NewParker(fd, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	probe.Close()
	w.name, w.fd, w.look, w.closed = name, fd, look, closed
	w.ready = func(uintptr) bool {
		if w.closed() {
			return true
		}
		w.looks++
		w.n, w.err = w.look(w.bufs, w.sizes)
		return w.n > 0 || w.err != nil
	}
	return nil
}

// parker returns the Parker, registering the socket with the runtime
// poller on first use; after Close, ErrParkerClosed.
func (w *BatchWait) parker() (*Parker, error) {
	if p := w.park.Load(); p != nil {
		return p, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shut {
		return nil, ErrParkerClosed
	}
	if p := w.park.Load(); p != nil {
		return p, nil
	}
	p, err := NewParker(w.fd, w.name)
	if err != nil {
		return nil, err
	}
	w.park.Store(p)
	return p, nil
}

// Wait looks for frames and, while there are none, parks in the runtime
// poller until the socket signals more, the deadline (SetDeadline) passes
// or Close. It returns the frames read and how many looks followed a
// wake-up (the first look does not count). The error is look's,
// os.ErrDeadlineExceeded, nic.ErrClosed, or the parker's, wrapped.
func (w *BatchWait) Wait(bufs [][]byte, sizes []int) (n, wakeups int, err error) {
	if w.closed() {
		return 0, 0, nic.ErrClosed
	}
	w.bufs, w.sizes, w.n, w.err, w.looks = bufs, sizes, 0, nil, 0
	p, perr := w.parker()
	if perr == nil {
		perr = p.Wait(w.ready)
	}
	w.bufs, w.sizes = nil, nil
	wakeups = max(w.looks-1, 0)
	switch {
	case w.closed() || errors.Is(perr, ErrParkerClosed):
		return 0, wakeups, nic.ErrClosed
	case perr == nil:
		return w.n, wakeups, w.err
	case errors.Is(perr, os.ErrDeadlineExceeded):
		return 0, wakeups, perr
	}
	return 0, wakeups, fmt.Errorf("%s: wait: %w", w.name, perr)
}

// SetDeadline sets the wait deadline; any goroutine may call it, and it
// wakes a parked Wait when it moves the deadline into the past.
func (w *BatchWait) SetDeadline(t time.Time) error {
	if w.closed() {
		return nic.ErrClosed
	}
	p, err := w.parker()
	if errors.Is(err, ErrParkerClosed) {
		return nic.ErrClosed
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	return p.SetDeadline(t)
}

// Close wakes a parked Wait and releases the parker. It may be called on a
// BatchWait that was never initialised.
func (w *BatchWait) Close() error {
	w.mu.Lock()
	w.shut = true
	p := w.park.Load()
	w.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Close()
}
