package nic

import "time"

// Waiter is implemented by links whose reads can wait in the Go runtime's
// network poller instead of a blocking system call: a waiting goroutine is
// parked by the runtime (its OS thread goes on running other goroutines), and
// the poller's one epoll_wait wakes it. qp's normal-mode device uses it to
// run one driver goroutine per device that sleeps there until frames arrive
// or the engines' earliest deadline.
//
// WaitReadBatch is TryReadBatch that, when no frame is waiting, parks the
// goroutine until one arrives, the wait deadline passes (it returns 0 and an
// error wrapping os.ErrDeadlineExceeded; a deadline already past returns so
// at once, without reading), or the link is closed (ErrClosed). It is called
// by one goroutine at a time, like ReadBatch.
//
// SetWaitDeadline sets the deadline of the WaitReadBatch in progress and of
// later ones; the zero time means none. It may be called from any goroutine,
// concurrently with WaitReadBatch: a parked call sees the new deadline at
// once (an earlier one wakes it earlier). It costs no system call. A link
// that cannot wait this way in its current configuration returns an error
// wrapping errors.ErrUnsupported (and its WaitReadBatch blocks like
// ReadBatch, ignoring deadlines).
type Waiter interface {
	Poller
	WaitReadBatch(bufs [][]byte, sizes []int) (int, error)
	SetWaitDeadline(t time.Time) error
}

// CanWait reports whether l is a Waiter that can wait in its current
// configuration (SetWaitDeadline accepts the zero time).
func CanWait(l Link) (Waiter, bool) {
	w, ok := l.(Waiter)
	if !ok {
		return nil, false
	}
	if err := w.SetWaitDeadline(time.Time{}); err != nil {
		return nil, false
	}
	return w, true
}
