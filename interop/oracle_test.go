//go:build linux

package interop

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestOracleAgreesWithWire: the wire profile's own parser and source-port
// formulas, kept independent of package wire on purpose, agree with it on
// every RoCEv2 frame of rxe's captures and on random QPNs, so that a
// difference a profile reports is one of the frames, not of the parsers.
func TestOracleAgreesWithWire(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "rxe", "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	frames := 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := pcapfileReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range recs {
			x, ok := parseRoCEFrame(rec)
			var p wire.Packet
			werr := wire.Parse(rec, &p)
			if !ok {
				continue // IPv6, not RoCEv2, or not whole: the profile skips it
			}
			if werr != nil {
				t.Fatalf("%s frame %d: the oracle accepts it, wire.Parse: %v", name, i, werr)
			}
			frames++
			b := p.BTH
			if x.src != p.SrcIP() || x.dst != p.DstIP() || x.sport != p.UDP.SrcPort() ||
				x.op != byte(b.Opcode()) || x.se != b.SE() || x.migreq != b.MigReq() || x.pad != b.PadCnt() ||
				x.tver != b.TVer() || x.pkey != b.PKey() || x.fecn != b.FECN() || x.becn != b.BECN() ||
				x.dqpn != b.DestQP() || x.ackreq != b.AckReq() || x.psn != uint32(b.PSN()) ||
				x.hasAETH != (p.AETH != nil) {
				t.Fatalf("%s frame %d: oracle %+v, wire %v", name, i, x, b)
			}
			if x.hasAETH && (x.syndrome != uint8(p.AETH.Syndrome()) || x.msn != p.AETH.MSN()) {
				t.Fatalf("%s frame %d: AETH oracle %#x/%d, wire %#x/%d", name, i, x.syndrome, x.msn, p.AETH.Syndrome(), p.AETH.MSN())
			}
		}
	}
	if frames < 1000 {
		t.Errorf("only %d frames compared", frames)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		l, r := rng.Uint32()&0xFFFFFF, rng.Uint32()&0xFFFFFF
		if a, b := UDPSportFlowLabel(l, r), wire.RCSourcePort(l, r); a != b {
			t.Fatalf("QPNs %#x %#x: flow-label port %#x, wire %#x", l, r, a, b)
		}
		if a, b := UDPSportHash32(l), wire.UDSourcePort(l); a != b {
			t.Fatalf("QPN %#x: hash_32 port %#x, wire %#x", l, a, b)
		}
	}
}
