package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// TestPerftestUsage: bad and unsupported options exit 1 with a message
// and the usage, before touching a device.
func TestPerftestUsage(t *testing.T) {
	for _, c := range []struct {
		test perftest.Test
		args string
	}{
		{perftest.WriteBW, "-R"},
		{perftest.WriteBW, "-c UC"},
		{perftest.AtomicBW, "-A ADD"},
		{perftest.WriteLat, "-D 5"},
		{perftest.ReadLat, "-U"},
		{perftest.SendBW, "-i 2"},
		{perftest.SendBW, "--timeout=-1"},
		{perftest.ReadBW, "-m 1000"},
	} {
		var out, errb bytes.Buffer
		env := toolEnv{stdout: &out, stderr: &errb, open: func(context.Context, string) (*qp.Device, error) {
			t.Fatalf("%v %s: opened a device", c.test, c.args)
			return nil, nil
		}}
		if code := runPerftest(env, c.test, strings.Fields(c.args)); code != 1 || !strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%v %s: exit %d, stderr %q", c.test, c.args, code, errb.String())
		}
	}
}

// TestToolHelp: -h and --help print the usage on stdout and exit 0.
func TestToolHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errb bytes.Buffer
		env := toolEnv{stdout: &out, stderr: &errb}
		if code := runPingpong(env, []string{"-n", "5", h}); code != 0 || !strings.HasPrefix(out.String(), "Usage:") {
			t.Errorf("pingpong %s: exit %d, %q", h, code, out.String())
		}
		out.Reset()
		if code := runPerftest(env, perftest.ReadLat, []string{h}); code != 0 || !strings.Contains(out.String(), "goroce read_lat [options] <host>") {
			t.Errorf("read_lat %s: exit %d, %q", h, code, out.String())
		}
	}
}

// TestToolTimeouts: --timeout bounds a server nobody connects to and a
// client whose server never comes (it retries refused connections until
// then); without it a refused client fails at once, like the C tools.
func TestToolTimeouts(t *testing.T) {
	open := memDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := toolEnv{stdout: &out, stderr: &errb, open: open}
	start := time.Now()
	if code := runPerftest(env, perftest.WriteBW, []string{"-d", "a", "-p", "0", "--timeout", "0.3"}); code != 1 ||
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
	if code := runPingpong(env, []string{"-d", "b", "-g", "1", "-p", port, "--timeout=400ms", "127.0.0.1"}); code != 1 ||
		!strings.Contains(errb.String(), "Couldn't connect to 127.0.0.1:"+port) || !strings.Contains(errb.String(), "timed out") {
		t.Errorf("client with --timeout: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := runPerftest(env, perftest.SendLat, []string{"-d", "b", "-p", port, "127.0.0.1"}); code != 1 ||
		!strings.Contains(errb.String(), "connection refused") {
		t.Errorf("client without --timeout: exit %d, %q", code, errb.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestPerftestQPMismatch: -q differing between the ends fails both at the
// second key exchange (whose keys must repeat the first's) instead of
// hanging until a timeout as the C tools do.
func TestPerftestQPMismatch(t *testing.T) {
	open := memDevices(t, nic.MemConfig{Seed: 1})
	run := func(env toolEnv, args []string) int { return runPerftest(env, perftest.WriteBW, args) }
	s, c := runPair(t, run, open, []string{"-n", "10", "-s", "64", "--timeout", "20"}, []string{"-n", "10", "-s", "64", "-q", "2", "--timeout", "20"})
	if s.code != 1 || c.code != 1 {
		t.Fatalf("exit codes server %d client %d", s.code, c.code)
	}
	if !strings.Contains(s.stderr+c.stderr, "do both sides use the same -q?") {
		t.Errorf("stderr:\n%s\n%s", s.stderr, c.stderr)
	}
}

// TestDeadLink: a link that loses every frame. The requester gives up
// after its retries (transport retry counter exceeded) and exits 1; its
// peer, left waiting for messages that never come, fails when the exchange
// connection closes (perftest) or when the idle watchdog fires (pingpong,
// whose exchange is over by then).
func TestDeadLink(t *testing.T) {
	saved := testIdle
	testIdle = 2 * time.Second
	defer func() { testIdle = saved }()
	dead := nic.Faults{Drop: 1}

	open := memDevices(t, nic.MemConfig{Seed: 1, AtoB: dead, BtoA: dead})
	s, c := runPair(t, runPingpong, open, []string{"-g", "1", "-n", "5"}, []string{"-g", "1", "-n", "5"})
	if s.code != 1 || c.code != 1 {
		t.Fatalf("pingpong: exit codes server %d client %d", s.code, c.code)
	}
	if !strings.Contains(c.stderr, "Failed status transport retry counter exceeded (12) for wr_id 2") {
		t.Errorf("pingpong client stderr %q", c.stderr)
	}
	if !strings.Contains(s.stderr, "no progress for 2s") {
		t.Errorf("pingpong server stderr %q", s.stderr)
	}

	open = memDevices(t, nic.MemConfig{Seed: 1, AtoB: dead, BtoA: dead})
	run := func(env toolEnv, args []string) int { return runPerftest(env, perftest.WriteBW, args) }
	s, c = runPair(t, run, open, []string{"-n", "10", "-s", "64"}, []string{"-n", "10", "-s", "64"})
	if s.code != 1 || c.code != 1 {
		t.Fatalf("write_bw: exit codes server %d client %d", s.code, c.code)
	}
	if !strings.Contains(c.stderr, "Completion with error at client") || !strings.Contains(c.stderr, "RETRY_EXC_ERR") {
		t.Errorf("write_bw client stderr %q", c.stderr)
	}
}

// TestPerftestHostilePeer: a peer advertising a 1 GiB "page size" in
// check_sys_data does not make the tool allocate gigabytes; it fails the
// run with a message.
func TestPerftestHostilePeer(t *testing.T) {
	open := memDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	portc := make(chan int, 1)
	env := toolEnv{stdout: &out, stderr: &errb, open: open, listening: func(a net.Addr) { portc <- a.(*net.TCPAddr).Port }}
	done := make(chan int, 1)
	go func() { done <- runPerftest(env, perftest.WriteBW, []string{"-d", "a", "-p", "0", "--timeout", "20"}) }()
	conn, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(<-portc))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := perftest.NewSession(conn, false).Hello(1<<30, 64, perftest.MTU1024); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 1 || !strings.Contains(errb.String(), "cycle buffer (1073741824)") {
		t.Errorf("exit %d, %q", code, errb.String())
	}
}
