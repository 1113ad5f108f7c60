package qp

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// TestCQWaitWakesEveryWaiter: several goroutines sleeping in Wait on one
// CQ each get a completion when as many arrive, one at a time or all at
// once (a woken waiter passes the wake-up on when entries are left); Wait
// leaves a ReqNotify arm alone; an overrun wakes a sleeping waiter with
// ErrCQOverrun.
func TestCQWaitWakesEveryWaiter(t *testing.T) {
	la, _ := nic.NewMemPair(nic.MemConfig{})
	d, err := Open(Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"), Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // hang guard
	defer cancel()
	for _, burst := range []bool{false, true} {
		cq, _ := d.CreateCQ(16)
		cq.ReqNotify(true)
		const n = 4
		var wg sync.WaitGroup
		got := make(chan uint64, n)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var wc [1]WC
				if k, err := cq.Wait(ctx, wc[:]); k != 1 || err != nil {
					t.Errorf("Wait: %d, %v", k, err)
					return
				}
				got <- wc[0].WRID
			}()
		}
		for cq.sleepers() < n {
			time.Sleep(time.Millisecond)
		}
		for i := range n {
			d.mu.Lock()
			cq.Complete(&WC{WRID: uint64(i)})
			d.mu.Unlock()
			if !burst {
				<-got
			}
		}
		wg.Wait()
		if !cq.armedFor(true) {
			t.Fatal("Wait cleared the ReqNotify arm")
		}
	}

	cq, _ := d.CreateCQ(1)
	errc := make(chan error, 1)
	d.mu.Lock()
	cq.Complete(&WC{WRID: 1})
	d.mu.Unlock()
	var wc [1]WC
	if k, _ := cq.Wait(ctx, wc[:]); k != 1 {
		t.Fatal("first completion not returned")
	}
	go func() {
		_, err := cq.Wait(ctx, wc[:])
		errc <- err
	}()
	for cq.sleepers() < 1 {
		time.Sleep(time.Millisecond)
	}
	d.mu.Lock()
	cq.Complete(&WC{WRID: 2})
	cq.Complete(&WC{WRID: 3}) // overruns the one-entry CQ
	d.mu.Unlock()
	// The first Complete wakes the sleeper, which may take WRID 2 before
	// the second one overruns the CQ (cq.mu is free between them); then
	// the next Wait reports the overrun.
	err = <-errc
	if err == nil {
		if wc[0].WRID != 2 {
			t.Fatalf("sleeping Wait at the overrun returned WRID %d, want 2 or ErrCQOverrun", wc[0].WRID)
		}
		_, err = cq.Wait(ctx, wc[:])
	}
	if err != ErrCQOverrun {
		t.Fatalf("Wait at the overrun: %v, want ErrCQOverrun", err)
	}
}

func (cq *CQ) sleepers() int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.waiters
}

func (cq *CQ) armedFor(solicitedOnly bool) bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.armed && cq.solicitedOnly == solicitedOnly
}
