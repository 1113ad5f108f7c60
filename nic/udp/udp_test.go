//go:build linux

package udp

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

func open(t testing.TB, local string, peerPort uint16) *Link {
	t.Helper()
	l, err := Open(Config{Local: netip.MustParseAddrPort(local), PeerPort: peerPort})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot bind %s: %v", local, err)
		}
		t.Skipf("cannot bind %s here: %v", local, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestRoundTripIPv4(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	b := open(t, "127.0.0.2:4791", 0)
	src, dst := a.LocalAddr(), b.LocalAddr()
	var frames [][]byte
	for i := 0; i < 200; i++ {
		frames = append(frames, buildFrame(t, src.Addr(), dst.Addr(), uint32(i), (i*13)%1025))
	}
	// In chunks the socket buffer holds: UDP drops what does not fit.
	var got [][]byte
	for i := 0; i < len(frames); i += 20 {
		if n, err := a.WriteBatch(frames[i : i+20]); n != 20 || err != nil {
			t.Fatalf("WriteBatch = %d %v", n, err)
		}
		got = append(got, readN(t, b, 20)...)
	}
	for i := range got {
		checkDelivered(t, got[i], frames[i], src, dst)
		if len(got[i]) != len(frames[i]) {
			t.Fatalf("frame %d: %d bytes, sent %d", i, len(got[i]), len(frames[i]))
		}
	}
	if s := a.Stats(); s.TxFrames != 200 || s.TxDrops != 0 {
		t.Fatalf("A %+v", s)
	}
	if s := b.Stats(); s.RxFrames != 200 || s.RxDrops != 0 {
		t.Fatalf("B %+v", s)
	}
	// And back.
	back := buildFrame(t, dst.Addr(), src.Addr(), 7, 100)
	b.WriteBatch([][]byte{back})
	checkDelivered(t, readN(t, a, 1)[0], back, dst, src)
}

func TestRoundTripIPv6(t *testing.T) {
	a := open(t, "[::1]:14791", 24791)
	b := open(t, "[::1]:24791", 14791)
	src, dst := a.LocalAddr(), b.LocalAddr()
	frames := [][]byte{buildFrame(t, src.Addr(), dst.Addr(), 1, 0), buildFrame(t, src.Addr(), dst.Addr(), 2, 1021)}
	a.WriteBatch(frames)
	got := readN(t, b, 2)
	for i := range got {
		checkDelivered(t, got[i], frames[i], src, dst)
	}
}

// A receive-buffer overflow is counted in RxDrops (SO_MEMINFO).
func TestOverflowCounted(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	b := open(t, "127.0.0.6:4791", 0)
	var frames [][]byte
	for i := 0; i < 64; i++ {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 1024))
	}
	const sent = 64 * 10 // far more than the default receive buffer holds
	for i := 0; i < sent/64; i++ {
		a.WriteBatch(frames)
	}
	got := 0
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	for {
		n, _ := b.recvLocked(bufs, sizes)
		if n == 0 {
			break
		}
		got += n
	}
	s := b.Stats()
	if s.RxDrops == 0 || uint64(got)+s.RxDrops != sent {
		t.Fatalf("received %d, drops %d, sent %d", got, s.RxDrops, sent)
	}
}

func TestSamePortsDifferentPeerPort(t *testing.T) {
	// Two endpoints on one address, different ports.
	a := open(t, "127.0.0.1:14791", 24791)
	b := open(t, "127.0.0.1:24791", 14791)
	f := buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), 3, 64)
	a.WriteBatch([][]byte{f})
	checkDelivered(t, readN(t, b, 1)[0], f, a.LocalAddr(), b.LocalAddr())
}

// A frame whose ICRC is wrong when handed to the backend still fails the
// receiver's check: the re-basing carries the error over.
func TestCorruptionNotHidden(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	b := open(t, "127.0.0.3:4791", 0)
	good := buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), 9, 256)
	payloadFlip := append([]byte(nil), good...)
	payloadFlip[len(payloadFlip)-40] ^= 0x10 // payload bit, ICRC not updated
	bthFlip := append([]byte(nil), good...)
	bthFlip[14+20+8+11] ^= 0x01 // PSN bit
	icrcFlip := append([]byte(nil), good...)
	icrcFlip[len(icrcFlip)-1] ^= 0x80
	a.WriteBatch([][]byte{payloadFlip, bthFlip, icrcFlip, good})
	got := readN(t, b, 4)
	var p wire.Packet
	for i := 0; i < 3; i++ {
		if err := wire.Parse(got[i], &p); !errors.Is(err, wire.ErrBadICRC) {
			t.Errorf("corrupt frame %d: Parse = %v, want ErrBadICRC", i, err)
		}
	}
	if err := wire.Parse(got[3], &p); err != nil {
		t.Errorf("good frame: %v", err)
	}
}

func TestBadFramesDropped(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	b := open(t, "127.0.0.4:4791", 0)
	good := buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), 1, 8)
	v6 := buildFrame(t, netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 2, 8)
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	short := good[:14+20+8+4]
	huge := make([]byte, 3000)
	n, err := a.WriteBatch([][]byte{arp, v6, short, huge, nil, good})
	if n != 6 || err != nil {
		t.Fatalf("WriteBatch = %d %v", n, err)
	}
	if s := a.Stats(); s.TxDrops != 5 || s.TxFrames != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkDelivered(t, readN(t, b, 1)[0], good, a.LocalAddr(), b.LocalAddr())

	// A receive buffer too small for a datagram: dropped and counted, the
	// next one still arrives.
	big := buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), 3, 1000)
	a.WriteBatch([][]byte{big, good})
	bufs, sizes := [][]byte{make([]byte, 500)}, []int{0}
	var got int
	for got == 0 {
		got, err = b.ReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := b.Stats(); s.RxDrops != 1 || sizes[0] != len(good) {
		t.Fatalf("stats %+v, size %d", s, sizes[0])
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(Config{Local: netip.MustParseAddrPort("0.0.0.0:4791")}); err == nil {
		t.Fatal("wildcard accepted")
	}
	a := open(t, "127.0.0.1:4791", 0)
	if _, err := Open(Config{Local: a.LocalAddr()}); err == nil {
		t.Fatal("second bind succeeded")
	}
}

func TestCloseWakesReader(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	errc := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		_, err := a.ReadBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it block (passes either way)
	a.Close()
	if err := <-errc; !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("ReadBatch after Close: %v", err)
	}
	if _, err := a.WriteBatch(nil); err != nil {
		t.Fatalf("empty WriteBatch after Close: %v", err)
	}
	if _, err := a.WriteBatch([][]byte{{1}}); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("WriteBatch after Close: %v", err)
	}
}

// BenchmarkUDP sends 64-frame batches of 1082-byte RoCE frames over
// loopback and reports the receive rate.
func BenchmarkUDP(b *testing.B) {
	a := open(b, "127.0.0.1:4791", 0)
	r := open(b, "127.0.0.5:4791", 0)
	const batch = 64
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = buildFrame(b, a.LocalAddr().Addr(), r.LocalAddr().Addr(), uint32(i), 1024)
	}
	done := make(chan uint64)
	go func() {
		bufs := make([][]byte, batch)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, batch)
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

func (l *Link) recvLocked(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	return l.s.recv(bufs, sizes, false)
}

// FuzzWriteBatch feeds arbitrary frames to the transmit path's parser and
// ICRC re-basing: nothing may panic, and a prepared frame has a BTH-sized
// payload and a 4-byte trailer.
func FuzzWriteBatch(f *testing.F) {
	src, dst := netip.MustParseAddr("127.0.0.9"), netip.MustParseAddr("127.0.0.10")
	f.Add(buildFrame(f, src, dst, 1, 16))
	f.Add(buildFrame(f, netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 1, 16))
	f.Add([]byte{})
	f.Add(make([]byte, 14))
	// The fuzzing coordinator and its workers each open one: a port per process.
	l, err := Open(Config{Local: netip.AddrPortFrom(src, uint16(20000+os.Getpid()%20000)), PeerPort: 9})
	if err != nil {
		f.Skipf("cannot bind: %v", err)
	}
	defer l.Close()
	s := l.s.(*mmsgSock)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if s.prepare(0, frame) {
			// A prepared frame carries at least a BTH before the trailer.
			if s.tx.Iovs[0].Len < 12 || s.tx.Iovs[1].Len != 4 {
				t.Fatalf("prepared iovecs %d + %d bytes", s.tx.Iovs[0].Len, s.tx.Iovs[1].Len)
			}
		}
		s.tx.Clear()
	})
}

// Close while a reader, a writer and a stats poller run: everything returns.
func TestConcurrentClose(t *testing.T) {
	a := open(t, "127.0.0.1:4791", 0)
	b := open(t, "127.0.0.7:4791", 0)
	f := buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), 1, 200)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		for {
			if _, err := a.WriteBatch([][]byte{f, f, f}); err != nil {
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	go func() {
		defer wg.Done()
		bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, []int{0, 0}
		for {
			if _, err := b.ReadBatch(bufs, sizes); err != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			_ = a.Stats()
			_ = b.Stats()
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); b.Stats().RxFrames < 100; {
		if time.Now().After(deadline) {
			t.Error("no traffic")
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.Close()
	a.Close()
	close(done)
	wg.Wait()
}
