package wire

import "encoding/binary"

// Parse decodes an Ethernet frame carrying RoCEv2 into p: Ethernet (with at
// most one 802.1Q tag), IPv4 (options skipped) or IPv6 (no extension
// headers), UDP to port 4791, BTH, the extension headers the opcode table
// lists, payload, pad and ICRC. The views in p point into frame.
//
// Lengths come from the IP total/payload length and the UDP length, never
// from len(frame): the MAC pads short frames and a capture may hold an FCS.
// Bytes after the IP packet are ignored.
//
// Errors are the Err* sentinels (test with errors.Is). On ErrBadICRC, p is
// fully populated. On other errors p holds whatever was decoded before the
// error. Parse does not allocate.
func Parse(frame []byte, p *Packet) error {
	return parseFrame(frame, p, nil)
}

// parseFrame is Parse, checking the ICRC through c when it is not nil.
func parseFrame(frame []byte, p *Packet, c *ICRCCache) error {
	*p = Packet{}
	if len(frame) < EthernetLen {
		return ErrTruncated
	}
	off := EthernetLen
	et := binary.BigEndian.Uint16(frame[ethType:])
	if et == EtherTypeVLAN {
		if len(frame) < EthernetLen+VLANTagLen {
			return ErrTruncated
		}
		p.HasVLAN = true
		p.VLAN = binary.BigEndian.Uint16(frame[ethTCI:])
		et = binary.BigEndian.Uint16(frame[ethType2:])
		off += VLANTagLen
	}
	p.Eth = Ethernet(frame[:off:off])
	var ver byte
	switch et {
	case EtherTypeIPv4:
		ver = 4
	case EtherTypeIPv6:
		ver = 6
	default:
		return ErrNotIP
	}
	l3 := frame[off:]
	if len(l3) == 0 {
		return ErrTruncated
	}
	if l3[0]>>4 != ver {
		return ErrBadIPHeader
	}
	return parseL3(l3, p, c)
}

// ParseL3 is Parse for a packet that starts at the IP header (a raw IP
// socket, or a link type without Ethernet). The IP version comes from the
// first nibble.
func ParseL3(l3 []byte, p *Packet) error {
	*p = Packet{}
	return parseL3(l3, p, nil)
}

// ParseBTH decodes a UDP payload (BTH through ICRC) as received on a UDP
// socket bound to port 4791. There is no IP header, so the ICRC is read into
// p.ICRC but not checked, and p.L3, p.IPv4, p.IPv6, p.UDP and p.Eth are nil.
func ParseBTH(b []byte, p *Packet) error {
	*p = Packet{}
	return parseBTH(b, p)
}

// parseL3 decodes l3 into p and checks its ICRC, through c when it is not
// nil (ICRCCache), else with ICRC.
func parseL3(l3 []byte, p *Packet, c *ICRCCache) error {
	if len(l3) == 0 {
		return ErrTruncated
	}
	var ipLen, end int
	switch l3[0] >> 4 {
	case 4:
		if len(l3) < IPv4Len {
			return ErrTruncated
		}
		ip := IPv4(l3)
		ipLen = ip.HeaderLen()
		if ipLen < IPv4Len {
			return ErrBadIPHeader
		}
		if len(l3) < ipLen {
			return ErrTruncated
		}
		if ip.Protocol() != ProtocolUDP {
			return ErrNotRoCE
		}
		if ip.IsFragment() {
			return ErrBadIPHeader
		}
		end = int(ip.TotalLen())
		p.IPv4 = IPv4(l3[:ipLen:ipLen])
	case 6:
		if len(l3) < IPv6Len {
			return ErrTruncated
		}
		ip := IPv6(l3)
		if ip.NextHeader() != ProtocolUDP {
			return ErrNotRoCE
		}
		ipLen = IPv6Len
		end = IPv6Len + int(ip.PayloadLen())
		p.IPv6 = IPv6(l3[:IPv6Len:IPv6Len])
	default:
		return ErrBadIPHeader
	}
	if end < ipLen+UDPLen {
		return ErrBadIPLength
	}
	if end > len(l3) {
		return ErrTruncated
	}
	l3 = l3[:end:end]
	udp := UDP(l3[ipLen : ipLen+UDPLen : ipLen+UDPLen])
	p.UDP = udp
	if udp.DstPort() != UDPPort {
		return ErrNotRoCE
	}
	if int(udp.Length()) != end-ipLen {
		return ErrBadUDPLength
	}
	p.L3 = l3
	if err := parseBTH(l3[ipLen+UDPLen:], p); err != nil {
		return err
	}
	var sum uint32
	if c != nil {
		sum = c.ICRC(l3[:end-ICRCLen])
	} else {
		sum = ICRC(l3[:end-ICRCLen])
	}
	if sum != p.ICRC {
		return ErrBadICRC
	}
	return nil
}

// parseBTH decodes BTH..ICRC; b ends exactly at the end of the ICRC.
func parseBTH(b []byte, p *Packet) error {
	if len(b) < BTHLen+ICRCLen {
		return ErrTruncated
	}
	bth := BTH(b[:BTHLen:BTHLen])
	p.BTH = bth
	if bth.TVer() != 0 {
		return ErrBadTVer
	}
	info := &opTable[bth.Opcode()]
	if !info.Valid {
		return ErrUnknownOpcode
	}
	hl := int(info.hdrLen)
	n := len(b) - ICRCLen
	if n < hl {
		return ErrTruncated
	}
	off := BTHLen
	h := info.Headers
	if h&HasDETH != 0 {
		p.DETH = DETH(b[off : off+DETHLen : off+DETHLen])
		off += DETHLen
	}
	if h&HasFETH != 0 {
		// FLUSH: the FETH comes before the RETH (rxe_opcode.c offsets).
		p.FETH = FETH(b[off : off+FETHLen : off+FETHLen])
		off += FETHLen
	}
	if h&HasRETH != 0 {
		p.RETH = RETH(b[off : off+RETHLen : off+RETHLen])
		off += RETHLen
	}
	if h&HasAtomicETH != 0 {
		p.AtomicETH = AtomicETH(b[off : off+AtomicETHLen : off+AtomicETHLen])
		off += AtomicETHLen
	}
	if h&HasAETH != 0 {
		p.AETH = AETH(b[off : off+AETHLen : off+AETHLen])
		off += AETHLen
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAckETH = AtomicAckETH(b[off : off+AtomicAckETHLen : off+AtomicAckETHLen])
		off += AtomicAckETHLen
	}
	if h&HasImmDt != 0 {
		p.ImmDt = ImmDt(b[off : off+ImmDtLen : off+ImmDtLen])
		off += ImmDtLen
	}
	if h&HasIETH != 0 {
		p.IETH = IETH(b[off : off+IETHLen : off+IETHLen])
		off += IETHLen
	}
	if h&HasCNPPad != 0 {
		p.CNPPad = CNPPad(b[off : off+CNPPadLen : off+CNPPadLen])
		off += CNPPadLen
	}
	p.ICRC = binary.LittleEndian.Uint32(b[n:])
	pad := int(bth.PadCnt())
	p.Pad = pad
	body := n - off
	// PadCnt is non-zero only on packets that end a message (PROTOCOL §2.6):
	// FIRST/MIDDLE payloads are a full PMTU, a multiple of 4.
	if pad > body || (pad != 0 && (info.Pos == PosFirst || info.Pos == PosMiddle)) {
		return ErrBadPad
	}
	if !info.Payload && body != 0 {
		return ErrBadPayload
	}
	p.Payload = b[off : n-pad : n-pad]
	return nil
}
