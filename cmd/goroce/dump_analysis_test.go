package main

import (
	"bytes"
	"strings"
	"testing"
)

// The analysis flags reach the dump engine; their content is tested in
// internal/dump.
func TestDumpAnalysisFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := dumpMain([]string{"--latency", "--explain", smallPcap}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	s := out.String()
	if !strings.Contains(s, "latency (last request packet") || !strings.Contains(s, "explain: 1 anomaly") ||
		!strings.Contains(s, "SEND       50") || strings.Contains(s, "icrc=ok") {
		t.Fatalf("output:\n%s", s)
	}
}
