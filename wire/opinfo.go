package wire

// HeaderSet is the set of extension headers an opcode carries after the BTH.
// On the wire they appear in this order: DETH, RETH, AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH, CNPPad (IBTA 9.2, ib_pack.h, rxe_opcode.c).
type HeaderSet uint16

// Extension header flags. HasFETH (the FLUSH header, IBTA 1.5) is the
// newest and has the highest bit, though on the wire it comes first, before
// the RETH: the wire order is DETH, FETH, RETH, ... (Parse, Build).
const (
	HasDETH HeaderSet = 1 << iota
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasCNPPad
	HasFETH
)

// Len returns the total length of the headers in s.
func (s HeaderSet) Len() int {
	n := 0
	if s&HasDETH != 0 {
		n += DETHLen
	}
	if s&HasRETH != 0 {
		n += RETHLen
	}
	if s&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if s&HasAETH != 0 {
		n += AETHLen
	}
	if s&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if s&HasImmDt != 0 {
		n += ImmDtLen
	}
	if s&HasIETH != 0 {
		n += IETHLen
	}
	if s&HasCNPPad != 0 {
		n += CNPPadLen
	}
	if s&HasFETH != 0 {
		n += FETHLen
	}
	return n
}

// String joins the names of the headers in s with "+" ("RETH+ImmDt"), or
// returns "none". HeaderSet is a bit set, which stringer does not format.
func (s HeaderSet) String() string {
	if s == 0 {
		return "none"
	}
	names := [...]string{"DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNPPad", "FETH"}
	out := ""
	for i, n := range names {
		if s&(1<<i) != 0 {
			if out != "" {
				out += "+"
			}
			out += n
		}
	}
	return out
}

// Position is where a packet sits in its message.
type Position uint8

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Position -linecomment

// Positions. Single-packet messages (READ REQUEST, ACKs, atomics, UD sends)
// are PosOnly; CNP is PosNone.
const (
	PosNone   Position = iota // none
	PosFirst                  // first
	PosMiddle                 // middle
	PosLast                   // last
	PosOnly                   // only
)

// OpInfo describes an opcode.
type OpInfo struct {
	Name     string    // IBTA/Wireshark-style name, e.g. "RC_SEND_ONLY"
	Valid    bool      // goroce parses and builds it
	Headers  HeaderSet // extension headers after the BTH
	Payload  bool      // carries a payload (possibly empty for ONLY)
	Pos      Position  // position in the message
	Request  bool      // requester → responder
	Response bool      // responder → requester
	hdrLen   uint8     // BTH + extension headers
}

// opTable is indexed by opcode. Entries with Valid == false are either
// unassigned (Name "") or known but unsupported:
//
//   - RC FLUSH (0x1C, FETH+RETH, no payload) and RC ATOMIC_WRITE (0x1D,
//     RETH + 8 bytes) are IBTA 1.5's memory placement extensions, in Linux
//     rxe since 6.2 (rxe_opcode.c IB_OPCODE_RC_FLUSH, IB_OPCODE_RC_ATOMIC_WRITE).
//     Both are answered with an RDMA READ RESPONSE ONLY without payload.
//     The Debian 6.1 rxe peers of the interop VM do not know them.
//   - RD (0x40-0x5F) is not implemented by any RoCE device.
var opTable [256]OpInfo

type opDef struct {
	op      Opcode
	name    string
	hdrs    HeaderSet
	payload bool
	pos     Position
	dir     int8 // +1 request, -1 response, 0 neither
}

// Connected-service operations shared by RC and UC (operation = low 5 bits).
var connectedOps = []opDef{
	{0x00, "SEND_FIRST", 0, true, PosFirst, 1},
	{0x01, "SEND_MIDDLE", 0, true, PosMiddle, 1},
	{0x02, "SEND_LAST", 0, true, PosLast, 1},
	{0x03, "SEND_LAST_WITH_IMMEDIATE", HasImmDt, true, PosLast, 1},
	{0x04, "SEND_ONLY", 0, true, PosOnly, 1},
	{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasImmDt, true, PosOnly, 1},
	{0x06, "RDMA_WRITE_FIRST", HasRETH, true, PosFirst, 1},
	{0x07, "RDMA_WRITE_MIDDLE", 0, true, PosMiddle, 1},
	{0x08, "RDMA_WRITE_LAST", 0, true, PosLast, 1},
	{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HasImmDt, true, PosLast, 1},
	{0x0A, "RDMA_WRITE_ONLY", HasRETH, true, PosOnly, 1},
	{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HasRETH | HasImmDt, true, PosOnly, 1},
}

// RC-only operations.
var rcOnlyOps = []opDef{
	{0x0C, "RDMA_READ_REQUEST", HasRETH, false, PosOnly, 1},
	{0x0D, "RDMA_READ_RESPONSE_FIRST", HasAETH, true, PosFirst, -1},
	{0x0E, "RDMA_READ_RESPONSE_MIDDLE", 0, true, PosMiddle, -1}, // no AETH
	{0x0F, "RDMA_READ_RESPONSE_LAST", HasAETH, true, PosLast, -1},
	{0x10, "RDMA_READ_RESPONSE_ONLY", HasAETH, true, PosOnly, -1},
	{0x11, "ACKNOWLEDGE", HasAETH, false, PosOnly, -1},
	{0x12, "ATOMIC_ACKNOWLEDGE", HasAETH | HasAtomicAckETH, false, PosOnly, -1},
	{0x13, "COMPARE_SWAP", HasAtomicETH, false, PosOnly, 1},
	{0x14, "FETCH_ADD", HasAtomicETH, false, PosOnly, 1},
	{0x16, "SEND_LAST_WITH_INVALIDATE", HasIETH, true, PosLast, 1},
	{0x17, "SEND_ONLY_WITH_INVALIDATE", HasIETH, true, PosOnly, 1},
}

func init() {
	add := func(base Opcode, prefix string, d opDef, valid bool) {
		op := base | d.op
		opTable[op] = OpInfo{
			Name:     prefix + d.name,
			Valid:    valid,
			Headers:  d.hdrs,
			Payload:  d.payload,
			Pos:      d.pos,
			Request:  d.dir > 0,
			Response: d.dir < 0,
			hdrLen:   uint8(BTHLen + d.hdrs.Len()),
		}
	}
	for _, d := range connectedOps {
		add(TransportRC, "RC_", d, true)
		add(TransportUC, "UC_", d, true)
	}
	for _, d := range rcOnlyOps {
		add(TransportRC, "RC_", d, true)
	}
	add(TransportRC, "RC_", opDef{0x1C, "FLUSH", HasFETH | HasRETH, false, PosOnly, 1}, true)
	add(TransportRC, "RC_", opDef{0x1D, "ATOMIC_WRITE", HasRETH, true, PosOnly, 1}, true)
	add(TransportUD, "UD_", opDef{0x04, "SEND_ONLY", HasDETH, true, PosOnly, 1}, true)
	add(TransportUD, "UD_", opDef{0x05, "SEND_ONLY_WITH_IMMEDIATE", HasDETH | HasImmDt, true, PosOnly, 1}, true)
	add(0, "", opDef{CNP, "CNP", HasCNPPad, false, PosNone, 0}, true)
}

// Info returns the opcode's table entry. Unassigned opcodes have Valid ==
// false and an empty Name.
func (o Opcode) Info() OpInfo { return opTable[o] }

// String returns the opcode's name, e.g. "RC_SEND_ONLY", or "UNKNOWN_0x15".
func (o Opcode) String() string {
	if n := opTable[o].Name; n != "" {
		return n
	}
	const hex = "0123456789ABCDEF"
	return "UNKNOWN_0x" + string([]byte{hex[o>>4], hex[o&0xF]})
}

// Valid reports whether goroce parses and builds this opcode.
func (o Opcode) Valid() bool { return opTable[o].Valid }

// HeaderLen returns the length of the BTH plus the opcode's extension
// headers, or 0 for an invalid opcode.
func (o Opcode) HeaderLen() int {
	if !opTable[o].Valid {
		return 0
	}
	return int(opTable[o].hdrLen)
}

// Transport returns the transport bits (TransportRC, TransportUC, ...).
func (o Opcode) Transport() Opcode { return o & 0xE0 }

func (o Opcode) op() Opcode { return o & 0x1F }

func (o Opcode) connected() bool { return o.Transport() == TransportRC || o.Transport() == TransportUC }

// IsSend reports SEND opcodes of any transport (RC/UC SEND_*, UD SEND_ONLY*).
func (o Opcode) IsSend() bool {
	switch {
	case o.connected():
		return o.op() <= 0x05 || (o.Transport() == TransportRC && (o.op() == 0x16 || o.op() == 0x17))
	case o.Transport() == TransportUD:
		return o.op() == 0x04 || o.op() == 0x05
	}
	return false
}

// IsWrite reports RDMA WRITE opcodes (RC and UC).
func (o Opcode) IsWrite() bool { return o.connected() && o.op() >= 0x06 && o.op() <= 0x0B }

// IsRead reports RDMA READ REQUEST.
func (o Opcode) IsRead() bool { return o == RCRDMAReadRequest }

// IsReadResponse reports RDMA READ RESPONSE FIRST/MIDDLE/LAST/ONLY.
func (o Opcode) IsReadResponse() bool {
	return o >= RCRDMAReadResponseFirst && o <= RCRDMAReadResponseOnly
}

// IsAtomic reports COMPARE_SWAP and FETCH_ADD.
func (o Opcode) IsAtomic() bool { return o == RCCompareSwap || o == RCFetchAdd }

// IsFlush reports RC FLUSH (IBTA 1.5).
func (o Opcode) IsFlush() bool { return o == RCFlush }

// IsAtomicWrite reports RC ATOMIC_WRITE (IBTA 1.5).
func (o Opcode) IsAtomicWrite() bool { return o == RCAtomicWrite }

// IsAck reports ACKNOWLEDGE and ATOMIC_ACKNOWLEDGE.
func (o Opcode) IsAck() bool { return o == RCAcknowledge || o == RCAtomicAcknowledge }

// HasImm reports opcodes carrying immediate data.
func (o Opcode) HasImm() bool { return opTable[o].Headers&HasImmDt != 0 }

// HasInv reports SEND ... WITH_INVALIDATE.
func (o Opcode) HasInv() bool { return opTable[o].Headers&HasIETH != 0 }
