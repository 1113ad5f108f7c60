package dump

import (
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/wire"
)

// TestDumpUCAndPlacement: the UC opcodes by name, and FLUSH's FETH and
// ATOMIC_WRITE's RETH decoded, in text and JSON.
func TestDumpUCAndPlacement(t *testing.T) {
	mk := func(op wire.Opcode, payload int, feth wire.FETHFields) Record {
		f := wire.Frame{SrcIP: ipA, DstIP: ipB, SrcPort: 50000, HopLimit: 64,
			BTH:  wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 5, AckReq: op.Transport() == wire.TransportRC},
			FETH: feth, RETH: wire.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: 0x40}}
		buf := make([]byte, f.Len(payload))
		n, err := wire.Build(buf, &f, payload)
		if err != nil {
			t.Fatal(err)
		}
		return Record{Time: time.Unix(1e9, 0), Data: buf[:n], LinkType: layers.LinkTypeEthernet}
	}
	recs := []Record{
		mk(wire.UCSendFirst, 1024, wire.FETHFields{}),
		mk(wire.UCRDMAWriteOnlyWithImm, 4, wire.FETHFields{}),
		mk(wire.RCFlush, 0, wire.FETHFields{PlacementType: wire.FlushGlobal, Selectivity: wire.FlushMR}),
		mk(wire.RCAtomicWrite, 8, wire.FETHFields{}),
	}
	text, _ := run(t, recs, Options{})
	for _, want := range []string{
		"UC_SEND_FIRST", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		"RC_FLUSH                   dqpn=0x11 psn=5 ackreq placement=global level=mr va=0x1000 rkey=0x77 len=64",
		"RC_ATOMIC_WRITE            dqpn=0x11 psn=5 ackreq va=0x1000 rkey=0x77 len=64 payload=8",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	js, _ := run(t, recs, Options{JSON: true})
	if !strings.Contains(js, `"feth":{"placement_type":1,"placement":"global","selectivity":1,"level":"mr"}`) {
		t.Errorf("JSON lacks the FETH:\n%s", js)
	}
}
