package gopacketroce

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/mad"
)

// TestMADLayer: the CM MADs of rping decode to MAD layers with their
// messages, serialize back to the same bytes, and decode without
// allocating in a DecodingLayerParser.
func TestMADLayer(t *testing.T) {
	var frames [][]byte
	for _, c := range loadCaptures(t) {
		if c.name == "rping.pcap" {
			frames = c.frames
		}
	}
	if frames == nil {
		t.Fatal("no rping.pcap")
	}
	var names []string
	for _, data := range frames {
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		l, _ := pkt.Layer(LayerTypeMAD).(*MAD)
		if l == nil {
			continue
		}
		if pkt.Layer(gopacket.LayerTypePayload) != nil {
			t.Fatal("MAD packet with a payload layer")
		}
		names = append(names, l.Message.Name())
		buf := gopacket.NewSerializeBuffer()
		if err := l.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), l.Contents) {
			t.Fatalf("%s: serialized bytes differ", l.Message.Name())
		}
		if s := l.String(); !strings.HasPrefix(s, "MAD{CM "+l.Message.Name()) {
			t.Errorf("String() = %.60s", s)
		}
	}
	if got := strings.Join(names, " "); got != "REQ REP RTU DREQ DREP" {
		t.Fatalf("MAD layers %q", got)
	}

	ps := newParser()
	n := 0
	for _, data := range frames {
		if ps.p.DecodeLayers(data, &ps.decoded) == nil && ps.get(LayerTypeMAD) != nil {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("DecodingLayerParser found %d MADs", n)
	}
	if allocs := testing.AllocsPerRun(3, func() {
		for _, data := range frames {
			_ = ps.p.DecodeLayers(data, &ps.decoded)
		}
	}); allocs != 0 {
		t.Fatalf("DecodingLayerParser over rping: %v allocations per run", allocs)
	}

	// A MAD of another class keeps its header and bytes, with no message.
	b := make([]byte, mad.MADLen)
	h := mad.Header{BaseVersion: 1, MgmtClass: 0x03, ClassVersion: 2, Method: mad.MethodGet, TID: 9}
	_ = h.Marshal(b)
	var l MAD
	if err := l.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil || l.Message != nil || l.Header != h || !errors.Is(l.Err, mad.ErrNotCM) {
		t.Fatalf("SA MAD: %v %+v", err, l)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := l.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil || !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("SA MAD serialized: %v", err)
	}
	if err := l.DecodeFromBytes(b[:100], gopacket.NilDecodeFeedback); err == nil {
		t.Fatal("short MAD decoded")
	}
}
