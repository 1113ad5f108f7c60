package qp

import (
	"math/rand"
	"testing"
	"time"
)

// TestDeadlineHeap: random pushes, moves and removals keep the heap's top
// the earliest (deadline, creation order) of the QPs in it and every QP's
// index right. Seeded; the seed is printed on failure.
func TestDeadlineHeap(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	base := time.Unix(1000, 0)
	qps := make([]*QP, 200)
	for i := range qps {
		qps[i] = &QP{seq: uint64(i + 1), hidx: -1}
	}
	var h deadlineHeap
	for step := range 20000 {
		q := qps[rng.Intn(len(qps))]
		switch {
		case rng.Intn(4) == 0:
			h.remove(q)
		case q.hidx >= 0:
			q.dl = base.Add(time.Duration(rng.Intn(50)) * time.Millisecond)
			h.fix(q.hidx)
		default:
			q.dl = base.Add(time.Duration(rng.Intn(50)) * time.Millisecond)
			h.push(q)
		}
		var best *QP
		n := 0
		for _, x := range qps {
			if x.hidx < 0 {
				continue
			}
			n++
			if x.hidx >= len(h) || h[x.hidx] != x {
				t.Fatalf("seed %d step %d: QP %d has index %d, wrong", seed, step, x.seq, x.hidx)
			}
			if best == nil || x.dl.Before(best.dl) || x.dl.Equal(best.dl) && x.seq < best.seq {
				best = x
			}
		}
		if n != len(h) {
			t.Fatalf("seed %d step %d: heap holds %d, %d QPs say they are in it", seed, step, len(h), n)
		}
		if best != nil && h[0] != best {
			t.Fatalf("seed %d step %d: top is QP %d, earliest is QP %d", seed, step, h[0].seq, best.seq)
		}
	}
}
