package mad_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/goroce/goroce/mad"
)

// FuzzParse: Parse never panics, and whatever it accepts marshals to bytes
// that parse to the same header and message (reserved bits aside, which
// Marshal clears).
func FuzzParse(f *testing.F) {
	for _, b := range cmMADs(f, "rping.pcap") {
		f.Add(b)
	}
	for _, id := range []uint16{mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		b := bytes.Repeat([]byte{0xff}, mad.MADLen)
		h := mad.CMHeader(1, id)
		_ = h.Marshal(b)
		f.Add(b)
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := mad.Parse(b)
		if _, err := mad.ParseCMAHeader(b); err == nil && len(b) < mad.CMAHeaderLen {
			t.Fatal("ParseCMAHeader accepted a short buffer")
		}
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with message %T", err, m)
			}
			return
		}
		out := make([]byte, mad.MADLen)
		if err := mad.Marshal(h, m, out); err != nil {
			t.Fatalf("Marshal of a parsed %s: %v", m.Name(), err)
		}
		h2, m2, err := mad.Parse(out)
		if err != nil || h2 != h || !reflect.DeepEqual(m2, m) {
			t.Fatalf("round trip: %+v %+v %v\nwant %+v %+v", h2, m2, err, h, m)
		}
		if out2 := make([]byte, mad.MADLen); mad.Marshal(h2, m2, out2) != nil || !bytes.Equal(out, out2) {
			t.Fatal("second Marshal differs")
		}
	})
}
