package perftestcmd

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// TestUsage: bad and unsupported options exit 1 with a message
// and the usage, before touching a device.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		test perftest.Test
		args string
	}{
		{perftest.WriteBW, "-R -T 16"},
		{perftest.ReadBW, "-c UC"},
		{perftest.SendBW, "-c UC -R"},
		{perftest.WriteBW, "-c UD"},
		{perftest.AtomicBW, "-A ADD"},
		{perftest.WriteLat, "-D 5"},
		{perftest.WriteBW, "-U"},
		{perftest.ReadBW, "-H"},
		{perftest.SendLat, "-b"},
		{perftest.ReadLat, "--run_infinitely"},
		{perftest.SendBW, "-b --run_infinitely"},
		{perftest.WriteBW, "-l 3"},
		{perftest.SendBW, "-i 2"},
		{perftest.SendBW, "--timeout=-1"},
		{perftest.ReadBW, "-m 1000"},
		{perftest.WriteBW, "--use-srq"},
		{perftest.SendBW, "--use_srq -q 4 -r 3"},
	} {
		var out, errb bytes.Buffer
		env := tool.Env{Stdout: &out, Stderr: &errb, Open: func(context.Context, string) (*qp.Device, error) {
			t.Fatalf("%v %s: opened a device", c.test, c.args)
			return nil, nil
		}}
		if code := Run(env, c.test, strings.Fields(c.args)); code != tool.ExitUsage || !strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%v %s: exit %d, stderr %q", c.test, c.args, code, errb.String())
		}
	}
}

// TestQPMismatch: -q differing between the ends fails both at the
// second key exchange (whose keys must repeat the first's) instead of
// hanging until a timeout as the C tools do.
func TestQPMismatch(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	run := func(env tool.Env, args []string) int { return Run(env, perftest.WriteBW, args) }
	s, c := tooltest.RunPair(t, run, open, []string{"-n", "10", "-s", "64", "--timeout", "20"}, []string{"-n", "10", "-s", "64", "-q", "2", "--timeout", "20"})
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
	}
	if !strings.Contains(s.Stderr+c.Stderr, "do both sides use the same -q?") {
		t.Errorf("stderr:\n%s\n%s", s.Stderr, c.Stderr)
	}
}

// TestHostilePeer: a peer advertising a 1 GiB "page size" in
// check_sys_data does not make the tool allocate gigabytes; it fails the
// run with a message.
func TestHostilePeer(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	portc := make(chan int, 1)
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open, Listening: func(a net.Addr) { portc <- a.(*net.TCPAddr).Port }}
	done := make(chan int, 1)
	go func() { done <- Run(env, perftest.WriteBW, []string{"-d", "a", "-p", "0", "--timeout", "20"}) }()
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
