//go:build linux

package afxdp

import (
	"time"

	"github.com/goroce/goroce/nic"
)

var _ nic.Waiter = (*Link)(nil)

// initWait registers the XSK with the runtime poller: POLLIN while the RX
// ring is not empty (the kernel signals each flush of new descriptors).
func (l *Link) initWait() error {
	return l.w.Init(l.fd, "afxdp", func(bufs [][]byte, sizes []int) (int, error) {
		return l.tryReceive(bufs, sizes), nil
	}, l.c.Closed)
}

// tryReceive is TryReadBatch's look at the RX ring (rxMu held): the frames
// there, or 0 after asking a driver that ran out of fill descriptors to
// resume (XDP_RING_NEED_WAKEUP).
func (l *Link) tryReceive(bufs [][]byte, sizes []int) int {
	want := uint32(min(len(bufs), len(sizes)))
	if want == 0 {
		return 0
	}
	for {
		n := l.rx.available(want)
		if n == 0 {
			break
		}
		if got := l.receive(n, bufs, sizes); got > 0 {
			return got
		}
	}
	if l.needWakeup && l.fill.needWakeup() {
		rxWakeup(l.fd)
		l.c.Wakeups.Add(1)
	}
	return 0
}

// WaitReadBatch implements nic.Waiter: it copies the frames on the RX ring
// (no system call), and when there are none parks in the runtime poller
// until the socket signals more, the wait deadline passes or Close.
func (l *Link) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.giveBack()
	n, wakeups, err := l.w.Wait(bufs, sizes)
	l.c.Wakeups.Add(uint64(wakeups))
	return n, err
}

// SetWaitDeadline implements nic.Waiter.
func (l *Link) SetWaitDeadline(t time.Time) error { return l.w.SetDeadline(t) }
