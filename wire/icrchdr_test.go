package wire

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// TestICRCHeaderSum: for packets of one QP with every varying field
// random (lengths, IP ID, opcode, SE/M/pad, AckReq, PSN), Sum equals ICRC
// and Matches holds; a packet that differs in an invariant field does not
// match.
func TestICRCHeaderSum(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	tmpl := benchFrame()
	buf := make([]byte, 9000)
	n, err := Build(buf, &tmpl, 64)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := NewICRCHeader(buf[EthernetLen : n-ICRCLen])
	if !ok {
		t.Fatal("NewICRCHeader refused an IPv4 RoCE packet")
	}
	ops := []Opcode{RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly, RCRDMAWriteFirst, RCRDMAWriteMiddle, RCRDMAWriteOnly}
	for i := range 2000 {
		f := tmpl
		f.IPID = uint16(rng.Uint32())
		f.BTH.Opcode = ops[rng.IntN(len(ops))]
		f.BTH.SE = rng.IntN(2) == 1
		f.BTH.M = rng.IntN(2) == 1
		f.BTH.AckReq = rng.IntN(2) == 1
		f.BTH.PSN = PSN(rng.Uint32() & 0xFFFFFF)
		payload := 4 * rng.IntN(1025) // FIRST and MIDDLE carry whole words
		if f.BTH.Opcode == RCSendOnly || f.BTH.Opcode == RCRDMAWriteOnly || f.BTH.Opcode == RCSendLast {
			payload = rng.IntN(4097)
		}
		n, err := Build(buf, &f, payload)
		if err != nil {
			t.Fatalf("seed %d packet %d: %v", seed, i, err)
		}
		l3 := buf[EthernetLen : n-ICRCLen]
		if !h.Matches(l3) {
			t.Fatalf("seed %d packet %d: Matches false for a packet of the template's QP (%v)", seed, i, f.BTH)
		}
		if got, want := h.Sum(l3), ICRC(l3); got != want {
			t.Fatalf("seed %d packet %d (%v, %d B): Sum %#08x, ICRC %#08x", seed, i, f.BTH, payload, got, want)
		}
	}
	for _, change := range []func(*Frame){
		func(f *Frame) { f.BTH.DestQP = 0x12 },
		func(f *Frame) { f.SrcPort++ },
		func(f *Frame) { f.DstIP = netip.MustParseAddr("198.18.0.3") },
		func(f *Frame) { f.BTH.PKey = 0x7FFF },
	} {
		f := tmpl
		change(&f)
		n, _ := Build(buf, &f, 64)
		if h.Matches(buf[EthernetLen : n-ICRCLen]) {
			t.Errorf("Matches true for a packet with another invariant field (%+v)", f.BTH)
		}
	}
	var zero ICRCHeader
	if zero.Matches(buf[EthernetLen : n-ICRCLen]) {
		t.Error("the zero ICRCHeader matches")
	}
}

func TestNewICRCHeaderRefuses(t *testing.T) {
	f := benchFrame()
	f.SrcIP, f.DstIP = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	buf := make([]byte, 1500)
	n, err := Build(buf, &f, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := NewICRCHeader(buf[EthernetLen : n-ICRCLen]); ok {
		t.Error("NewICRCHeader accepted IPv6")
	}
	if _, ok := NewICRCHeader(buf[:10]); ok {
		t.Error("NewICRCHeader accepted 10 bytes")
	}
}

// BenchmarkICRCHeader compares a precomputed ICRCHeader's Sum with ICRC on
// the same packet (alternate: the fastest block per call, sum-ns and
// icrc-ns, and their ratio sum/icrc).
func BenchmarkICRCHeader(b *testing.B) {
	for _, size := range append([]int{0, 16}, benchSizes...) {
		b.Run(sizeName(size), func(b *testing.B) {
			f := benchFrame()
			buf := make([]byte, f.Len(size))
			n, _ := Build(buf, &f, size)
			l3 := buf[EthernetLen : n-ICRCLen]
			h, _ := NewICRCHeader(l3)
			alternate(b, "sum", func() uint32 { return h.Sum(l3) }, "icrc", func() uint32 { return ICRC(l3) })
		})
	}
}

// BenchmarkBuildICRC compares BuildICRC (the precomputed header, as
// transport's emitter builds every RC and UC frame) with Build on the same
// frame, alternating blocks in one run (buildicrc/build, and each one's
// fastest ns per frame); allocs/op must be 0.
func BenchmarkBuildICRC(b *testing.B) {
	for _, size := range append([]int{0}, benchSizes...) {
		b.Run(sizeName(size), func(b *testing.B) {
			f := benchFrame()
			buf := make([]byte, f.Len(size))
			n, _ := Build(buf, &f, size)
			h, _ := NewICRCHeader(buf[EthernetLen : n-ICRCLen])
			b.ReportAllocs()
			alternate(b, "buildicrc", func() uint32 {
				f.BTH.PSN = f.BTH.PSN.Add(1)
				n, _ := BuildICRC(buf, &f, size, &h)
				return uint32(n)
			}, "build", func() uint32 {
				f.BTH.PSN = f.BTH.PSN.Add(1)
				n, _ := Build(buf, &f, size)
				return uint32(n)
			})
		})
	}
}

// TestBuildICRCAsBuild: BuildICRC writes the frame Build writes, for a
// template's packets (every opcode with the template's QP) and for a frame
// of another QP (the header does not match: ICRC is taken).
func TestBuildICRCAsBuild(t *testing.T) {
	tmpl := benchFrame()
	a, b := make([]byte, 9000), make([]byte, 9000)
	n, _ := Build(a, &tmpl, 64)
	h, _ := NewICRCHeader(a[EthernetLen : n-ICRCLen])
	for op := range 256 {
		if !Opcode(op).Valid() {
			continue
		}
		for _, other := range []bool{false, true} {
			f := tmpl
			f.BTH.Opcode = Opcode(op)
			f.BTH.PSN = PSN(op * 77)
			if other {
				f.BTH.DestQP++
			}
			size := 0
			if opTable[op].Payload {
				size = 1024
			}
			copy(b, a) // the payload Build leaves in place
			n1, err1 := Build(a, &f, size)
			n2, err2 := BuildICRC(b, &f, size, &h)
			if err1 != nil || err2 != nil || n1 != n2 || string(a[:n1]) != string(b[:n2]) {
				t.Errorf("%v (other QP %v): Build %d %v, BuildICRC %d %v, frames differ", f.BTH.Opcode, other, n1, err1, n2, err2)
			}
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { BuildICRC(b, &tmpl, 64, &h) }); allocs != 0 {
		t.Errorf("BuildICRC: %.1f allocations", allocs)
	}
}
