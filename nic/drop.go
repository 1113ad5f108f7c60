package nic

import (
	"math/rand/v2"
	"sync"
)

// DropLink drops a seeded fraction of the frames written to the link it
// wraps: loss on a real interface, for tests, the demo and the tools
// (GOROCE_TX_DROP). A dropped frame counts as written, as a wire loses it;
// RC recovery has to make up for it.
type DropLink struct {
	Link
	onClose func(frames, dropped uint64)

	mu      sync.Mutex
	rng     *rand.Rand
	p       float64
	keep    [][]byte
	idx     []int
	frames  uint64
	dropped uint64
}

// dropPoller is a DropLink over a link that can be polled: busy-poll and
// manual devices need the non-blocking read through any wrapper.
type dropPoller struct {
	*DropLink
	try Poller
}

func (l dropPoller) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return l.try.TryReadBatch(bufs, sizes)
}

// WithDrops wraps l so that each written frame is dropped with probability
// p, drawn from a PCG generator seeded with (seed, stream). It returns the
// link to use — a Poller exactly when l is one — and the DropLink for its
// counters. onClose (may be nil) is called with the counters at Close.
func WithDrops(l Link, p float64, seed, stream uint64, onClose func(frames, dropped uint64)) (Link, *DropLink) {
	d := &DropLink{Link: l, onClose: onClose, p: p, rng: rand.New(rand.NewPCG(seed, stream))}
	if t, ok := l.(Poller); ok {
		return dropPoller{d, t}, d
	}
	return d, d
}

// WriteBatch passes on the frames that survive and reports every frame as
// written, except when the link below writes fewer: then it reports up to
// the first surviving frame the link did not take.
func (l *DropLink) WriteBatch(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep, l.idx = l.keep[:0], l.idx[:0]
	for i, f := range frames {
		l.frames++
		if l.rng.Float64() < l.p {
			l.dropped++
			continue
		}
		l.keep = append(l.keep, f)
		l.idx = append(l.idx, i)
	}
	if len(l.keep) == 0 {
		return len(frames), nil
	}
	n, err := l.Link.WriteBatch(l.keep)
	if n >= len(l.keep) {
		return len(frames), err
	}
	return l.idx[n], err
}

// Counts returns the frames written and dropped so far.
func (l *DropLink) Counts() (frames, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frames, l.dropped
}

// Close reports the counters to onClose and closes the link below.
func (l *DropLink) Close() error {
	if l.onClose != nil {
		l.onClose(l.Counts())
	}
	return l.Link.Close()
}
