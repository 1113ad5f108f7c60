//go:build linux

package udp

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
)

// waitState is the Linux path's runtime-poller wait: the parker, and the
// arguments and results of the one wait in progress (under l.rxMu), which
// the ready func made once at Open reads, so a wait allocates nothing.
type waitState struct {
	park  *sockio.Parker
	ready func(uintptr) bool
	bufs  [][]byte
	sizes []int
	n     int
	err   error
}

func (s *mmsgSock) initWait() error {
	p, err := sockio.NewParker(s.fd, "udp")
	if err != nil {
		return fmt.Errorf("udp: %w", err)
	}
	s.w.park = p
	s.w.ready = func(uintptr) bool {
		s.w.n, s.w.err = s.recvOnce(s.w.bufs, s.w.sizes)
		return s.w.n > 0 || s.w.err != nil
	}
	return nil
}

func (s *mmsgSock) wait(bufs [][]byte, sizes []int) (int, error) {
	w := &s.w
	w.bufs, w.sizes = bufs, sizes
	err := w.park.Wait(w.ready)
	w.bufs, w.sizes = nil, nil
	switch {
	case err == nil:
		return w.n, w.err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, err
	case errors.Is(err, sockio.ErrParkerClosed) || s.l.closed.Load():
		return 0, nic.ErrClosed
	}
	return 0, fmt.Errorf("udp: wait: %w", err)
}

func (s *mmsgSock) setWaitDeadline(t time.Time) error { return s.w.park.SetDeadline(t) }
