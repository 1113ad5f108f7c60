//go:build linux

package afxdp

import (
	"testing"
)

// TestReserveTx: frames built in the chunks ReserveTx lends go out without
// a copy, mixed with copied ones, intact and in order, across more rounds
// than the link has transmit chunks (lent chunks come back through the
// completion ring); an empty frame in a lent chunk is dropped and its
// chunk returned; the lending stops at half the transmit chunks.
func TestReserveTx(t *testing.T) {
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{FrameSize: 2048, NumFrames: 256})
	b := p.open(t, p.nsB, p.ifB, Options{FrameSize: 2048}) // 2048 receive chunks: no overrun
	half := int(a.tx.size)
	bufs := make([][]byte, half)
	if n := a.ReserveTx(bufs); n != half/2 {
		t.Fatalf("ReserveTx of %d: %d lent, want half the %d transmit chunks", half, n, half)
	}
	if n := a.ReserveTx(bufs[:1]); n != 0 {
		t.Fatalf("ReserveTx past half: %d lent", n)
	}
	if a.txReserved != half/2 {
		t.Fatalf("txReserved %d", a.txReserved)
	}
	// Hand back one lent chunk as an empty frame: dropped, chunk freed.
	free := len(a.txFree)
	if m, err := a.WriteBatch([][]byte{bufs[0][:0]}); m != 1 || err != nil {
		t.Fatalf("WriteBatch of an empty lent frame: %d, %v", m, err)
	}
	if a.txReserved != half/2-1 || len(a.txFree) < free+1 {
		t.Fatalf("empty lent frame: txReserved %d, free %d (was %d)", a.txReserved, len(a.txFree), free)
	}
	lent := bufs[1 : half/2]
	const rounds, per = 10, 32
	heap := make([][]byte, per)
	for i := range heap {
		heap[i] = make([]byte, 2048)
	}
	wait := readAsync(b, 0, rounds*per)
	seq := 0
	batch := make([][]byte, 0, per)
	for range rounds {
		batch = batch[:0]
		for i := range per {
			buf := heap[i]
			if i%2 == 0 {
				buf = lent[i/2]
			}
			batch = append(batch, buildFrame(buf, frameSizeFor(uint32(seq)), p.macB, a.HardwareAddr(), p.ipA, p.ipB, roceUDPPort, uint32(seq)))
			seq++
		}
		if m, err := a.WriteBatch(batch); m != per || err != nil {
			t.Fatalf("WriteBatch: %d of %d, %v", m, per, err)
		}
		// The lent chunks written are the link's again: borrow new ones.
		if n := a.ReserveTx(lent[:per/2]); n != per/2 {
			t.Fatalf("ReserveTx after a write: %d of %d", n, per/2)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if a.txReserved != half/2-1 {
		t.Errorf("txReserved %d after the rounds, want %d", a.txReserved, half/2-1)
	}
}
