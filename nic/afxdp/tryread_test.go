//go:build linux

package afxdp

import (
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// TestTryReadBatch: on a veth pair between two namespaces, the
// non-blocking read returns 0 on an empty RX ring without a system call
// (no wake-up counted in copy mode), then exactly the frames sent, intact
// and in order; the receive chunks go back to the fill ring, so more frames
// than the ring holds pass in rounds; after Close it reports nic.ErrClosed.
func TestTryReadBatch(t *testing.T) {
	p := newVethPair(t, 1500)
	opts := Options{NumFrames: 256} // 128 receive chunks: rounds below reuse them
	a := p.open(t, p.nsA, p.ifA, opts)
	b := p.open(t, p.nsB, p.ifB, opts)
	bufs, sizes := make([][]byte, b.BatchSize()), make([]int, b.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	w0 := b.Stats().Wakeups
	for range 100 {
		if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
			t.Fatalf("empty ring: %d frames, %v", n, err)
		}
	}
	if w := b.Stats().Wakeups; !b.ZeroCopy() && w != w0 {
		t.Fatalf("empty polls made %d wake-up system calls", w-w0)
	}
	if n, err := b.TryReadBatch(nil, nil); n != 0 || err != nil {
		t.Fatalf("no buffers: %d frames, %v", n, err)
	}
	const rounds, per = 4, 100 // 400 frames through 128 receive chunks
	next := 0
	for r := range rounds {
		sendFrames(t, a, p, p.macB, r*per, per, roceUDPPort)
		deadline := time.Now().Add(liveness) // a hang guard, not a threshold
		for next < (r+1)*per {
			n, err := b.TryReadBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				f := bufs[i][:sizes[i]]
				seq, err := checkFrame(f)
				if err != nil {
					t.Fatal(err)
				}
				if int(seq) != next || len(f) != frameSizeFor(seq) {
					t.Fatalf("got seq %d (%d bytes), want %d (%d bytes)", seq, len(f), next, frameSizeFor(uint32(next)))
				}
				next++
			}
			if n == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d frames; stats %+v kernel %+v", next, (r+1)*per, b.Stats(), b.KernelStats())
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("after draining: %d frames, %v", n, err)
	}
	if s := b.Stats(); s.RxFrames != rounds*per || s.RxDrops != 0 {
		t.Fatalf("stats %+v", s)
	}
	b.Close()
	if _, err := b.TryReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// BenchmarkTryReadBatchEmpty is the cost of one look at an empty RX ring:
// an atomic load, no system call, no allocation.
func BenchmarkTryReadBatchEmpty(b *testing.B) {
	p := newVethPair(b, 1500)
	l := p.open(b, p.nsB, p.ifB, Options{NumFrames: 256})
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := l.TryReadBatch(bufs, sizes); n != 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}
