package dumpjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestHex64(t *testing.T) {
	for _, v := range []Hex64{0, 1, 0xdeadbeef, 1<<64 - 1} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got Hex64
		if err := json.Unmarshal(b, &got); err != nil || got != v {
			t.Errorf("%s: got %#x, %v; want %#x", b, uint64(got), err, uint64(v))
		}
	}
	for _, bad := range []string{`12`, `"0xg"`, `"0x1ffffffffffffffff"`, `null1`} {
		var h Hex64
		if err := json.Unmarshal([]byte(bad), &h); err == nil {
			t.Errorf("%s accepted as %#x", bad, uint64(h))
		}
	}
}

func TestRead(t *testing.T) {
	in := `{"src":"198.18.0.1","dst":"198.18.0.2","opcode":"RC_ATOMIC_ACKNOWLEDGE","psn":7,"atomicacketh":{"orig":"0x10"},"caplen":70,"len":70}

{"summary":true,"packets":1,"roce":1,"flows":[{"src":"198.18.0.1","dst":"198.18.0.2","dqpn":17,"packets":1,"responses":{"packets":1,"acks":0,"naks":{"PSN_SEQUENCE_ERROR":1},"rnr_naks":0}}]}
`
	rep, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Packets) != 1 || *rep.Packets[0].PSN != 7 || rep.Packets[0].AtomicAckETH.Orig != 0x10 {
		t.Errorf("packets %+v", rep.Packets)
	}
	if s := rep.Summary; !s.Summary || s.RoCE != 1 || len(s.Flows) != 1 || s.Flows[0].Responses.NAKs["PSN_SEQUENCE_ERROR"] != 1 {
		t.Errorf("summary %+v", s)
	}
	if _, err := Read(strings.NewReader(`{"src":"x"}` + "\n")); err == nil || !strings.Contains(err.Error(), "no summary") {
		t.Errorf("without a summary: %v", err)
	}
	if _, err := Read(strings.NewReader("{\"psn\":\"x\"}\n")); err == nil {
		t.Error("a malformed line was accepted")
	}
}
