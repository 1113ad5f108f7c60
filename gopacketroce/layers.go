package gopacketroce

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/wire"
)

// Layer types, in gopacket's application range (1000-1999).
var (
	LayerTypeBTH          = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeBTH)})
	LayerTypeRETH         = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: extDecoder(func() extLayer { return &RETH{} })})
	LayerTypeAETH         = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: extDecoder(func() extLayer { return &AETH{} })})
	LayerTypeAtomicETH    = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{Name: "AtomicETH", Decoder: extDecoder(func() extLayer { return &AtomicETH{} })})
	LayerTypeAtomicAckETH = gopacket.RegisterLayerType(1795, gopacket.LayerTypeMetadata{Name: "AtomicAckETH", Decoder: extDecoder(func() extLayer { return &AtomicAckETH{} })})
	LayerTypeImmDt        = gopacket.RegisterLayerType(1796, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: extDecoder(func() extLayer { return &ImmDt{} })})
	LayerTypeIETH         = gopacket.RegisterLayerType(1797, gopacket.LayerTypeMetadata{Name: "IETH", Decoder: extDecoder(func() extLayer { return &IETH{} })})
	LayerTypeDETH         = gopacket.RegisterLayerType(1798, gopacket.LayerTypeMetadata{Name: "DETH", Decoder: extDecoder(func() extLayer { return &DETH{} })})
	LayerTypeCNP          = gopacket.RegisterLayerType(1799, gopacket.LayerTypeMetadata{Name: "CNP", Decoder: extDecoder(func() extLayer { return &CNP{} })})
	LayerTypeFETH         = gopacket.RegisterLayerType(1801, gopacket.LayerTypeMetadata{Name: "FETH", Decoder: extDecoder(func() extLayer { return &FETH{} })})
)

func init() {
	layers.RegisterUDPPortLayerType(wire.UDPPort, LayerTypeBTH)
}

// errNoView is returned by SerializeTo on a layer without header bytes.
var errNoView = errors.New("gopacketroce: layer has no header bytes to serialize")

// extOrder lists the extension headers in wire order with their layer types.
var extOrder = [...]struct {
	h  wire.HeaderSet
	lt *gopacket.LayerType
}{
	{wire.HasDETH, &LayerTypeDETH},
	{wire.HasFETH, &LayerTypeFETH},
	{wire.HasRETH, &LayerTypeRETH},
	{wire.HasAtomicETH, &LayerTypeAtomicETH},
	{wire.HasAETH, &LayerTypeAETH},
	{wire.HasAtomicAckETH, &LayerTypeAtomicAckETH},
	{wire.HasImmDt, &LayerTypeImmDt},
	{wire.HasIETH, &LayerTypeIETH},
	{wire.HasCNPPad, &LayerTypeCNP},
}

// nextAfter returns the layer type that follows header h (0: the BTH itself)
// in a packet with opcode op: the next extension header the opcode carries,
// or gopacket.LayerTypePayload.
func nextAfter(op wire.Opcode, h wire.HeaderSet) gopacket.LayerType {
	set := op.Info().Headers
	after := h == 0 // the BTH: the first header present follows it
	for _, e := range extOrder {
		if after && set&e.h != 0 {
			return *e.lt
		}
		if e.h == h {
			after = true
		}
	}
	return gopacket.LayerTypePayload
}

// BTH is the Base Transport Header layer. The embedded wire.BTH is a view of
// the 12 header bytes (Contents); Payload is the extension headers and the
// message, without the pad and the ICRC, which are in PadBytes and Trailer.
type BTH struct {
	layers.BaseLayer
	wire.BTH
	// PadBytes are the PadCnt bytes between the payload and the ICRC.
	PadBytes []byte
	// Trailer is the 4-byte ICRC as captured. When the capture is
	// truncated these are simply the last 4 captured bytes.
	Trailer []byte
}

// LayerType returns LayerTypeBTH.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns the first extension header of the opcode, or
// gopacket.LayerTypePayload.
func (b *BTH) NextLayerType() gopacket.LayerType {
	if len(b.BTH) < wire.BTHLen {
		return gopacket.LayerTypeZero
	}
	return nextAfter(b.Opcode(), 0)
}

// ICRC returns the ICRC read from the trailer (0 without a trailer).
func (b *BTH) ICRC() uint32 {
	if len(b.Trailer) != wire.ICRCLen {
		return 0
	}
	return binary.LittleEndian.Uint32(b.Trailer)
}

// DecodeFromBytes decodes a UDP payload (BTH through ICRC) with
// wire.ParseBTH. On an error that leaves a whole BTH (a truncated extension
// header, an unknown opcode, a bad pad), the BTH view is still set.
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	*b = BTH{}
	if len(data) < wire.BTHLen {
		df.SetTruncated()
		return wire.ErrTruncated
	}
	b.BTH = wire.BTH(data[:wire.BTHLen:wire.BTHLen])
	b.Contents = data[:wire.BTHLen]
	var p wire.Packet
	if err := wire.ParseBTH(data, &p); err != nil {
		if errors.Is(err, wire.ErrTruncated) {
			df.SetTruncated()
		}
		return err
	}
	n := len(data) - wire.ICRCLen
	b.Trailer = data[n:len(data):len(data)]
	b.PadBytes = data[n-p.Pad : n : n]
	b.Payload = data[wire.BTHLen : n-p.Pad]
	return nil
}

// SerializeTo writes the BTH in front of what b already holds (extension
// headers and payload) and the pad and ICRC after it. With opts.FixLengths
// PadCnt is computed, the pad is zero and the ICRC is zero (see FixICRC);
// otherwise PadBytes and Trailer are written as they are (a zero ICRC when
// Trailer is not 4 bytes).
func (b *BTH) SerializeTo(buf gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if len(b.BTH) < wire.BTHLen {
		return errNoView
	}
	pad := len(b.PadBytes)
	if opts.FixLengths {
		pad = -len(buf.Bytes()) & 3
	}
	t, err := buf.AppendBytes(pad + wire.ICRCLen)
	if err != nil {
		return err
	}
	clear(t)
	if !opts.FixLengths {
		copy(t, b.PadBytes)
		if len(b.Trailer) == wire.ICRCLen {
			copy(t[pad:], b.Trailer)
		}
	}
	h, err := buf.PrependBytes(wire.BTHLen)
	if err != nil {
		return err
	}
	copy(h, b.BTH[:wire.BTHLen])
	if opts.FixLengths {
		wire.BTH(h).SetPadCnt(uint8(pad))
	}
	return nil
}

func (b *BTH) String() string {
	if len(b.BTH) < wire.BTHLen {
		return "BTH{}"
	}
	f := b.Fields()
	return fmt.Sprintf("BTH{Opcode=%v SE=%v M=%v PadCnt=%d TVer=%d PKey=%#04x FECN=%v BECN=%v DestQP=%#06x AckReq=%v PSN=%d ICRC=%#08x}",
		f.Opcode, f.SE, f.M, f.PadCnt, f.TVer, f.PKey, f.FECN, f.BECN, f.DestQP, f.AckReq, f.PSN, b.ICRC())
}

// decodeBTH is the gopacket decoder for LayerTypeBTH: it adds the BTH and
// every extension header, linked to the BTH, then hands the message to
// gopacket.LayerTypePayload.
func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	b := &BTH{}
	if err := b.DecodeFromBytes(data, p); err != nil {
		if b.BTH != nil && errors.Is(err, wire.ErrTruncated) {
			p.AddLayer(b) // the BTH itself is whole: keep what was decoded
		}
		return err
	}
	p.AddLayer(b)
	rest := b.Payload
	set := b.Opcode().Info().Headers
	for _, e := range extOrder {
		if set&e.h == 0 {
			continue
		}
		l := newExt(e.h)
		l.link(b)
		if err := l.DecodeFromBytes(rest, p); err != nil {
			return err // not reached: ParseBTH checked the lengths
		}
		p.AddLayer(l)
		rest = l.LayerPayload()
	}
	if isMAD(b.BTH, len(rest)) {
		return p.NextDecoder(LayerTypeMAD)
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

func newExt(h wire.HeaderSet) extLayer {
	switch h {
	case wire.HasDETH:
		return &DETH{}
	case wire.HasFETH:
		return &FETH{}
	case wire.HasRETH:
		return &RETH{}
	case wire.HasAtomicETH:
		return &AtomicETH{}
	case wire.HasAETH:
		return &AETH{}
	case wire.HasAtomicAckETH:
		return &AtomicAckETH{}
	case wire.HasImmDt:
		return &ImmDt{}
	case wire.HasIETH:
		return &IETH{}
	}
	return &CNP{}
}

// extLayer is what every extension-header layer implements.
type extLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
	link(*BTH)
}

// extDecoder decodes an extension header on its own (without a BTH, e.g.
// gopacket.NewPacket(b, LayerTypeRETH, ...)); what follows is the payload.
func extDecoder(mk func() extLayer) gopacket.Decoder {
	return gopacket.DecodeFunc(func(data []byte, p gopacket.PacketBuilder) error {
		l := mk()
		if err := l.DecodeFromBytes(data, p); err != nil {
			return err
		}
		p.AddLayer(l)
		return p.NextDecoder(gopacket.LayerTypePayload)
	})
}

// ext is the part every extension-header layer shares.
type ext struct {
	bth *BTH
}

func (e *ext) link(b *BTH) { e.bth = b }

// next returns the layer after header h: the next header of the linked
// BTH's opcode, or gopacket.LayerTypePayload when not linked.
func (e *ext) next(h wire.HeaderSet) gopacket.LayerType {
	if e.bth == nil || len(e.bth.BTH) < wire.BTHLen {
		return gopacket.LayerTypePayload
	}
	return nextAfter(e.bth.Opcode(), h)
}

// decodeExt slices a fixed-size header off data.
func decodeExt(bl *layers.BaseLayer, data []byte, n int, df gopacket.DecodeFeedback) ([]byte, error) {
	if len(data) < n {
		df.SetTruncated()
		*bl = layers.BaseLayer{}
		return nil, wire.ErrTruncated
	}
	bl.Contents, bl.Payload = data[:n:n], data[n:]
	return data[:n:n], nil
}

// serializeExt prepends a copy of a fixed-size header.
func serializeExt(buf gopacket.SerializeBuffer, view []byte, n int) error {
	if len(view) < n {
		return errNoView
	}
	h, err := buf.PrependBytes(n)
	if err != nil {
		return err
	}
	copy(h, view[:n])
	return nil
}

// RETH is the RDMA Extended Transport Header layer (RDMA WRITE FIRST/ONLY,
// READ REQUEST).
type RETH struct {
	layers.BaseLayer
	wire.RETH
	ext
}

func (l *RETH) LayerType() gopacket.LayerType     { return LayerTypeRETH }
func (l *RETH) CanDecode() gopacket.LayerClass    { return LayerTypeRETH }
func (l *RETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasRETH) }
func (l *RETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.RETH, err = decodeExt(&l.BaseLayer, data, wire.RETHLen, df)
	return err
}
func (l *RETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.RETH, wire.RETHLen)
}
func (l *RETH) String() string {
	if !l.IsValid() {
		return "RETH{}"
	}
	return fmt.Sprintf("RETH{VA=%#x RKey=%#x DMALen=%d}", l.VA(), l.RKey(), l.DMALen())
}

// FETH is the FLUSH Extended Transport Header layer (RC FLUSH, IBTA 1.5;
// before the RETH).
type FETH struct {
	layers.BaseLayer
	wire.FETH
	ext
}

func (l *FETH) LayerType() gopacket.LayerType     { return LayerTypeFETH }
func (l *FETH) CanDecode() gopacket.LayerClass    { return LayerTypeFETH }
func (l *FETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasFETH) }
func (l *FETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.FETH, err = decodeExt(&l.BaseLayer, data, wire.FETHLen, df)
	return err
}
func (l *FETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.FETH, wire.FETHLen)
}
func (l *FETH) String() string {
	if !l.IsValid() {
		return "FETH{}"
	}
	return fmt.Sprintf("FETH{PlacementType=%d Selectivity=%d}", l.PlacementType(), l.Selectivity())
}

// AETH is the ACK Extended Transport Header layer (ACKNOWLEDGE, ATOMIC
// ACKNOWLEDGE, READ RESPONSE FIRST/LAST/ONLY).
type AETH struct {
	layers.BaseLayer
	wire.AETH
	ext
}

func (l *AETH) LayerType() gopacket.LayerType     { return LayerTypeAETH }
func (l *AETH) CanDecode() gopacket.LayerClass    { return LayerTypeAETH }
func (l *AETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasAETH) }
func (l *AETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.AETH, err = decodeExt(&l.BaseLayer, data, wire.AETHLen, df)
	return err
}
func (l *AETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.AETH, wire.AETHLen)
}
func (l *AETH) String() string {
	if !l.IsValid() {
		return "AETH{}"
	}
	return fmt.Sprintf("AETH{Syndrome=%v MSN=%d}", l.Syndrome(), l.MSN())
}

// AtomicETH is the Atomic Extended Transport Header layer (COMPARE_SWAP,
// FETCH_ADD).
type AtomicETH struct {
	layers.BaseLayer
	wire.AtomicETH
	ext
}

func (l *AtomicETH) LayerType() gopacket.LayerType     { return LayerTypeAtomicETH }
func (l *AtomicETH) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicETH }
func (l *AtomicETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasAtomicETH) }
func (l *AtomicETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.AtomicETH, err = decodeExt(&l.BaseLayer, data, wire.AtomicETHLen, df)
	return err
}
func (l *AtomicETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.AtomicETH, wire.AtomicETHLen)
}
func (l *AtomicETH) String() string {
	if !l.IsValid() {
		return "AtomicETH{}"
	}
	return fmt.Sprintf("AtomicETH{VA=%#x RKey=%#x SwapAdd=%#x Compare=%#x}", l.VA(), l.RKey(), l.SwapAdd(), l.Compare())
}

// AtomicAckETH is the Atomic ACK Extended Transport Header layer (ATOMIC
// ACKNOWLEDGE): the original remote value.
type AtomicAckETH struct {
	layers.BaseLayer
	wire.AtomicAckETH
	ext
}

func (l *AtomicAckETH) LayerType() gopacket.LayerType     { return LayerTypeAtomicAckETH }
func (l *AtomicAckETH) CanDecode() gopacket.LayerClass    { return LayerTypeAtomicAckETH }
func (l *AtomicAckETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasAtomicAckETH) }
func (l *AtomicAckETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.AtomicAckETH, err = decodeExt(&l.BaseLayer, data, wire.AtomicAckETHLen, df)
	return err
}
func (l *AtomicAckETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.AtomicAckETH, wire.AtomicAckETHLen)
}
func (l *AtomicAckETH) String() string {
	if !l.IsValid() {
		return "AtomicAckETH{}"
	}
	return fmt.Sprintf("AtomicAckETH{OrigValue=%#x}", l.OrigValue())
}

// ImmDt is the Immediate Data layer (SEND / RDMA WRITE ... WITH_IMMEDIATE).
type ImmDt struct {
	layers.BaseLayer
	wire.ImmDt
	ext
}

func (l *ImmDt) LayerType() gopacket.LayerType     { return LayerTypeImmDt }
func (l *ImmDt) CanDecode() gopacket.LayerClass    { return LayerTypeImmDt }
func (l *ImmDt) NextLayerType() gopacket.LayerType { return l.next(wire.HasImmDt) }
func (l *ImmDt) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.ImmDt, err = decodeExt(&l.BaseLayer, data, wire.ImmDtLen, df)
	return err
}
func (l *ImmDt) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.ImmDt, wire.ImmDtLen)
}
func (l *ImmDt) String() string {
	if !l.IsValid() {
		return "ImmDt{}"
	}
	return fmt.Sprintf("ImmDt{Imm=%#08x}", l.Imm())
}

// IETH is the Invalidate Extended Transport Header layer (SEND ...
// WITH_INVALIDATE): the R_Key to invalidate.
type IETH struct {
	layers.BaseLayer
	wire.IETH
	ext
}

func (l *IETH) LayerType() gopacket.LayerType     { return LayerTypeIETH }
func (l *IETH) CanDecode() gopacket.LayerClass    { return LayerTypeIETH }
func (l *IETH) NextLayerType() gopacket.LayerType { return l.next(wire.HasIETH) }
func (l *IETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.IETH, err = decodeExt(&l.BaseLayer, data, wire.IETHLen, df)
	return err
}
func (l *IETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.IETH, wire.IETHLen)
}
func (l *IETH) String() string {
	if !l.IsValid() {
		return "IETH{}"
	}
	return fmt.Sprintf("IETH{RKey=%#x}", l.RKey())
}

// DETH is the Datagram Extended Transport Header layer (UD SEND ONLY).
type DETH struct {
	layers.BaseLayer
	wire.DETH
	ext
}

func (l *DETH) LayerType() gopacket.LayerType     { return LayerTypeDETH }
func (l *DETH) CanDecode() gopacket.LayerClass    { return LayerTypeDETH }
func (l *DETH) NextLayerType() gopacket.LayerType { return l.nextMAD() }
func (l *DETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.DETH, err = decodeExt(&l.BaseLayer, data, wire.DETHLen, df)
	return err
}
func (l *DETH) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.DETH, wire.DETHLen)
}
func (l *DETH) String() string {
	if !l.IsValid() {
		return "DETH{}"
	}
	return fmt.Sprintf("DETH{QKey=%#08x SrcQP=%#06x}", l.QKey(), l.SrcQP())
}

// CNP is the layer of the 16 reserved bytes of a Congestion Notification
// Packet (opcode 0x81).
type CNP struct {
	layers.BaseLayer
	wire.CNPPad
	ext
}

func (l *CNP) LayerType() gopacket.LayerType     { return LayerTypeCNP }
func (l *CNP) CanDecode() gopacket.LayerClass    { return LayerTypeCNP }
func (l *CNP) NextLayerType() gopacket.LayerType { return l.next(wire.HasCNPPad) }
func (l *CNP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) (err error) {
	l.CNPPad, err = decodeExt(&l.BaseLayer, data, wire.CNPPadLen, df)
	return err
}
func (l *CNP) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	return serializeExt(b, l.CNPPad, wire.CNPPadLen)
}
func (l *CNP) String() string { return "CNP{}" }

// Layers is a set of RoCEv2 decoding layers for a gopacket.DecodingLayerParser
// or DecodingLayerContainer. Use DecodingLayers to link the extension
// headers to BTH and get the list to register.
type Layers struct {
	BTH          BTH
	FETH         FETH
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	DETH         DETH
	CNP          CNP
	MAD          MAD
}

// DecodingLayers links every extension header of l to l.BTH and returns the
// eleven layers (the BTH, the nine extension headers and the MAD), e.g. to
// append to gopacket.NewDecodingLayerParser's list.
func (l *Layers) DecodingLayers() []gopacket.DecodingLayer {
	exts := []extLayer{&l.FETH, &l.RETH, &l.AETH, &l.AtomicETH, &l.AtomicAckETH, &l.ImmDt, &l.IETH, &l.DETH, &l.CNP}
	out := []gopacket.DecodingLayer{&l.BTH}
	for _, e := range exts {
		e.link(&l.BTH)
		out = append(out, e)
	}
	return append(out, &l.MAD)
}
