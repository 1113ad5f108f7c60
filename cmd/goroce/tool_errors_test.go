package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/perftestcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// TestToolHelp: -h and --help print the usage on stdout and exit 0.
func TestToolHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		env := tool.Env{Stdout: &out, Stderr: &errb}
		if code := pingpongcmd.Run(env, []string{"-n", "5", h}); code != 0 || !strings.HasPrefix(out.String(), "Usage:") {
			t.Errorf("pingpong %s: exit %d, %q", h, code, out.String())
		}
		out.Reset()
		if code := perftestcmd.Run(env, perftest.ReadLat, []string{h}); code != 0 || !strings.Contains(out.String(), "goroce read_lat [options] <host>") {
			t.Errorf("read_lat %s: exit %d, %q", h, code, out.String())
		}
	}
}

// TestToolTimeouts: --timeout bounds a server nobody connects to and a
// client whose server never comes (it retries refused connections until
// then); without it a refused client fails at once, like the C tools.
func TestToolTimeouts(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	start := time.Now()
	if code := perftestcmd.Run(env, perftest.WriteBW, []string{"-d", "a", "-p", "0", "--timeout", "0.3"}); code != 1 ||
		!strings.Contains(errb.String(), "timed out after 300ms") {
		t.Errorf("lonely server: exit %d, %q", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), perftest.WaitingBanner) {
		t.Errorf("server output %q", out.String())
	}
	// A port nobody listens on: bind one and close it.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	errb.Reset()
	if code := pingpongcmd.Run(env, []string{"-d", "b", "-g", "1", "-p", port, "--timeout=400ms", "127.0.0.1"}); code != 1 ||
		!strings.Contains(errb.String(), "Couldn't connect to 127.0.0.1:"+port) || !strings.Contains(errb.String(), "timed out") {
		t.Errorf("client with --timeout: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := perftestcmd.Run(env, perftest.SendLat, []string{"-d", "b", "-p", port, "127.0.0.1"}); code != 1 ||
		!strings.Contains(errb.String(), "connection refused") {
		t.Errorf("client without --timeout: exit %d, %q", code, errb.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestDeadLink: a link that loses every frame. The requester gives up
// after its retries (transport retry counter exceeded) and exits 1; its
// peer, left waiting for messages that never come, fails when the exchange
// connection closes (perftest) or when the idle watchdog fires (pingpong,
// whose exchange is over by then).
func TestDeadLink(t *testing.T) {
	dead := nic.Faults{Drop: 1}

	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1, AtoB: dead, BtoA: dead})
	s, c := tooltest.RunPairIdle(t, 2*time.Second, pingpongcmd.Run, open, []string{"-g", "1", "-n", "5"}, []string{"-g", "1", "-n", "5"})
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("pingpong: exit codes server %d client %d", s.Code, c.Code)
	}
	if !strings.Contains(c.Stderr, "Failed status transport retry counter exceeded (12) for wr_id 2") {
		t.Errorf("pingpong client stderr %q", c.Stderr)
	}
	if !strings.Contains(s.Stderr, "no progress for 2s") {
		t.Errorf("pingpong server stderr %q", s.Stderr)
	}

	open = tooltest.MemDevices(t, nic.MemConfig{Seed: 1, AtoB: dead, BtoA: dead})
	run := func(env tool.Env, args []string) int { return perftestcmd.Run(env, perftest.WriteBW, args) }
	s, c = tooltest.RunPairIdle(t, 2*time.Second, run, open, []string{"-n", "10", "-s", "64"}, []string{"-n", "10", "-s", "64"})
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("write_bw: exit codes server %d client %d", s.Code, c.Code)
	}
	if !strings.Contains(c.Stderr, "Completion with error at client") || !strings.Contains(c.Stderr, "RETRY_EXC_ERR") {
		t.Errorf("write_bw client stderr %q", c.Stderr)
	}
}
