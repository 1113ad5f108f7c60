package wire

import "encoding/binary"

// ImmDt, Immediate Data (IBTA 9.3.1.3, 4 bytes), carried by SEND/RDMA WRITE
// LAST/ONLY WITH_IMMEDIATE. The 32 bits are opaque: verbs passes imm_data
// already in network order and the receiver gets the same bytes back.
// Imm returns them read big-endian.
//
// IETH, the Invalidate Extended Transport Header (IBTA 9.3.8, 4 bytes),
// carried by SEND LAST/ONLY WITH_INVALIDATE:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Immediate Data / R_Key to invalidate                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// ImmDt is a view of an Immediate Data header.
type ImmDt []byte

// IsValid reports whether b holds a whole ImmDt.
func (b ImmDt) IsValid() bool { return len(b) >= ImmDtLen }

// Imm returns the immediate data, read big-endian.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b) }

// SetImm sets the immediate data, written big-endian.
func (b ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(b, v) }

// IETH is a view of an Invalidate Extended Transport Header.
type IETH []byte

// IsValid reports whether b holds a whole IETH.
func (b IETH) IsValid() bool { return len(b) >= IETHLen }

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// SetRKey sets the R_Key to invalidate.
func (b IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b, v) }
