package linkcore

import (
	"errors"
	"sync"
	"testing"
)

func TestStats(t *testing.T) {
	var c Core
	c.RxFrames.Add(3)
	c.RxBytes.Add(300)
	c.TxFrames.Add(2)
	c.TxBytes.Add(200)
	c.RxDrops.Add(1)
	c.TxDrops.Add(4)
	c.RingFull.Add(5)
	c.Wakeups.Add(6)
	s := c.Stats(func() (uint64, uint64) { return 10, 20 })
	if s.RxFrames != 3 || s.RxBytes != 300 || s.TxFrames != 2 || s.TxBytes != 200 ||
		s.RxDrops != 11 || s.TxDrops != 24 || s.RingFull != 5 || s.Wakeups != 6 {
		t.Fatalf("Stats = %+v", s)
	}
	if s := c.Stats(nil); s.RxDrops != 1 || s.TxDrops != 4 {
		t.Fatalf("Stats(nil) drops = %d, %d", s.RxDrops, s.TxDrops)
	}
}

// TestCloseOrder: Close marks the link closed before it wakes, waits for
// the receive and transmit sides to leave before it releases, releases
// once, and returns release's error to every caller.
func TestCloseOrder(t *testing.T) {
	var c Core
	var rx, tx sync.Mutex
	rx.Lock() // a receive call inside the socket
	woken := make(chan struct{})
	released := 0
	boom := errors.New("boom")
	go func() {
		<-woken
		rx.Unlock() // the woken receive call leaves
	}()
	err := c.Close(&rx, &tx, func() {
		if !c.Closed() {
			t.Error("wake ran before Closed")
		}
		close(woken)
	}, func() error {
		released++
		if rx.TryLock() || tx.TryLock() || c.StatsMu.TryLock() {
			t.Error("release ran without the receive, transmit and stats locks held")
		}
		return boom
	})
	if !errors.Is(err, boom) || !errors.Is(c.Close(&rx, &tx, func() {}, func() error { released++; return nil }), boom) {
		t.Fatalf("Close = %v, want boom from both calls", err)
	}
	if released != 1 {
		t.Fatalf("released %d times", released)
	}
}
