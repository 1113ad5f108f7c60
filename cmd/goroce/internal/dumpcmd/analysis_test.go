package dumpcmd

import (
	"strings"
	"testing"
)

// The analysis flags reach the dump engine; their content is tested in
// internal/dump.
func TestDumpAnalysisFlags(t *testing.T) {
	rc, s, errs := runDumpCLI("--latency", "--explain", smallPcap)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errs)
	}
	if !strings.Contains(s, "latency (last request packet") || !strings.Contains(s, "explain: 1 anomaly") ||
		!strings.Contains(s, "SEND       50") || strings.Contains(s, "icrc=ok") {
		t.Fatalf("output:\n%s", s)
	}
}

func TestDumpGraphFlag(t *testing.T) {
	dir := t.TempDir()
	rc, out, errs := runDumpCLI("-q", "--graph", dir, smallPcap)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errs)
	}
	for _, f := range []string{"198.18.0.12_to_198.18.0.11_qp0x12.svg", "198.18.0.11_to_198.18.0.12_qp0x12.svg"} {
		if !strings.Contains(out, dir+"/"+f) {
			t.Fatalf("output lacks %s:\n%s", f, out)
		}
	}
}
