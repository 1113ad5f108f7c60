package wire

import "encoding/binary"

// Ethernet II header (IEEE 802.3), optionally followed by one 802.1Q tag:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Destination MAC (6 bytes)                    |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                    Source MAC (6 bytes)                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   EtherType (0x8100 = VLAN)   |  [TCI: PCP(3) DEI(1) VID(12)] |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| [inner EtherType, when tagged]|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RoCEv2 uses EtherType 0x0800 (IPv4) or 0x86DD (IPv6). The Ethernet header,
// the VLAN tag, any L2 padding and the FCS are not covered by the ICRC.

// EtherTypes used by RoCEv2.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100 // IEEE 802.1Q tag protocol identifier
)

const (
	ethDst   = 0
	ethSrc   = 6
	ethType  = 12
	ethTCI   = 14 // when tagged
	ethType2 = 16
)

// Ethernet is a view of an Ethernet header: 14 bytes, or 18 with one 802.1Q tag.
type Ethernet []byte

// EthernetFields builds an Ethernet header. When HasVLAN, the 802.1Q tag with
// VLAN (the whole TCI) is written and Type becomes the inner EtherType.
type EthernetFields struct {
	Dst, Src [6]byte
	HasVLAN  bool
	VLAN     uint16
	Type     uint16
}

// IsValid reports whether b holds a whole header (with the tag, when the
// outer EtherType says there is one).
func (b Ethernet) IsValid() bool {
	if len(b) < EthernetLen {
		return false
	}
	return b.EtherType() != EtherTypeVLAN || len(b) >= EthernetLen+VLANTagLen
}

// Len is 14, or 18 when the header carries an 802.1Q tag. b must be valid.
func (b Ethernet) Len() int {
	if b.EtherType() == EtherTypeVLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// Dst returns the destination MAC address.
func (b Ethernet) Dst() [6]byte { return [6]byte(b[ethDst:]) }

// Src returns the source MAC address.
func (b Ethernet) Src() [6]byte { return [6]byte(b[ethSrc:]) }

// EtherType returns the outer EtherType (0x8100 for a tagged frame).
func (b Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(b[ethType:]) }

// VLAN returns the TCI of the 802.1Q tag, if there is one.
func (b Ethernet) VLAN() (tci uint16, ok bool) {
	if b.EtherType() != EtherTypeVLAN || len(b) < EthernetLen+VLANTagLen {
		return 0, false
	}
	return binary.BigEndian.Uint16(b[ethTCI:]), true
}

// InnerType returns the EtherType of the payload: the one after the tag for a
// tagged frame, else EtherType.
func (b Ethernet) InnerType() uint16 {
	if b.EtherType() == EtherTypeVLAN && len(b) >= EthernetLen+VLANTagLen {
		return binary.BigEndian.Uint16(b[ethType2:])
	}
	return b.EtherType()
}

// SetDst sets the destination MAC address.
func (b Ethernet) SetDst(a [6]byte) { copy(b[ethDst:], a[:]) }

// SetSrc sets the source MAC address.
func (b Ethernet) SetSrc(a [6]byte) { copy(b[ethSrc:], a[:]) }

// SetEtherType sets the outer EtherType.
func (b Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(b[ethType:], t) }

// Encode writes the header (14 bytes, 18 with a tag) into b.
func (b Ethernet) Encode(f *EthernetFields) {
	b.SetDst(f.Dst)
	b.SetSrc(f.Src)
	if f.HasVLAN {
		binary.BigEndian.PutUint16(b[ethType:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[ethTCI:], f.VLAN)
		binary.BigEndian.PutUint16(b[ethType2:], f.Type)
		return
	}
	binary.BigEndian.PutUint16(b[ethType:], f.Type)
}
