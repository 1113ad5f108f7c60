package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"

	"github.com/goroce/goroce/nic"
)

// GOROCE_TX_DROP=P makes a tool drop each frame it transmits with
// probability P (0 < P < 1), from a generator seeded with
// GOROCE_TX_DROP_SEED (default 1): loss on goroce's side of a link, for
// the interop matrix, whose only other loss is netem in the peer's VM. The
// dropped frames count as sent, as a wire loses them; RC recovery
// (go-back-N after a NAK or the ACK timeout) must make up for them. At exit
// the tool reports on stderr how many it dropped.

// txDropFromEnv reads GOROCE_TX_DROP and GOROCE_TX_DROP_SEED; p is 0 when
// the variable is unset.
func txDropFromEnv() (p float64, seed uint64, err error) {
	v := os.Getenv("GOROCE_TX_DROP")
	if v == "" {
		return 0, 0, nil
	}
	p, err = strconv.ParseFloat(v, 64)
	if err != nil || p < 0 || p >= 1 {
		return 0, 0, fmt.Errorf("GOROCE_TX_DROP=%q: want a probability in [0, 1)", v)
	}
	seed = 1
	if s := os.Getenv("GOROCE_TX_DROP_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 0, 64); err != nil {
			return 0, 0, fmt.Errorf("GOROCE_TX_DROP_SEED=%q: %w", s, err)
		}
	}
	return p, seed, nil
}

// txDropLink drops a seeded fraction of the frames written to it.
type txDropLink struct {
	nic.Link
	report io.Writer // the summary at Close ("" when nil)

	mu      sync.Mutex
	rng     *rand.Rand
	p       float64
	keep    [][]byte
	idx     []int
	frames  uint64
	dropped uint64
}

// txDropTryLink is a txDropLink over a link that has TryReadBatch.
type txDropTryLink struct {
	*txDropLink
	try nic.Poller // busy-poll mode needs the non-blocking read through any wrapper
}

func (l txDropTryLink) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return l.try.TryReadBatch(bufs, sizes)
}

// wrapTxDrop wraps l; the result has TryReadBatch exactly when l has it.
func wrapTxDrop(l nic.Link, p float64, seed uint64, report io.Writer) nic.Link {
	d := &txDropLink{Link: l, report: report, p: p, rng: rand.New(rand.NewPCG(seed, 0x676f726f6365))}
	if t, ok := l.(nic.Poller); ok {
		return txDropTryLink{d, t}
	}
	return d
}

// WriteBatch passes on the frames that survive and reports every frame as
// written (a lost frame was sent, as far as the sender knows), except when
// the link below writes fewer: then it reports up to the first frame the
// link did not take.
func (l *txDropLink) WriteBatch(frames [][]byte) (int, error) {
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

// counts returns the frames written and dropped so far.
func (l *txDropLink) counts() (frames, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frames, l.dropped
}

func (l *txDropLink) Close() error {
	if l.report != nil {
		f, d := l.counts()
		fmt.Fprintf(l.report, "goroce: GOROCE_TX_DROP dropped %d of %d transmitted frames\n", d, f)
	}
	return l.Link.Close()
}
