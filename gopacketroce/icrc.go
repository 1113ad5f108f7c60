package gopacketroce

import (
	"errors"

	"github.com/gopacket/gopacket"

	"github.com/goroce/goroce/wire"
)

// VerifyICRC checks the ICRC of a decoded RoCEv2 packet. present is false
// when the packet has no BTH layer, no network layer, or was captured
// truncated (its last 4 bytes are then not the ICRC); ok is meaningful only
// when present.
func VerifyICRC(pkt gopacket.Packet) (ok, present bool) {
	if pkt == nil || pkt.Layer(LayerTypeBTH) == nil || pkt.Metadata().Truncated {
		return false, false
	}
	nl := pkt.NetworkLayer()
	if nl == nil {
		return false, false
	}
	return VerifyICRCLayer(nl)
}

// VerifyICRCLayer checks the ICRC over a network layer (*layers.IPv4 or
// *layers.IPv6) whose payload is a RoCEv2 packet: it is wire.VerifyICRC over
// the layer's contents and payload, which must be adjacent in memory (they
// are, as decoded by gopacket). Use it with a DecodingLayerParser; it does not
// allocate. present is false when the bytes cannot hold IP+UDP+BTH+ICRC.
// It does not know about capture truncation: check that first.
func VerifyICRCLayer(nl gopacket.Layer) (ok, present bool) {
	if nl == nil {
		return false, false
	}
	l3, ok := adjacent(nl.LayerContents(), nl.LayerPayload())
	if !ok || len(l3) == 0 {
		return false, false
	}
	hdr := 0
	switch l3[0] >> 4 {
	case 4:
		hdr = int(l3[0]&0x0F) * 4
	case 6:
		hdr = wire.IPv6Len
	default:
		return false, false
	}
	if len(l3) < hdr+wire.UDPLen+wire.BTHLen+wire.ICRCLen {
		return false, false
	}
	return wire.VerifyICRC(l3), true
}

// adjacent returns a followed by b as one slice when b starts right where a
// ends in the same backing array.
func adjacent(a, b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return a, true
	}
	n := len(a) + len(b)
	if cap(a) < n {
		return nil, false
	}
	joined := a[:n]
	if &joined[len(a)] != &b[0] {
		return nil, false
	}
	return joined, true
}

// FixICRC computes the ICRC of an Ethernet frame holding a RoCEv2 packet
// (e.g. the output of gopacket.SerializeLayers with a BTH layer) and writes
// it into the frame's trailer. It returns wire.Parse's error when the frame
// is not a well-formed RoCEv2 frame.
func FixICRC(frame []byte) error {
	var p wire.Packet
	if err := wire.Parse(frame, &p); err != nil && !errors.Is(err, wire.ErrBadICRC) {
		return err
	}
	n := len(p.L3) - wire.ICRCLen
	wire.PutICRC(p.L3[n:], wire.ICRC(p.L3[:n]))
	return nil
}
