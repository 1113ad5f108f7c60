package wire

import "encoding/binary"

// AtomicETH, the Atomic Extended Transport Header (IBTA 9.3.4, 28 bytes,
// packed: the 64-bit fields are not 8-byte aligned):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Virtual Address (64)  @0                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          R_Key  @8                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Swap (or Add) Data (64)  @12                   |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Compare Data (64)  @20                       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// For FETCH_ADD the add value is in Swap/Add and Compare is unused (rxe
// sends 0). The VA must be 8-byte aligned (checked by the responder, not here).
//
// AtomicAckETH (IBTA 9.3.6, 8 bytes) follows the AETH in ATOMIC ACKNOWLEDGE:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Original Remote Data (64)                        |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// AtomicETH is a view of an Atomic Extended Transport Header.
type AtomicETH []byte

// IsValid reports whether b holds a whole AtomicETH.
func (b AtomicETH) IsValid() bool { return len(b) >= AtomicETHLen }

// VA returns the remote virtual address.
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SwapAdd returns the swap value (COMPARE_SWAP) or add value (FETCH_ADD).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[12:]) }

// Compare returns the compare value (COMPARE_SWAP).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[20:]) }

// SetVA sets the virtual address.
func (b AtomicETH) SetVA(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// SetRKey sets the remote key.
func (b AtomicETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b[8:], v) }

// SetSwapAdd sets the swap/add value.
func (b AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(b[12:], v) }

// SetCompare sets the compare value.
func (b AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(b[20:], v) }

// Encode writes the header.
func (b AtomicETH) Encode(f *AtomicETHFields) {
	_ = b[AtomicETHLen-1]
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetSwapAdd(f.SwapAdd)
	b.SetCompare(f.Compare)
}

// Fields returns the header's fields.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: b.VA(), RKey: b.RKey(), SwapAdd: b.SwapAdd(), Compare: b.Compare()}
}

// AtomicAckETH is a view of an Atomic Acknowledge Extended Transport Header.
type AtomicAckETH []byte

// IsValid reports whether b holds a whole AtomicAckETH.
func (b AtomicAckETH) IsValid() bool { return len(b) >= AtomicAckETHLen }

// OrigValue returns the value the remote location held before the atomic.
func (b AtomicAckETH) OrigValue() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// SetOrigValue sets the original remote value.
func (b AtomicAckETH) SetOrigValue(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// Encode writes the header.
func (b AtomicAckETH) Encode(orig uint64) { b.SetOrigValue(orig) }
