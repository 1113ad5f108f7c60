//go:build linux

package udp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// The net.UDPConn path is the only one macOS, FreeBSD and Windows have;
// these tests run it on Linux (Config.portable), inside private namespaces.

func openIn(t testing.TB, p *netns.Pair, side netns.Side, cfg Config) *Link {
	t.Helper()
	var l *Link
	if err := p.Do(side, func() (err error) {
		l, err = Open(cfg)
		return err
	}); err != nil {
		t.Fatalf("Open %v: %v", cfg.Local, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func isPortable(l *Link) bool {
	_, ok := l.s.(*connSock)
	return ok
}

// TestPortableLoopback: two portable links on 127.0.0.1 (and ::1) of a
// private namespace, different ports, each sending to the other's.
func TestPortableLoopback(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	for _, c := range []struct{ a, b string }{{"127.0.0.1:14791", "127.0.0.1:24791"}, {"[::1]:14791", "[::1]:24791"}} {
		la, lb := netip.MustParseAddrPort(c.a), netip.MustParseAddrPort(c.b)
		a := openIn(t, p, netns.A, Config{Local: la, PeerPort: lb.Port(), portable: true})
		b := openIn(t, p, netns.A, Config{Local: lb, PeerPort: la.Port(), portable: true})
		if !isPortable(a) || !isPortable(b) {
			t.Fatal("portable option ignored")
		}
		sendRecv(t, a, b, 100)
		sendRecv(t, b, a, 30)
		if s := a.Stats(); s.TxFrames != 100 || s.TxDrops != 0 || s.RxFrames != 30 {
			t.Fatalf("%v: A stats %+v", la, s)
		}
	}
}

// TestPortableWithMmsg: the two paths speak the same canonical header, so
// a portable link and a Linux mmsg link talk to each other across the veth
// pair, both ways.
func TestPortableWithMmsg(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	b := openIn(t, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port)})
	if !isPortable(a) || isPortable(b) {
		t.Fatal("wrong paths")
	}
	sendRecv(t, a, b, 50)
	sendRecv(t, b, a, 50)
}

// TestPortableTryReadBatch: the non-blocking read returns 0 on an empty
// ring, then exactly the datagrams sent, in order; after Close ErrClosed.
func TestPortableTryReadBatch(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	b := openIn(t, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port), portable: true, BatchSize: 4})
	bufs, sizes := make([][]byte, 3), make([]int, 3)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("empty: %d frames, %v", n, err)
	}
	if n, err := b.TryReadBatch(nil, nil); n != 0 || err != nil {
		t.Fatalf("no buffers: %d frames, %v", n, err)
	}
	// More than the ring's 8 slots: the reader waits for space, nothing is
	// lost (the socket buffer holds the rest).
	const N = 40
	var sent [][]byte
	for i := range N {
		sent = append(sent, buildFrame(t, p.A.Addr, p.B.Addr, uint32(i), (i*131)%1025))
	}
	if n, err := a.WriteBatch(sent); n != N || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := 0
	for deadline := time.Now().Add(20 * time.Second); got < N; { // liveness only
		n, err := b.TryReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if n > len(bufs) {
			t.Fatalf("%d frames into %d buffers", n, len(bufs))
		}
		for i := range n {
			checkDelivered(t, bufs[i][:sizes[i]], sent[got], a.LocalAddr(), b.LocalAddr())
			got++
		}
		if n == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames; stats %+v", got, N, b.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("after draining: %d, %v", n, err)
	}
	if s := b.Stats(); s.RxFrames != N || s.RxDrops != 0 {
		t.Fatalf("stats %+v", s)
	}
	b.Close()
	if _, err := b.TryReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestPortableDrops: frames the link cannot carry are dropped and counted
// on send; on receive a datagram larger than the link's MTU, or than the
// caller's buffer, is dropped and counted and the next one still arrives.
func TestPortableDrops(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	b := openIn(t, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port), portable: true, MTU: 600})
	good := buildFrame(t, p.A.Addr, p.B.Addr, 1, 8)
	v6 := buildFrame(t, netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 2, 8)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	short := good[:14+20+8+4]
	huge := make([]byte, 3000)
	if n, err := a.WriteBatch([][]byte{arp, v6, short, huge, nil, good}); n != 6 || err != nil {
		t.Fatalf("WriteBatch = %d %v", n, err)
	}
	if s := a.Stats(); s.TxDrops != 5 || s.TxFrames != 1 {
		t.Fatalf("sender stats %+v", s)
	}
	checkDelivered(t, readN(t, b, 1)[0], good, a.LocalAddr(), b.LocalAddr())

	// 1000 bytes of payload: over b's MTU of 600.
	big := buildFrame(t, p.A.Addr, p.B.Addr, 3, 1000)
	a.WriteBatch([][]byte{big, good})
	checkDelivered(t, readN(t, b, 1)[0], good, a.LocalAddr(), b.LocalAddr())
	if s := b.Stats(); s.RxDrops != 1 || s.RxFrames != 2 {
		t.Fatalf("after an oversized datagram: %+v", s)
	}

	// 400 bytes: within the MTU but not the 300-byte buffer.
	mid := buildFrame(t, p.A.Addr, p.B.Addr, 4, 400)
	a.WriteBatch([][]byte{mid, good})
	bufs, sizes := [][]byte{make([]byte, 300)}, []int{0}
	var got int
	for got == 0 {
		n, err := b.ReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		got = n
	}
	if s := b.Stats(); s.RxDrops != 2 || sizes[0] != len(good) {
		t.Fatalf("after a datagram too big for the buffer: %+v, size %d", s, sizes[0])
	}
}

// TestPortableClose: Close wakes a blocked ReadBatch; afterwards reads and
// non-empty writes report ErrClosed.
func TestPortableClose(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	errc := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		_, err := a.ReadBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it block (passes either way)
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, nic.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake ReadBatch")
	}
	if _, err := a.WriteBatch(nil); err != nil {
		t.Fatalf("empty WriteBatch after Close: %v", err)
	}
	if _, err := a.WriteBatch([][]byte{{1}}); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("WriteBatch after Close: %v", err)
	}
}

// TestPortableCorruptionNotHidden: the re-based ICRC carries a wrong one
// over on this path too.
func TestPortableCorruptionNotHidden(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	b := openIn(t, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port), portable: true})
	good := buildFrame(t, p.A.Addr, p.B.Addr, 9, 256)
	bad := append([]byte(nil), good...)
	bad[len(bad)-40] ^= 0x10
	a.WriteBatch([][]byte{bad, good})
	got := readN(t, b, 2)
	var pk wire.Packet
	if err := wire.Parse(got[0], &pk); !errors.Is(err, wire.ErrBadICRC) {
		t.Errorf("corrupt frame: Parse = %v, want ErrBadICRC", err)
	}
	if err := wire.Parse(got[1], &pk); err != nil {
		t.Errorf("good frame: %v", err)
	}
}

// TestPortableAllocs: a frame out and in on the portable path allocates
// nothing (send, the reader goroutine's receive, the copy out of the ring).
func TestPortableAllocs(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	a := openIn(t, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	b := openIn(t, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port), portable: true})
	frames := [][]byte{buildFrame(t, p.A.Addr, p.B.Addr, 1, 1024)}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	roundTrip := func() {
		if n, err := a.WriteBatch(frames); n != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		if n, err := b.ReadBatch(bufs, sizes); n != 1 || err != nil {
			t.Fatalf("ReadBatch = %d, %v", n, err)
		}
	}
	roundTrip() // neighbour resolution, first wake-ups
	if avg := testing.AllocsPerRun(200, roundTrip); avg != 0 {
		t.Fatalf("%.2f allocations per frame", avg)
	}
}

// BenchmarkPortable sends 64-frame batches of 1082-byte frames between the
// namespaces on the portable path and reports the receive rate.
func BenchmarkPortable(b *testing.B) {
	p := netns.NewPair(b, netns.Options{})
	a := openIn(b, p, netns.A, Config{Local: netip.AddrPortFrom(p.A.Addr, RoCEv2Port), portable: true})
	r := openIn(b, p, netns.B, Config{Local: netip.AddrPortFrom(p.B.Addr, RoCEv2Port), portable: true})
	const batch = 64
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = buildFrame(b, p.A.Addr, p.B.Addr, uint32(i), 1024)
	}
	done := make(chan uint64)
	go func() {
		bufs, sizes := make([][]byte, batch), make([]int, batch)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		var n uint64
		for {
			k, err := r.ReadBatch(bufs, sizes)
			if err != nil {
				done <- n
				return
			}
			n += uint64(k)
		}
	}()
	b.ReportAllocs()
	b.SetBytes(batch * 1082)
	start := time.Now()
	for b.Loop() {
		if _, err := a.WriteBatch(frames); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	time.Sleep(20 * time.Millisecond)
	r.Close()
	rx := <-done
	b.ReportMetric(float64(rx)/el.Seconds()/1e6, "Mpps-rx")
	b.ReportMetric(float64(a.Stats().TxFrames)/el.Seconds()/1e6, "Mpps-tx")
}
