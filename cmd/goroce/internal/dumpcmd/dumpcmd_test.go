package dumpcmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
)

const smallPcap = "../../../../testdata/rxe/rc_pingpong_small.pcap"

func runDumpCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(tool.Env{Stdout: &o, Stderr: &e}, args)
	return code, o.String(), e.String()
}

func TestCLI(t *testing.T) {
	code, out, errOut := runDumpCLI("-utc", smallPcap)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "07:49:50.585033 198.18.0.12:49476 > 198.18.0.11 RC_SEND_ONLY") ||
		!strings.Contains(out, "213 packets: 202 RoCEv2 (0 ICRC failures, 0 malformed), 11 other") {
		t.Fatalf("output:\n%s", out)
	}

	// Flags after the file name; -c counts RoCEv2 packets.
	code, out, _ = runDumpCLI(smallPcap, "--json", "-c", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 {
		t.Fatalf("exit %d, %d lines:\n%s", code, len(lines), out)
	}
	var sum struct {
		Summary bool `json:"summary"`
		RoCE    int  `json:"roce"`
	}
	if err := json.Unmarshal([]byte(lines[3]), &sum); err != nil || !sum.Summary || sum.RoCE != 3 {
		t.Fatalf("summary line %q: %v", lines[3], err)
	}

	code, out, _ = runDumpCLI("-q", "-mtu", "1024", smallPcap)
	if code != 0 || strings.Contains(out, "RC_SEND_ONLY   ") || !strings.Contains(out, "path MTU 1024 from --mtu") {
		t.Fatalf("-q: exit %d\n%s", code, out)
	}
}

func TestCLIErrors(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"/nonexistent/x.pcap"}, 1, "no such file or directory"},
		{[]string{"dumpcmd.go"}, 1, "not a pcap or pcapng file"},
		{nil, 2, "give a capture file or -i IFACE"},
		{[]string{"-x"}, 2, "flag provided but not defined"},
		{[]string{"a.pcap", "b.pcap"}, 2, "one capture file at a time"},
		{[]string{"-i", "eth0", smallPcap}, 2, "not both"},
		{[]string{"-mtu", "1000", smallPcap}, 2, "-mtu must be"},
		{[]string{"-t", "1s", smallPcap}, 2, "-t applies to live capture"},
		{[]string{"-c", "-1", smallPcap}, 2, "-c must not be negative"},
		{[]string{"-s", "100", smallPcap}, 2, "apply to live capture"},
		{[]string{"-i", "goroce-no-such-if0"}, 1, "goroce-no-such-if0"},
		{[]string{"-h"}, 0, "usage: goroce dump"},
	}
	for _, c := range cases {
		code, _, errOut := runDumpCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.stderr)
		}
	}
}
