package gopacketroce

import (
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// LayerTypeMAD is the layer of a management datagram on QP 1: the payload
// of a UD SEND ONLY to destination QP 1 that is at least mad.MADLen bytes.
var LayerTypeMAD = gopacket.RegisterLayerType(1800, gopacket.LayerTypeMetadata{Name: "MAD", Decoder: gopacket.DecodeFunc(decodeMAD)})

// MAD is the layer of one 256-byte MAD, decoded with package mad. Header is
// always set; Message is the CM message (*mad.REQ, *mad.REP, ...) when the
// MAD is one, nil for other management classes and CM attributes package
// mad does not decode (LAP, APR). Message belongs to the layer and is
// overwritten when the layer decodes the next packet.
type MAD struct {
	layers.BaseLayer
	Header  mad.Header
	Message mad.Message
	// Err says why Message is nil: mad.ErrNotCM, mad.ErrUnknownAttr,
	// mad.ErrBaseVersion or mad.ErrInvalid (wrapped).
	Err error
	dec mad.Decoder
}

// isMAD reports whether a packet of bth carries a MAD in a payload of n
// bytes.
func isMAD(bth wire.BTH, n int) bool {
	return len(bth) >= wire.BTHLen && bth.Opcode() == wire.UDSendOnly && bth.DestQP() == mad.GSIQPN && n >= mad.MADLen
}

// nextMAD is what follows a DETH: the MAD of a UD SEND to QP 1, else the
// payload.
func (l *DETH) nextMAD() gopacket.LayerType {
	if l.bth != nil && isMAD(l.bth.BTH, len(l.Payload)) {
		return LayerTypeMAD
	}
	return l.next(wire.HasDETH)
}

func (l *MAD) LayerType() gopacket.LayerType  { return LayerTypeMAD }
func (l *MAD) CanDecode() gopacket.LayerClass { return LayerTypeMAD }

// NextLayerType is gopacket.LayerTypePayload for bytes after the 256 of
// the MAD (none on a well-formed packet), else gopacket.LayerTypeZero.
func (l *MAD) NextLayerType() gopacket.LayerType {
	if len(l.Payload) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// DecodeFromBytes decodes the MAD at the start of data. Only fewer than
// mad.MADLen bytes are an error: a MAD of another class, a CM attribute
// package mad does not decode or an invalid CM message is still a MAD,
// whose Message is nil and Err says why (the transport delivered it; what
// the receiver's MAD layer makes of it is another matter).
func (l *MAD) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.BaseLayer, l.Message, l.Err = layers.BaseLayer{}, nil, nil
	h, m, err := l.dec.Parse(data)
	l.Header = h
	if errors.Is(err, mad.ErrShort) {
		df.SetTruncated()
		return err
	}
	l.Message, l.Err = m, err
	l.Contents, l.Payload = data[:mad.MADLen:mad.MADLen], data[mad.MADLen:]
	return nil
}

// SerializeTo prepends the 256 bytes of the MAD: Header and Message
// encoded with mad.Marshal, or, without a Message, the decoded bytes.
func (l *MAD) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if l.Message == nil && len(l.Contents) != mad.MADLen {
		return errNoView
	}
	buf, err := b.PrependBytes(mad.MADLen)
	if err != nil {
		return err
	}
	if l.Message == nil {
		copy(buf, l.Contents)
		return nil
	}
	return mad.Marshal(l.Header, l.Message, buf)
}

func (l *MAD) String() string {
	h := l.Header
	if l.Message == nil {
		return fmt.Sprintf("MAD{Class=%#02x Method=%#02x AttrID=%#04x TID=%#x Err=%v}", h.MgmtClass, h.Method, h.AttrID, h.TID, l.Err)
	}
	return fmt.Sprintf("MAD{CM %s TID=%#x %+v}", l.Message.Name(), h.TID, l.Message)
}

func decodeMAD(data []byte, p gopacket.PacketBuilder) error {
	l := &MAD{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	if len(l.Payload) > 0 {
		return p.NextDecoder(gopacket.LayerTypePayload)
	}
	return nil
}
