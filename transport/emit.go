package transport

import "github.com/goroce/goroce/wire"

// emitter builds every frame the QP sends, for the requester and the
// responder alike: one template holds the outer headers (Ethernet, IP,
// UDP), resolved when the path is set; a frame is the template plus a BTH
// and the extension headers of one packet, with the payload the caller has
// already copied into place behind the headers.
type emitter struct {
	qp  *QP // counters
	out Output
	// tmpl holds the outer headers for every frame this QP sends. Its IPv4
	// identification stays 0 (with DF, which wire.Build sets): every
	// RoCEv2 packet is an atomic datagram, whose ID RFC 6864 lets the
	// source set to any value, and 0 is the one a goroce UDP-backend
	// receiver can know — a UDP socket never shows the IP header, so it
	// rebuilds the header the ICRC covers with ID 0 (docs/backends.md).
	// rxe uses the kernel's counter (__ip_select_ident) instead.
	tmpl wire.Frame
	// icrc is the ICRC work of tmpl's invariant header fields
	// (wire.NewICRCHeader), taken from the first frame built on the
	// template after setPath; icrcSet says it was taken (it stays zero,
	// and every frame takes wire.ICRC, for IPv6).
	icrc    wire.ICRCHeader
	icrcSet bool
	// outer holds tmpl's Ethernet, IPv4 and UDP headers as the first frame
	// after setPath wrote them (unset for IPv6): later frames copy them.
	outer   wire.OuterHeaders
	destQPN uint32
	lastLen int // length of the last frame sent (the pacer charges it)
}

// setPath resolves the outer headers for the address vector av between the
// local QP qpn and the remote QP destQPN.
func (e *emitter) setPath(av *AV, qpn, destQPN uint32) {
	e.destQPN = destQPN
	e.icrc, e.icrcSet = wire.ICRCHeader{}, false
	e.outer = wire.OuterHeaders{}
	e.tmpl = wire.Frame{
		DstMAC: av.DMAC, SrcMAC: av.SMAC, HasVLAN: av.HasVLAN, VLAN: av.VLAN,
		SrcIP: av.SGID.Unmap(), DstIP: av.DGID.Unmap(),
		TrafficClass: e.qp.ccTrafficClass(av.TrafficClass), HopLimit: av.HopLimit,
		SrcPort: wire.RCSourcePortFL(av.FlowLabel, qpn, destQPN),
	}
	if e.tmpl.SrcIP.Is6() {
		// rxe writes flow label 0 on IPv6 (ip6_flow_hdr(..., 0)).
		e.tmpl.FlowLabel = 0
	}
}

// buffer returns the buffer for the next frame, from the Output. The caller
// places the payload at frame(...).HeaderLen() and passes it to emit.
func (e *emitter) buffer() []byte { return e.out.Frame() }

// frame prepares the template for one packet of opcode op. The caller adds
// the packet's flags and extension headers.
func (e *emitter) frame(op wire.Opcode, psn wire.PSN) *wire.Frame {
	f := &e.tmpl
	f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: e.destQPN, PSN: psn}
	return f
}

// emit builds the frame whose payload (payloadLen bytes) the caller already
// placed at buf[f.HeaderLen():] and hands it to the output.
// Frames built on the template (every RC and UC frame) take the
// precomputed ICRC header; wire.BuildICRC checks that the frame's
// invariant fields are the template's before it uses it.
func (e *emitter) emit(buf []byte, f *wire.Frame, payloadLen int) {
	var n int
	var err error
	if f == &e.tmpl {
		n, err = wire.BuildOuter(buf, f, payloadLen, &e.icrc, &e.outer)
	} else {
		n, err = wire.Build(buf, f, payloadLen)
	}
	if err != nil {
		// Only a programming error (buffer too small) gets here.
		e.qp.inc(CntSendErrors)
		return
	}
	if f == &e.tmpl && !e.icrcSet {
		l2 := wire.EthernetLen
		if f.HasVLAN {
			l2 += wire.VLANTagLen
		}
		e.icrc, _ = wire.NewICRCHeader(buf[l2 : n-wire.ICRCLen])
		e.outer, _ = wire.NewOuterHeaders(buf[:n], f)
		e.icrcSet = true
	}
	e.lastLen = n
	e.out.Send(n)
	e.qp.inc(CntSentPkts)
}

// ack sends an ACKNOWLEDGE with syndrome syn and MSN msn for psn.
func (e *emitter) ack(psn wire.PSN, syn wire.Syndrome, msn uint32) {
	buf := e.buffer()
	f := e.frame(wire.RCAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: syn, MSN: msn & wire.PSNMask}
	e.emit(buf, f, 0)
}

// atomicAck sends an ATOMIC_ACKNOWLEDGE carrying orig for psn.
func (e *emitter) atomicAck(psn wire.PSN, orig uint64, msn uint32) {
	f := e.frame(wire.RCAtomicAcknowledge, psn)
	f.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: msn & wire.PSNMask}
	f.AtomicAckETH = orig
	e.emit(e.buffer(), f, 0)
}
