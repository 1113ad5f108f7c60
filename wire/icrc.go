package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The RoCEv2 invariant CRC (IBTA Annex A17.3.3; rxe_icrc.c; PROTOCOL §2) is
// the standard IEEE CRC-32 (zlib, not Castagnoli) over
//
//	8 bytes of 0xFF (stand-in for the IB LRH)
//	IP header, with IPv4 TOS, TTL and header checksum, or IPv6 traffic
//	   class, flow label and hop limit, replaced by all-ones
//	UDP header, with the checksum replaced by 0xFFFF
//	BTH, with byte 4 (FECN, BECN, resv6) replaced by 0xFF
//	extension headers, payload and pad bytes
//
// and goes on the wire least-significant byte first. Everything else,
// including the IPv4 Identification, is covered.
//
// Implementation: the masked header is never copied (hash/crc32 would make a
// stack copy escape, one allocation per packet). The 8-byte prefix is a
// precomputed start state; the IP, UDP and BTH headers (40 bytes for IPv4,
// 60 for IPv6) are read as little-endian 64-bit words, the masks OR-ed in,
// and fed through a slicing-by-8 table built from crc32.IEEETable; the rest
// (extension headers, payload, pad), the bulk of the work, goes through
// crc32.Update in one call and so gets the architecture's SIMD path. IPv4
// with options (never sent by RoCE senders; rxe itself assumes a 20-byte
// header) takes a slower path that chains crc32.Update over sub-slices.

// crcPrefix is crc32.ChecksumIEEE of 8 bytes of 0xFF: the state after the
// LRH stand-in (its complement is rxe's start value 0xDEBB20E3).
const crcPrefix = ^uint32(0xDEBB20E3)

var ieee = crc32.IEEETable

// crcByte feeds one byte to a (finalised-form) CRC value, like crc32.Update
// with a 1-byte slice.
func crcByte(crc uint32, v byte) uint32 {
	c := ^crc
	c = ieee[byte(c)^v] ^ c>>8
	return ^c
}

// crcFF feeds n bytes of 0xFF.
func crcFF(crc uint32, n int) uint32 {
	c := ^crc
	for range n {
		c = ieee[byte(c)^0xFF] ^ c>>8
	}
	return ^c
}

// icrcHeaderLen returns the offset of the BTH in l3 (IP header + UDP) and
// whether l3 holds the IP, UDP and BTH headers.
func icrcHeaderLen(l3 []byte) (int, bool) {
	if len(l3) == 0 {
		return 0, false
	}
	var ipLen int
	switch l3[0] >> 4 {
	case 4:
		ipLen = int(l3[0]&0x0F) * 4
		if ipLen < IPv4Len {
			return 0, false
		}
	case 6:
		ipLen = IPv6Len
	default:
		return 0, false
	}
	bth := ipLen + UDPLen
	return bth, len(l3) >= bth+BTHLen
}

// ICRC computes the invariant CRC of l3: the bytes from the start of the IP
// header through the last pad byte (without the 4-byte trailer). It returns
// 0 if l3 is not an IPv4/IPv6 packet holding at least the UDP header and the
// BTH. It does not allocate and is safe for concurrent use.
func ICRC(l3 []byte) uint32 {
	bth, ok := icrcHeaderLen(l3)
	if !ok {
		return 0
	}
	v6 := l3[0]>>4 == 6
	switch {
	case !v6 && bth == IPv4Len+UDPLen:
		// IPv4 without options: IP+UDP+BTH are 40 bytes, five masked words.
		b := (*[40]byte)(l3) // one bounds check
		le := binary.LittleEndian
		c := slicing8(^uint32(crcPrefix), le.Uint64(b[0:])|icrcMask4[0])
		c = slicing8(c, le.Uint64(b[8:])|icrcMask4[1])
		c = slicing8(c, le.Uint64(b[16:])|icrcMask4[2])
		c = slicing8(c, le.Uint64(b[24:])|icrcMask4[3])
		c = slicing8(c, le.Uint64(b[32:])|icrcMask4[4])
		return crc32.Update(^c, ieee, l3[40:])
	case v6:
		// IPv6: the first 56 of the 60 header bytes as seven masked words.
		c := ^uint32(crcPrefix)
		for i, m := range icrcMask6 {
			c = slicing8(c, binary.LittleEndian.Uint64(l3[8*i:])|m)
		}
		return crc32.Update(^c, ieee, l3[len(icrcMask6)*8:])
	}
	return icrcSlow(l3, bth)
}

// Masks OR-ed into the little-endian 64-bit words of the headers: byte i of
// a word is bits 8i..8i+7.
var (
	icrcMask4 = [5]uint64{
		0xFF00,     // TOS (byte 1)
		0xFFFF00FF, // TTL (8), header checksum (10, 11)
		0,          // addresses, UDP ports
		0xFFFF0000, // UDP checksum (26, 27)
		0xFF,       // BTH byte 4 (32)
	}
	icrcMask6 = [7]uint64{
		0xFF000000FFFFFF0F, // traffic class, flow label (low nibble of 0, 1-3), hop limit (7)
		0, 0, 0, 0,         // addresses
		0xFFFF000000000000, // UDP checksum (46, 47)
		0xFF00000000,       // BTH byte 4 (52)
	}
)

// slicing8 is one slicing-by-8 step over the word v, on the raw
// (non-complemented) CRC state c.
func slicing8(c uint32, v uint64) uint32 {
	lo := uint32(v) ^ c
	hi := uint32(v >> 32)
	t := &ieee8
	return t[0][hi>>24] ^ t[1][hi>>16&0xFF] ^ t[2][hi>>8&0xFF] ^ t[3][hi&0xFF] ^
		t[4][lo>>24] ^ t[5][lo>>16&0xFF] ^ t[6][lo>>8&0xFF] ^ t[7][lo&0xFF]
}

// ieee8 holds the slicing-by-8 tables of the IEEE polynomial, derived from
// crc32.IEEETable at init: ieee8[k][b] is the CRC contribution of byte b
// followed by k zero bytes.
var ieee8 [8][256]uint32

func init() {
	ieee8[0] = *ieee
	for i := range 256 {
		c := ieee[i]
		for k := 1; k < 8; k++ {
			c = ieee[c&0xFF] ^ c>>8
			ieee8[k][i] = c
		}
	}
}

// icrcSlow handles IPv4 with options: the CRC is chained over sub-slices
// and masked bytes are fed one at a time.
func icrcSlow(l3 []byte, bth int) uint32 {
	crc := uint32(crcPrefix)
	udp := bth - UDPLen
	crc = crcByte(crc, l3[0])                    // version/IHL
	crc = crcFF(crc, 1)                          // TOS
	crc = crc32.Update(crc, ieee, l3[2:8])       // total length, ID, flags
	crc = crcFF(crc, 1)                          // TTL
	crc = crcByte(crc, l3[ipv4Proto])            // protocol
	crc = crcFF(crc, 2)                          // header checksum
	crc = crc32.Update(crc, ieee, l3[12:udp+6])  // addresses, options, UDP ports and length
	crc = crcFF(crc, 2)                          // UDP checksum
	crc = crc32.Update(crc, ieee, l3[bth:bth+4]) // opcode, flags, P_Key
	crc = crcFF(crc, 1)                          // FECN, BECN, resv6
	return crc32.Update(crc, ieee, l3[bth+5:])   // DestQP .. last pad byte
}

// VerifyICRC reports whether the last 4 bytes of l3WithTrailer (IP header
// through ICRC) are the ICRC of the bytes before them.
func VerifyICRC(l3WithTrailer []byte) bool {
	n := len(l3WithTrailer) - ICRCLen
	if n <= 0 {
		return false
	}
	if _, ok := icrcHeaderLen(l3WithTrailer[:n]); !ok {
		return false
	}
	return ICRC(l3WithTrailer[:n]) == binary.LittleEndian.Uint32(l3WithTrailer[n:])
}

// PutICRC stores crc in the 4-byte trailer, least-significant byte first.
func PutICRC(trailer []byte, crc uint32) { binary.LittleEndian.PutUint32(trailer, crc) }
