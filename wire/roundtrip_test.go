package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"
)

// testSeed returns the seed for randomized tests: TEST_SEED if set, else a
// fixed value, logged so that a failure can be replayed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(0x60c0e)
	if s := os.Getenv("TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %#x (set TEST_SEED to replay)", seed)
	return seed
}

var (
	v4a = netip.MustParseAddr("198.18.0.11")
	v4b = netip.MustParseAddr("198.18.0.12")
	v6a = netip.MustParseAddr("2001:db8::11")
	v6b = netip.MustParseAddr("2001:db8::12")
)

// randFrame fills a Frame for opcode o with random field values, all within
// their wire widths. TVer is 0 and reserved bits are implied 0.
func randFrame(r *rand.Rand, o Opcode, v6, vlan bool) Frame {
	f := Frame{
		DstMAC:       [6]byte{2, 0, 0, 0, 0, byte(r.Uint32())},
		SrcMAC:       [6]byte{2, 0, 0, 0, 1, byte(r.Uint32())},
		HasVLAN:      vlan,
		VLAN:         uint16(r.Uint32()),
		SrcIP:        v4a,
		DstIP:        v4b,
		TrafficClass: uint8(r.Uint32()),
		HopLimit:     uint8(r.Uint32()),
		IPID:         uint16(r.Uint32()),
		SrcPort:      uint16(r.Uint32()),
		BTH: BTHFields{
			Opcode: o, SE: r.IntN(2) == 0, M: r.IntN(2) == 0, PKey: uint16(r.Uint32()),
			FECN: r.IntN(2) == 0, BECN: r.IntN(2) == 0, DestQP: r.Uint32() & qpnMask,
			AckReq: r.IntN(2) == 0, PSN: PSN(r.Uint32() & PSNMask),
		},
		RETH:         RETHFields{VA: r.Uint64(), RKey: r.Uint32(), DMALen: r.Uint32()},
		AETH:         AETHFields{Syndrome: Syndrome(r.Uint32() & 0x7F), MSN: r.Uint32() & 0xFFFFFF},
		AtomicETH:    AtomicETHFields{VA: r.Uint64(), RKey: r.Uint32(), SwapAdd: r.Uint64(), Compare: r.Uint64()},
		AtomicAckETH: r.Uint64(),
		ImmDt:        r.Uint32(),
		IETH:         r.Uint32(),
		DETH:         DETHFields{QKey: r.Uint32(), SrcQP: r.Uint32() & qpnMask},
	}
	if v6 {
		f.SrcIP, f.DstIP = v6a, v6b
		f.FlowLabel = r.Uint32() & 0xFFFFF
	}
	return f
}

// randPayloadLen picks a payload length legal for o.
func randPayloadLen(r *rand.Rand, o Opcode) int {
	in := o.Info()
	switch {
	case !in.Payload:
		return 0
	case in.Pos == PosFirst || in.Pos == PosMiddle:
		return 4 * (1 + r.IntN(256))
	}
	return r.IntN(1100)
}

// checkPacket asserts that p is the parse of f with n payload bytes.
func checkPacket(t *testing.T, p *Packet, f *Frame, payload []byte) {
	t.Helper()
	o := f.BTH.Opcode
	in := o.Info()
	want := f.BTH
	want.PadCnt = uint8((-len(payload)) & 3)
	if got := p.BTH.Fields(); got != want {
		t.Errorf("%s: BTH %+v, want %+v", o, got, want)
	}
	if p.Eth.Dst() != f.DstMAC || p.Eth.Src() != f.SrcMAC || p.HasVLAN != f.HasVLAN || (f.HasVLAN && p.VLAN != f.VLAN) {
		t.Errorf("%s: Ethernet/VLAN", o)
	}
	if p.SrcIP() != f.SrcIP.Unmap() || p.DstIP() != f.DstIP.Unmap() {
		t.Errorf("%s: IPs %v %v", o, p.SrcIP(), p.DstIP())
	}
	if p.IPv4 != nil {
		if p.IPv4.TOS() != f.TrafficClass || p.IPv4.TTL() != f.HopLimit || p.IPv4.ID() != f.IPID || !p.IPv4.DF() || !p.IPv4.ChecksumValid() {
			t.Errorf("%s: IPv4 fields", o)
		}
	} else if p.IPv6.TrafficClass() != f.TrafficClass || p.IPv6.HopLimit() != f.HopLimit || p.IPv6.FlowLabel() != f.FlowLabel {
		t.Errorf("%s: IPv6 fields", o)
	}
	if p.UDP.SrcPort() != f.SrcPort || p.UDP.DstPort() != UDPPort || p.UDP.Checksum() != 0 {
		t.Errorf("%s: UDP", o)
	}
	h := in.Headers
	present := func(name string, isNil bool, flag HeaderSet) bool {
		if isNil == (h&flag != 0) {
			t.Errorf("%s: %s present=%v, want %v", o, name, !isNil, h&flag != 0)
			return false
		}
		return !isNil
	}
	if present("RETH", p.RETH == nil, HasRETH) && p.RETH.Fields() != f.RETH {
		t.Errorf("%s: RETH", o)
	}
	if present("AETH", p.AETH == nil, HasAETH) && p.AETH.Fields() != f.AETH {
		t.Errorf("%s: AETH", o)
	}
	if present("AtomicETH", p.AtomicETH == nil, HasAtomicETH) && p.AtomicETH.Fields() != f.AtomicETH {
		t.Errorf("%s: AtomicETH", o)
	}
	if present("AtomicAckETH", p.AtomicAckETH == nil, HasAtomicAckETH) && p.AtomicAckETH.OrigValue() != f.AtomicAckETH {
		t.Errorf("%s: AtomicAckETH", o)
	}
	if present("ImmDt", p.ImmDt == nil, HasImmDt) && p.ImmDt.Imm() != f.ImmDt {
		t.Errorf("%s: ImmDt", o)
	}
	if present("IETH", p.IETH == nil, HasIETH) && p.IETH.RKey() != f.IETH {
		t.Errorf("%s: IETH", o)
	}
	if present("DETH", p.DETH == nil, HasDETH) && p.DETH.Fields() != f.DETH {
		t.Errorf("%s: DETH", o)
	}
	if present("CNPPad", p.CNPPad == nil, HasCNPPad) && !bytes.Equal(p.CNPPad, make([]byte, 16)) {
		t.Errorf("%s: CNPPad not zero", o)
	}
	if !bytes.Equal(p.Payload, payload) || p.Pad != int(want.PadCnt) {
		t.Errorf("%s: payload %d bytes pad %d, want %d pad %d", o, len(p.Payload), p.Pad, len(payload), want.PadCnt)
	}
	ipl := IPv4Len
	if p.IPv6 != nil {
		ipl = IPv6Len
	}
	if want := ipl + UDPLen + o.HeaderLen() + len(payload) + p.Pad + ICRCLen; len(p.L3) != want {
		t.Errorf("%s: L3 %d bytes, want %d", o, len(p.L3), want)
	}
	if !VerifyICRC(p.L3) || binary.LittleEndian.Uint32(p.L3[len(p.L3)-4:]) != p.ICRC {
		t.Errorf("%s: ICRC", o)
	}
}

// TestBuildParseEveryOpcode builds every valid opcode with random fields over
// IPv4/IPv6, with and without VLAN, parses it back and compares everything.
func TestBuildParseEveryOpcode(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 1))
	buf := make([]byte, 2048)
	for i := range 256 {
		o := Opcode(i)
		if !o.Valid() {
			if _, err := Build(buf, &Frame{SrcIP: v4a, DstIP: v4b, BTH: BTHFields{Opcode: o}}, 0); !errors.Is(err, ErrUnknownOpcode) {
				t.Errorf("%s: Build error %v, want ErrUnknownOpcode", o, err)
			}
			continue
		}
		for rep := range 8 {
			f := randFrame(r, o, rep&1 != 0, rep&2 != 0)
			payload := make([]byte, randPayloadLen(r, o))
			for j := range payload {
				payload[j] = byte(r.Uint32())
			}
			n, err := BuildPayload(buf, &f, payload)
			if err != nil {
				t.Fatalf("%s: %v", o, err)
			}
			if n != f.Len(len(payload)) {
				t.Errorf("%s: Build returned %d, Len says %d", o, n, f.Len(len(payload)))
			}
			if hl := f.HeaderLen(); !bytes.Equal(buf[hl:hl+len(payload)], payload) {
				t.Errorf("%s: payload moved", o)
			}
			var p Packet
			if err := Parse(buf[:n], &p); err != nil {
				t.Fatalf("%s (rep %d): Parse: %v", o, rep, err)
			}
			checkPacket(t, &p, &f, payload)
			// ParseL3 and ParseBTH agree.
			var q Packet
			if err := ParseL3(buf[len(p.Eth):n], &q); err != nil || !bytes.Equal(q.L3, p.L3) || q.Opcode() != o || q.Eth != nil {
				t.Errorf("%s: ParseL3: %v", o, err)
			}
			ipl := len(p.IPv4) + len(p.IPv6)
			if err := ParseBTH(p.L3[ipl+UDPLen:], &q); err != nil || q.BTH.Fields() != p.BTH.Fields() ||
				!bytes.Equal(q.Payload, payload) || q.L3 != nil || q.ICRC != p.ICRC {
				t.Errorf("%s: ParseBTH: %v", o, err)
			}
			// Rebuilding from the parsed packet gives the same bytes.
			var g Frame
			p.FillFrame(&g)
			out := make([]byte, n)
			if m, err := BuildPayload(out, &g, p.Payload); err != nil || m != n || !bytes.Equal(out, buf[:n]) {
				t.Errorf("%s: FillFrame rebuild differs (%v)", o, err)
			}
		}
	}
}

// flipCheck flips each byte of l3 (IP header through ICRC) in turn and
// classifies the result: bytes in masked must still parse, bytes in covered
// must give ErrBadICRC, all others must give some error.
func flipCheck(t *testing.T, frame []byte, l2 int, masked map[int]byte, covered func(int) bool) {
	t.Helper()
	var p Packet
	for i := l2; i < len(frame); i++ {
		x := byte(0xFF)
		if m, ok := masked[i-l2]; ok {
			x = m
		}
		frame[i] ^= x
		err := Parse(frame, &p)
		frame[i] ^= x
		_, isMasked := masked[i-l2]
		switch {
		case isMasked:
			if err != nil {
				t.Errorf("flip of masked L3 byte %d: %v", i-l2, err)
			}
		case covered(i - l2):
			if !errors.Is(err, ErrBadICRC) {
				t.Errorf("flip of covered L3 byte %d: %v, want ErrBadICRC", i-l2, err)
			} else if p.Opcode() != RCRDMAWriteOnlyWithImm || p.RETH == nil {
				t.Errorf("flip of L3 byte %d: packet not populated on ErrBadICRC", i-l2)
			}
		default:
			if err == nil {
				t.Errorf("flip of L3 byte %d went unnoticed", i-l2)
			}
		}
	}
	if err := Parse(frame, &p); err != nil {
		t.Fatalf("frame damaged: %v", err)
	}
}

func TestICRCMaskingIPv6(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 2))
	f := randFrame(r, RCRDMAWriteOnlyWithImm, true, true)
	buf := make([]byte, 512)
	n, err := BuildPayload(buf, &f, []byte("twenty-three byte data!"))
	if err != nil {
		t.Fatal(err)
	}
	const bth = IPv6Len + UDPLen
	masked := map[int]byte{
		0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, // traffic class, flow label
		7:  0xFF,           // hop limit
		46: 0xFF, 47: 0xFF, // UDP checksum
		bth + 4: 0xFF, // FECN, BECN, resv6
	}
	covered := func(i int) bool {
		return i >= 8 && i < 42 || // addresses, UDP source port
			i == bth+2 || i == bth+3 || // P_Key
			i >= bth+5 // DestQP .. ICRC
	}
	flipCheck(t, buf[:n], EthernetLen+VLANTagLen, masked, covered)
}

func TestICRCMaskingIPv4(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 3))
	f := randFrame(r, RCRDMAWriteOnlyWithImm, false, false)
	buf := make([]byte, 512)
	n, err := BuildPayload(buf, &f, []byte("twenty-three byte data!"))
	if err != nil {
		t.Fatal(err)
	}
	const bth = IPv4Len + UDPLen
	masked := map[int]byte{1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF, 26: 0xFF, 27: 0xFF, bth + 4: 0xFF}
	covered := func(i int) bool {
		return i == 4 || i == 5 || // Identification
			i >= 12 && i < 22 || // addresses, UDP source port
			i == bth+2 || i == bth+3 || i >= bth+5
	}
	flipCheck(t, buf[:n], EthernetLen, masked, covered)
}

// TestIPv4Options: options are skipped by Parse and covered by the ICRC.
func TestIPv4Options(t *testing.T) {
	f := randFrame(rand.New(rand.NewPCG(testSeed(t), 4)), RCSendOnly, false, false)
	buf := make([]byte, 256)
	n, _ := BuildPayload(buf, &f, []byte("hello"))
	fr := make([]byte, 0, n+4)
	fr = append(fr, buf[:EthernetLen+IPv4Len]...)
	fr = append(fr, 1, 1, 1, 0) // NOP, NOP, NOP, EOL
	fr = append(fr, buf[EthernetLen+IPv4Len:n]...)
	ip := IPv4(fr[EthernetLen:])
	ip[0] = 0x46
	ip.SetTotalLen(ip.TotalLen() + 4)
	ip.SetChecksum(ip.CalculateChecksum())
	l3 := fr[EthernetLen:]
	PutICRC(l3[len(l3)-4:], ICRC(l3[:len(l3)-4]))
	var p Packet
	if err := Parse(fr, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.IPv4) != 24 || string(p.Payload) != "hello" || !p.IPv4.ChecksumValid() {
		t.Errorf("IPv4 %d bytes, payload %q", len(p.IPv4), p.Payload)
	}
	fr[EthernetLen+21] ^= 1 // an option byte
	if err := Parse(fr, &p); !errors.Is(err, ErrBadICRC) {
		t.Errorf("option change: %v, want ErrBadICRC", err)
	}
}

// TestParseErrors damages a good frame in one way at a time.
func TestParseErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 5))
	build := func(o Opcode, v6 bool, payload int) []byte {
		f := randFrame(r, o, v6, false)
		buf := make([]byte, 2048)
		n, err := BuildPayload(buf, &f, make([]byte, payload))
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	refresh := func(fr []byte) { // recompute the ICRC after an edit
		l3 := fr[EthernetLen:]
		if len(l3) < IPv6Len {
			return
		}
		n := IPv6Len + int(IPv6(l3).PayloadLen())
		if l3[0]>>4 == 4 {
			n = int(IPv4(l3).TotalLen())
		}
		if n > len(l3) || n < IPv6Len {
			return
		}
		l3 = l3[:n]
		PutICRC(l3[len(l3)-4:], ICRC(l3[:len(l3)-4]))
	}
	const ip4, udp4, bth4 = EthernetLen, EthernetLen + IPv4Len, EthernetLen + IPv4Len + UDPLen
	const ip6, udp6 = EthernetLen, EthernetLen + IPv6Len
	cases := []struct {
		name string
		make func() []byte
		want error
	}{
		{"empty", func() []byte { return nil }, ErrTruncated},
		{"arp", func() []byte { fr := build(RCAcknowledge, false, 0); fr[12], fr[13] = 0x08, 0x06; return fr }, ErrNotIP},
		{"vlan short", func() []byte { fr := build(RCAcknowledge, false, 0); fr[12], fr[13] = 0x81, 0; return fr[:16] }, ErrTruncated},
		{"v4 ethertype v6 header", func() []byte { fr := build(RCAcknowledge, true, 0); fr[12], fr[13] = 0x08, 0x00; return fr }, ErrBadIPHeader},
		{"ihl 4", func() []byte { fr := build(RCAcknowledge, false, 0); fr[ip4] = 0x44; return fr }, ErrBadIPHeader},
		{"fragment", func() []byte { fr := build(RCAcknowledge, false, 0); fr[ip4+6] = 0x20; return fr }, ErrBadIPHeader},
		{"tcp", func() []byte { fr := build(RCAcknowledge, false, 0); fr[ip4+9] = 6; return fr }, ErrNotRoCE},
		{"v6 hop-by-hop", func() []byte { fr := build(RCAcknowledge, true, 0); fr[ip6+6] = 0; return fr }, ErrNotRoCE},
		{"total len 27", func() []byte { fr := build(RCAcknowledge, false, 0); IPv4(fr[ip4:]).SetTotalLen(27); return fr }, ErrBadIPLength},
		{"v6 payload len 7", func() []byte { fr := build(RCAcknowledge, true, 0); IPv6(fr[ip6:]).SetPayloadLen(7); return fr }, ErrBadIPLength},
		{"total len past end", func() []byte { fr := build(RCAcknowledge, false, 0); IPv4(fr[ip4:]).SetTotalLen(49); return fr }, ErrTruncated},
		{"dst port 4792", func() []byte { fr := build(RCAcknowledge, false, 0); fr[udp4+3]++; return fr }, ErrNotRoCE},
		{"udp len short", func() []byte { fr := build(RCAcknowledge, false, 0); fr[udp4+5]--; return fr }, ErrBadUDPLength},
		{"udp len long v6", func() []byte { fr := build(RCAcknowledge, true, 0); fr[udp6+5]++; return fr }, ErrBadUDPLength},
		{"ip len short of bth", func() []byte {
			fr := build(RCSendOnly, false, 0)
			IPv4(fr[ip4:]).SetTotalLen(20 + 8 + 8)
			UDP(fr[udp4:]).SetLength(16)
			return fr
		}, ErrTruncated},
		{"ip len short of reth", func() []byte {
			fr := build(RCRDMAReadRequest, false, 0)
			IPv4(fr[ip4:]).SetTotalLen(20 + 8 + 12 + 8 + 4)
			UDP(fr[udp4:]).SetLength(8 + 12 + 8 + 4)
			return fr
		}, ErrTruncated},
		{"tver 1", func() []byte { fr := build(RCSendOnly, false, 4); fr[bth4+1] |= 1; return fr }, ErrBadTVer},
		{"opcode 0x15", func() []byte { fr := build(RCSendOnly, false, 4); fr[bth4] = 0x15; return fr }, ErrUnknownOpcode},
		{"opcode flush with payload", func() []byte { fr := build(RCSendOnly, false, 40); fr[bth4] = 0x1C; return fr }, ErrBadPayload},
		{"opcode 0x1E", func() []byte { fr := build(RCSendOnly, false, 16); fr[bth4] = 0x1E; return fr }, ErrUnknownOpcode},
		{"opcode RD", func() []byte { fr := build(RCSendOnly, false, 16); fr[bth4] = 0x44; return fr }, ErrUnknownOpcode},
		{"pad on first", func() []byte { fr := build(RCSendFirst, false, 16); fr[bth4+1] |= 0x10; return fr }, ErrBadPad},
		{"pad on middle", func() []byte { fr := build(RCRDMAReadResponseMiddle, false, 16); fr[bth4+1] |= 0x30; return fr }, ErrBadPad},
		{"pad > payload", func() []byte { fr := build(RCSendOnly, false, 0); fr[bth4+1] |= 0x10; return fr }, ErrBadPad},
		{"pad on ack", func() []byte { fr := build(RCAcknowledge, false, 0); fr[bth4+1] |= 0x30; return fr }, ErrBadPad},
		{"payload on ack", func() []byte { fr := build(RCSendOnly, false, 8); fr[bth4] = byte(RCAcknowledge); return fr }, ErrBadPayload},
		{"payload on cnp", func() []byte { fr := build(RCSendOnly, false, 20); fr[bth4] = byte(CNP); return fr }, ErrBadPayload},
		{"bad icrc", func() []byte { fr := build(RCSendOnly, false, 9); fr[len(fr)-1] ^= 0x80; return fr }, ErrBadICRC},
	}
	for _, c := range cases {
		fr := c.make()
		if len(fr) > EthernetLen && c.want != ErrBadICRC {
			refresh(fr) // so that only the intended defect remains
		}
		var p Packet
		if err := Parse(fr, &p); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestParseIgnoresTrailer: L2 padding and an FCS after the IP packet are ignored.
func TestParseIgnoresTrailer(t *testing.T) {
	f := randFrame(rand.New(rand.NewPCG(testSeed(t), 6)), RCAcknowledge, false, false)
	buf := make([]byte, 128)
	n, _ := Build(buf, &f, 0) // 62 bytes: the MAC pads it to 60+FCS... and captures may show more
	for extra := 0; extra <= 20; extra++ {
		var p Packet
		if err := Parse(buf[:n+extra], &p); err != nil {
			t.Fatalf("+%d bytes: %v", extra, err)
		}
		if len(p.Eth)+len(p.L3) != n {
			t.Fatalf("+%d bytes: frame length %d", extra, len(p.Eth)+len(p.L3))
		}
	}
}

func TestBuildErrors(t *testing.T) {
	f := randFrame(rand.New(rand.NewPCG(testSeed(t), 7)), RCSendOnly, false, true)
	need := f.Len(100)
	buf := make([]byte, need)
	for size := range need {
		if _, err := Build(buf[:size], &f, 100); !errors.Is(err, ErrBufferTooSmall) {
			t.Fatalf("buffer %d of %d: %v", size, need, err)
		}
	}
	if n, err := Build(buf, &f, 100); err != nil || n != need {
		t.Fatalf("exact buffer: %d %v", n, err)
	}
	if _, err := BuildPayload(buf[:f.HeaderLen()+50], &f, make([]byte, 100)); !errors.Is(err, ErrBufferTooSmall) {
		t.Errorf("BuildPayload short: %v", err)
	}
	g := f
	g.DstIP = v6b
	if _, err := Build(buf, &g, 0); !errors.Is(err, ErrMixedIPVersions) {
		t.Errorf("mixed: %v", err)
	}
	g = f
	g.SrcIP = netip.Addr{}
	if _, err := Build(buf, &g, 0); !errors.Is(err, ErrMixedIPVersions) {
		t.Errorf("zero address: %v", err)
	}
	g = f
	g.BTH.Opcode = RCAcknowledge
	if _, err := Build(buf, &g, 4); !errors.Is(err, ErrBadPayloadLen) {
		t.Errorf("payload on ACK: %v", err)
	}
	g = f
	g.BTH.Opcode = RCRDMAWriteMiddle
	if _, err := Build(buf, &g, 99); !errors.Is(err, ErrBadPayloadLen) {
		t.Errorf("unaligned MIDDLE: %v", err)
	}
	if _, err := Build(buf, &f, -1); !errors.Is(err, ErrBadPayloadLen) {
		t.Errorf("negative payload: %v", err)
	}
	big := make([]byte, 70000)
	if _, err := Build(big, &f, 65536); !errors.Is(err, ErrBadPayloadLen) {
		t.Errorf("oversize payload: %v", err)
	}
	// IPv4-mapped IPv6 (RoCE GID form) builds IPv4.
	g = f
	g.SrcIP, g.DstIP = netip.AddrFrom16(v4a.As16()), netip.AddrFrom16(v4b.As16())
	n, err := Build(buf, &g, 100)
	var p Packet
	if err != nil || Parse(buf[:n], &p) != nil || p.IPv4 == nil || p.SrcIP() != v4a {
		t.Errorf("IPv4-mapped: %v", err)
	}
}

// TestTruncation parses every prefix of every captured frame: each prefix
// shorter than the IP packet is ErrTruncated (or, for TCP, ErrNotRoCE), the
// full frame parses.
func TestTruncation(t *testing.T) {
	for _, c := range loadCaptures(t) {
		for i, rec := range c.recs {
			var full Packet
			fullErr := Parse(rec.Data, &full)
			end := len(rec.Data)
			if fullErr == nil {
				end = len(full.Eth) + len(full.L3)
			}
			for k := 0; k < len(rec.Data); k++ {
				var p Packet
				err := Parse(rec.Data[:k], &p)
				switch {
				case fullErr != nil: // TCP: never a successful parse
					if err == nil {
						t.Fatalf("%s #%d prefix %d of a non-RoCE frame parsed", c.name, i, k)
					}
				case k < end:
					if !errors.Is(err, ErrTruncated) {
						t.Fatalf("%s #%d prefix %d/%d: %v, want ErrTruncated", c.name, i, k, end, err)
					}
				default:
					if err != nil {
						t.Fatalf("%s #%d prefix %d: %v", c.name, i, k, err)
					}
				}
			}
		}
	}
}

// TestNoAllocs guards the zero-allocation promise of the per-packet paths.
func TestNoAllocs(t *testing.T) {
	f := randFrame(rand.New(rand.NewPCG(testSeed(t), 8)), RCRDMAWriteOnly, false, false)
	buf := make([]byte, 2048)
	payload := make([]byte, 1024)
	var p Packet
	n, _ := BuildPayload(buf, &f, payload)
	bad := append([]byte(nil), buf[:n]...)
	bad[n-1] ^= 1
	short := buf[:n-1]
	for name, fn := range map[string]func(){
		"Build":           func() { _, _ = Build(buf, &f, len(payload)) },
		"Parse":           func() { _ = Parse(buf[:n], &p) },
		"Parse/BadICRC":   func() { _ = Parse(bad, &p) },
		"Parse/Truncated": func() { _ = Parse(short, &p) },
		"ICRC":            func() { _ = ICRC(buf[EthernetLen : n-4]) },
	} {
		if a := testing.AllocsPerRun(100, fn); a != 0 {
			t.Errorf("%s: %v allocs/op", name, a)
		}
	}
}
