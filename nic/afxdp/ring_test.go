//go:build linux

package afxdp

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testSeed returns TEST_SEED or a time-based seed, logged for replay.
func testSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with TEST_SEED=%d", seed)
		}
	})
	return seed
}

// fakeRingPair lays one ring out in ordinary memory the way the kernel
// does (producer, consumer, flags, descriptors) and gives two views of it,
// as the two sides would have.
func fakeRingPair(size uint32) (prod, cons *addrRing) {
	mem := make([]byte, 256+int(size)*8)
	off := unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 256}
	prod, cons = &addrRing{}, &addrRing{}
	prod.initAddr(mem, off, size)
	cons.initAddr(mem, off, size)
	return prod, cons
}

// TestRingWrap drives a producer and a consumer view of one ring through
// many random batches across index wrap-around: every value comes out once,
// in order, and the producer never overwrites an unconsumed slot.
func TestRingWrap(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	const size = 16
	p, c := fakeRingPair(size)
	// Start near the uint32 wrap to exercise free-running indices.
	start := uint32(1<<32 - 40)
	p.producer.Store(start)
	p.consumer.Store(start)
	p.prod, p.cons, c.prod, c.cons = start, start, start, start

	var next, want uint64
	for range 10_000 {
		n := p.free(uint32(rng.IntN(size + 4)))
		if inFlight := next - want; uint64(n)+inFlight > size {
			t.Fatalf("free gave %d with %d in flight in a ring of %d", n, inFlight, size)
		}
		for i := range n {
			p.descs[(p.prod+i)&p.mask] = next
			next++
		}
		p.submit(n)
		m := c.available(uint32(rng.IntN(size + 4)))
		for i := range m {
			if v := c.descs[(c.cons+i)&c.mask]; v != want {
				t.Fatalf("got %d, want %d", v, want)
			}
			want++
		}
		c.release(m)
	}
	if want == 0 {
		t.Fatal("nothing went through")
	}
}

func TestNotSupportedError(t *testing.T) {
	err := error(&NotSupportedError{What: "AF_XDP socket", Needs: "CONFIG_XDP_SOCKETS and kernel >= 5.4", Err: unix.EAFNOSUPPORT})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Error("not errors.ErrUnsupported")
	}
	if !errors.Is(err, unix.EAFNOSUPPORT) {
		t.Error("does not unwrap to the errno")
	}
	var ns *NotSupportedError
	if !errors.As(err, &ns) || ns.What != "AF_XDP socket" {
		t.Error("errors.As")
	}
	want := "afxdp: AF_XDP socket not supported (needs CONFIG_XDP_SOCKETS and kernel >= 5.4): address family not supported by protocol"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{FrameSize: 1000}, {FrameSize: 8192}, {NumFrames: 100}, {NumFrames: 32}} {
		if _, err := Open("lo", 0, o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
	if _, err := Open("lo", -1, Options{}); err == nil {
		t.Error("Open with queue -1 succeeded")
	}
	if _, err := Open("no-such-if-xyz", 0, Options{}); err == nil {
		t.Error("Open of a missing interface succeeded")
	}
}

// TestOpenUnprivileged: without privileges Open answers NotSupportedError,
// so a caller falls back. Only meaningful when not root.
func TestOpenUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs only without root (as root Open would succeed)")
	}
	_, err := Open("lo", 0, Options{})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Open as uid %d: %v, want a NotSupportedError", os.Geteuid(), err)
	}
	t.Log(err)
}
