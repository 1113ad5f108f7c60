package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPv4 header (RFC 791):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |  TOS (masked) |         Total Length          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  TTL (masked) |    Protocol   |   Header Checksum (masked)    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options (IHL > 5, skipped)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// "masked" fields are replaced by all-ones for the ICRC (rxe_icrc.c). The
// Identification field is NOT masked: it is covered by the ICRC, so a sender
// must know the exact ID that goes on the wire (PROTOCOL §2).

const (
	ipv4VerIHL   = 0
	ipv4TOS      = 1
	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4Flags    = 6
	ipv4TTL      = 8
	ipv4Proto    = 9
	ipv4Csum     = 10
	ipv4Src      = 12
	ipv4Dst      = 16
)

// IPv4 flag bits in the 16-bit flags/fragment-offset word.
const (
	IPv4FlagDF      = 0x4000
	IPv4FlagMF      = 0x2000
	ipv4FragOffMask = 0x1FFF
	ProtocolUDP     = 17
)

// IPv4 is a view of an IPv4 header (options included when IHL > 5).
type IPv4 []byte

// IPv4Fields builds a 20-byte IPv4 header (no options). Checksum is written
// as given; call SetChecksum(CalculateChecksum()) afterwards, or use Build.
type IPv4Fields struct {
	TOS      uint8
	TotalLen uint16
	ID       uint16
	Flags    uint16 // the whole flags/fragment-offset word, e.g. IPv4FlagDF
	TTL      uint8
	Protocol uint8
	Checksum uint16
	Src, Dst netip.Addr // must be IPv4 (or IPv4-mapped IPv6)
}

// IsValid reports whether b holds a whole IPv4 header: version 4, IHL ≥ 5
// and at least IHL*4 bytes. It does not look at the total length.
func (b IPv4) IsValid() bool {
	if len(b) < IPv4Len || b[0]>>4 != 4 {
		return false
	}
	hl := b.HeaderLen()
	return hl >= IPv4Len && len(b) >= hl
}

// Version returns the IP version nibble.
func (b IPv4) Version() uint8 { return b[ipv4VerIHL] >> 4 }

// HeaderLen returns IHL*4 in bytes.
func (b IPv4) HeaderLen() int { return int(b[ipv4VerIHL]&0x0F) * 4 }

// TOS returns the type-of-service byte (DSCP<<2 | ECN).
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// ECN returns the ECN bits of the TOS byte (3 = CE).
func (b IPv4) ECN() uint8 { return b[ipv4TOS] & 3 }

// TotalLen returns the total length (header + payload, RoCE: through the ICRC).
func (b IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the flags/fragment-offset word.
func (b IPv4) Flags() uint16 { return binary.BigEndian.Uint16(b[ipv4Flags:]) }

// DF reports whether the don't-fragment bit is set.
func (b IPv4) DF() bool { return b.Flags()&IPv4FlagDF != 0 }

// IsFragment reports whether MF is set or the fragment offset is non-zero.
func (b IPv4) IsFragment() bool { return b.Flags()&(IPv4FlagMF|ipv4FragOffMask) != 0 }

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the payload protocol (17 = UDP).
func (b IPv4) Protocol() uint8 { return b[ipv4Proto] }

// Checksum returns the header checksum as on the wire.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4Csum:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Src:])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4Dst:])) }

// SetTOS sets the TOS byte (the ICRC does not cover it).
func (b IPv4) SetTOS(v uint8) { b[ipv4TOS] = v }

// SetTotalLen sets the total length.
func (b IPv4) SetTotalLen(v uint16) { binary.BigEndian.PutUint16(b[ipv4TotalLen:], v) }

// SetID sets the identification field (covered by the ICRC).
func (b IPv4) SetID(v uint16) { binary.BigEndian.PutUint16(b[ipv4ID:], v) }

// SetFlags sets the flags/fragment-offset word.
func (b IPv4) SetFlags(v uint16) { binary.BigEndian.PutUint16(b[ipv4Flags:], v) }

// SetTTL sets the TTL (the ICRC does not cover it).
func (b IPv4) SetTTL(v uint8) { b[ipv4TTL] = v }

// SetProtocol sets the protocol.
func (b IPv4) SetProtocol(v uint8) { b[ipv4Proto] = v }

// SetChecksum sets the header checksum.
func (b IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[ipv4Csum:], v) }

// SetSrc sets the source address (IPv4 or IPv4-mapped).
func (b IPv4) SetSrc(a netip.Addr) { a4 := a.Unmap().As4(); copy(b[ipv4Src:], a4[:]) }

// SetDst sets the destination address (IPv4 or IPv4-mapped).
func (b IPv4) SetDst(a netip.Addr) { a4 := a.Unmap().As4(); copy(b[ipv4Dst:], a4[:]) }

// CalculateChecksum returns the RFC 791 header checksum of the header as it
// is now, treating the checksum field as zero.
func (b IPv4) CalculateChecksum() uint16 {
	hl := b.HeaderLen()
	if hl == IPv4Len && len(b) >= IPv4Len {
		// No options (every RoCE packet): four big-endian words and the
		// TTL/protocol half-word, summed at once; folding the 64-bit sum
		// is the 16-bit ones' complement sum (2^16 = 1 mod 2^16-1), and
		// zero only when every word is.
		h := (*[IPv4Len]byte)(b)
		be := binary.BigEndian
		s := uint64(be.Uint32(h[0:])) + uint64(be.Uint32(h[4:])) + uint64(be.Uint16(h[ipv4TTL:]))<<16 +
			uint64(be.Uint32(h[ipv4Src:])) + uint64(be.Uint32(h[ipv4Dst:]))
		for s > 0xFFFF {
			s = s>>16 + s&0xFFFF
		}
		return ^uint16(s)
	}
	var sum uint32
	for i := 0; i+1 < hl; i += 2 {
		if i == ipv4Csum {
			continue
		}
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return ^uint16(sum)
}

// ChecksumValid reports whether the header checksum is correct. Parse does
// not check it: the ICRC covers every IPv4 field except TOS, TTL and the
// checksum itself.
func (b IPv4) ChecksumValid() bool { return b.CalculateChecksum() == b.Checksum() }

// Encode writes a 20-byte header (version 4, IHL 5) into b.
func (b IPv4) Encode(f *IPv4Fields) {
	b[ipv4VerIHL] = 0x45
	b[ipv4TOS] = f.TOS
	b.SetTotalLen(f.TotalLen)
	b.SetID(f.ID)
	b.SetFlags(f.Flags)
	b[ipv4TTL] = f.TTL
	b[ipv4Proto] = f.Protocol
	b.SetChecksum(f.Checksum)
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}
