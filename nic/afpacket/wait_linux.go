//go:build linux

package afpacket

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
)

var _ nic.Waiter = (*Link)(nil)

// waitState is the runtime-poller wait: the parker on the socket (POLLIN
// when a frame, or with TPACKET_V3 a block, is ready in the ring), and the
// arguments and result of the one wait in progress (under rxMu), read by
// the ready func made once at Open, so a wait allocates nothing.
type waitState struct {
	park  *sockio.Parker
	ready func(uintptr) bool
	bufs  [][]byte
	sizes []int
	n     int
	looks int // ready calls in this wait: all but the first follow a wake-up
}

func (l *Link) initWait() error {
	p, err := sockio.NewParker(l.fd, "afpacket")
	if err != nil {
		return fmt.Errorf("afpacket: %w", err)
	}
	l.w.park = p
	l.w.ready = func(uintptr) bool {
		if l.closed.Load() {
			return true
		}
		l.w.looks++
		l.w.n = l.drain(l.w.bufs, l.w.sizes)
		return l.w.n > 0
	}
	return nil
}

// WaitReadBatch implements nic.Waiter: it copies the frames in the ring, and
// when there are none parks in the runtime poller until the socket signals
// one, the wait deadline passes or Close.
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
	return 0, fmt.Errorf("afpacket: wait: %w", err)
}

// SetWaitDeadline implements nic.Waiter.
func (l *Link) SetWaitDeadline(t time.Time) error {
	if l.closed.Load() {
		return nic.ErrClosed
	}
	return l.w.park.SetDeadline(t)
}
