package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/dumpcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/perftestcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/rpingcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// TestToolPcap: --pcap FILE on the three ways a subcommand opens its
// device (a pingpong session, perftest, an rdma_cm tool) writes the
// device's own traffic, both directions, which `goroce dump` decodes with
// every ICRC good, and tshark (when installed) reads as InfiniBand.
func TestToolPcap(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		cm     bool
		run    func(tool.Env, []string) int
		server []string
		client []string
	}{
		{"pingpong", false, pingpongcmd.Run, []string{"-g", "1", "-n", "20", "-s", "3000"}, []string{"-g", "1", "-n", "20", "-s", "3000"}},
		{"write_bw", false, perftestcmd.Command(perftest.WriteBW), []string{"-x", "1", "-n", "20", "-s", "4096", "-F"}, []string{"-x", "1", "-n", "20", "-s", "4096", "-F"}},
		{"rping", true, rpingcmd.Run, []string{"--dev", "a", "-s", "-a", "198.18.0.1", "-C", "5"}, []string{"--dev", "b", "-c", "-a", "198.18.0.1", "-C", "5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp, cp := filepath.Join(dir, c.name+"-server.pcap"), filepath.Join(dir, c.name+"-client.pcap")
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			sargs, cargs := append([]string{"--pcap", sp}, c.server...), append([]string{"--pcap=" + cp}, c.client...)
			var s, cl tooltest.Outcome
			if c.cm {
				s, cl = tooltest.RunCMPair(t, c.run, open, sargs, cargs)
			} else {
				s, cl = tooltest.RunPair(t, c.run, open, sargs, cargs)
			}
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d", s.Code, cl.Code)
			}
			for _, p := range []string{sp, cp} {
				checkDump(t, p)
			}
		})
	}
}

// checkDump runs goroce dump on path: RoCEv2 packets from both devices'
// addresses, every ICRC good; and tshark, when installed, on the same file.
func checkDump(t *testing.T, path string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := dumpcmd.Run(tool.Env{Stdout: &out, Stderr: &errb}, []string{path}); code != 0 {
		t.Fatalf("goroce dump %s: exit %d: %s", path, code, errb.String())
	}
	from := map[string]int{}
	n := 0
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != ">" {
			continue
		}
		n++
		if !strings.Contains(l, " icrc=ok") {
			t.Errorf("%s: %s", filepath.Base(path), l)
		}
		from[strings.Split(f[1], ":")[0]]++
	}
	if n < 10 || from["198.18.0.1"] == 0 || from["198.18.0.2"] == 0 {
		t.Errorf("%s: %d RoCEv2 packets, by source %v:\n%s", filepath.Base(path), n, from, out.String())
	}
	t.Logf("%s: %d RoCEv2 packets, by source %v", filepath.Base(path), n, from)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		return
	}
	cmd := exec.Command(tshark, "-n", "-r", path, "-Y", "infiniband", "-T", "fields", "-e", "frame.number")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user profile
	o, err := cmd.Output()
	if err != nil {
		t.Errorf("tshark -r %s: %v", path, err)
		return
	}
	if got := len(strings.Fields(string(o))); got != n {
		t.Errorf("tshark decodes %d InfiniBand packets in %s, goroce dump %d", got, filepath.Base(path), n)
	} else {
		t.Logf("tshark: %d InfiniBand packets", got)
	}
}

// TestToolPcapErrors: --pcap without a file is a usage error; a file that
// cannot be created fails the device's opening with the reason.
func TestToolPcapErrors(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	if code := pingpongcmd.Run(env, []string{"-d", "a", "-g", "1", "--pcap"}); code != tool.ExitUsage || !strings.Contains(errb.String(), "--pcap requires an argument") {
		t.Errorf("--pcap without a file: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	bad := filepath.Join(t.TempDir(), "no", "such", "dir.pcap")
	if code := pingpongcmd.Run(env, []string{"-d", "a", "-g", "1", "--pcap", bad}); code != 1 || !strings.Contains(errb.String(), "--pcap") {
		t.Errorf("--pcap %s: exit %d, %q", bad, code, errb.String())
	}
}
