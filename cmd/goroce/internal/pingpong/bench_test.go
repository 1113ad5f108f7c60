package pingpong

import "testing"

func BenchmarkEncode(b *testing.B) {
	d := Dest{QPN: 0x11, PSN: 0x226416, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 11}}
	b.ReportAllocs()
	for b.Loop() {
		_ = Encode(d)
	}
}

func BenchmarkDecode(b *testing.B) {
	m := Encode(Dest{QPN: 0x11, PSN: 0x226416, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 11}})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(m[:]); err != nil {
			b.Fatal(err)
		}
	}
}
