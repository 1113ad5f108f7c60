//go:build linux

package afxdp

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeDescRingPair is fakeRingPair for {addr, len, options} descriptors.
func fakeDescRingPair(size uint32) (prod, cons *descRing) {
	d := uint32(unsafe.Sizeof(unix.XDPDesc{}))
	mem := make([]byte, 256+int(size*d))
	off := unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 256}
	prod, cons = &descRing{}, &descRing{}
	prod.initDesc(mem, off, size)
	cons.initDesc(mem, off, size)
	return prod, cons
}

// TestReceiveAssembles drives Link.receive against a kernel simulated in
// ordinary memory: the "kernel" takes chunks from the fill ring, copies
// random frames of 1 to 9014 bytes into them after the 256-byte headroom
// (FrameSize-256 bytes per chunk, XDP_PKT_CONTD on all but a frame's last
// descriptor) and publishes at random points, sometimes in the middle of a
// frame. Every frame that fits its buffer must come out whole, in order and
// byte-exact, every larger one must be counted and skipped, a frame must
// never be delivered before its last descriptor is published, and every
// chunk must return to the fill ring exactly once.
func TestReceiveAssembles(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	const (
		frameSize = 2048
		nChunks   = 64
		bufSize   = 6000
	)
	room := uint32(frameSize - xdpPacketHeadroom)
	l := &Link{umem: make([]byte, frameSize*nChunks), frameMask: ^uint64(frameSize - 1)}
	kRx, uRx := fakeDescRingPair(nChunks)
	uFill, kFill := fakeRingPair(nChunks)
	l.rx, l.fill = *uRx, *uFill
	for i := range uint64(nChunks) {
		l.fill.descs[i] = i * frameSize
	}
	l.fill.submit(nChunks)

	var sent, got [][]byte // frames the kernel wrote, frames that fit and came out
	var fits []bool
	owned := map[uint64]bool{} // chunks the kernel holds (taken from the fill ring)
	kernelWrite := func(f []byte) bool {
		n := (uint32(len(f)) + room - 1) / room
		if kFill.available(n) < n || kRx.free(n) < n {
			return false
		}
		for i := range n {
			addr := kFill.descs[(kFill.cons+i)&kFill.mask]
			if owned[addr] {
				t.Fatalf("chunk %#x handed to the kernel twice", addr)
			}
			owned[addr] = true
			piece := f[i*room : min(uint32(len(f)), (i+1)*room)]
			copy(l.umem[addr+xdpPacketHeadroom:], piece)
			var opt uint32
			if i < n-1 {
				opt = unix.XDP_PKT_CONTD
			}
			kRx.descs[(kRx.prod+i)&kRx.mask] = unix.XDPDesc{Addr: addr + xdpPacketHeadroom, Len: uint32(len(piece)), Options: opt}
		}
		kFill.release(n)
		// Publish all of it, or (to test the guard) all but the last piece.
		k := n
		if n > 1 && rng.IntN(4) == 0 {
			k = n - 1 - uint32(rng.IntN(int(n-1)))
		}
		kRx.prod += n
		kRx.producer.Store(kRx.prod - (n - k))
		return true
	}
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, bufSize)
	}
	sizes := make([]int, len(bufs))
	for step := range 8000 {
		if rng.IntN(2) == 0 {
			kRx.producer.Store(kRx.prod) // the rest of any partly published frame
			f := make([]byte, 1+rng.IntN(9014))
			for i, x := 0, rng.Uint64(); i < len(f); i, x = i+1, x*6364136223846793005+1442695040888963407 {
				f[i] = byte(x >> 56)
			}
			if kernelWrite(f) {
				sent = append(sent, f)
				fits = append(fits, len(f) <= bufSize)
			}
			continue
		}
		published := kRx.producer.Load()
		nb := 1 + rng.IntN(len(bufs))
		avail := l.rx.available(l.rx.size)
		if avail == 0 {
			continue
		}
		k := l.receive(avail, bufs[:nb], sizes)
		if int32(l.rx.cons-published) > 0 {
			t.Fatalf("step %d: consumed past the published index", step)
		}
		for i := range k {
			got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
		// Chunks given back to the fill ring are the kernel's to take again.
		for i := kFill.cons; i != kFill.producer.Load(); i++ {
			delete(owned, kFill.descs[i&kFill.mask])
		}
	}
	kRx.producer.Store(kRx.prod)
	for {
		avail := l.rx.available(l.rx.size)
		if avail == 0 {
			break
		}
		k := l.receive(avail, bufs, sizes)
		for i := range k {
			got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	var want [][]byte
	var tooBig uint64
	for i, f := range sent {
		if fits[i] {
			want = append(want, f)
		} else {
			tooBig++
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d frames out, want %d (of %d sent)", len(got), len(want), len(sent))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d (%d bytes) differs from the one sent (%d bytes)", i, len(got[i]), len(want[i]))
		}
	}
	if l.c.RxDrops.Load() != tooBig || l.c.RxFrames.Load() != uint64(len(want)) {
		t.Errorf("counted %d frames and %d too big, want %d and %d", l.c.RxFrames.Load(), l.c.RxDrops.Load(), len(want), tooBig)
	}
	if l.rx.cons != kRx.prod {
		t.Errorf("RX ring: consumed to %d, produced to %d", l.rx.cons, kRx.prod)
	}
	if free := l.fill.prod - kFill.cons; free != nChunks {
		t.Errorf("%d chunks on the fill ring at the end, want all %d", free, nChunks)
	}
	t.Logf("%d frames sent, %d delivered, %d too big", len(sent), len(want), tooBig)
}
