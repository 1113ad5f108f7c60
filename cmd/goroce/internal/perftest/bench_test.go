package perftest

import "testing"

func TestTargetVAddr(t *testing.T) {
	// 64-byte messages, cycle buffer 4096, one QP: one BuffSize (a page)
	// past the buffer's start, as the page-aligned vaddrs of the captures.
	if got := TargetVAddr(0x55e227702000, 1, 0, 64, 4096); got != 0x55e227703000 {
		t.Fatalf("TargetVAddr = %#x", got)
	}
	if got := TargetVAddr(0x1000, 2, 1, 65536, 4096); got != 0x1000+3*65536 {
		t.Fatalf("TargetVAddr = %#x", got)
	}
	if BuffSize(8, -1) != 8 {
		t.Fatal("BuffSize with a negative cycle buffer")
	}
}

func BenchmarkEncodeKeyMsg(b *testing.B) {
	k := KeyMsg{OutReads: 0x80, QPN: 0x16, PSN: 0xd73a80, RKey: 0x7a0, VAddr: 0x55980184a000}
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeKeyMsg(k)
	}
}

func BenchmarkDecodeKeyMsg(b *testing.B) {
	m := EncodeKeyMsg(KeyMsg{OutReads: 0x80, QPN: 0x16, PSN: 0xd73a80, RKey: 0x7a0, VAddr: 0x55980184a000})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeKeyMsg(m[:]); err != nil {
			b.Fatal(err)
		}
	}
}
