package udp

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/nic"
)

var _ nic.Waiter = (*Link)(nil)

// waitSock is a socket path that can wait in the runtime's network poller
// (the Linux one).
type waitSock interface {
	wait(bufs [][]byte, sizes []int) (int, error)
	setWaitDeadline(t time.Time) error
}

var errNoWait = fmt.Errorf("udp: the portable socket path cannot wait in the runtime poller: %w", errors.ErrUnsupported)

// WaitReadBatch implements nic.Waiter: on Linux one recvmmsg(2), and when
// nothing is waiting the goroutine parks in the runtime poller until the
// socket is readable or the wait deadline passes. On the portable path it
// is ReadBatch.
func (l *Link) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.c.Closed() {
		return 0, nic.ErrClosed
	}
	if w, ok := l.s.(waitSock); ok {
		return w.wait(bufs, sizes)
	}
	return l.s.recv(bufs, sizes, true)
}

// SetWaitDeadline implements nic.Waiter. On the portable path it returns an
// error wrapping errors.ErrUnsupported.
func (l *Link) SetWaitDeadline(t time.Time) error {
	if l.c.Closed() {
		return nic.ErrClosed
	}
	if w, ok := l.s.(waitSock); ok {
		return w.setWaitDeadline(t)
	}
	return errNoWait
}
