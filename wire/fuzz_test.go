package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse, ParseL3 and ParseBTH. Besides
// not panicking, a successful Parse must describe a frame that verifies and
// that Build reproduces field for field. The seed corpus in
// testdata/fuzz/FuzzParse holds real rxe frames (regenerate with
// WIRE_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus).
func FuzzParse(f *testing.F) {
	f.Add(mustHex(f, cx4CNP))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Packet
		_ = ParseL3(data, &p)
		_ = ParseBTH(data, &p)
		_ = ICRC(data)
		_ = VerifyICRC(data)
		err := Parse(data, &p)
		// The receive cache gives Parse's answer on a miss (refilling its
		// slot) and on the hit that follows.
		var c ICRCCache
		var cp Packet
		for range 2 {
			if e := c.Parse(data, &cp); e != err {
				t.Fatalf("ICRCCache.Parse %v, Parse %v", e, err)
			}
		}
		if err != nil {
			if errors.Is(err, ErrBadICRC) && VerifyICRC(p.L3) {
				t.Fatal("ErrBadICRC but the ICRC verifies")
			}
			return
		}
		if !VerifyICRC(p.L3) {
			t.Fatal("parsed but ICRC does not verify")
		}
		if len(p.Eth)+len(p.L3) > len(data) {
			t.Fatal("packet longer than the data")
		}
		if p.Pad > 3 || (p.IPv4 == nil) == (p.IPv6 == nil) {
			t.Fatalf("pad %d, v4 %v v6 %v", p.Pad, p.IPv4 != nil, p.IPv6 != nil)
		}
		var fr Frame
		p.FillFrame(&fr)
		buf := make([]byte, fr.Len(len(p.Payload)))
		n, err := BuildPayload(buf, &fr, p.Payload)
		if err != nil {
			t.Fatalf("rebuild: %v", err)
		}
		var q Packet
		if err := Parse(buf[:n], &q); err != nil {
			t.Fatalf("parse of rebuild: %v", err)
		}
		a, b := p.BTH.Fields(), q.BTH.Fields()
		a.PadCnt, b.PadCnt = 0, 0
		if a != b || !bytes.Equal(p.Payload, q.Payload) || p.SrcIP().Unmap() != q.SrcIP() || p.DstIP().Unmap() != q.DstIP() {
			t.Fatalf("rebuild differs: %+v vs %+v", a, b)
		}
	})
}

// FuzzBuildParse builds a frame from fuzzed field values and checks that
// Parse returns exactly those values.
func FuzzBuildParse(f *testing.F) {
	f.Add(uint8(RCSendOnly), false, false, uint64(1), uint16(17))
	f.Add(uint8(RCRDMAWriteFirst), true, true, uint64(2), uint16(1024))
	f.Add(uint8(RCAtomicAcknowledge), true, false, uint64(3), uint16(0))
	f.Add(uint8(UDSendOnlyWithImmediate), false, true, uint64(4), uint16(255))
	f.Add(uint8(CNP), false, false, uint64(5), uint16(0))
	f.Add(uint8(0x15), false, false, uint64(6), uint16(0))
	f.Fuzz(func(t *testing.T, op uint8, v6, vlan bool, seed uint64, plen uint16) {
		o := Opcode(op)
		fr := randFrame(rand.New(rand.NewPCG(seed, 0)), o, v6, vlan)
		buf := make([]byte, 70000)
		if !o.Valid() {
			if _, err := Build(buf, &fr, 0); !errors.Is(err, ErrUnknownOpcode) {
				t.Fatalf("%s: %v", o, err)
			}
			return
		}
		n := int(plen) % 9000
		switch in := o.Info(); {
		case !in.Payload:
			n = 0
		case in.Pos == PosFirst || in.Pos == PosMiddle:
			n &^= 3
		}
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + int(seed))
		}
		m, err := BuildPayload(buf, &fr, payload)
		if err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		var p Packet
		if err := Parse(buf[:m], &p); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		checkPacket(t, &p, &fr, payload)
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzParse from the rxe
// captures (one frame per opcode) plus built IPv6/VLAN/CNP frames. It only
// runs with WIRE_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("WIRE_WRITE_CORPUS") != "1" {
		t.Skip("set WIRE_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, c := range loadCaptures(t) {
		for _, r := range c.recs {
			var p Packet
			err := Parse(r.Data, &p)
			name := "tcp"
			if err == nil {
				name = p.Opcode().String()
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			write("rxe_"+name, r.Data)
		}
	}
	write("cx4_CNP", mustHex(t, cx4CNP))
	write("scapy_UC_SEND_ONLY", scapyUCFrame(t))
	r := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		name     string
		o        Opcode
		v6, vlan bool
		n        int
	}{
		{"ipv6_vlan_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", RCRDMAWriteOnlyWithImm, true, true, 13},
		{"ipv6_RC_RDMA_READ_RESPONSE_MIDDLE", RCRDMAReadResponseMiddle, true, false, 256},
		{"vlan_RC_SEND_LAST_WITH_INVALIDATE", RCSendLastWithInvalidate, false, true, 3},
	} {
		f := randFrame(r, c.o, c.v6, c.vlan)
		buf := make([]byte, 2048)
		n, err := BuildPayload(buf, &f, make([]byte, c.n))
		if err != nil {
			t.Fatal(err)
		}
		write(c.name, buf[:n])
	}
}
