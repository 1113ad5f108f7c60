//go:build linux

package afxdp

import (
	"fmt"
	"testing"
)

// mbSizes are frame sizes around the chunk boundaries of a multi-buffer
// socket with 4096-byte chunks (3840 bytes of a received chunk after the
// headroom, 4096 of a transmitted one), the frame of a 4096-byte UDP
// payload, the largest RoCEv2 frame at path MTU 4096 (14 + 20 + 8 + BTH 12
// + RETH 16 + 4096 + ICRC 4), and the largest frame at MTU 9000.
var mbSizes = []int{60, 1514, 3839, 3840, 3841, 4095, 4096, 4097, 14 + 20 + 8 + 4096, 4170, 7680, 7681, 8192, 9014}

func mbSizeFor(seq uint32) int { return mbSizes[seq%uint32(len(mbSizes))] }

// TestMTU9000MultiBuffer runs a veth pair at MTU 9000 with multi-buffer
// AF_XDP on both ends, in native and generic mode: the link carries the
// whole MTU, and frames up to 9014 bytes (4096-byte payloads among them)
// cross in both directions intact, in order and byte-exact, counted once
// each. With 2048-byte chunks the largest frame spans six.
func TestMTU9000MultiBuffer(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"native", Options{Mode: ModeNative}},
		{"generic", Options{Mode: ModeGeneric}},
		{"native/frame2048", Options{Mode: ModeNative, FrameSize: 2048}},
	} {
		t.Run(c.name, func(t *testing.T) { testMultiBuffer(t, c.opts) })
	}
}

func testMultiBuffer(t *testing.T, opts Options) {
	p := newVethPair(t, 9000)
	a := p.open(t, p.nsA, p.ifA, opts)
	b := p.open(t, p.nsB, p.ifB, opts)
	t.Logf("MTU 9000: mode %s, multi-buffer %v, MTU %d", b.Mode(), b.MultiBuffer(), b.MTU())
	for _, l := range []*Link{a, b} {
		if !l.MultiBuffer() {
			t.Skipf("kernel refused multi-buffer AF_XDP (needs >= 6.6); see the log")
		}
		if l.MTU() != 9000 {
			t.Errorf("MTU %d, want 9000", l.MTU())
		}
	}
	// N frames (about 3 chunks each on average with 2048-byte chunks) stay
	// below the receive ring (2048 descriptors), so nothing overruns even if
	// the receiver starts late.
	const N = 420
	wait := readSizedAsync(b, 0, N, 9014, mbSizeFor)
	sendSized(t, a, p, p.macB, 0, N, roceUDPPort, mbSizeFor)
	if err := wait(); err != nil {
		t.Fatalf("a→b: %v", err)
	}
	wait = readSizedAsync(a, N, N, 9014, mbSizeFor)
	sendSized(t, b, p, p.macA, N, N, roceUDPPort, mbSizeFor)
	if err := wait(); err != nil {
		t.Fatalf("b→a: %v", err)
	}
	var bytes uint64
	for seq := range uint32(N) {
		bytes += uint64(mbSizeFor(seq))
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("a: %+v\nb: %+v", sa, sb)
	for _, s := range []struct {
		name string
		st   [4]uint64
	}{{"a", [4]uint64{sa.TxFrames, sa.RxFrames, sa.TxBytes, sa.RxBytes}}, {"b", [4]uint64{sb.TxFrames, sb.RxFrames, sb.TxBytes, sb.RxBytes}}} {
		if s.st != [4]uint64{N, N, bytes, bytes} {
			t.Errorf("%s: tx/rx frames, tx/rx bytes %v, want %d frames and %d bytes each way", s.name, s.st, N, bytes)
		}
	}
	if sa.RxDrops+sb.RxDrops+sa.TxDrops+sb.TxDrops != 0 {
		t.Errorf("drops: a rx %d tx %d, b rx %d tx %d", sa.RxDrops, sa.TxDrops, sb.RxDrops, sb.TxDrops)
	}
	checkVLAN(t, p, a, b)
}

// TestMultiBufferLimits checks the edges: a multi-buffer frame larger than
// the receiver's buffer is dropped and counted and the frames around it
// arrive; a frame larger than the link's MTU is not sent, counted, and still
// accepted.
func TestMultiBufferLimits(t *testing.T) {
	p := newVethPair(t, 9000)
	a := p.open(t, p.nsA, p.ifA, Options{})
	b := p.open(t, p.nsB, p.ifB, Options{})
	if !a.MultiBuffer() || !b.MultiBuffer() {
		t.Skipf("kernel refused multi-buffer AF_XDP (needs >= 6.6)")
	}
	// Frames 0, 2, 4 fit a 4096-byte buffer, 1 and 3 (two and three
	// chunks) do not; 5 is larger than the MTU carries.
	sizes := []int{4096, 4170, 3000, 9014, 100, 9000 + 14 + 4 + 1}
	frames := make([][]byte, len(sizes))
	for i, n := range sizes {
		frames[i] = buildFrame(make([]byte, n), n, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	if m, err := a.WriteBatch(frames); m != len(frames) || err != nil {
		t.Fatalf("WriteBatch: %d of %d, %v", m, len(frames), err)
	}
	if s := a.Stats(); s.TxFrames != 5 || s.TxDrops != 1 {
		t.Errorf("TxFrames %d TxDrops %d, want 5 and 1", s.TxFrames, s.TxDrops)
	}
	bufs, got := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	var seqs []uint32
	for len(seqs) < 3 {
		k, err := b.ReadBatch(bufs, got)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k {
			seq, err := checkFrame(bufs[i][:got[i]])
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
	}
	if fmt.Sprint(seqs) != "[0 2 4]" {
		t.Errorf("received seqs %v, want [0 2 4]", seqs)
	}
	if s := b.Stats(); s.RxFrames != 3 || s.RxDrops != 2 {
		t.Errorf("RxFrames %d RxDrops %d, want 3 and 2", s.RxFrames, s.RxDrops)
	}
}

// TestMultiBufferNoAlloc checks that splitting jumbo frames over chunks on
// transmit and assembling them on receive allocates nothing.
func TestMultiBufferNoAlloc(t *testing.T) {
	p := newVethPair(t, 9000)
	a := p.open(t, p.nsA, p.ifA, Options{})
	b := p.open(t, p.nsB, p.ifB, Options{})
	if !a.MultiBuffer() || !b.MultiBuffer() {
		t.Skipf("kernel refused multi-buffer AF_XDP (needs >= 6.6)")
	}
	const n = 8
	frames := make([][]byte, n)
	bufs, sizes := make([][]byte, n), make([]int, n)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, 9014), 4170+i*600, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
		bufs[i] = make([]byte, 9014)
	}
	var err error
	allocs := testing.AllocsPerRun(20, func() {
		if _, err = a.WriteBatch(frames); err != nil {
			return
		}
		for got := 0; got < n && err == nil; {
			var k int
			k, err = b.ReadBatch(bufs[got:], sizes[got:])
			got += k
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per batch of %d jumbo frames, want 0", allocs, n)
	}
	for i := range n {
		if seq, err := checkFrame(bufs[i][:sizes[i]]); err != nil || seq != uint32(i) {
			t.Errorf("frame %d: seq %d, %v", i, seq, err)
		}
	}
}

// TestMultiBufferBackPressure writes one batch of jumbo frames through a
// sender with 32 transmit chunks and a 32-slot TX ring: WriteBatch must post
// each frame's descriptors together, reap, wait, and deliver every frame
// intact and in order.
func TestMultiBufferBackPressure(t *testing.T) {
	p := newVethPair(t, 9000)
	a := p.open(t, p.nsA, p.ifA, Options{NumFrames: 64})
	b := p.open(t, p.nsB, p.ifB, Options{})
	if !a.MultiBuffer() || !b.MultiBuffer() {
		t.Skipf("kernel refused multi-buffer AF_XDP (needs >= 6.6)")
	}
	const n = 300
	wait := readSizedAsync(b, 0, n, 9014, mbSizeFor)
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = buildFrame(make([]byte, 9014), mbSizeFor(uint32(i)), p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	if m, err := a.WriteBatch(frames); m != n || err != nil {
		t.Fatalf("WriteBatch: %d of %d, %v", m, n, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.TxFrames != n || s.TxDrops != 0 || s.RingFull == 0 {
		t.Errorf("TxFrames %d TxDrops %d RingFull %d, want %d, 0 and > 0", s.TxFrames, s.TxDrops, s.RingFull, n)
	}
}
