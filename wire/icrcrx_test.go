package wire

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// TestICRCCache: over random packets of a few QPs and paths, interleaved,
// some with a header or payload byte flipped, ICRCCache.ICRC equals ICRC
// (hits, misses and refills alike), a refilled slot is what NewICRCHeader
// computes, and a masked byte (TTL, checksums, FECN/BECN) changes neither.
func TestICRCCache(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	var tmpls []Frame
	for i := range 6 {
		f := benchFrame()
		f.BTH.DestQP = uint32(0x11 + 32*(i%3)) // three QPs in one slot
		if i >= 3 {
			f.SrcIP = netip.MustParseAddr("198.18.0.7")
			f.SrcPort += uint16(i)
		}
		tmpls = append(tmpls, f)
	}
	ops := []Opcode{RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly, RCRDMAWriteFirst, RCRDMAWriteMiddle, RCRDMAWriteOnly, RCAcknowledge}
	var c ICRCCache
	buf := make([]byte, 9000)
	hits := 0
	for i := range 5000 {
		f := tmpls[rng.IntN(len(tmpls))]
		if rng.IntN(4) == 0 {
			f = tmpls[0] // runs of one QP: hits
		}
		f.IPID = uint16(rng.Uint32())
		f.BTH.Opcode = ops[rng.IntN(len(ops))]
		f.BTH.SE = rng.IntN(2) == 1
		f.BTH.AckReq = rng.IntN(2) == 1
		f.BTH.PSN = PSN(rng.Uint32() & 0xFFFFFF)
		payload := 4 * rng.IntN(300)
		switch f.BTH.Opcode {
		case RCAcknowledge:
			payload = 0
		case RCSendOnly, RCRDMAWriteOnly, RCSendLast:
			payload = rng.IntN(1500)
		}
		n, err := Build(buf, &f, payload)
		if err != nil {
			t.Fatalf("seed %d packet %d: %v", seed, i, err)
		}
		l3 := buf[EthernetLen : n-ICRCLen]
		switch rng.IntN(8) {
		case 0: // a covered byte
			l3[rng.IntN(len(l3))] ^= 1 << rng.IntN(8)
		case 1: // a masked one: TTL, the checksums, FECN/BECN
			l3[[]int{1, 8, 10, 11, 26, 27, 32}[rng.IntN(7)]] ^= 1 << rng.IntN(8)
		}
		slot := &c.slot[l3[IPv4Len+UDPLen+7]%icrcCacheSlots]
		if slot.Matches(l3) {
			hits++
		}
		if got, want := c.ICRC(l3), ICRC(l3); got != want {
			t.Fatalf("seed %d packet %d (%v, %d B): cache %#08x, ICRC %#08x", seed, i, f.BTH, payload, got, want)
		}
		if h, ok := NewICRCHeader(l3); ok && l3[0] == 0x45 && *slot != h {
			t.Fatalf("seed %d packet %d: slot %x, NewICRCHeader %x", seed, i, *slot, h)
		}
	}
	if hits < 1000 {
		t.Errorf("seed %d: %d hits in 5000 packets", seed, hits)
	}
	// Not IPv4 without options: ICRC's answer, the slots untouched.
	var empty ICRCCache
	for _, l3 := range [][]byte{nil, {0x45}, {0x46, 0, 0}, make([]byte, 64)} {
		if got, want := empty.ICRC(l3), ICRC(l3); got != want {
			t.Errorf("% x: cache %#08x, ICRC %#08x", l3, got, want)
		}
	}
	if empty != (ICRCCache{}) {
		t.Error("a refused packet filled a slot")
	}
}

// TestICRCCacheParse: a frame with a bad ICRC is ErrBadICRC through the
// cache, on a miss and on a hit.
func TestICRCCacheParse(t *testing.T) {
	f := benchFrame()
	buf := make([]byte, 2000)
	n, _ := Build(buf, &f, 64)
	var c ICRCCache
	var p Packet
	for i := range 2 {
		if err := c.Parse(buf[:n], &p); err != nil {
			t.Fatalf("parse %d: %v", i, err)
		}
	}
	buf[n-ICRCLen-1] ^= 0x40
	for i := range 2 {
		if err := c.Parse(buf[:n], &p); err != ErrBadICRC {
			t.Fatalf("corrupted payload, parse %d: %v", i, err)
		}
	}
	buf[n-ICRCLen-1] ^= 0x40
	buf[EthernetLen+IPv4Len+UDPLen+11] ^= 1 // the PSN: a varying byte
	if err := c.Parse(buf[:n], &p); err != ErrBadICRC {
		t.Fatalf("corrupted PSN: %v", err)
	}
}

// BenchmarkICRCCache compares the receive check through a warm ICRCCache
// (the frame's QP seen before) with ICRC, alternating blocks of 64 calls
// (cache-ns, icrc-ns, cache/icrc), and a miss (a slot refilled every call)
// with ICRC; allocs/op must be 0.
func BenchmarkICRCCache(b *testing.B) {
	for _, size := range append([]int{0}, benchSizes...) {
		b.Run(sizeName(size), func(b *testing.B) {
			f := benchFrame()
			buf := make([]byte, f.Len(size))
			n, _ := Build(buf, &f, size)
			l3 := buf[EthernetLen : n-ICRCLen]
			var c ICRCCache
			b.ReportAllocs()
			alternate(b, "cache", func() uint32 { return c.ICRC(l3) }, "icrc", func() uint32 { return ICRC(l3) })
		})
		b.Run(sizeName(size)+"/miss", func(b *testing.B) {
			f := benchFrame()
			buf := make([]byte, f.Len(size))
			n, _ := Build(buf, &f, size)
			l3 := buf[EthernetLen : n-ICRCLen]
			var c ICRCCache
			alternate(b, "miss", func() uint32 {
				l3[IPv4Len+UDPLen+6]++ // another QP in the same slot: DestQP's middle byte
				return c.ICRC(l3)
			}, "icrc", func() uint32 { return ICRC(l3) })
		})
	}
}

// TestIPv4ChecksumFast: CalculateChecksum's path for a header without
// options gives the RFC 791 sum of 16-bit words for random headers (and the
// all-zero and all-ones ones), as the general loop does.
func TestIPv4ChecksumFast(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 3))
	ref := ipv4ChecksumLoop
	h := make([]byte, IPv4Len)
	for i := range 100000 {
		switch i {
		case 0:
			clear(h)
		case 1:
			for j := range h {
				h[j] = 0xFF
			}
		default:
			for j := range h {
				h[j] = byte(rng.Uint32())
			}
		}
		h[0] = 0x45
		if got, want := IPv4(h).CalculateChecksum(), ref(h); got != want {
			t.Fatalf("seed %d header % x: %#04x, want %#04x", seed, h, got, want)
		}
	}
}

// ipv4ChecksumLoop is the RFC 791 checksum of a 20-byte header, 16-bit word
// by word (CalculateChecksum's general loop).
func ipv4ChecksumLoop(h []byte) uint16 {
	var sum uint32
	for i := 0; i < IPv4Len; i += 2 {
		if i != ipv4Csum {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return ^uint16(sum)
}

// BenchmarkIPv4Checksum compares CalculateChecksum (a header without
// options: words summed at once) with the word-by-word loop, alternating
// blocks (fast-ns, loop-ns, fast/loop).
func BenchmarkIPv4Checksum(b *testing.B) {
	h := make([]byte, IPv4Len)
	for i := range h {
		h[i] = byte(i * 37)
	}
	h[0] = 0x45
	alternate(b, "fast", func() uint32 { return uint32(IPv4(h).CalculateChecksum()) },
		"loop", func() uint32 { return uint32(ipv4ChecksumLoop(h)) })
}
