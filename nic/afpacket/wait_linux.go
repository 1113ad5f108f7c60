//go:build linux

package afpacket

import (
	"time"

	"github.com/goroce/goroce/nic"
)

var _ nic.Waiter = (*Link)(nil)

// initWait registers the socket with the runtime poller: POLLIN when a
// frame, or with TPACKET_V3 a block, is ready in the ring.
func (l *Link) initWait() error {
	return l.w.Init(l.fd, "afpacket", func(bufs [][]byte, sizes []int) (int, error) {
		return l.drain(bufs, sizes), nil
	}, l.c.Closed)
}

// WaitReadBatch implements nic.Waiter: it copies the frames in the ring, and
// when there are none parks in the runtime poller until the socket signals
// one, the wait deadline passes or Close.
func (l *Link) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	n, wakeups, err := l.w.Wait(bufs, sizes)
	l.c.Wakeups.Add(uint64(wakeups))
	return n, err
}

// SetWaitDeadline implements nic.Waiter.
func (l *Link) SetWaitDeadline(t time.Time) error { return l.w.SetDeadline(t) }
