package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestBuildOuter: frames built with the outer headers of an earlier frame
// (BuildOuter) are byte for byte Build's, for every opcode shape, payload
// length (the three lengths and the IPv4 checksum change), with and
// without a VLAN tag and a TOS; IPv6 takes no OuterHeaders and builds as
// Build.
func TestBuildOuter(t *testing.T) {
	ops := []Opcode{RCRDMAWriteOnly, RCRDMAWriteFirst, RCRDMAWriteMiddle, RCRDMAWriteLast, RCSendOnlyWithImmediate,
		RCAcknowledge, RCRDMAReadRequest, RCAtomicAcknowledge, RCSendLastWithInvalidate, RCRDMAWriteOnlyWithImm}
	for _, vlan := range []bool{false, true} {
		f := benchFrame()
		f.HasVLAN, f.VLAN, f.TrafficClass = vlan, 0x2005, 0x62
		first := make([]byte, 9000)
		n, err := Build(first, &f, 64)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := NewICRCHeader(first[f.l2Len() : n-ICRCLen])
		o, ok := NewOuterHeaders(first[:n], &f)
		if !ok {
			t.Fatalf("vlan %v: no outer headers", vlan)
		}
		for _, op := range ops {
			for _, size := range []int{0, 1, 3, 64, 1024, 4096} {
				g := f
				g.BTH.Opcode, g.BTH.PSN = op, PSN(size*7+int(op))
				want, got := make([]byte, 9000), make([]byte, 9000)
				wn, werr := Build(want, &g, size)
				gn, gerr := BuildOuter(got, &g, size, &h, &o)
				if wn != gn || (werr == nil) != (gerr == nil) || !bytes.Equal(want[:wn], got[:gn]) {
					t.Fatalf("vlan %v %v %d B: BuildOuter %d %v, Build %d %v\n% x\n% x", vlan, op, size, gn, gerr, wn, werr, got[:gn], want[:wn])
				}
			}
		}
	}
	f := benchFrame()
	f.SrcIP, f.DstIP = netip.MustParseAddr("2001:2::1"), netip.MustParseAddr("2001:2::2")
	buf := make([]byte, 9000)
	n, _ := Build(buf, &f, 64)
	if _, ok := NewOuterHeaders(buf[:n], &f); ok {
		t.Fatal("IPv6: outer headers taken")
	}
	var o OuterHeaders
	want := make([]byte, 9000)
	wn, _ := Build(want, &f, 64)
	if gn, err := BuildOuter(buf, &f, 64, nil, &o); err != nil || !bytes.Equal(buf[:gn], want[:wn]) {
		t.Fatalf("IPv6 with unset outer headers: %v", err)
	}
}

// BenchmarkBuildOuter compares BuildOuter (transport's emitter since the
// outer headers are copied) with BuildICRC on the same 64-byte WRITE,
// alternating blocks (buildouter/buildicrc, each one's fastest ns).
func BenchmarkBuildOuter(b *testing.B) {
	f := benchFrame()
	buf := make([]byte, f.Len(64))
	n, _ := Build(buf, &f, 64)
	h, _ := NewICRCHeader(buf[EthernetLen : n-ICRCLen])
	o, _ := NewOuterHeaders(buf[:n], &f)
	b.ReportAllocs()
	alternate(b, "buildouter", func() uint32 {
		f.BTH.PSN = f.BTH.PSN.Add(1)
		n, _ := BuildOuter(buf, &f, 64, &h, &o)
		return uint32(n)
	}, "buildicrc", func() uint32 {
		f.BTH.PSN = f.BTH.PSN.Add(1)
		n, _ := BuildICRC(buf, &f, 64, &h)
		return uint32(n)
	})
}
