package wire

import (
	"encoding/binary"
	"net/netip"
)

// ipVersion returns 4 or 6 for the frame's address pair, or 0 if the two
// addresses are not of the same family. IPv4-mapped IPv6 addresses (how
// RoCEv2 GIDs carry IPv4, ::ffff:a.b.c.d) count as IPv4, as in rxe.
func (f *Frame) ipVersion() int {
	s4, d4 := is4(f.SrcIP), is4(f.DstIP)
	switch {
	case s4 && d4:
		return 4
	case !s4 && !d4 && f.SrcIP.Is6() && f.DstIP.Is6():
		return 6
	}
	return 0
}

func is4(a netip.Addr) bool { return a.Is4() || a.Is4In6() }

// l2Len returns the Ethernet header length.
func (f *Frame) l2Len() int {
	if f.HasVLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// ipLen returns the IP header length Build will write.
func (f *Frame) ipLen() int {
	if is4(f.SrcIP) {
		return IPv4Len
	}
	return IPv6Len
}

// HeaderLen returns the number of bytes in front of the payload: Ethernet
// (+VLAN) + IP + UDP + BTH + the extension headers of f.BTH.Opcode. The IP
// header length follows SrcIP (IPv4 or IPv4-mapped: 20, else 40).
func (f *Frame) HeaderLen() int {
	return f.l2Len() + f.ipLen() + UDPLen + int(opTable[f.BTH.Opcode].hdrLen)
}

// Len returns the total frame length for a payload of payloadLen bytes:
// headers, payload, pad and ICRC (no FCS, no minimum-size padding).
func (f *Frame) Len(payloadLen int) int {
	return f.HeaderLen() + payloadLen + (-payloadLen)&3 + ICRCLen
}

// maxL3 bounds the IP packet so that the 16-bit length fields fit.
const maxL3 = 0xFFFF

// BuildPayload copies payload to buf[f.HeaderLen():] and calls Build.
func BuildPayload(buf []byte, f *Frame, payload []byte) (int, error) {
	hl := f.HeaderLen()
	if len(buf) < hl+len(payload) {
		return 0, ErrBufferTooSmall
	}
	copy(buf[hl:], payload)
	return Build(buf, f, len(payload))
}

// Build writes a RoCEv2 frame into buf, whose payload is already in place at
// buf[f.HeaderLen():f.HeaderLen()+payloadLen] (header room reserved up front,
// as gVisor's PacketBuffer does). It writes the headers in front of the
// payload, PadCnt = (-payloadLen)&3 zero pad bytes after it, and the ICRC
// trailer, and returns the frame length (f.Len(payloadLen)).
//
// Build computes: IPv4 total length, DF, header checksum (the ID is f.IPID);
// IPv6 payload length, next header 17; UDP destination port 4791, length,
// checksum 0; BTH PadCnt. FIRST and MIDDLE packets need a payload length
// that is a multiple of 4 (ErrBadPayloadLen otherwise). Extension headers are written per the opcode
// table from the matching Frame fields. f is not modified. Build does not
// allocate.
func Build(buf []byte, f *Frame, payloadLen int) (int, error) {
	return build(buf, f, payloadLen, nil, nil)
}

// BuildICRC is Build with the ICRC's invariant header work precomputed in h
// (NewICRCHeader of an earlier frame of the same QP and path): when the
// frame's invariant header fields are h's (ICRCHeader.Matches, five word
// compares), its ICRC is h.Sum, otherwise ICRC as in Build. The frame is
// byte for byte the one Build writes. A nil or zero h always takes ICRC.
func BuildICRC(buf []byte, f *Frame, payloadLen int, h *ICRCHeader) (int, error) {
	return build(buf, f, payloadLen, h, nil)
}

// OuterHeaders holds the Ethernet, IPv4 and UDP headers of an earlier
// frame built on the same Frame fields (a QP's template), so that
// BuildOuter copies them and patches the three lengths and the IPv4
// checksum instead of encoding them field by field. Take it with
// NewOuterHeaders from a built frame; the zero value is unset. Reset it
// whenever the Frame's outer fields (MACs, VLAN, addresses, traffic class,
// hop limit, source port, IP ID) change.
type OuterHeaders struct {
	n int      // bytes held: Ethernet (with VLAN tag) + IPv4 + UDP; 0 = unset
	b [64]byte // EthernetLen+VLANTagLen+IPv4Len+UDPLen = 46 fit
}

// NewOuterHeaders keeps the outer headers of frame, which Build or
// BuildICRC wrote from f. It returns false (and an unset value) for IPv6,
// IPv4 with options and anything shorter than the headers.
func NewOuterHeaders(frame []byte, f *Frame) (OuterHeaders, bool) {
	var o OuterHeaders
	if f.ipVersion() != 4 {
		return o, false
	}
	n := f.l2Len() + IPv4Len + UDPLen
	if len(frame) < n || frame[f.l2Len()] != 0x45 {
		return o, false
	}
	o.n = copy(o.b[:], frame[:n])
	return o, true
}

// BuildOuter is BuildICRC with the outer headers copied from o when o is
// set (NewOuterHeaders of an earlier frame from the same outer fields of
// f); the frame is byte for byte the one BuildICRC writes. An unset o
// builds as BuildICRC.
func BuildOuter(buf []byte, f *Frame, payloadLen int, h *ICRCHeader, o *OuterHeaders) (int, error) {
	if o != nil && o.n == 0 {
		o = nil
	}
	return build(buf, f, payloadLen, h, o)
}

func build(buf []byte, f *Frame, payloadLen int, h *ICRCHeader, o *OuterHeaders) (int, error) {
	info := &opTable[f.BTH.Opcode]
	if !info.Valid {
		return 0, ErrUnknownOpcode
	}
	ver := f.ipVersion()
	if ver == 0 {
		return 0, ErrMixedIPVersions
	}
	pad := (-payloadLen) & 3
	l2 := f.l2Len()
	ipl := f.ipLen()
	hl := l2 + ipl + UDPLen + int(info.hdrLen)
	if payloadLen < 0 || (!info.Payload && payloadLen != 0) || ipl+UDPLen+int(info.hdrLen)+payloadLen+pad+ICRCLen > maxL3 {
		return 0, ErrBadPayloadLen
	}
	if pad != 0 && (info.Pos == PosFirst || info.Pos == PosMiddle) {
		// FIRST/MIDDLE carry a full PMTU, a multiple of 4; a receiver
		// rejects a pad there (Parse: ErrBadPad).
		return 0, ErrBadPayloadLen
	}
	n := hl + payloadLen + pad + ICRCLen
	if len(buf) < n {
		return 0, ErrBufferTooSmall
	}
	b := buf[:n:n]

	l3 := b[l2:]
	if o != nil && ver == 4 && o.n == l2+IPv4Len+UDPLen {
		// The outer headers of an earlier frame from the same fields:
		// only the lengths and the checksum differ.
		copy(b, o.b[:o.n])
		ip := IPv4(l3[:IPv4Len])
		ip.SetTotalLen(uint16(len(l3)))
		ip.SetChecksum(ip.CalculateChecksum())
		UDP(l3[IPv4Len : IPv4Len+UDPLen]).SetLength(uint16(len(l3) - IPv4Len))
		return buildTransport(b, l3, f, info, ipl, pad, n, ver, h), nil
	}

	// Ethernet.
	copy(b[ethDst:], f.DstMAC[:])
	copy(b[ethSrc:], f.SrcMAC[:])
	et := uint16(EtherTypeIPv4)
	if ver == 6 {
		et = EtherTypeIPv6
	}
	if f.HasVLAN {
		binary.BigEndian.PutUint16(b[ethType:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[ethTCI:], f.VLAN)
		binary.BigEndian.PutUint16(b[ethType2:], et)
	} else {
		binary.BigEndian.PutUint16(b[ethType:], et)
	}

	// IP.
	if ver == 4 {
		ip := IPv4(l3[:IPv4Len])
		ip.Encode(&IPv4Fields{
			TOS:      f.TrafficClass,
			TotalLen: uint16(len(l3)),
			ID:       f.IPID,
			Flags:    IPv4FlagDF,
			TTL:      f.HopLimit,
			Protocol: ProtocolUDP,
			Src:      f.SrcIP,
			Dst:      f.DstIP,
		})
		ip.SetChecksum(ip.CalculateChecksum())
	} else {
		IPv6(l3[:IPv6Len]).Encode(&IPv6Fields{
			TrafficClass: f.TrafficClass,
			FlowLabel:    f.FlowLabel,
			PayloadLen:   uint16(len(l3) - IPv6Len),
			NextHeader:   ProtocolUDP,
			HopLimit:     f.HopLimit,
			Src:          f.SrcIP,
			Dst:          f.DstIP,
		})
	}

	// UDP.
	UDP(l3[ipl:]).Encode(&UDPFields{
		SrcPort: f.SrcPort,
		DstPort: UDPPort,
		Length:  uint16(len(l3) - ipl),
	})

	return buildTransport(b, l3, f, info, ipl, pad, n, ver, h), nil
}

// buildTransport writes the BTH, the extension headers, the pad and the
// ICRC of the frame b (n bytes, IP header at l3, outer headers written).
func buildTransport(b, l3 []byte, f *Frame, info *OpInfo, ipl, pad, n, ver int, h *ICRCHeader) int {
	// BTH and extension headers.
	t := l3[ipl+UDPLen:]
	bf := f.BTH
	bf.PadCnt = uint8(pad)
	BTH(t).Encode(&bf)
	off := BTHLen
	hs := info.Headers
	if hs&HasDETH != 0 {
		DETH(t[off:]).Encode(&f.DETH)
		off += DETHLen
	}
	if hs&HasFETH != 0 {
		FETH(t[off:]).Encode(&f.FETH)
		off += FETHLen
	}
	if hs&HasRETH != 0 {
		RETH(t[off:]).Encode(&f.RETH)
		off += RETHLen
	}
	if hs&HasAtomicETH != 0 {
		AtomicETH(t[off:]).Encode(&f.AtomicETH)
		off += AtomicETHLen
	}
	if hs&HasAETH != 0 {
		AETH(t[off:]).Encode(&f.AETH)
		off += AETHLen
	}
	if hs&HasAtomicAckETH != 0 {
		AtomicAckETH(t[off:]).SetOrigValue(f.AtomicAckETH)
		off += AtomicAckETHLen
	}
	if hs&HasImmDt != 0 {
		ImmDt(t[off:]).SetImm(f.ImmDt)
		off += ImmDtLen
	}
	if hs&HasIETH != 0 {
		IETH(t[off:]).SetRKey(f.IETH)
		off += IETHLen
	}
	if hs&HasCNPPad != 0 {
		CNPPad(t[off:]).Encode()
	}

	// Pad and ICRC.
	end := n - ICRCLen
	clear(b[end-pad : end])
	body := l3[:len(l3)-ICRCLen]
	if h != nil && ver == 4 && h.Matches(body) {
		PutICRC(b[end:], h.Sum(body))
	} else {
		PutICRC(b[end:], ICRC(body))
	}
	return n
}
