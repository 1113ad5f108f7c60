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
	d, err := Open(Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"), Mode: ModeManual})
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
			cq.complete(&WC{WRID: uint64(i)})
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

	// A sleeping Wait at an overrun returns ErrCQOverrun. The first
	// Complete below wakes the sleeper, which may take that entry before
	// the second one runs (cq.mu is free between them): then the second
	// one fits and nothing overran, a correct outcome that is tried again.
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			t.Fatal("in 100 attempts the sleeper always took the entry before the overrun")
		}
		cq, _ := d.CreateCQ(1)
		type res struct {
			wrid uint64
			err  error
		}
		resc := make(chan res, 1)
		go func() {
			var wc [1]WC
			_, err := cq.Wait(ctx, wc[:])
			resc <- res{wc[0].WRID, err}
		}()
		for cq.sleepers() < 1 {
			time.Sleep(time.Millisecond)
		}
		d.mu.Lock()
		cq.complete(&WC{WRID: 2})
		cq.complete(&WC{WRID: 3}) // overruns the one-entry CQ unless 2 was taken
		d.mu.Unlock()
		r := <-resc
		if r.err == ErrCQOverrun {
			break
		}
		if r.err != nil || r.wrid != 2 {
			t.Fatalf("sleeping Wait at the overrun: WRID %d, %v; want ErrCQOverrun, or WRID 2 taken before it", r.wrid, r.err)
		}
		var wc [1]WC
		if n, err := cq.Wait(ctx, wc[:]); n != 1 || err != nil || wc[0].WRID != 3 {
			t.Fatalf("after WRID 2 was taken: %d %v WRID %d, want WRID 3", n, err, wc[0].WRID)
		}
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
