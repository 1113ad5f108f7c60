package wire

import "encoding/binary"

// BTH, the InfiniBand Base Transport Header (IBTA 9.2, 12 bytes):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  resv6    |                  DestQP (24)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   resv7     |                   PSN (24)                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S = solicited event, M = MigReq (rxe sends 0, receivers ignore it),
// Pad = PadCnt (pad bytes between payload and ICRC), TVer must be 0 (rxe
// drops other values), F/B = FECN/BECN (byte 4 is masked by the ICRC, so
// switches may set them), A = AckReq. Masks as in rxe_hdr.h.

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthQPN    = 4
	bthPSN    = 8

	bthSE     = 0x80
	bthMig    = 0x40
	bthPad    = 0x30
	bthTVer   = 0x0F
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
	qpnMask   = 0xFFFFFF
)

// BTH is a view of a Base Transport Header.
type BTH []byte

// IsValid reports whether b holds a whole BTH. It does not check TVer.
func (b BTH) IsValid() bool { return len(b) >= BTHLen }

// Opcode returns the OpCode byte.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE reports the solicited-event bit.
func (b BTH) SE() bool { return b[bthFlags]&bthSE != 0 }

// MigReq reports the M bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMig != 0 }

// PadCnt returns the number of pad bytes (0..3) before the ICRC.
func (b BTH) PadCnt() uint8 { return (b[bthFlags] & bthPad) >> 4 }

// TVer returns the transport header version (must be 0).
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVer }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN reports the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthQPN]&bthFECN != 0 }

// BECN reports the backward explicit congestion notification bit (set in CNPs).
func (b BTH) BECN() bool { return b[bthQPN]&bthBECN != 0 }

// Resv6 returns the 6 reserved bits of byte 4.
func (b BTH) Resv6() uint8 { return b[bthQPN] & 0x3F }

// DestQP returns the 24-bit destination QP number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthQPN:]) & qpnMask }

// AckReq reports the acknowledge-request bit.
func (b BTH) AckReq() bool { return b[bthPSN]&bthAckReq != 0 }

// Resv7 returns the 7 reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[bthPSN] & 0x7F }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[bthPSN:]) & PSNMask) }

func setBit(p *byte, mask byte, v bool) {
	if v {
		*p |= mask
	} else {
		*p &^= mask
	}
}

// SetOpcode sets the OpCode byte.
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = byte(o) }

// SetSE sets the solicited-event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], bthSE, v) }

// SetMigReq sets the M bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMig, v) }

// SetPadCnt sets PadCnt (only the low 2 bits of n are used).
func (b BTH) SetPadCnt(n uint8) { b[bthFlags] = b[bthFlags]&^bthPad | (n&3)<<4 }

// SetTVer sets TVer (only the low 4 bits are used).
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^bthTVer | v&bthTVer }

// SetPKey sets the partition key.
func (b BTH) SetPKey(v uint16) { binary.BigEndian.PutUint16(b[bthPKey:], v) }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthQPN], bthFECN, v) }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthQPN], bthBECN, v) }

// SetDestQP sets the destination QP (only the low 24 bits are used).
func (b BTH) SetDestQP(qpn uint32) {
	b[bthQPN+1], b[bthQPN+2], b[bthQPN+3] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
}

// SetAckReq sets the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthPSN], bthAckReq, v) }

// SetPSN sets the PSN (only the low 24 bits are used).
func (b BTH) SetPSN(p PSN) {
	b[bthPSN+1], b[bthPSN+2], b[bthPSN+3] = byte(p>>16), byte(p>>8), byte(p)
}

// Encode writes the BTH; reserved bits are written as 0, DestQP and PSN are
// truncated to 24 bits, PadCnt to 2 bits and TVer to 4 bits.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(f.Opcode)
	var fl byte
	if f.SE {
		fl |= bthSE
	}
	if f.M {
		fl |= bthMig
	}
	fl |= (f.PadCnt & 3) << 4
	fl |= f.TVer & bthTVer
	b[bthFlags] = fl
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	w := f.DestQP & qpnMask
	if f.FECN {
		w |= uint32(bthFECN) << 24
	}
	if f.BECN {
		w |= uint32(bthBECN) << 24
	}
	binary.BigEndian.PutUint32(b[bthQPN:], w)
	w = uint32(f.PSN) & PSNMask
	if f.AckReq {
		w |= uint32(bthAckReq) << 24
	}
	binary.BigEndian.PutUint32(b[bthPSN:], w)
}

// Fields returns the header's fields (the inverse of Encode, reserved bits aside).
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: b.Opcode(), SE: b.SE(), M: b.MigReq(), PadCnt: b.PadCnt(), TVer: b.TVer(),
		PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(),
		AckReq: b.AckReq(), PSN: b.PSN(),
	}
}
