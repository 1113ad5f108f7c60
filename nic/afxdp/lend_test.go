//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/nic"
)

// TestLendRx: on a veth pair, a lending link's reads (TryReadBatch,
// WaitReadBatch and ReadBatch in turn) hand out the frames in their UMEM
// chunks, intact and in order, without writing the caller's buffers; the
// chunks go back to the fill ring at the next read, so more frames than
// there are receive chunks pass; ReleaseRx gives them back too, and
// LendRx(false) makes the reads copy again. After Close reads report
// nic.ErrClosed.
func TestLendRx(t *testing.T) {
	p := newVethPair(t, 1500)
	opts := Options{NumFrames: 256} // 128 receive chunks: the rounds reuse them
	a := p.open(t, p.nsA, p.ifA, opts)
	b := p.open(t, p.nsB, p.ifB, opts)
	if !b.LendRx(true) {
		t.Fatal("a single-buffer link does not lend")
	}
	own := make([][]byte, b.BatchSize())
	for i := range own {
		own[i] = make([]byte, 2048)
	}
	bufs, sizes := append([][]byte(nil), own...), make([]int, len(own))
	umem := uintptr(unsafe.Pointer(unsafe.SliceData(b.umem)))
	reads := []func() (int, error){
		func() (int, error) { return b.TryReadBatch(bufs, sizes) },
		func() (int, error) { return b.WaitReadBatch(bufs, sizes) },
		func() (int, error) { return b.ReadBatch(bufs, sizes) },
	}
	// 600 frames through 128 receive chunks; a batch (64) stays lent while
	// the next round is sent.
	const rounds, per = 10, 60
	next := 0
	for r := range rounds {
		read := reads[r%len(reads)]
		sendFrames(t, a, p, p.macB, r*per, per, roceUDPPort)
		deadline := time.Now().Add(liveness) // a hang guard, not a threshold
		for next < (r+1)*per {
			if r%len(reads) == 1 {
				b.SetWaitDeadline(time.Now().Add(10 * time.Millisecond))
			}
			n, err := read()
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			for i := range n {
				f := bufs[i][:sizes[i]]
				if at := uintptr(unsafe.Pointer(unsafe.SliceData(f))); at < umem || at >= umem+uintptr(len(b.umem)) || cap(bufs[i]) != sizes[i] {
					t.Fatalf("frame %d is not lent in the UMEM (cap %d, size %d)", next, cap(bufs[i]), sizes[i])
				}
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
					t.Fatalf("round %d: %d of %d frames; stats %+v kernel %+v", r, next, (r+1)*per, b.Stats(), b.KernelStats())
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		if r == 3 {
			b.ReleaseRx()
			if len(b.lent) != 0 {
				t.Fatalf("%d chunks lent after ReleaseRx", len(b.lent))
			}
		}
	}
	for i := range own {
		for _, c := range own[i] {
			if c != 0 {
				t.Fatalf("the caller's buffer %d was written", i)
			}
		}
	}
	if s := b.Stats(); s.RxFrames != rounds*per || s.RxDrops != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Lending off: the next read gives the chunks back and copies.
	b.LendRx(false)
	bufs = append(bufs[:0], own...)
	sendFrames(t, a, p, p.macB, next, 10, roceUDPPort)
	deadline := time.Now().Add(liveness)
	for next < rounds*per+10 {
		n, err := b.TryReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if &bufs[i][0] != &own[i][0] {
				t.Fatal("a read lent with lending off")
			}
			if seq, err := checkFrame(bufs[i][:sizes[i]]); err != nil || int(seq) != next {
				t.Fatalf("seq %d, want %d: %v", seq, next, err)
			}
			next++
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d frames after lending off", next-rounds*per)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	// Close with frames lent: the reads after it report ErrClosed.
	b.LendRx(true)
	sendFrames(t, a, p, p.macB, next, 5, roceUDPPort)
	deadline = time.Now().Add(liveness)
	for n := 0; n == 0; {
		var err error
		if n, err = b.TryReadBatch(bufs, sizes); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no frames before Close")
		}
	}
	b.Close()
	if _, err := b.TryReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	b.ReleaseRx()
	if b.LendRx(true) {
		t.Error("LendRx after Close")
	}
}

// TestLendRxAllocs: a lending read, with frames and without, allocates
// nothing.
func TestLendRxAllocs(t *testing.T) {
	p := newVethPair(t, 1500)
	opts := Options{NumFrames: 256}
	a := p.open(t, p.nsA, p.ifA, opts)
	b := p.open(t, p.nsB, p.ifB, opts)
	b.LendRx(true)
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	sendFrames(t, a, p, p.macB, 0, 100, roceUDPPort)
	time.Sleep(50 * time.Millisecond)
	got := 0
	allocs := testing.AllocsPerRun(20, func() {
		n, _ := b.TryReadBatch(bufs, sizes)
		got += n
	})
	if got == 0 {
		t.Fatal("no frames read")
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per lending read (%d frames in 21 reads)", allocs, got)
	}
}

// BenchmarkLendRx compares, per received frame, a copying read and a
// lending read on a veth pair, each followed by one pass over the frame (a
// CRC-32, standing for the receiver's ICRC check, the first thing that
// reads a frame): 64 frames of 1098 bytes (a path-MTU 1 KiB RoCE frame) are
// sent (and 64 of 138 bytes, a 64 B WRITE's), then read and checked,
// timed, alternating copy and lend blocks.
// Reported: the fastest block of each, copy-ns and lend-ns per frame, and
// lend/copy.
func BenchmarkLendRx(b *testing.B) {
	p := newVethPair(b, 1500)
	opts := Options{NumFrames: 1024}
	tx := p.open(b, p.nsA, p.ifA, opts)
	rx := p.open(b, p.nsB, p.ifB, opts)
	for _, size := range []int{138, 1098} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchLendRx(b, p, tx, rx, size) })
	}
}

func benchLendRx(b *testing.B, p *vethPair, tx, rx *Link, size int) {
	const block = 64
	frames := make([][]byte, block)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, size), size, p.macB, tx.HardwareAddr(), p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	own := make([][]byte, block)
	for i := range own {
		own[i] = make([]byte, 2048)
	}
	bufs, sizes := make([][]byte, block), make([]int, block)
	var sink uint32
	round := func(lend bool) time.Duration {
		rx.LendRx(lend)
		copy(bufs, own)
		if m, err := tx.WriteBatch(frames); err != nil || m != block {
			b.Fatalf("WriteBatch: %d, %v", m, err)
		}
		deadline := time.Now().Add(liveness)
		var el time.Duration
		for got := 0; got < block; {
			t0 := time.Now()
			n, err := rx.TryReadBatch(bufs[:block-got], sizes)
			for i := range n {
				sink += crc32.ChecksumIEEE(bufs[i][:sizes[i]])
			}
			el += time.Since(t0)
			if err != nil {
				b.Fatal(err)
			}
			got += n
			if n == 0 && time.Now().After(deadline) {
				b.Fatalf("%d of %d frames", got, block)
			}
		}
		return el
	}
	tc, tl := time.Duration(1<<62), time.Duration(1<<62)
	for b.Loop() {
		tc = min(tc, round(false))
		tl = min(tl, round(true))
	}
	_ = sink
	b.ReportMetric(float64(tc.Nanoseconds())/block, "copy-ns")
	b.ReportMetric(float64(tl.Nanoseconds())/block, "lend-ns")
	b.ReportMetric(float64(tl)/float64(tc), "lend/copy")
}
