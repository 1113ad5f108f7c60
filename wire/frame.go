package wire

import "net/netip"

// This file is the contract between wire and its users (transport, nic
// adapters, tools). Field names here are stable; add, do not rename.

// UDPPort is the IANA port of RoCEv2.
const UDPPort = 4791

// Sizes of the fixed headers.
const (
	EthernetLen     = 14
	VLANTagLen      = 4
	IPv4Len         = 20 // no options are ever sent; received options are skipped
	IPv6Len         = 40
	UDPLen          = 8
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	CNPPadLen       = 16
	ICRCLen         = 4
)

// DefaultPKey is the full-member default partition key rxe always sends.
const DefaultPKey = 0xFFFF

// Packet is the result of Parse: views into the frame that was parsed (no
// copies). Extension-header views are nil when the opcode does not carry them.
// A Packet is only valid while the frame's bytes are.
type Packet struct {
	Eth          Ethernet
	HasVLAN      bool
	VLAN         uint16 // TCI of the single 802.1Q tag (PCP, DEI, VID), when HasVLAN
	IPv4         IPv4   // exactly one of IPv4 and IPv6 is non-nil
	IPv6         IPv6
	UDP          UDP
	BTH          BTH
	FETH         FETH // RC FLUSH only
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	DETH         DETH
	CNPPad       CNPPad // the 16 reserved bytes of a CNP
	Payload      []byte // without pad bytes
	Pad          int    // BTH PadCnt, 0..3
	ICRC         uint32 // as read from the trailer (little-endian on the wire)
	// L3 is the frame from the start of the IP header through the ICRC: what
	// the ICRC covers (plus the ICRC itself).
	L3 []byte
}

// Opcode is a shortcut for p.BTH.Opcode().
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// SrcIP and DstIP return the IP addresses as netip.Addr (IPv4 as 4-byte addresses).
func (p *Packet) SrcIP() netip.Addr {
	if p.IPv4 != nil {
		return p.IPv4.Src()
	}
	return p.IPv6.Src()
}

// DstIP: see SrcIP.
func (p *Packet) DstIP() netip.Addr {
	if p.IPv4 != nil {
		return p.IPv4.Dst()
	}
	return p.IPv6.Dst()
}

// Frame describes a RoCEv2 frame to Build. Which extension headers are
// written is decided by BTH.Opcode through the opcode table; the others are
// ignored. PadCnt and all lengths and checksums are computed by Build.
type Frame struct {
	// Ethernet. VLAN is written as an 802.1Q tag (TPID 0x8100) when HasVLAN.
	DstMAC, SrcMAC [6]byte
	HasVLAN        bool
	VLAN           uint16

	// IP. SrcIP/DstIP choose IPv4 (both Is4, or both IPv4-mapped IPv6 as in
	// RoCEv2 GIDs ::ffff:a.b.c.d) or IPv6. For IPv4 the header is 20 bytes
	// with DF set; ID is written as given (the ICRC covers it).
	SrcIP, DstIP netip.Addr
	TrafficClass uint8  // IPv4 TOS / IPv6 traffic class
	HopLimit     uint8  // IPv4 TTL / IPv6 hop limit
	IPID         uint16 // IPv4 identification
	FlowLabel    uint32 // IPv6 flow label (20 bits); rxe sends 0

	// UDP. Destination port is always 4791; checksum is always 0.
	SrcPort uint16

	BTH          BTHFields
	FETH         FETHFields
	RETH         RETHFields
	AETH         AETHFields
	AtomicETH    AtomicETHFields
	AtomicAckETH uint64 // original remote value
	ImmDt        uint32 // immediate data, host order of the big-endian wire value
	IETH         uint32 // R_Key to invalidate
	DETH         DETHFields
}

// BTHFields builds a BTH. PadCnt is ignored by Build (computed from the payload).
type BTHFields struct {
	Opcode Opcode
	SE     bool
	M      bool
	PadCnt uint8
	TVer   uint8
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32
	AckReq bool
	PSN    PSN
}

// RETHFields builds a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// AETHFields builds an AETH. Syndrome is the raw byte (see Syndrome helpers).
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// AtomicETHFields builds an AtomicETH. For FETCH_ADD, SwapAdd is the add value
// and Compare is sent as 0.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// DETHFields builds a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

// FillFrame sets f to the headers of p, so that Build(buf, f, len(p.Payload))
// with the same payload reproduces the parsed frame (given DF set, no IPv4
// options and zero reserved bits, as every RoCE sender does). Useful to
// answer or re-send a packet with the same addressing.
func (p *Packet) FillFrame(f *Frame) {
	*f = Frame{}
	if p.Eth != nil {
		f.DstMAC, f.SrcMAC = p.Eth.Dst(), p.Eth.Src()
	}
	f.HasVLAN, f.VLAN = p.HasVLAN, p.VLAN
	switch {
	case p.IPv4 != nil:
		f.SrcIP, f.DstIP = p.IPv4.Src(), p.IPv4.Dst()
		f.TrafficClass, f.HopLimit, f.IPID = p.IPv4.TOS(), p.IPv4.TTL(), p.IPv4.ID()
	case p.IPv6 != nil:
		f.SrcIP, f.DstIP = p.IPv6.Src(), p.IPv6.Dst()
		f.TrafficClass, f.HopLimit, f.FlowLabel = p.IPv6.TrafficClass(), p.IPv6.HopLimit(), p.IPv6.FlowLabel()
	}
	if p.UDP != nil {
		f.SrcPort = p.UDP.SrcPort()
	}
	if p.BTH != nil {
		f.BTH = p.BTH.Fields()
	}
	if p.FETH != nil {
		f.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		f.RETH = p.RETH.Fields()
	}
	if p.AETH != nil {
		f.AETH = p.AETH.Fields()
	}
	if p.AtomicETH != nil {
		f.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckETH = p.AtomicAckETH.OrigValue()
	}
	if p.ImmDt != nil {
		f.ImmDt = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		f.IETH = p.IETH.RKey()
	}
	if p.DETH != nil {
		f.DETH = p.DETH.Fields()
	}
}
