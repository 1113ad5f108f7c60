package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// ICRCCache is the receive side's ICRCHeader: a reader of frames (one
// device's receive loop) keeps one and parses with its Parse, which checks
// each IPv4 frame's ICRC with the precomputed header of the last frame seen
// for the same destination QP (slot: the QPN's low bits) when the frame's
// invariant header fields match it (ICRCHeader.Matches, five masked word
// compares, then Sum's 12 table lookups), instead of feeding the 40 masked
// header bytes through slicing-by-8 as ICRC does. A frame that does not
// match is checked with ICRC's header steps, and its slot is refilled from
// the register those steps leave (the CRC is linear: the invariant bytes'
// register is the header's XOR the varying bytes' contributions, 12 more
// lookups), so a miss costs ICRC plus a few nanoseconds and never a second
// pass over the header. The result is always ICRC's: a corrupted frame
// fails the check as with Parse.
//
// The zero value is ready to use. An ICRCCache is not safe for concurrent
// use; it is about 1.4 KiB, so keep it with the reader's buffers.
type ICRCCache struct {
	slot [icrcCacheSlots]ICRCHeader
}

const icrcCacheSlots = 32

// Parse is wire.Parse with the ICRC checked through c (see ICRCCache).
func (c *ICRCCache) Parse(frame []byte, p *Packet) error {
	return parseFrame(frame, p, c)
}

// ICRC returns ICRC(l3), through c's precomputed headers when l3 matches
// one (see ICRCCache). It does not allocate.
func (c *ICRCCache) ICRC(l3 []byte) uint32 {
	if len(l3) < icrcHdr4 || l3[0] != 0x45 {
		// IPv6, IPv4 with options, short: the general path (which
		// refuses what it must).
		return ICRC(l3)
	}
	b := (*[icrcHdr4]byte)(l3) // one bounds check
	h := &c.slot[b[IPv4Len+UDPLen+7]%icrcCacheSlots]
	le := binary.LittleEndian
	// Matches without its zero-value test: a zero slot never matches, as
	// the masks put 0xFF bytes into every masked header.
	d := (le.Uint64(b[0:])|icrcMask4[0])&^icrcVarMask[0] ^ le.Uint64(h.iv[0:])
	d |= (le.Uint64(b[8:])|icrcMask4[1])&^icrcVarMask[1] ^ le.Uint64(h.iv[8:])
	d |= (le.Uint64(b[16:])|icrcMask4[2])&^icrcVarMask[2] ^ le.Uint64(h.iv[16:])
	d |= (le.Uint64(b[24:])|icrcMask4[3])&^icrcVarMask[3] ^ le.Uint64(h.iv[24:])
	d |= (le.Uint64(b[32:])|icrcMask4[4])&^icrcVarMask[4] ^ le.Uint64(h.iv[32:])
	if d == 0 {
		return h.Sum(l3)
	}
	r := slicing8(^uint32(crcPrefix), le.Uint64(b[0:])|icrcMask4[0])
	r = slicing8(r, le.Uint64(b[8:])|icrcMask4[1])
	r = slicing8(r, le.Uint64(b[16:])|icrcMask4[2])
	r = slicing8(r, le.Uint64(b[24:])|icrcMask4[3])
	r = slicing8(r, le.Uint64(b[32:])|icrcMask4[4])
	h.refill(b, r)
	return crc32.Update(^r, ieee, l3[icrcHdr4:])
}

// refill makes h the ICRCHeader of the frame whose 40 header bytes are b and
// whose header register (after the prefix and the masked header) is r: what
// NewICRCHeader(b) computes, without feeding the header again.
func (h *ICRCHeader) refill(b *[icrcHdr4]byte, r uint32) {
	t := &icrcVarTab
	h.k = r ^ t[0][b[2]] ^ t[1][b[3]] ^ t[2][b[4]] ^ t[3][b[5]] ^
		t[4][b[IPv4Len+4]] ^ t[5][b[IPv4Len+5]] ^
		t[6][b[IPv4Len+UDPLen]] ^ t[7][b[IPv4Len+UDPLen+1]] ^ t[8][b[IPv4Len+UDPLen+8]] ^
		t[9][b[IPv4Len+UDPLen+9]] ^ t[10][b[IPv4Len+UDPLen+10]] ^ t[11][b[IPv4Len+UDPLen+11]]
	le := binary.LittleEndian
	for i, m := range icrcMask4 {
		le.PutUint64(h.iv[8*i:], (le.Uint64(b[8*i:])|m)&^icrcVarMask[i])
	}
}
