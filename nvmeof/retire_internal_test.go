package nvmeof

import "testing"

// TestRetireInOrder: a signaled response's completion frees it and every
// response queued before it, in order, and nothing after it; an
// asynchronous event's response (sendNow, not queued) frees only itself.
// Over many rounds the queue of unretired responses stays bounded (it is
// compacted) and every response is freed exactly once.
func TestRetireInOrder(t *testing.T) {
	tq := &tqueue{}
	const n = 40
	for i := range n {
		tq.all = append(tq.all, &trsp{idx: i, q: tq})
	}
	take := func() *trsp {
		r := tq.free[len(tq.free)-1]
		tq.free = tq.free[:len(tq.free)-1]
		return r
	}
	tq.free = append(tq.free, tq.all...)
	freed := map[*trsp]int{}
	seq := 0
	for round := range 2000 {
		// Queue a few responses as finish does; signal every 16th.
		var sig *trsp
		for k := 0; k < 1+round%7 && len(tq.free) > 0; k++ {
			r := take()
			r.queued = true
			tq.rsps = append(tq.rsps, r)
			seq++
			if seq%respSignalEvery == 0 {
				sig = r
			}
		}
		if sig == nil {
			continue
		}
		before := len(tq.rsps) - tq.rspHead
		pos := -1
		for i, r := range tq.rsps[tq.rspHead:] {
			if r == sig {
				pos = i
			}
		}
		if pos < 0 {
			t.Fatalf("round %d: the signaled response is not queued", round)
		}
		nfree := len(tq.free)
		tq.retire(sig)
		if got, want := len(tq.free)-nfree, pos+1; got != want {
			t.Fatalf("round %d: retired %d responses, want %d", round, got, want)
		}
		if got := len(tq.rsps) - tq.rspHead; got != before-pos-1 {
			t.Fatalf("round %d: %d left queued, want %d", round, got, before-pos-1)
		}
		for _, r := range tq.free[nfree:] {
			if r.queued {
				t.Fatalf("round %d: a retired response is still marked queued", round)
			}
			freed[r]++
		}
		if len(tq.rsps) > 2*n+64 {
			t.Fatalf("round %d: the queue of unretired responses grew to %d", round, len(tq.rsps))
		}
	}
	// An asynchronous event's response: only itself.
	r := take()
	nq := len(tq.rsps) - tq.rspHead
	tq.retire(r)
	if len(tq.rsps)-tq.rspHead != nq || tq.free[len(tq.free)-1] != r {
		t.Fatal("a response that was not queued retired others")
	}
	if len(freed) == 0 {
		t.Fatal("nothing was retired")
	}
}
