//go:build linux

package interop

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// probeCheck is what rxe does on one check: the verdict and the observation
// with every PSN as P (P+1 for the next one) and every original value as V.
type probeCheck struct{ verdict, observed string }

// rxeProbe is what Linux 6.1 rxe (the VM's kernel) does on each check of
// `goroce probe`, per server. Every check but one is what IBTA requires;
// where rxe departs, the probe says so (verdict "deviation") and the cell
// records rxe's behaviour. Sources: drivers/infiniband/sw/rxe/rxe_resp.c
// (check_psn, check_op_seq, check_length, check_rkey, duplicate_request,
// atomic_reply) and rxe_recv.c (ICRC, QPN and length checks).
var rxeProbe = map[string]map[string]probeCheck{
	"write_bw": {
		"access":               {"pass", "RC_ACKNOWLEDGE psn P ACK"},
		"wrong-rkey":           {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"outside-region":       {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"straddle-end":         {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"length-mismatch":      {"pass", "RC_ACKNOWLEDGE psn P NAK(INVALID_REQUEST)"},
		"middle-without-first": {"pass", "RC_ACKNOWLEDGE psn P NAK(INVALID_REQUEST)"},
		"psn-gap":              {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn P ACK"},
		"far-future-psn":       {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn P ACK"},
		"duplicate":            {"pass", "RC_ACKNOWLEDGE psn P ACK, then for the duplicate: RC_ACKNOWLEDGE psn P ACK"},
		"bad-icrc":             {"pass", "silence, then for the valid request: RC_ACKNOWLEDGE psn P ACK"},
		"truncated":            {"pass", "silence, then for the valid request: RC_ACKNOWLEDGE psn P ACK"},
		"wrong-dest-qp":        {"pass", "silence, then for the valid request: RC_ACKNOWLEDGE psn P ACK"},
	},
	"read_bw": {
		"access":         {"pass", "RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		"wrong-rkey":     {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"outside-region": {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"straddle-end":   {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		// IBTA: NAK INVALID_REQUEST (a DMA length over 2^31). Linux 6.1's
		// check_length checks only payload against the path MTU (mainline
		// later added `if (dmalen > (1 << 31)) return RESPST_ERR_LENGTH;`),
		// so check_rkey's mr_check_range fails first:
		// RESPST_ERR_RKEY_VIOLATION, NAK REMOTE_ACCESS_ERROR.
		"oversized-read": {"deviation", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"psn-gap":        {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		"far-future-psn": {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		// duplicate_request finds the saved read by PSN and replays it.
		"duplicate":     {"pass", "RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes, then for the duplicate: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		"bad-icrc":      {"pass", "silence, then for the valid request: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		"truncated":     {"pass", "silence, then for the valid request: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
		"wrong-dest-qp": {"pass", "silence, then for the valid request: RC_RDMA_READ_RESPONSE_ONLY psn P ACK 8 bytes"},
	},
	"atomic_bw": {
		"access":         {"pass", "RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
		"wrong-rkey":     {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		"outside-region": {"pass", "RC_ACKNOWLEDGE psn P NAK(REMOTE_ACCESS_ERROR)"},
		// atomic_reply: RESPST_ERR_MISALIGNED_ATOMIC.
		"misaligned-atomic": {"pass", "RC_ACKNOWLEDGE psn P NAK(INVALID_REQUEST)"},
		"psn-gap":           {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
		"far-future-psn":    {"pass", "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
		// duplicate_request answers from the saved resource (res->replay):
		// the same original value, not executed again (the probe checks
		// the FETCH_ADD 0 sees one addition).
		"duplicate":     {"pass", "RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V, then for the duplicate: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V, then FETCH_ADD 0: RC_ATOMIC_ACKNOWLEDGE psn P+1 ACK orig V"},
		"bad-icrc":      {"pass", "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
		"truncated":     {"pass", "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
		"wrong-dest-qp": {"pass", "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V"},
	},
}

var (
	psnRe  = regexp.MustCompile(`psn (\d+)`)
	origRe = regexp.MustCompile(`orig 0x[0-9a-f]+`)
)

// probeShape replaces the first PSN of obs by P, the one after it by P+1,
// and every original value by V. Other PSNs stay, so a NAK carrying the
// wrong PSN shows.
func probeShape(obs string) string {
	var first uint64
	seen := false
	obs = psnRe.ReplaceAllStringFunc(obs, func(m string) string {
		var n uint64
		fmt.Sscan(strings.TrimPrefix(m, "psn "), &n)
		if !seen {
			first, seen = n, true
		}
		switch n {
		case first:
			return "psn P"
		case (first + 1) & 0xFFFFFF:
			return "psn P+1"
		}
		return m
	})
	return origRe.ReplaceAllString(obs, "orig V")
}

// probeReport is `goroce probe --json`'s output.
type probeReport struct {
	Host    string `json:"host"`
	Test    string `json:"test"`
	Results []struct {
		Check     string `json:"check"`
		Sent      string `json:"sent"`
		Observed  string `json:"observed"`
		Required  string `json:"required"`
		Verdict   string `json:"verdict"`
		Deviation string `json:"deviation"`
		Error     string `json:"error"`
	} `json:"results"`
}

// TestProbeRXE runs `goroce probe` against rxe: VM 0 runs the stock perftest
// server in a bounded loop (one connection per check), the host namespace
// runs the probe, and every check's observation must be what rxe does.
func TestProbeRXE(t *testing.T) {
	RequireRoot(t)
	bin := buildGoroce(t)
	if !goroceCommands(bin)["probe"] {
		skipOrFail(t, "%s has no probe subcommand", bin)
	}
	h := New(t, Config{VMs: 1, MTU: 1500})
	for _, tc := range []struct {
		test, server string
		text         bool
	}{
		{"write_bw", "ib_write_bw", false},
		{"read_bw", "ib_read_bw", true},
		{"atomic_bw", "ib_atomic_bw", false},
	} {
		t.Run(tc.test, func(t *testing.T) {
			rep, text := runProbe(t, h, bin, tc.server, tc.test, tc.text)
			if text != "" {
				t.Logf("goroce probe --test %s %s:\n%s", tc.test, h.VMIP(0), text)
			}
			want := rxeProbe[tc.test]
			if len(rep.Results) != len(want) {
				t.Errorf("%d checks ran, want %d", len(rep.Results), len(want))
			}
			for _, r := range rep.Results {
				t.Logf("%-20s %-9s %s", r.Check, r.Verdict, r.Observed)
				w, ok := want[r.Check]
				switch {
				case r.Error != "":
					t.Errorf("%s: could not run: %s", r.Check, r.Error)
				case !ok:
					t.Errorf("%s: a check with no recorded rxe behaviour: %s %q", r.Check, r.Verdict, r.Observed)
				case r.Verdict != w.verdict || probeShape(r.Observed) != w.observed:
					t.Errorf("%s: %s %q, rxe is recorded as %s %q", r.Check, r.Verdict, probeShape(r.Observed), w.verdict, w.observed)
				case r.Verdict == "deviation" && !strings.HasPrefix(r.Deviation, "rxe does "):
					t.Errorf("%s: deviation without the rxe line: %q", r.Check, r.Deviation)
				}
			}
		})
	}
}

// runProbe runs the server in VM 0 in a loop and the probe against it,
// once with --json and, when text is set, once more as text.
func runProbe(t *testing.T, h *Harness, bin, server, test string, text bool) (probeReport, string) {
	t.Helper()
	var rep probeReport
	run := func(asJSON bool) string {
		// 14 server runs cover the 12 checks; each run ends when its one
		// connection does, or after 60 s.
		srv := h.Start(0, fmt.Sprintf("for i in $(seq 1 14); do timeout 60 %s -F -x 1 >/dev/null 2>&1; done", server))
		defer srv.Kill()
		if err := h.WaitListen(0, toolPort, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		// rxe under TCG on a loaded host can answer later than the
		// default 200 ms; only the silent checks wait the whole window.
		args := []string{"probe", "-d", h.HostIface(), "--test", test, "--window", "1s"}
		if asJSON {
			args = append(args, "--json")
		}
		p, err := h.HostStart(bin, append(args, h.VMIP(0).String())...)
		if err != nil {
			t.Fatal(err)
		}
		res := p.Wait(5 * time.Minute)
		if res.Err != nil || (res.ExitCode != 0 && res.ExitCode != 1) {
			t.Fatalf("goroce probe: %s", res)
		}
		return res.Stdout
	}
	out := run(true)
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil {
		t.Fatalf("goroce probe --json: %v\n%s", err, out)
	}
	var txt string
	if text {
		txt = run(false)
	}
	return rep, txt
}

func TestProbeShape(t *testing.T) {
	for in, want := range map[string]string{
		"RC_ACKNOWLEDGE psn 16777215 NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn 16777215 ACK": "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn P ACK",
		"RC_ATOMIC_ACKNOWLEDGE psn 16777215 ACK orig 0x1f, then FETCH_ADD 0: RC_ATOMIC_ACKNOWLEDGE psn 0 ACK orig 0x20":                  "RC_ATOMIC_ACKNOWLEDGE psn P ACK orig V, then FETCH_ADD 0: RC_ATOMIC_ACKNOWLEDGE psn P+1 ACK orig V",
		"RC_ACKNOWLEDGE psn 10 NAK(PSN_SEQUENCE_ERROR), then: RC_ACKNOWLEDGE psn 9 ACK":                                                  "RC_ACKNOWLEDGE psn P NAK(PSN_SEQUENCE_ERROR), then: RC_ACKNOWLEDGE psn 9 ACK",
	} {
		if got := probeShape(in); got != want {
			t.Errorf("probeShape(%q) = %q, want %q", in, got, want)
		}
	}
}
