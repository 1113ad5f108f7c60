package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// ICRCHeader is the precomputed ICRC work of one IPv4 packet header shape:
// the CRC state after the LRH stand-in and the 40 bytes of IPv4, UDP and
// BTH header with every field that stays the same between the packets of
// one QP (version and IHL, flags and fragment offset, protocol, addresses,
// UDP ports, P_Key, destination QP, and the masked bytes). What varies
// from packet to packet (IPv4 total length and identification, UDP length,
// opcode, the SE/M/pad/version byte, the AckReq byte and the PSN) is added
// by Sum from one table per byte position, 12 lookups, instead of the 40
// bytes ICRC feeds; the rest of the packet (extension headers, payload,
// pad) goes through crc32.Update as in ICRC.
//
// A sender (transport) makes one per QP and path from its first packet,
// NewICRCHeader(l3), and calls Sum for every packet after that; Sum
// equals ICRC for every packet whose invariant fields are those of the
// template. Matches reports whether a packet's are. The zero value is not
// usable; an ICRCHeader is a value, safe to copy and to use concurrently.
type ICRCHeader struct {
	k  uint32   // raw CRC register after the prefix and the invariant bytes
	iv [40]byte // the template's header, varying bytes zeroed, masks applied
}

// icrcVarying are the offsets, in the 40-byte IPv4+UDP+BTH header, of the
// bytes that vary between one QP's packets.
var icrcVarying = [...]int{
	2, 3, // IPv4 total length
	4, 5, // IPv4 identification
	IPv4Len + 4, IPv4Len + 5, // UDP length
	IPv4Len + UDPLen + 0,                                               // opcode
	IPv4Len + UDPLen + 1,                                               // SE, M, pad count, transport version
	IPv4Len + UDPLen + 8,                                               // AckReq, reserved
	IPv4Len + UDPLen + 9, IPv4Len + UDPLen + 10, IPv4Len + UDPLen + 11, // PSN
}

// icrcVarTab[j][b] is the raw CRC register contribution of byte b at
// offset icrcVarying[j] of the 40-byte header (all other bytes zero, zero
// start): the CRC is linear, so a header's register is the invariant
// bytes' register XOR these.
var icrcVarTab [len(icrcVarying)][256]uint32

const icrcHdr4 = IPv4Len + UDPLen + BTHLen // 40

func init() {
	var h [icrcHdr4]byte
	for j, off := range icrcVarying {
		for b := range 256 {
			h[off] = byte(b)
			icrcVarTab[j][b] = icrcHeaderRegister(0, &h)
		}
		h[off] = 0
	}
}

// icrcHeaderRegister feeds the 40 bytes of h (masks not applied) to the raw
// register c, as ICRC's slicing-by-8 loop does.
func icrcHeaderRegister(c uint32, h *[icrcHdr4]byte) uint32 {
	for i := range len(icrcMask4) {
		c = slicing8(c, binary.LittleEndian.Uint64(h[8*i:]))
	}
	return c
}

// NewICRCHeader precomputes the invariant part of the ICRC of packets
// shaped like l3 (the bytes from the IPv4 header on: an IPv4 header
// without options, UDP and the BTH). It returns false for anything else
// (IPv6, IPv4 options, short), for which ICRC is the way.
func NewICRCHeader(l3 []byte) (ICRCHeader, bool) {
	bth, ok := icrcHeaderLen(l3)
	if !ok || l3[0]>>4 != 4 || bth != IPv4Len+UDPLen {
		return ICRCHeader{}, false
	}
	var h ICRCHeader
	copy(h.iv[:], l3[:icrcHdr4])
	for i, m := range icrcMask4 {
		binary.LittleEndian.PutUint64(h.iv[8*i:], binary.LittleEndian.Uint64(h.iv[8*i:])|m)
	}
	for _, off := range icrcVarying {
		h.iv[off] = 0
	}
	h.k = icrcHeaderRegister(^uint32(crcPrefix), &h.iv)
	return h, true
}

// Sum returns the ICRC of l3 (IPv4 header through the last pad byte,
// without the trailer), which must have the template's invariant fields
// (see Matches) and at least the 40 header bytes; it does not allocate.
func (h *ICRCHeader) Sum(l3 []byte) uint32 {
	b := (*[icrcHdr4]byte)(l3) // one bounds check; the offsets are icrcVarying's
	t := &icrcVarTab
	c := h.k ^ t[0][b[2]] ^ t[1][b[3]] ^ t[2][b[4]] ^ t[3][b[5]] ^
		t[4][b[IPv4Len+4]] ^ t[5][b[IPv4Len+5]] ^
		t[6][b[IPv4Len+UDPLen]] ^ t[7][b[IPv4Len+UDPLen+1]] ^ t[8][b[IPv4Len+UDPLen+8]] ^
		t[9][b[IPv4Len+UDPLen+9]] ^ t[10][b[IPv4Len+UDPLen+10]] ^ t[11][b[IPv4Len+UDPLen+11]]
	return crc32.Update(^c, ieee, l3[icrcHdr4:])
}

// Matches reports whether l3's invariant header fields are the template's,
// so that Sum(l3) == ICRC(l3).
func (h *ICRCHeader) Matches(l3 []byte) bool {
	if len(l3) < icrcHdr4 || h.k == 0 && h.iv == [icrcHdr4]byte{} {
		return false
	}
	b := (*[icrcHdr4]byte)(l3) // one bounds check
	le := binary.LittleEndian
	d := (le.Uint64(b[0:])|icrcMask4[0])&^icrcVarMask[0] ^ le.Uint64(h.iv[0:])
	d |= (le.Uint64(b[8:])|icrcMask4[1])&^icrcVarMask[1] ^ le.Uint64(h.iv[8:])
	d |= (le.Uint64(b[16:])|icrcMask4[2])&^icrcVarMask[2] ^ le.Uint64(h.iv[16:])
	d |= (le.Uint64(b[24:])|icrcMask4[3])&^icrcVarMask[3] ^ le.Uint64(h.iv[24:])
	d |= (le.Uint64(b[32:])|icrcMask4[4])&^icrcVarMask[4] ^ le.Uint64(h.iv[32:])
	return d == 0
}

// icrcVarMask has the varying bytes' bits set, per little-endian word.
var icrcVarMask = func() (m [len(icrcMask4)]uint64) {
	for _, off := range icrcVarying {
		m[off/8] |= 0xFF << (8 * (off % 8))
	}
	return m
}()
