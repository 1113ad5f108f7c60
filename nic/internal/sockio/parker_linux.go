//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrParkerClosed is returned by Parker.Wait after Close.
var ErrParkerClosed = errors.New("sockio: parker closed")

// Parker lets a goroutine wait for a socket to become readable in the Go
// runtime's network poller (edge-triggered epoll, one epoll_wait for the
// whole process) instead of in poll(2) on a thread of its own. It holds a
// duplicate of the socket's descriptor, registered with the poller through
// os.NewFile; the socket itself stays with its owner.
type Parker struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
}

// NewParker registers a duplicate of fd (a socket in non-blocking mode)
// with the runtime poller.
func NewParker(fd int, name string) (*Parker, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sockio: dup: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("sockio: non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), name)
	// A descriptor epoll refuses is not pollable: deadlines fail on it.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("sockio: %s is not pollable: %w", name, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Parker{f: f, rc: rc}, nil
}

// Wait calls ready until it returns true, parking the goroutine in the
// runtime poller whenever it returns false until the socket signals
// readability again. ready must look at the real state (read the socket, or
// the ring it fills), never at a flag: a readiness edge that came before
// Wait began is not remembered. It returns nil once ready returned true, an
// error wrapping os.ErrDeadlineExceeded at the deadline (SetDeadline), and
// ErrParkerClosed after Close. ready should be a func value made once: one
// made per call allocates.
func (p *Parker) Wait(ready func(fd uintptr) bool) error {
	err := p.rc.Read(ready)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if p.closed.Load() {
		return ErrParkerClosed // the poller's "use of closed file"
	}
	return err
}

// SetDeadline sets the deadline of the current and later Waits (zero:
// none). Safe from any goroutine; no system call.
func (p *Parker) SetDeadline(t time.Time) error { return p.f.SetReadDeadline(t) }

// Close wakes a parked Wait (ErrParkerClosed), waits for it to leave, and
// closes the duplicate descriptor.
func (p *Parker) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	return p.f.Close()
}
