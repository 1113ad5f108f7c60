//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
)

// BatchWait is a link's nic.Waiter machinery: the Parker on its socket, and
// the arguments and results of the one wait in progress (the link
// serialises waits, under its receive lock), read by a ready func made once
// at Init, so a wait allocates nothing.
type BatchWait struct {
	name   string
	park   *Parker
	ready  func(uintptr) bool
	look   func(bufs [][]byte, sizes []int) (int, error)
	closed func() bool

	bufs  [][]byte
	sizes []int
	n     int
	err   error
	looks int
}

// Init registers fd with the runtime poller. look reads the frames that are
// waiting without blocking (a ring check or a non-blocking receive); closed
// reports that the link was closed, which ends a wait.
func (w *BatchWait) Init(fd int, name string, look func(bufs [][]byte, sizes []int) (int, error), closed func() bool) error {
	p, err := NewParker(fd, name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	w.name, w.park, w.look, w.closed = name, p, look, closed
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
	perr := w.park.Wait(w.ready)
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
	return w.park.SetDeadline(t)
}

// Close wakes a parked Wait and releases the parker. It may be called on a
// BatchWait that was never initialised.
func (w *BatchWait) Close() error {
	if w.park == nil {
		return nil
	}
	return w.park.Close()
}
