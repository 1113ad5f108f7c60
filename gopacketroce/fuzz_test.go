package gopacketroce

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/wire"
)

// FuzzLayers decodes arbitrary bytes as an Ethernet frame with
// gopacket.NewPacket (the registered layers, UDP port 4791 → BTH → the
// extension headers) and with a DecodingLayerParser. Nothing may panic,
// including the layers' String methods. When wire.Parse accepts the frame,
// both decoders must agree with it: no error layer, the same BTH fields
// (opcode, PSN, destination QP, ...), the same extension headers as views
// of the same bytes with the same RETH (VA, R_Key, DMA length) and AETH
// (syndrome, MSN) values, the same payload, and an ICRC that verifies.
// When gopacket decodes a whole BTH without error, wire.ParseBTH must
// accept the UDP payload it decoded and agree on the BTH. Each input is
// checked as it is and with its ICRC fixed. The seed corpus
// in testdata/fuzz/FuzzLayers holds one rxe frame per opcode plus built
// IPv6 and VLAN frames (regenerate with GOPACKETROCE_WRITE_CORPUS=1 go
// test -run TestWriteFuzzCorpus).
func FuzzLayers(f *testing.F) {
	ps := newParser()
	f.Fuzz(func(t *testing.T, data []byte) {
		checkLayers(t, ps, data)
		// Most mutations break the ICRC, and wire rejects the frame; the
		// same frame with its ICRC fixed compares the mutated headers too.
		if fixed := bytes.Clone(data); FixICRC(fixed) == nil && !bytes.Equal(fixed, data) {
			checkLayers(t, ps, fixed)
		}
	})
}

func checkLayers(t *testing.T, ps *parser, data []byte) {
	t.Helper()
	pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, noCopy)
	_ = pkt.String()
	ok, present := VerifyICRC(pkt)
	perr := ps.p.DecodeLayers(data, &ps.decoded)

	var p wire.Packet
	if werr := wire.Parse(data, &p); werr == nil {
		if e := pkt.ErrorLayer(); e != nil {
			t.Fatalf("wire parses, gopacket: %v", e.Error())
		}
		checkAgainstWire(t, "NewPacket", pkt.Layer, &p)
		checkReth(t, "NewPacket", pkt.Layer, &p)
		if !ok || !present {
			t.Fatalf("wire parses, VerifyICRC = %v, %v", ok, present)
		}
		if perr != nil {
			t.Fatalf("wire parses, DecodeLayers: %v", perr)
		}
		checkAgainstWire(t, "DecodingLayerParser", ps.get, &p)
		checkReth(t, "DecodingLayerParser", ps.get, &p)
	} else if errors.Is(werr, wire.ErrBadICRC) && ok && present {
		t.Fatal("wire: bad ICRC, VerifyICRC: ok")
	}

	if bl, _ := pkt.Layer(LayerTypeBTH).(*BTH); bl != nil && pkt.ErrorLayer() == nil {
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil {
			t.Fatal("BTH without UDP")
		}
		var q wire.Packet
		if err := wire.ParseBTH(udp.Payload, &q); err != nil {
			t.Fatalf("gopacket decoded %v, wire.ParseBTH: %v", bl, err)
		}
		if bl.Fields() != q.BTH.Fields() || len(bl.PadBytes) != q.Pad || bl.ICRC() != q.ICRC {
			t.Fatalf("BTH %+v, wire %+v", bl.Fields(), q.BTH.Fields())
		}
	}
}

// checkReth compares the RETH and AETH field values (checkAgainstWire
// compares their bytes).
func checkReth(t *testing.T, where string, get layerGetter, p *wire.Packet) {
	t.Helper()
	if p.RETH != nil {
		r := get(LayerTypeRETH).(*RETH)
		if r.VA() != p.RETH.VA() || r.RKey() != p.RETH.RKey() || r.DMALen() != p.RETH.DMALen() {
			t.Fatalf("%s: %v, wire va %#x rkey %#x len %d", where, r, p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen())
		}
	}
	if p.AETH != nil {
		a := get(LayerTypeAETH).(*AETH)
		if a.Syndrome() != p.AETH.Syndrome() || a.MSN() != p.AETH.MSN() {
			t.Fatalf("%s: %v, wire %v %d", where, a, p.AETH.Syndrome(), p.AETH.MSN())
		}
	}
	bl := get(LayerTypeBTH).(*BTH)
	if bl.Opcode() != p.Opcode() || bl.PSN() != p.BTH.PSN() || bl.DestQP() != p.BTH.DestQP() {
		t.Fatalf("%s: %v", where, bl)
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzLayers: one frame of
// each opcode (and one non-RoCE frame) from the rxe captures, the same
// frames cut after the BTH and with a flipped ICRC bit, and built IPv6,
// VLAN and CNP frames. It only runs with GOPACKETROCE_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("GOPACKETROCE_WRITE_CORPUS") != "1" {
		t.Skip("set GOPACKETROCE_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLayers")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
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
		for _, data := range c.frames {
			var p wire.Packet
			name := "other"
			if err := wire.Parse(data, &p); err == nil {
				name = p.Opcode().String()
			}
			if seen[name] || len(data) > 1200 {
				continue
			}
			seen[name] = true
			write("rxe_"+name, data)
			if name != "other" {
				bad := append([]byte(nil), data...)
				bad[len(bad)-1] ^= 1
				write("rxe_"+name+"_bad_icrc", bad)
				write("rxe_"+name+"_cut", data[:wire.EthernetLen+len(p.L3)-len(p.Payload)-p.Pad-wire.ICRCLen])
			}
		}
	}
	for _, c := range []struct {
		name string
		op   wire.Opcode
		v6   bool
		vlan bool
		n    int
	}{
		{"ipv6_RC_RDMA_WRITE_FIRST", wire.RCRDMAWriteFirst, true, false, 256},
		{"ipv6_vlan_RC_RDMA_READ_REQUEST", wire.RCRDMAReadRequest, true, true, 0},
		{"vlan_RC_ACKNOWLEDGE", wire.RCAcknowledge, false, true, 0},
		{"ipv6_CNP", wire.CNP, true, false, 0},
		{"vlan_UD_SEND_ONLY_WITH_IMMEDIATE", wire.UDSendOnlyWithImmediate, false, true, 13},
	} {
		f := testFrame(c.op, c.v6)
		if c.vlan {
			f.VLAN, f.HasVLAN = 7, true
		}
		write(c.name, buildFrame(t, &f, make([]byte, c.n)))
	}
}
