//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
	"golang.org/x/sys/unix"
)

var _ nic.Waiter = (*Link)(nil)

// waitState is the runtime-poller wait: the parker on the XSK (POLLIN while
// the RX ring is not empty; the kernel signals each flush of new
// descriptors), and the arguments and result of the one wait in progress
// (under rxMu), read by the ready func made once at Open, so a wait
// allocates nothing.
type waitState struct {
	park  *sockio.Parker
	ready func(uintptr) bool
	bufs  [][]byte
	sizes []int
	n     int
	looks int
}

func (l *Link) initWait() error {
	p, err := sockio.NewParker(l.fd, "afxdp")
	if err != nil {
		return fmt.Errorf("afxdp: %w", err)
	}
	l.w.park = p
	l.w.ready = func(uintptr) bool {
		if l.closed.Load() {
			return true
		}
		l.w.looks++
		l.w.n = l.tryReceive(l.w.bufs, l.w.sizes)
		return l.w.n > 0
	}
	return nil
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
		unix.Recvfrom(l.fd, nil, unix.MSG_DONTWAIT)
		l.wakeups.Add(1)
	}
	return 0
}

// WaitReadBatch implements nic.Waiter: it copies the frames on the RX ring
// (no system call), and when there are none parks in the runtime poller
// until the socket signals more, the wait deadline passes or Close.
func (l *Link) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.closed.Load() {
		return 0, nic.ErrClosed
	}
	w := &l.w
	w.bufs, w.sizes, w.n, w.looks = bufs, sizes, 0, 0
	err := w.park.Wait(w.ready)
	w.bufs, w.sizes = nil, nil
	if w.looks > 1 {
		l.wakeups.Add(uint64(w.looks - 1))
	}
	switch {
	case l.closed.Load() || errors.Is(err, sockio.ErrParkerClosed):
		return 0, nic.ErrClosed
	case err == nil:
		return w.n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, err
	}
	return 0, opError("wait", err)
}

// SetWaitDeadline implements nic.Waiter.
func (l *Link) SetWaitDeadline(t time.Time) error {
	if l.closed.Load() {
		return nic.ErrClosed
	}
	return l.w.park.SetDeadline(t)
}
