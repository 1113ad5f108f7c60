//go:build linux

package udp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
)

// TestTryReadBatch: between two namespaces (198.18.0.0/15 addresses), the
// non-blocking read returns 0 on an empty socket, then exactly the
// datagrams sent, intact and in order, with synthesized headers; after
// Close it reports nic.ErrClosed.
func TestTryReadBatch(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	var a, b *Link
	for _, s := range []struct {
		side netns.Side
		l    **Link
		ip   netip.Addr
	}{{netns.A, &a, p.A.Addr}, {netns.B, &b, p.B.Addr}} {
		if err := p.Do(s.side, func() (err error) {
			*s.l, err = Open(Config{Local: netip.AddrPortFrom(s.ip, RoCEv2Port)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer (*s.l).Close()
	}
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("empty socket: %d frames, %v", n, err)
	}
	if n, err := b.TryReadBatch(nil, nil); n != 0 || err != nil {
		t.Fatalf("no buffers: %d frames, %v", n, err)
	}
	const N = 20
	var sent [][]byte
	for i := range N {
		sent = append(sent, buildFrame(t, p.A.Addr, p.B.Addr, uint32(i), (i*97)%1025))
	}
	if n, err := a.WriteBatch(sent); n != N || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	src, dst := netip.AddrPortFrom(p.A.Addr, RoCEv2Port), netip.AddrPortFrom(p.B.Addr, RoCEv2Port)
	got := 0
	deadline := time.Now().Add(20 * time.Second) // liveness only
	for got < N {
		n, err := b.TryReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			checkDelivered(t, bufs[i][:sizes[i]], sent[got], src, dst)
			if sizes[i] != len(sent[got]) {
				t.Fatalf("frame %d: %d bytes, sent %d", got, sizes[i], len(sent[got]))
			}
			got++
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames arrived; stats %+v", got, N, b.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("after draining: %d frames, %v", n, err)
	}
	if s := b.Stats(); s.RxFrames != N || s.RxDrops != 0 {
		t.Fatalf("stats %+v", s)
	}
	b.Close()
	if _, err := b.TryReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// BenchmarkTryReadBatchEmpty is the cost of one look at an empty socket
// (one recvmmsg answering EAGAIN).
func BenchmarkTryReadBatchEmpty(b *testing.B) {
	l := open(b, "127.0.0.1:4791", 0)
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := l.TryReadBatch(bufs, sizes); n != 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}
