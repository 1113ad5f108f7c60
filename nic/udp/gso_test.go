//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"
)

// learn has b send one frame to a, so that a knows b for a goroce UDP link
// (the only kind of peer a sends GSO datagrams to).
func learn(t *testing.T, a, b *Link) {
	t.Helper()
	unzoned := func(ap netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port()) }
	la, lb := unzoned(a.LocalAddr()), unzoned(b.LocalAddr())
	f := buildFrame(t, lb.Addr(), la.Addr(), 999, 16)
	if _, err := b.WriteBatch([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, readN(t, a, 1)[0], f, lb, la)
	if !a.peers.known(lb.Addr()) {
		t.Fatalf("%v did not learn %v", la, lb)
	}
}

func offloadPair(t *testing.T, la, lb string, pa, pb uint16) (a, b *Link) {
	t.Helper()
	a, b = open(t, la, pa), open(t, lb, pb)
	if !a.OffloadStats().GSO || !b.OffloadStats().GRO {
		t.Skipf("this kernel has no UDP GSO/GRO: %+v %+v", a.OffloadStats(), b.OffloadStats())
	}
	return a, b
}

// sendCheck writes frames from a to b in one WriteBatch and checks that b
// delivers them in order with byte-identical RoCE parts, each ICRC
// verifying against the synthesized header, reading with bufs of nbuf
// frames.
func sendCheck(t *testing.T, a, b *Link, frames [][]byte, nbuf int) {
	t.Helper()
	if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readNBuf(t, b, len(frames), nbuf)
	for i := range got {
		checkDelivered(t, got[i], frames[i], a.LocalAddr(), b.LocalAddr())
		if len(got[i]) != len(frames[i]) {
			t.Fatalf("frame %d: %d bytes, sent %d", i, len(got[i]), len(frames[i]))
		}
	}
}

// readNBuf reads n frames from l into nbuf buffers of a frame at l's MTU
// each (at least 2048 bytes).
func readNBuf(t *testing.T, l *Link, n, nbuf int) [][]byte {
	t.Helper()
	bufs, sizes := make([][]byte, nbuf), make([]int, nbuf)
	for i := range bufs {
		bufs[i] = make([]byte, max(2048, l.mtu+100))
	}
	var out [][]byte
	deadline := time.Now().Add(20 * time.Second) // liveness only
	for len(out) < n {
		k, err := l.TryReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames; stats %+v %+v", len(out), n, l.Stats(), l.OffloadStats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// A batch of N equal frames to a known peer leaves as one GSO datagram
// and arrives, coalesced, as N frames (loopback keeps the datagram whole).
func TestGSOEqualFrames(t *testing.T) {
	a, b := offloadPair(t, "127.0.0.1:4791", "127.0.0.2:4791", 0, 0)
	learn(t, a, b)
	const N = 40
	var frames [][]byte
	for i := range N {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 1024))
	}
	sendCheck(t, a, b, frames, 64)
	if s := a.OffloadStats(); s.GSOSends != 1 || s.GSOSegments != N {
		t.Fatalf("sender %+v, want one GSO datagram of %d", s, N)
	}
	if s := b.OffloadStats(); s.GROReceives != 1 || s.GROSegments != N {
		t.Fatalf("receiver %+v, want one coalesced datagram of %d", s, N)
	}
	if s := b.Stats(); s.RxFrames != N || s.RxDrops != 0 {
		t.Fatalf("receiver stats %+v", s)
	}
}

// Runs end at a size change, a shorter frame (which still joins the run),
// a new destination, 64 segments or 64 KiB.
func TestGSOMixedSizes(t *testing.T) {
	a, b := offloadPair(t, "127.0.0.1:4791", "127.0.0.2:4791", 0, 0)
	learn(t, a, b)
	src, dst := a.LocalAddr().Addr(), b.LocalAddr().Addr()
	// UDP payloads (BTH + payload + ICRC): a run takes equal sizes and may
	// end with one shorter frame.
	sizes := []int{
		1040, 1024, // [1056 1040]: the shorter one ends the run
		1024, 1024, 100, // [1040 1040 116]
		500, 500, 8, // [516 516 24]
		1024, 1024, // [1040 1040 32] with the first 16
	}
	for range 70 {
		sizes = append(sizes, 16) // the 64-frame batch ends after 53: [32×53], [32×16]
	}
	var frames [][]byte
	for i, n := range sizes {
		frames = append(frames, buildFrame(t, src, dst, uint32(i), n))
	}
	sendCheck(t, a, b, frames, 64)
	if s := a.OffloadStats(); s.GSOSends != 6 || s.GSOSegments != 2+3+3+3+53+16 {
		t.Fatalf("sender %+v", s)
	}
	// A new destination ends a run.
	c := open(t, "127.0.0.4:4791", 0)
	learn(t, a, c)
	frames = frames[:0]
	for i := range 6 {
		to := b
		if i >= 3 {
			to = c
		}
		frames = append(frames, buildFrame(t, src, to.LocalAddr().Addr(), uint32(i), 64))
	}
	before := a.OffloadStats().GSOSends
	if n, err := a.WriteBatch(frames); n != 6 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	readNBuf(t, b, 3, 8)
	readNBuf(t, c, 3, 8)
	if s := a.OffloadStats(); s.GSOSends != before+2 {
		t.Fatalf("two destinations: %+v", s)
	}

	// 64 KiB bounds a datagram: 1500-byte payloads, 43 per datagram.
	big := open(t, "127.0.0.3:4791", 0)
	big.mtu = 9000
	big.scratch, big.shifts = make([]byte, 9064), make(shiftCache, 9064)
	learn(t, big, b)
	frames = frames[:0]
	for i := range 50 {
		frames = append(frames, buildFrame(t, big.LocalAddr().Addr(), dst, uint32(i), 1500))
	}
	if n, err := big.WriteBatch(frames); n != 50 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readNBuf(t, b, 50, 64)
	for i := range got {
		checkDelivered(t, got[i], frames[i], big.LocalAddr(), b.LocalAddr())
	}
	// UDP payload 12 + 16 (RETH-less SEND: BTH only) … 1500 + 12 + 4 = 1516
	// bytes: 43 fit in 65507.
	if s := big.OffloadStats(); s.GSOSends != 2 || s.GSOSegments != 50 {
		t.Fatalf("64 KiB sender %+v", s)
	}
}

// More segments than the reader's buffers: the rest waits in the link and
// comes with the next reads, in order, without loss, even once the socket
// is empty.
func TestGROMoreSegmentsThanBufs(t *testing.T) {
	a, b := offloadPair(t, "127.0.0.1:4791", "127.0.0.2:4791", 0, 0)
	learn(t, a, b)
	var frames [][]byte
	for i := range 64 {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 900))
	}
	sendCheck(t, a, b, frames, 5)
	if s := b.OffloadStats(); s.GROReceives != 1 {
		t.Fatalf("receiver %+v", s)
	}
	// And through ReadBatch and WaitReadBatch too.
	if _, err := a.WriteBatch(frames); err != nil {
		t.Fatal(err)
	}
	bufs, sz := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 3)
	var got [][]byte
	for len(got) < len(frames) {
		var n int
		var err error
		if len(got)%2 == 0 {
			n, err = b.ReadBatch(bufs, sz)
		} else {
			n, err = b.WaitReadBatch(bufs, sz)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, append([]byte(nil), bufs[i][:sz[i]]...))
		}
	}
	for i := range got {
		checkDelivered(t, got[i], frames[i], a.LocalAddr(), b.LocalAddr())
	}
	if n, err := b.TryReadBatch(bufs, sz); n != 0 || err != nil {
		t.Fatalf("after everything: %d, %v", n, err)
	}
}

func TestGSOIPv6(t *testing.T) {
	a, b := offloadPair(t, "[::1]:14791", "[::1]:24791", 24791, 14791)
	learn(t, a, b)
	var frames [][]byte
	for i := range 30 {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 1200-4*(i/29)))
	}
	sendCheck(t, a, b, frames, 64)
	if s := a.OffloadStats(); s.GSOSends != 1 || s.GSOSegments != 30 {
		t.Fatalf("sender %+v", s)
	}
	if s := b.OffloadStats(); s.GROReceives != 1 || s.GROSegments != 30 {
		t.Fatalf("receiver %+v", s)
	}
}

// Peers not known to be goroce UDP links get one datagram per frame, and
// NoOffload turns both offloads off.
func TestGSOOnlyToKnownPeers(t *testing.T) {
	a, b := offloadPair(t, "127.0.0.1:4791", "127.0.0.2:4791", 0, 0)
	var frames [][]byte
	for i := range 10 {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 512))
	}
	sendCheck(t, a, b, frames, 64)
	if s := a.OffloadStats(); s.GSOSends != 0 || s.GSOPeers != 0 {
		t.Fatalf("unknown peer: %+v", s)
	}

	off, err := Open(Config{Local: netip.MustParseAddrPort("127.0.0.3:4791"), NoOffload: true})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if s := off.OffloadStats(); s.GSO || s.GRO {
		t.Fatalf("NoOffload: %+v", s)
	}
	back := buildFrame(t, b.LocalAddr().Addr(), off.LocalAddr().Addr(), 1, 16)
	b.WriteBatch([][]byte{back})
	readNBuf(t, off, 1, 4)
	frames = frames[:0]
	for i := range 10 {
		frames = append(frames, buildFrame(t, off.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 512))
	}
	sendCheck(t, off, b, frames, 64)
	if s := off.OffloadStats(); s.GSOSends != 0 {
		t.Fatalf("NoOffload sender %+v", s)
	}
}

// A datagram from the peer port marks the address a goroce UDP link, one
// from any other port (rxe's 0xC000 and up) unmarks it.
func TestUDPPeers(t *testing.T) {
	var p udpPeers
	x, y := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	p.note(x, true)
	p.note(x, true)
	p.note(y, false)
	if !p.known(x) || p.known(y) {
		t.Fatal("after x from the peer port, y from another")
	}
	p.note(y, true)
	p.note(x, false)
	if p.known(x) || !p.known(y) {
		t.Fatal("after the kinds swapped")
	}
	for i := range maxKnownPeers + 10 {
		p.note(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), true)
	}
	if n := p.count(); n != maxKnownPeers {
		t.Fatalf("%d peers, bound %d", n, maxKnownPeers)
	}
}

// A GSO batch out and its coalesced datagram in, split into the reader's
// buffers over several reads, allocate nothing.
func TestGSOAllocs(t *testing.T) {
	a, b := offloadPair(t, "127.0.0.1:4791", "127.0.0.2:4791", 0, 0)
	learn(t, a, b)
	var frames [][]byte
	for i := range 16 {
		frames = append(frames, buildFrame(t, a.LocalAddr().Addr(), b.LocalAddr().Addr(), uint32(i), 1024))
	}
	bufs, sizes := make([][]byte, 6), make([]int, 6)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	roundTrip := func() {
		if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		for got := 0; got < len(frames); {
			n, err := b.ReadBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	roundTrip()
	if avg := testing.AllocsPerRun(100, roundTrip); avg != 0 {
		t.Fatalf("%.2f allocations per batch", avg)
	}
	if s := a.OffloadStats(); s.GSOSends < 100 {
		t.Fatalf("sender %+v: the batches were not sent as GSO datagrams", s)
	}
}
