package wire

import "encoding/binary"

// FETH, the FLUSH Extended Transport Header (IBTA 1.5, A19.4.1; 4 bytes),
// carried by RC FLUSH (0x1C) between the BTH and the RETH:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   reserved                        |SEL| PLT   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// As Linux rxe reads and writes it (rxe_hdr.h struct rxe_feth, a __be32:
// FETH_PLT_MASK 0x0000000f, bits 3-0, the placement type; FETH_SEL_MASK
// 0x00000030, bits 5-4, the selectivity level; feth_init writes the rest
// zero). Placement types (ib_verbs.h enum ib_placement_type, rdma-core
// IBV_FLUSH_*) are a bit set: FlushGlobal 1 (global visibility),
// FlushPersistent 2 (persistence). Selectivity levels (enum
// ib_selectivity_level): FlushRange 0 (the RETH's range), FlushMR 1 (the
// whole memory region the R_Key names).

// FETH is a view of a FLUSH Extended Transport Header.
type FETH []byte

// FETHLen is the size of a FETH.
const FETHLen = 4

// Placement types and selectivity levels of a FLUSH.
const (
	FlushGlobal     = 1 // IB_FLUSH_GLOBAL: make the range globally visible
	FlushPersistent = 2 // IB_FLUSH_PERSISTENT: make the range persistent
	FlushRange      = 0 // IB_FLUSH_RANGE: the RETH's [VA, VA+DMA length)
	FlushMR         = 1 // IB_FLUSH_MR: the whole region of the R_Key
)

// FETHFields builds a FETH.
type FETHFields struct {
	PlacementType uint8 // bits 3:0
	Selectivity   uint8 // bits 5:4
}

// IsValid reports whether b holds a whole FETH.
func (b FETH) IsValid() bool { return len(b) >= FETHLen }

// PlacementType returns bits 3:0 (rxe feth_plt).
func (b FETH) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(b) & 0xF) }

// Selectivity returns bits 5:4 (rxe feth_sel).
func (b FETH) Selectivity() uint8 { return uint8(binary.BigEndian.Uint32(b) >> 4 & 3) }

// Encode writes the header as rxe's feth_init does: ((level << 4) & 0x30)
// | (type & 0xf), big-endian, the other bits zero.
func (b FETH) Encode(f *FETHFields) {
	binary.BigEndian.PutUint32(b, uint32(f.Selectivity)<<4&0x30|uint32(f.PlacementType)&0xF)
}

// Fields returns the header's fields.
func (b FETH) Fields() FETHFields {
	return FETHFields{PlacementType: b.PlacementType(), Selectivity: b.Selectivity()}
}
