package gopacketroce

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

type capture struct {
	name   string
	frames [][]byte
}

// loadCaptures reads every rxe capture with gopacket's pcapgo.
func loadCaptures(t testing.TB) []capture {
	t.Helper()
	files, err := filepath.Glob("../testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in ../testdata/rxe: %v", err)
	}
	var out []capture
	for _, fn := range files {
		f, err := os.Open(fn)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("%s: link type %v", fn, r.LinkType())
		}
		c := capture{name: filepath.Base(fn)}
		for {
			data, _, err := r.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", fn, err)
			}
			c.frames = append(c.frames, data)
		}
		f.Close()
		out = append(out, c)
	}
	return out
}

// layerGetter abstracts a gopacket.Packet and a DecodingLayerParser result.
type layerGetter func(gopacket.LayerType) gopacket.Layer

// checkAgainstWire compares the RoCE layers with wire.Parse's views.
func checkAgainstWire(t *testing.T, where string, get layerGetter, p *wire.Packet) {
	t.Helper()
	bl, _ := get(LayerTypeBTH).(*BTH)
	if bl == nil {
		t.Fatalf("%s: no BTH layer", where)
	}
	if bl.Fields() != p.BTH.Fields() {
		t.Fatalf("%s: BTH %+v, wire %+v", where, bl.Fields(), p.BTH.Fields())
	}
	if bl.ICRC() != p.ICRC || len(bl.PadBytes) != p.Pad {
		t.Fatalf("%s: ICRC %#x pad %d, wire %#x pad %d", where, bl.ICRC(), len(bl.PadBytes), p.ICRC, p.Pad)
	}
	ext := []struct {
		lt   gopacket.LayerType
		wire []byte
	}{
		{LayerTypeRETH, p.RETH}, {LayerTypeAETH, p.AETH}, {LayerTypeAtomicETH, p.AtomicETH},
		{LayerTypeAtomicAckETH, p.AtomicAckETH}, {LayerTypeImmDt, p.ImmDt}, {LayerTypeIETH, p.IETH},
		{LayerTypeDETH, p.DETH}, {LayerTypeCNP, p.CNPPad},
	}
	for _, e := range ext {
		l := get(e.lt)
		switch {
		case l == nil && e.wire != nil:
			t.Fatalf("%s: %v missing", where, e.lt)
		case l != nil && e.wire == nil:
			t.Fatalf("%s: unexpected %v", where, e.lt)
		case l != nil && !bytes.Equal(l.LayerContents(), e.wire):
			t.Fatalf("%s: %v % x, wire % x", where, e.lt, l.LayerContents(), e.wire)
		case l != nil && &l.LayerContents()[0] != &e.wire[0]:
			t.Fatalf("%s: %v is a copy, not a view", where, e.lt)
		}
	}
	if p.AETH != nil {
		a := get(LayerTypeAETH).(*AETH)
		if a.Syndrome() != p.AETH.Syndrome() || a.MSN() != p.AETH.MSN() {
			t.Fatalf("%s: AETH fields differ", where)
		}
	}
	var payload []byte
	if l := get(gopacket.LayerTypePayload); l != nil {
		payload = l.LayerContents()
	}
	if l := get(LayerTypeMAD); l != nil {
		if payload != nil {
			t.Fatalf("%s: a MAD and a payload layer", where)
		}
		payload = l.LayerContents()
		if m := l.(*MAD); (m.Message == nil) == (m.Err == nil) || (m.Message != nil && m.Header.MgmtClass != mad.ClassCM) {
			t.Fatalf("%s: MAD %v", where, m)
		}
	} else if p.BTH.Opcode() == wire.UDSendOnly && p.BTH.DestQP() == 1 {
		t.Fatalf("%s: UD SEND to QP 1 without a MAD layer", where)
	}
	if !bytes.Equal(payload, p.Payload) {
		t.Fatalf("%s: payload %d bytes, wire %d", where, len(payload), len(p.Payload))
	}
}

// TestCapturesMatchWire decodes every frame of every rxe capture with
// gopacket.NewPacket and compares the RoCE layers with wire.Parse.
func TestCapturesMatchWire(t *testing.T) {
	for _, c := range loadCaptures(t) {
		roce := 0
		for i, data := range c.frames {
			where := c.name + " #" + itoa(i+1)
			var p wire.Packet
			err := wire.Parse(data, &p)
			pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, noCopy)
			switch {
			case err == nil:
				roce++
				if f := pkt.ErrorLayer(); f != nil {
					t.Fatalf("%s: gopacket error %v", where, f.Error())
				}
				checkAgainstWire(t, where, pkt.Layer, &p)
				if ok, present := VerifyICRC(pkt); !ok || !present {
					t.Fatalf("%s: VerifyICRC = %v, %v", where, ok, present)
				}
				// Layer order: Ethernet, IPv4/6, UDP, BTH, ext..., [Payload].
				ls := pkt.Layers()
				if ls[3].LayerType() != LayerTypeBTH {
					t.Fatalf("%s: layer 3 is %v", where, ls[3].LayerType())
				}
			case errors.Is(err, wire.ErrNotRoCE), errors.Is(err, wire.ErrNotIP):
				if pkt.Layer(LayerTypeBTH) != nil {
					t.Fatalf("%s: BTH layer on a non-RoCE packet", where)
				}
				if _, present := VerifyICRC(pkt); present {
					t.Fatalf("%s: ICRC present on a non-RoCE packet", where)
				}
			default:
				t.Fatalf("%s: wire.Parse: %v", where, err)
			}
		}
		if roce == 0 {
			t.Fatalf("%s: no RoCE packets", c.name)
		}
		t.Logf("%s: %d frames, %d RoCEv2", c.name, len(c.frames), roce)
	}
}

// parser is a DecodingLayerParser for Ethernet/IP/UDP/RoCEv2.
type parser struct {
	eth     layers.Ethernet
	dot1q   layers.Dot1Q
	ip4     layers.IPv4
	ip6     layers.IPv6
	udp     layers.UDP
	roce    Layers
	payload gopacket.Payload
	p       *gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
}

func newParser() *parser {
	ps := &parser{decoded: make([]gopacket.LayerType, 0, 16)}
	dl := []gopacket.DecodingLayer{&ps.eth, &ps.dot1q, &ps.ip4, &ps.ip6, &ps.udp, &ps.payload}
	dl = append(dl, ps.roce.DecodingLayers()...)
	ps.p = gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, dl...)
	ps.p.IgnoreUnsupported = true // TCP in the captures
	return ps
}

func (ps *parser) get(lt gopacket.LayerType) gopacket.Layer {
	for _, d := range ps.decoded {
		if d != lt {
			continue
		}
		switch lt {
		case LayerTypeBTH:
			return &ps.roce.BTH
		case LayerTypeRETH:
			return &ps.roce.RETH
		case LayerTypeAETH:
			return &ps.roce.AETH
		case LayerTypeAtomicETH:
			return &ps.roce.AtomicETH
		case LayerTypeAtomicAckETH:
			return &ps.roce.AtomicAckETH
		case LayerTypeImmDt:
			return &ps.roce.ImmDt
		case LayerTypeIETH:
			return &ps.roce.IETH
		case LayerTypeDETH:
			return &ps.roce.DETH
		case LayerTypeCNP:
			return &ps.roce.CNP
		case LayerTypeMAD:
			return &ps.roce.MAD
		case gopacket.LayerTypePayload:
			return &ps.payload
		}
	}
	return nil
}

// TestDecodingLayerParser decodes every capture with a DecodingLayerParser,
// compares with wire.Parse, and checks that decoding does not allocate.
func TestDecodingLayerParser(t *testing.T) {
	ps := newParser()
	caps := loadCaptures(t)
	for _, c := range caps {
		for i, data := range c.frames {
			where := c.name + " #" + itoa(i+1)
			var p wire.Packet
			werr := wire.Parse(data, &p)
			err := ps.p.DecodeLayers(data, &ps.decoded)
			if werr != nil {
				if ps.get(LayerTypeBTH) != nil {
					t.Fatalf("%s: BTH decoded on a non-RoCE packet (%v)", where, werr)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: DecodeLayers: %v", where, err)
			}
			checkAgainstWire(t, where, ps.get, &p)
			var nl gopacket.Layer = &ps.ip4
			if p.IPv6 != nil {
				nl = &ps.ip6
			}
			if ok, present := VerifyICRCLayer(nl); !ok || !present {
				t.Fatalf("%s: VerifyICRCLayer = %v, %v", where, ok, present)
			}
		}
	}
	// Zero allocations per packet, ICRC check included.
	frames := caps[0].frames
	allocs := testing.AllocsPerRun(3, func() {
		for _, data := range frames {
			if ps.p.DecodeLayers(data, &ps.decoded) == nil {
				VerifyICRCLayer(&ps.ip4)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodingLayerParser: %v allocations per run of %d frames", allocs, len(frames))
	}
}

// buildFrame builds a frame with package wire.
func buildFrame(t testing.TB, f *wire.Frame, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, f.Len(len(payload)))
	n, err := wire.BuildPayload(buf, f, payload)
	if err != nil {
		t.Fatalf("Build %v: %v", f.BTH.Opcode, err)
	}
	return buf[:n]
}

func testFrame(op wire.Opcode, v6 bool) wire.Frame {
	f := wire.Frame{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 1}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("198.18.0.12"), DstIP: netip.MustParseAddr("198.18.0.11"),
		HopLimit: 64, IPID: 0x1234, SrcPort: 0xC123,
		BTH:          wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 0xFFFFFE, AckReq: true, SE: true},
		RETH:         wire.RETHFields{VA: 0x7f00dead0000, RKey: 0x1234, DMALen: 4099},
		AETH:         wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(12), MSN: 77},
		AtomicETH:    wire.AtomicETHFields{VA: 0x7f00beef0008, RKey: 0x99, SwapAdd: 5, Compare: 7},
		AtomicAckETH: 0xAABBCCDDEEFF0011,
		ImmDt:        0xCAFEF00D,
		IETH:         0x4242,
		DETH:         wire.DETHFields{QKey: 0x11111111, SrcQP: 0x22},
	}
	if v6 {
		f.SrcIP = netip.MustParseAddr("2001:db8::12")
		f.DstIP = netip.MustParseAddr("2001:db8::11")
	}
	if op == wire.CNP {
		f.BTH = wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, BECN: true, DestQP: 0x11}
	}
	return f
}

// TestEveryOpcode builds every valid opcode with package wire (IPv4 and
// IPv6, payload lengths hitting every PadCnt) and decodes it both ways.
func TestEveryOpcode(t *testing.T) {
	ps := newParser()
	for op := 0; op < 256; op++ {
		o := wire.Opcode(op)
		if !o.Valid() {
			continue
		}
		for _, v6 := range []bool{false, true} {
			lens := []int{0}
			if o.Info().Payload {
				lens = []int{0, 1, 2, 3, 4, 256}
				if pos := o.Info().Pos; pos == wire.PosFirst || pos == wire.PosMiddle {
					lens = []int{256} // a full PMTU, no pad
				}
			}
			for _, n := range lens {
				f := testFrame(o, v6)
				payload := bytes.Repeat([]byte{0xA5}, n)
				frame := buildFrame(t, &f, payload)
				where := o.String() + " len " + itoa(n)
				if v6 {
					where += " v6"
				}
				var p wire.Packet
				if err := wire.Parse(frame, &p); err != nil {
					t.Fatalf("%s: wire.Parse: %v", where, err)
				}
				pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, noCopy)
				if e := pkt.ErrorLayer(); e != nil {
					t.Fatalf("%s: %v", where, e.Error())
				}
				checkAgainstWire(t, where, pkt.Layer, &p)
				if ok, present := VerifyICRC(pkt); !ok || !present {
					t.Fatalf("%s: VerifyICRC = %v %v", where, ok, present)
				}
				if err := ps.p.DecodeLayers(frame, &ps.decoded); err != nil {
					t.Fatalf("%s: DecodeLayers: %v", where, err)
				}
				checkAgainstWire(t, where+" (DLP)", ps.get, &p)
				// Corrupt a payload or header byte: the ICRC must fail.
				frame[len(frame)-5] ^= 0x40
				pkt = gopacket.NewPacket(frame, layers.LayerTypeEthernet, noCopy)
				if ok, present := VerifyICRC(pkt); ok || !present {
					t.Fatalf("%s corrupted: VerifyICRC = %v %v", where, ok, present)
				}
			}
		}
	}
}

// TestSerializeRoundTrip re-serializes every decoded RoCE frame of the
// captures: as decoded it is byte-identical; with FixLengths and FixICRC it
// parses with wire and matches.
func TestSerializeRoundTrip(t *testing.T) {
	for _, c := range loadCaptures(t) {
		for i, data := range c.frames {
			var p wire.Packet
			if wire.Parse(data, &p) != nil {
				continue
			}
			where := c.name + " #" + itoa(i+1)
			pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, noCopy)
			var sl []gopacket.SerializableLayer
			for _, l := range pkt.Layers() {
				s, ok := l.(gopacket.SerializableLayer)
				if !ok {
					t.Fatalf("%s: %v is not serializable", where, l.LayerType())
				}
				sl = append(sl, s)
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, sl...); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			want := data[:len(p.Eth)+len(p.L3)] // without Ethernet minimum-size padding
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("%s: re-serialized frame differs\n got % x\nwant % x", where, buf.Bytes(), want)
			}
			// Drop the pad: FixLengths must recompute everything.
			buf = gopacket.NewSerializeBuffer()
			opts := gopacket.SerializeOptions{FixLengths: true} // the IPv4 checksum is unchanged; UDP stays 0
			if ip, ok := sl[1].(*layers.IPv4); ok {
				ip.Length = 0
			}
			for _, l := range sl {
				switch l := l.(type) {
				case *layers.UDP:
					l.Length = 0
				case *BTH:
					l.PadBytes, l.Trailer = nil, nil
				}
			}
			if err := gopacket.SerializeLayers(buf, opts, sl...); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			out := buf.Bytes()
			if err := FixICRC(out); err != nil {
				t.Fatalf("%s: FixICRC: %v", where, err)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("%s: rebuilt frame differs\n got % x\nwant % x", where, out, want)
			}
		}
	}
}

// TestTruncated cuts a frame of every opcode at every length: gopacket must
// not panic, must not report a present ICRC once the capture is marked
// truncated, and keeps the BTH layer when the BTH itself was captured.
func TestTruncated(t *testing.T) {
	for op := 0; op < 256; op++ {
		o := wire.Opcode(op)
		if !o.Valid() {
			continue
		}
		f := testFrame(o, false)
		n := 0
		if o.Info().Payload {
			n = 256
		}
		frame := buildFrame(t, &f, bytes.Repeat([]byte{1}, n))
		bthEnd := wire.EthernetLen + wire.IPv4Len + wire.UDPLen + wire.BTHLen
		for cut := 0; cut < len(frame); cut++ {
			pkt := gopacket.NewPacket(frame[:cut], layers.LayerTypeEthernet, noCopy)
			if _, present := VerifyICRC(pkt); present {
				t.Fatalf("%v cut at %d: ICRC present", o, cut)
			}
			if cut >= bthEnd && pkt.Layer(LayerTypeBTH) == nil {
				t.Fatalf("%v cut at %d: no BTH layer", o, cut)
			}
			if !pkt.Metadata().Truncated && cut >= wire.EthernetLen+wire.IPv4Len {
				t.Fatalf("%v cut at %d: not marked truncated", o, cut)
			}
		}
	}
}

// TestRandomBytes feeds random UDP payloads to port 4791 through both
// decoders; nothing may panic and a decode that succeeds agrees with wire.
func TestRandomBytes(t *testing.T) {
	seed := uint64(os.Getpid())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ps := newParser()
	f := testFrame(wire.RCSendOnly, false)
	base := buildFrame(t, &f, make([]byte, 64))
	for i := 0; i < 8000; i++ {
		frame := append([]byte(nil), base...)
		// Randomize the BTH onwards, sometimes only a few bytes.
		start := wire.EthernetLen + wire.IPv4Len + wire.UDPLen
		if rng.IntN(2) == 0 {
			for j := start; j < len(frame); j++ {
				frame[j] = byte(rng.Uint32())
			}
		} else {
			for range 1 + rng.IntN(4) {
				frame[start+rng.IntN(len(frame)-start)] = byte(rng.Uint32())
			}
		}
		frame = frame[:start+rng.IntN(len(frame)-start+1)]
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, noCopy)
		VerifyICRC(pkt)
		_ = pkt.String()
		err := ps.p.DecodeLayers(frame, &ps.decoded)
		if err == nil && ps.get(LayerTypeBTH) != nil {
			var p wire.Packet
			// wire.Parse uses the IP/UDP lengths; our frame was cut, so
			// compare against ParseBTH of what the UDP layer handed over.
			if werr := wire.ParseBTH(ps.udp.Payload, &p); werr != nil {
				t.Fatalf("seed %d iter %d: DLP ok, wire %v", seed, i, werr)
			}
			if ps.roce.BTH.Fields() != p.BTH.Fields() {
				t.Fatalf("seed %d iter %d: BTH differs", seed, i)
			}
		}
	}
}

// noCopy decodes in place, so that layers are views of the frame.
var noCopy = gopacket.DecodeOptions{NoCopy: true}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

func BenchmarkDecodingLayerParser(b *testing.B) {
	ps := newParser()
	f := testFrame(wire.RCRDMAWriteOnly, false)
	frame := buildFrame(b, &f, make([]byte, 1024))
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := ps.p.DecodeLayers(frame, &ps.decoded); err != nil {
			b.Fatal(err)
		}
		if ok, _ := VerifyICRCLayer(&ps.ip4); !ok {
			b.Fatal("bad ICRC")
		}
	}
}
