package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// TestExitCodes: every subcommand exits 0 for -h, 2 for a command-line
// error, 1 for a failed run (here: its device cannot be opened, or the
// capture file does not exist), with one "goroce CMD: " prefix at most.
// A device that exists but cannot be opened is not reported as "not
// found". No device is opened and nothing is sent.
func TestExitCodes(t *testing.T) {
	const ifname = "goroce-nosuch0"
	// failArgs makes each subcommand fail at its device (or file); ""
	// marks one that has no such failure without a peer (demo runs on an
	// in-memory pair, version cannot fail).
	failArgs := map[string]string{
		"demo": "", "version": "", "probe": "-d " + ifname + " 198.18.0.2",
		"dump":     filepath.Join(t.TempDir(), "missing.pcap"),
		"devinfo":  "-d " + ifname,
		"nvme":     "discover -d " + ifname + " -a 198.18.0.2",
		"nvmet":    "-d " + ifname + " -a 198.18.0.2 --nqn nqn.2014-08.org.example:x --ram 1M",
		"rping":    "-s --dev " + ifname,
		"ucmatose": "--dev " + ifname, "udaddy": "--dev " + ifname, "rstream": "--dev " + ifname,
		"riostream": "--dev " + ifname, "rcopy": "--dev " + ifname, "mckey": "--dev " + ifname + " -m 239.1.2.3",
		"pingpong": "-d " + ifname + " -g 1", "ud_pingpong": "-d " + ifname + " -g 1",
		"srq_pingpong": "-d " + ifname + " -g 1", "uc_pingpong": "-d " + ifname + " -g 1",
	}
	for _, why := range []error{fmt.Errorf("qp: open interface %s: %w", ifname, qp.ErrNoInterface),
		fmt.Errorf("qp: open interface %s: %w: the afxdp backend needs CAP_BPF", ifname, qp.ErrPermission)} {
		for _, c := range commands {
			t.Run(c.name, func(t *testing.T) {
				run := func(args ...string) (int, string) {
					var o, e bytes.Buffer
					env := tool.Env{Stdout: &o, Stderr: &e, Open: func(context.Context, string) (*qp.Device, error) { return nil, why }}
					return run(env, append([]string{c.name}, args...)), o.String() + e.String()
				}
				if code, out := run("-h"); code != tool.ExitOK || out == "" {
					t.Errorf("-h: exit %d, output %.200q", code, out)
				}
				if code, out := run("--no-such-flag"); code != tool.ExitUsage {
					t.Errorf("--no-such-flag: exit %d, want %d: %.300q", code, tool.ExitUsage, out)
				} else {
					checkPrefix(t, c.name, out)
				}
				fa, ok := failArgs[c.name]
				if !ok {
					fa = "-d " + ifname // the perftest tools
				}
				if fa == "" {
					return
				}
				code, out := run(strings.Fields(fa)...)
				if code != tool.ExitFailure {
					t.Fatalf("%s: exit %d, want %d: %.300q", fa, code, tool.ExitFailure, out)
				}
				checkPrefix(t, c.name, out)
				// devinfo and probe open the interface themselves, not
				// through Env.Open: they saw the real, missing interface.
				if errors.Is(why, qp.ErrPermission) && c.name != "dump" && c.name != "devinfo" && c.name != "probe" &&
					(strings.Contains(out, "not found") || !strings.Contains(out, "CAP_BPF")) {
					t.Errorf("%s, the interface existing but not openable: %q, want the reason and no \"not found\"", fa, out)
				}
			})
		}
	}
}

// checkPrefix: no line says "goroce CMD: CMD:" or names an internal
// package after the prefix.
func checkPrefix(t *testing.T, cmd, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(l, "goroce "+cmd+": ")
		if !ok {
			continue
		}
		for _, p := range []string{cmd + ": ", "goroce ", "pingpong: ", "perftest: "} {
			if strings.HasPrefix(rest, p) {
				t.Errorf("two prefixes: %q", l)
			}
		}
	}
}
