// Command mqmodel simulates how a multi-queue goroce device's 64 B WRITE
// message rate scales with the number of queues (one core per queue), for
// the design in the tree (every engine call under one device-wide lock,
// Device.mu) and for the 64-queue design of docs/architecture.md ("Many
// queues": per-QP engine locks, everything else per queue).
//
//	go run ./bench/mqmodel                 # the table in docs/architecture.md
//	go run ./bench/mqmodel -par 2.0 -ser 0.28 -batch 16
//
// The model is a discrete-event simulation of N cores, each serving one
// queue: a core takes a batch of frames, spends par µs per frame outside
// any shared lock (the kernel's transmit and receive, the rings, the
// waits: per queue in both designs), then takes the shared lock once per
// batch and spends ser µs per frame under it; a lock that changes cores
// costs handoff µs more (the lock's and the engine state's cache lines
// moving). The lock is granted in arrival order. Defaults are the per-frame
// costs docs/performance.md measured ("Where the time goes per frame",
// 64 B WRITE, both ends, 2.28 µs per message): under Device.mu the engine,
// ICRC, the device loop, header build and parse, locks and completions
// (0.28 µs); outside it the kick, waits, ring handling and the rest
// (2.00 µs). In the per-QP design the shared part is what stays shared:
// a QP table lookup and the CQ of an application that shares one
// (-qpser, 0.01 µs), and a frame that arrives on another queue than its
// QP's (-cross of them) takes that QP's lock, which may be held.
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
)

type params struct {
	par, ser, qpser, handoff, cross float64
	batch                           int
	simTime                         float64 // µs
}

// core is one queue's reader.
type core struct {
	id int
	t  float64 // when it next wants the lock
}

type coreHeap []*core

func (h coreHeap) Len() int { return len(h) }
func (h coreHeap) Less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].id < h[j].id
}
func (h coreHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *coreHeap) Push(x any)   { *h = append(*h, x.(*core)) }
func (h *coreHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// simulate returns messages per second for n cores sharing one lock held
// ser µs per frame (batch frames per acquisition).
func simulate(n int, p params, ser float64) float64 {
	h := make(coreHeap, n)
	for i := range h {
		// Start staggered, as queues do.
		h[i] = &core{id: i, t: p.par * float64(p.batch) * float64(i) / float64(n)}
	}
	heap.Init(&h)
	lockFree, lastOwner := 0.0, -1
	frames := 0
	for {
		c := h[0]
		if c.t >= p.simTime {
			break
		}
		start := max(c.t, lockFree)
		hold := ser * float64(p.batch)
		if lastOwner != c.id && lastOwner >= 0 {
			hold += p.handoff
		}
		lockFree, lastOwner = start+hold, c.id
		frames += p.batch
		c.t = lockFree + p.par*float64(p.batch)
		heap.Fix(&h, 0)
	}
	return float64(frames) / p.simTime * 1e6
}

// simulatePerQP is the per-QP-lock design: each core's engine work runs
// under its own QPs' locks (uncontended), except the cross fraction of
// frames, whose QP lives on another queue: those take that QP's lock,
// which its own core holds with probability equal to its lock duty.
func simulatePerQP(n int, p params, rng *rand.Rand) float64 {
	if n == 1 {
		return simulate(1, p, p.ser+p.qpser)
	}
	// The shared part (qpser per frame) is one lock for all; the engine
	// part is parallel, plus the expected wait of a cross-queue frame.
	duty := (p.ser * float64(p.batch)) / ((p.ser + p.par) * float64(p.batch))
	wait := 0.0
	const samples = 100000
	for range samples {
		if rng.Float64() < p.cross && rng.Float64() < duty {
			wait += rng.Float64() * p.ser * float64(p.batch) // the rest of the holder's batch
		}
	}
	wait /= samples
	q := p
	q.par = p.par + p.ser + wait/float64(p.batch) + p.handoff*p.cross
	return simulate(n, q, p.qpser)
}

func main() {
	var p params
	flag.Float64Var(&p.par, "par", 2.00, "µs per frame outside any shared lock (per queue)")
	flag.Float64Var(&p.ser, "ser", 0.28, "µs per frame of engine work (under Device.mu today)")
	flag.Float64Var(&p.qpser, "qpser", 0.01, "µs per frame that stays shared in the per-QP design")
	flag.Float64Var(&p.handoff, "handoff", 0.10, "µs a lock (and the state it guards) costs when it changes cores")
	flag.Float64Var(&p.cross, "cross", 0.0, "share of frames arriving on another queue than their QP's (per-QP design)")
	flag.IntVar(&p.batch, "batch", 16, "frames per lock acquisition (a receive or post batch)")
	max := flag.Int("max", 64, "largest number of queues")
	flag.Parse()
	if p.par <= 0 || p.ser < 0 || p.batch < 1 || *max < 1 || *max > 1024 {
		fmt.Fprintln(os.Stderr, "mqmodel: bad parameters")
		os.Exit(2)
	}
	p.simTime = 20000 // 20 ms simulated
	rng := rand.New(rand.NewPCG(1, 2))
	fmt.Printf("par %.2f µs, ser %.2f µs, per-QP shared %.2f µs, handoff %.2f µs, cross-queue %.0f %%, batch %d\n\n",
		p.par, p.ser, p.qpser, p.handoff, p.cross*100, p.batch)
	fmt.Println("| queues (cores) | device-wide lock: M msg/s | speed-up | per-QP locks: M msg/s | speed-up | ideal |")
	fmt.Println("|---|---|---|---|---|---|")
	one := simulate(1, p, p.ser)
	oneQP := simulatePerQP(1, p, rng)
	for n := 1; n <= *max; n *= 2 {
		a := simulate(n, p, p.ser)
		b := simulatePerQP(n, p, rng)
		fmt.Printf("| %d | %.2f | %.1f× | %.2f | %.1f× | %d× |\n", n, a/1e6, a/one, b/1e6, b/oneQP, n)
	}
}
