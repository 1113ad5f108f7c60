package wire

import "encoding/binary"

// DETH, the Datagram Extended Transport Header (IBTA 9.3.2, 8 bytes), carried
// by UD SEND ONLY(/WITH_IMMEDIATE):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Q_Key                                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                  SrcQP (24)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// QP1 (GSI, the CM) expects Q_Key 0x80010000 (rxe_recv.c).

// GSIQKey is the well-known Q_Key of QP1.
const GSIQKey = 0x80010000

// DETH is a view of a Datagram Extended Transport Header.
type DETH []byte

// IsValid reports whether b holds a whole DETH.
func (b DETH) IsValid() bool { return len(b) >= DETHLen }

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SrcQP returns the 24-bit source QP number.
func (b DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(b[4:]) & qpnMask }

// SetQKey sets the queue key.
func (b DETH) SetQKey(v uint32) { binary.BigEndian.PutUint32(b[0:], v) }

// SetSrcQP sets the source QP (only the low 24 bits are used).
func (b DETH) SetSrcQP(qpn uint32) { b[5], b[6], b[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn) }

// Encode writes the header; the reserved byte is written as 0.
func (b DETH) Encode(f *DETHFields) {
	_ = b[DETHLen-1]
	b.SetQKey(f.QKey)
	binary.BigEndian.PutUint32(b[4:], f.SrcQP&qpnMask)
}

// Fields returns the header's fields.
func (b DETH) Fields() DETHFields { return DETHFields{QKey: b.QKey(), SrcQP: b.SrcQP()} }
