package wire

// AETH, the ACK Extended Transport Header (IBTA 9.3.5, 4 bytes):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Syndrome    |                    MSN (24)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Syndrome: bit 7 reserved (0), bits 6:5 kind (00 ACK, 01 RNR NAK,
// 10 reserved, 11 NAK), bits 4:0 credit code / RNR timer code / NAK code;
// see Syndrome. MSN counts completed messages at the responder (rxe bumps it
// at the end of a SEND/WRITE, when a READ is accepted, and when an atomic
// executes; C9-148). Carried by ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and RDMA READ
// RESPONSE FIRST/LAST/ONLY (not MIDDLE).

// AETH is a view of an ACK Extended Transport Header.
type AETH []byte

// IsValid reports whether b holds a whole AETH.
func (b AETH) IsValid() bool { return len(b) >= AETHLen }

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() uint32 { return uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(s Syndrome) { b[0] = byte(s) }

// SetMSN sets the MSN (only the low 24 bits are used).
func (b AETH) SetMSN(msn uint32) { b[1], b[2], b[3] = byte(msn>>16), byte(msn>>8), byte(msn) }

// Encode writes the header.
func (b AETH) Encode(f *AETHFields) {
	_ = b[AETHLen-1]
	b.SetSyndrome(f.Syndrome)
	b.SetMSN(f.MSN)
}

// Fields returns the header's fields.
func (b AETH) Fields() AETHFields { return AETHFields{Syndrome: b.Syndrome(), MSN: b.MSN()} }
