package wire

import "encoding/binary"

// RETH, the RDMA Extended Transport Header (IBTA 9.3.3, 16 bytes):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Virtual Address (64)                       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          R_Key                                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        DMA Length                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Carried by RDMA WRITE FIRST/ONLY(/WITH_IMMEDIATE) and RDMA READ REQUEST.
// DMA Length is the length of the whole message, not of this packet (rxe
// writes the remaining dma.resid, which is the whole message at FIRST).

// RETH is a view of an RDMA Extended Transport Header.
type RETH []byte

// IsValid reports whether b holds a whole RETH.
func (b RETH) IsValid() bool { return len(b) >= RETHLen }

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// DMALen returns the length of the whole RDMA message.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:]) }

// SetVA sets the virtual address.
func (b RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b[8:], v) }

// SetDMALen sets the DMA length.
func (b RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(b[12:], v) }

// Encode writes the header.
func (b RETH) Encode(f *RETHFields) {
	_ = b[RETHLen-1]
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetDMALen(f.DMALen)
}

// Fields returns the header's fields.
func (b RETH) Fields() RETHFields { return RETHFields{VA: b.VA(), RKey: b.RKey(), DMALen: b.DMALen()} }
