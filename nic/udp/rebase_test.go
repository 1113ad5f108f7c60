package udp

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// zeroShift advances a raw CRC state over zero bytes exactly as hash/crc32
// does.
func TestZeroShift(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	zeros := make([]byte, 9000)
	for _, n := range []int{0, 1, 2, 7, 8, 12, 1024, 4096, 4112, 8999} {
		s := r.Uint32()
		// raw(s, 0^n) = ^Update(^s, 0^n)
		want := ^crc32.Update(^s, crc32.IEEETable, zeros[:n])
		if got := gfMul(s, zeroShift(n)); got != want {
			t.Fatalf("n=%d: %#x, want %#x", n, got, want)
		}
	}
}

// rebaseTrailer gives the same trailer as the full recomputation (rebase)
// for frames with arbitrary IDs, TTLs, ports, traffic classes and flow
// labels, and keeps a wrong ICRC wrong by the same bits.
func TestRebaseTrailerMatchesRebase(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, fam := range []struct {
		local, peer netip.Addr
	}{
		{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")},
		{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")},
	} {
		l := &Link{local: netip.AddrPortFrom(fam.local, 4791), v6: fam.local.Is6(), mtu: 9000,
			scratch: make([]byte, 9064), shifts: make(shiftCache, 9064)}
		for i := range 300 {
			f := &wire.Frame{
				SrcIP: fam.local, DstIP: fam.peer, HopLimit: uint8(r.IntN(256)), IPID: uint16(r.Uint32()),
				TrafficClass: uint8(r.IntN(256)), FlowLabel: r.Uint32() & 0xFFFFF, SrcPort: uint16(r.Uint32()),
				BTH: wire.BTHFields{Opcode: wire.RCRDMAWriteMiddle, PKey: wire.DefaultPKey, DestQP: r.Uint32() & 0xFFFFFF, PSN: wire.PSN(i)},
			}
			payload := make([]byte, 4*r.IntN(2049))
			for j := range payload {
				payload[j] = byte(r.Uint32())
			}
			buf := make([]byte, f.Len(len(payload)))
			n, err := wire.BuildPayload(buf, f, payload)
			if err != nil {
				t.Fatal(err)
			}
			fr := buf[:n]
			if i%7 == 0 {
				fr[len(fr)-1] ^= 0x5a // a wrong ICRC
			}
			_, _, slow, _, ok1 := l.rebase(fr)
			_, _, fast, ok2 := l.rebaseTrailer(fr)
			if !ok1 || !ok2 || slow != fast {
				t.Fatalf("%v frame %d (%d B payload): rebase %#x %v, rebaseTrailer %#x %v", fam.local, i, len(payload), slow, ok1, fast, ok2)
			}
		}
	}
}

func TestGFMulFast(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		a, b := r.Uint32(), r.Uint32()
		if got, want := gfMulFast(a, b), gfMul(a, b); got != want {
			t.Fatalf("gfMulFast(%#x, %#x) = %#x, want %#x", a, b, got, want)
		}
	}
	for _, a := range []uint32{0, 1, 1 << 31, 0xFFFFFFFF} {
		if got, want := gfMulFast(a, 0x12345678), gfMul(a, 0x12345678); got != want {
			t.Fatalf("gfMulFast(%#x, …) = %#x, want %#x", a, got, want)
		}
	}
}

func BenchmarkGFMul(b *testing.B) {
	x, y := uint32(0x9E3779B9), zeroShift(4108)
	b.Run("bitwise", func(b *testing.B) {
		for b.Loop() {
			x = gfMul(x, y) | 1
		}
	})
	b.Run("nibbles", func(b *testing.B) {
		for b.Loop() {
			x = gfMulFast(x, y) | 1
		}
	})
}
