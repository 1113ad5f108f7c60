package nic

import (
	"os"
	"sync"
	"time"
)

var _ Waiter = (*MemLink)(nil)

// memWait is the deadline of MemLink's WaitReadBatch.
type memWait struct {
	mu       sync.Mutex
	deadline time.Time
	changed  chan struct{} // cap 1: the deadline changed
	timer    *time.Timer   // owned by the waiting goroutine
}

// WaitReadBatch implements Waiter: ReadBatch that also returns at the wait
// deadline (os.ErrDeadlineExceeded), judged by the link's clock. Under a
// custom Clock it re-reads the clock every millisecond of real time while
// it waits for a time (as ReadBatch does).
func (l *MemLink) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	p := l.rx
	w := &l.w
	for {
		select {
		case <-l.done:
			return 0, ErrClosed
		default:
		}
		now := l.clock()
		w.mu.Lock()
		dl := w.deadline
		w.mu.Unlock()
		if !dl.IsZero() && !now.Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		p.mu.Lock()
		n := p.take(bufs, sizes, now)
		next, due := p.peek()
		p.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		sleep := time.Duration(-1)
		if due {
			sleep = max(next.Sub(now), 0)
		}
		if !dl.IsZero() && (sleep < 0 || dl.Sub(now) < sleep) {
			sleep = dl.Sub(now)
		}
		var tc <-chan time.Time
		if sleep >= 0 {
			if l.custom {
				sleep = min(sleep, memFakeClockPoll)
			}
			if w.timer == nil {
				w.timer = time.NewTimer(sleep)
			} else {
				w.timer.Reset(sleep)
			}
			tc = w.timer.C
		}
		select {
		case <-p.wake:
		case <-w.changed:
		case <-tc:
		case <-l.done:
		}
		if tc != nil {
			w.timer.Stop()
		}
		p.mu.Lock()
		p.wakeups++
		p.mu.Unlock()
	}
}

// SetWaitDeadline implements Waiter.
func (l *MemLink) SetWaitDeadline(t time.Time) error {
	select {
	case <-l.done:
		return ErrClosed
	default:
	}
	w := &l.w
	w.mu.Lock()
	w.deadline = t
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return nil
}
