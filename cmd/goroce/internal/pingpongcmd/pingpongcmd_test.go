package pingpongcmd

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

var ppLocalRE = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)

// TestPingpongMem runs goroce pingpong against itself over the in-memory
// link, the exchange on 127.0.0.1: busy polling and CQ events, several
// sizes (one packet, several, not a multiple of the MTU), -c validation.
func TestPingpongMem(t *testing.T) {
	cases := []struct {
		name string
		args []string
		size int
		n    int
	}{
		{"default-size", []string{"-g", "1", "-n", "20"}, 4096, 20},
		{"events-check", []string{"-g", "1", "-n", "30", "-e", "-c", "-s", "10000"}, 10000, 30},
		{"small-rx-depth", []string{"--gid-idx=1", "-n", "25", "-r", "3", "-s", "512", "-m", "512"}, 512, 25},
		{"one-byte", []string{"-g1", "-n", "10", "-s", "1", "-e"}, 1, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunPair(t, Run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d", s.Code, cl.Code)
			}
			tooltest.CheckPingpongOutput(t, ppLocalRE, s, cl, strconv.Itoa(2*c.size*c.n), strconv.Itoa(c.n))
			// Both buffers end with what the client sent: 0x7b, and 0 at
			// each page start when -c set them.
			want := bytes.Repeat([]byte{0x7b}, c.size)
			if strings.Contains(strings.Join(c.args, " "), "-c") {
				for i := 0; i < c.size; i += os.Getpagesize() {
					want[i] = 0
				}
			}
			if !bytes.Equal(s.Final, want) || !bytes.Equal(cl.Final, want) {
				t.Errorf("buffers differ from the client's data")
			}
		})
	}
}

// TestPingpongLossy: the same over a link that drops, duplicates and
// reorders frames; RC recovery must still deliver every message.
func TestPingpongLossy(t *testing.T) {
	f := nic.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.05}
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 7, AtoB: f, BtoA: f})
	args := []string{"-g", "1", "-n", "40", "-e", "-c", "-s", "3000"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("seed 7: exit codes server %d client %d", s.Code, c.Code)
	}
	tooltest.CheckPingpongOutput(t, ppLocalRE, s, c, "240000", "40")
}

// TestPingpongErrors: usage errors, no -g (RoCE needs a GID: the server
// fails at RTR, the client sees the connection close), unsupported options.
func TestPingpongErrors(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	for _, args := range [][]string{{"-m", "1000"}, {"-x"}, {"a", "b"}, {"-o"}, {"-t"}, {"-j"}, {"--timeout"}, {"--timeout=abc"}} {
		out.Reset()
		errb.Reset()
		want := tool.ExitUsage
		if args[0] == "-o" || args[0] == "-t" || args[0] == "-j" {
			want = tool.ExitFailure // the device lacks ODP, timestamps, DM: a failed run, as rc_pingpong reports it
		}
		if code := Run(env, append([]string{"-d", "a"}, args...)); code != want {
			t.Errorf("%q: exit %d, want %d", args, code, want)
		}
		if errb.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
	}
	if code := Run(env, []string{"-d", "nosuch", "-g", "1"}); code != 1 || !strings.Contains(errb.String(), "IB device nosuch not found") {
		t.Errorf("unknown device: exit %d, %q", code, errb.String())
	}

	open = tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	s, c := tooltest.RunPair(t, Run, open, []string{"-n", "5"}, []string{"-n", "5"})
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("without -g: exit codes server %d client %d", s.Code, c.Code)
	}
	if !strings.Contains(s.Stderr, "Failed to modify QP to RTR") || !strings.Contains(s.Stderr, "Couldn't connect to remote QP") {
		t.Errorf("server stderr: %q", s.Stderr)
	}
	if !strings.Contains(c.Stderr, "Couldn't read/write remote address") {
		t.Errorf("client stderr: %q", c.Stderr)
	}
	if !regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x`).MatchString(s.Stdout) || !strings.HasSuffix(strings.TrimSpace(s.Stdout), "GID ::") {
		t.Errorf("server stdout: %q", s.Stdout)
	}
}

// TestPingpongTxDrop: the tools recover from their own transmit losses
// (the wrapper between the device and an in-memory link, both ways).
func TestPingpongTxDrop(t *testing.T) {
	open := tooltest.MemDevicesWrap(t, nic.MemConfig{Seed: 3}, func(l nic.Link, side uint64) nic.Link {
		w, _ := tool.WrapTxDrop(l, 0.05, side, nil)
		return w
	})
	args := []string{"-g", "1", "-n", "60", "-s", "3000", "-e", "-c"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
	}
	tooltest.CheckPingpongOutput(t, ppLocalRE, s, c, "360000", "60")
}

// TestBusyPoll runs pingpong on devices in busy-poll mode (no device
// goroutines): its loop must drive the device through its CQ polls, and
// the Progressor between the phases.
func TestBusyPoll(t *testing.T) {
	open := tooltest.MemDevicesMode(t, nic.MemConfig{Seed: 11}, qp.ModeBusyPoll)
	args := []string{"-g", "1", "-n", "20", "-c", "-s", "5000"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
	}
	tooltest.CheckPingpongOutput(t, ppLocalRE, s, c, "200000", "20")
}
