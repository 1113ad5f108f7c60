package udp

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// The ICRC is a CRC-32: for two inputs of equal length, ICRC(a) XOR
// ICRC(b) is the pure (zero-initialised, not complemented) CRC of a XOR b.
// The canonical header and the frame's own differ only in the IP and UDP
// headers, and the bytes behind them are the same, so the correction the
// trailer needs is the pure CRC of the header difference advanced over the
// rest of the payload, as if over that many zero bytes: a multiplication by
// x^(8n) modulo the CRC polynomial. rebaseTrailer computes it from the
// headers alone (two CRCs of 40 or 60 bytes and one multiplication) instead
// of two CRCs over the whole payload.

// crcPoly is the IEEE CRC-32 polynomial in the reflected bit order
// hash/crc32 uses: bit 31 is the coefficient of x^0, bit 0 that of x^31.
const crcPoly = 0xEDB88320

// gfMul multiplies a and b modulo the CRC polynomial (reflected order).
func gfMul(a, b uint32) uint32 {
	var p uint32
	for bit := uint32(1) << 31; bit != 0 && a != 0; bit >>= 1 {
		if a&bit != 0 {
			p ^= b
			a &^= bit
		}
		// b *= x
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// mulX4 holds v·x^4 mod P for the 4-bit values v (coefficients of x^28 ..
// x^31): p·x^4 is then p>>4 ^ mulX4[p&15].
var mulX4 = func() (t [16]uint32) {
	for v := range t {
		b := uint32(v)
		for range 4 {
			if b&1 != 0 {
				b = b>>1 ^ crcPoly
			} else {
				b >>= 1
			}
		}
		t[v] = b
	}
	return t
}()

// gfMulFast is gfMul four bits of a at a time, without branches on the
// data (Horner's rule from x^31 down: p = p·x^4 + the nibble's multiple
// of b).
func gfMulFast(a, b uint32) uint32 {
	// bx[k] = b·x^k
	var bx [4]uint32
	bx[0] = b
	for k := 1; k < 4; k++ {
		c := bx[k-1]
		bx[k] = c>>1 ^ crcPoly&-(c&1)
	}
	// Bit 0 of a nibble is its highest power (x^3 relative), bit 3 its
	// lowest.
	var t [16]uint32
	for g := 1; g < 16; g++ {
		low := g & -g
		t[g] = t[g&^low] ^ bx[3-bitIndex[low]]
	}
	var p uint32
	for j := 0; j < 32; j += 4 {
		p = p>>4 ^ mulX4[p&15] ^ t[a>>j&15]
	}
	return p
}

// bitIndex[1<<i] = i for i < 4.
var bitIndex = [9]int{1: 0, 2: 1, 4: 2, 8: 3}

// xPow8 holds x^(8·2^k) mod P for k = 0..31.
var xPow8 = func() (t [32]uint32) {
	x8 := uint32(1) << 31 // x^0
	for range 8 {
		if x8&1 != 0 {
			x8 = x8>>1 ^ crcPoly
		} else {
			x8 >>= 1
		}
	}
	t[0] = x8
	for k := 1; k < len(t); k++ {
		t[k] = gfMul(t[k-1], t[k-1])
	}
	return t
}()

// zeroShift returns x^(8n) mod P: multiplying a raw CRC state by it
// advances the state over n zero bytes.
func zeroShift(n int) uint32 {
	p := uint32(1) << 31
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = gfMul(p, xPow8[k])
		}
	}
	return p
}

// shiftCache memoises zeroShift for the payload lengths a link sees; 0
// means not computed yet (x^(8n) mod P is never 0). One per link, used
// under txMu.
type shiftCache []uint32

func (c shiftCache) get(n int) uint32 {
	if n < 0 || n >= len(c) {
		return zeroShift(n)
	}
	if v := c[n]; v != 0 {
		return v
	}
	v := zeroShift(n)
	c[n] = v
	return v
}

// rebaseTrailer is rebase without the copy and the payload CRCs: the
// payload (BTH .. last pad byte, in f), the destination and the trailer
// for the canonical header. Frames whose IP header has options (its length
// differs from the canonical one) take rebase's way.
func (l *Link) rebaseTrailer(f []byte) (body []byte, dst netip.Addr, trailer uint32, ok bool) {
	if len(f) > l.mtu+18 {
		return nil, dst, 0, false
	}
	l3, dst, poff, err := l.parseFrame(f)
	if err != nil || len(l3) < poff+wire.BTHLen+wire.ICRCLen {
		return nil, dst, 0, false
	}
	hl := 28
	if l.v6 {
		hl = 48
	}
	if poff != hl {
		body, dst, trailer, _, ok = l.rebase(f)
		return body, dst, trailer, ok
	}
	body = l3[poff : len(l3)-wire.ICRCLen]
	frameICRC := binary.LittleEndian.Uint32(l3[len(l3)-wire.ICRCLen:])
	h := hl + wire.BTHLen
	c := l.scratch[:h]
	if l.v6 {
		putCanonical6(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	} else {
		putCanonical4(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	}
	copy(c[hl:], l3[hl:h])
	delta := wire.ICRC(c) ^ wire.ICRC(l3[:h])
	if delta != 0 {
		delta = gfMulFast(delta, l.shifts.get(len(body)-wire.BTHLen))
	}
	return body, dst, frameICRC ^ delta, true
}
