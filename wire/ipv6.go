package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPv6 header (RFC 8200):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Source Address (16)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Destination Address (16)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// For the ICRC, traffic class, flow label and hop limit are replaced by
// all-ones (rxe_icrc.c sets priority to 0xF and the flow_lbl bytes and
// hop_limit to 0xFF). RoCEv2 carries UDP directly: Parse rejects extension
// headers. rxe writes flow label 0.

const (
	ipv6VerTCFL   = 0
	ipv6PayLen    = 4
	ipv6NextHdr   = 6
	ipv6HopLimit  = 7
	ipv6Src       = 8
	ipv6Dst       = 24
	flowLabelMask = 0xFFFFF
)

// IPv6 is a view of a fixed IPv6 header.
type IPv6 []byte

// IPv6Fields builds an IPv6 header.
type IPv6Fields struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// IsValid reports whether b holds a whole header with version 6.
func (b IPv6) IsValid() bool { return len(b) >= IPv6Len && b[0]>>4 == 6 }

// Version returns the IP version nibble.
func (b IPv6) Version() uint8 { return b[0] >> 4 }

// TrafficClass returns the traffic class (DSCP<<2 | ECN).
func (b IPv6) TrafficClass() uint8 {
	return uint8(binary.BigEndian.Uint16(b[ipv6VerTCFL:]) >> 4)
}

// ECN returns the ECN bits of the traffic class (3 = CE).
func (b IPv6) ECN() uint8 { return b.TrafficClass() & 3 }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(b[ipv6VerTCFL:]) & flowLabelMask
}

// PayloadLen returns the payload length (RoCE: UDP header through ICRC).
func (b IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(b[ipv6PayLen:]) }

// NextHeader returns the next-header field (17 = UDP).
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHdr] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Src:])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6Dst:])) }

// SetTrafficClass sets the traffic class.
func (b IPv6) SetTrafficClass(tc uint8) {
	w := binary.BigEndian.Uint32(b[ipv6VerTCFL:])
	w = w&^(0xFF<<20) | uint32(tc)<<20
	binary.BigEndian.PutUint32(b[ipv6VerTCFL:], w)
}

// SetFlowLabel sets the 20-bit flow label (higher bits are dropped).
func (b IPv6) SetFlowLabel(fl uint32) {
	w := binary.BigEndian.Uint32(b[ipv6VerTCFL:])
	w = w&^flowLabelMask | fl&flowLabelMask
	binary.BigEndian.PutUint32(b[ipv6VerTCFL:], w)
}

// SetPayloadLen sets the payload length.
func (b IPv6) SetPayloadLen(n uint16) { binary.BigEndian.PutUint16(b[ipv6PayLen:], n) }

// SetNextHeader sets the next-header field.
func (b IPv6) SetNextHeader(v uint8) { b[ipv6NextHdr] = v }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(v uint8) { b[ipv6HopLimit] = v }

// SetSrc sets the source address (an IPv4 address is written IPv4-mapped).
func (b IPv6) SetSrc(a netip.Addr) { a16 := a.As16(); copy(b[ipv6Src:], a16[:]) }

// SetDst sets the destination address (an IPv4 address is written IPv4-mapped).
func (b IPv6) SetDst(a netip.Addr) { a16 := a.As16(); copy(b[ipv6Dst:], a16[:]) }

// Encode writes the header into b.
func (b IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(b[ipv6VerTCFL:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&flowLabelMask)
	b.SetPayloadLen(f.PayloadLen)
	b[ipv6NextHdr] = f.NextHeader
	b[ipv6HopLimit] = f.HopLimit
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}
