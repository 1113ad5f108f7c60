package udpingpongcmd

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

var localRE = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:198\.18\.0\.[12]$`)

// TestUDPingpongMem runs goroce ud_pingpong against itself over the
// in-memory link: polling and events, inline (≤ 400 bytes) and not, the
// largest size (the path MTU), -c validation, a small receive depth.
func TestUDPingpongMem(t *testing.T) {
	cases := []struct {
		name string
		args []string
		size int
		n    int
	}{
		{"default-size", []string{"-g", "1", "-n", "20"}, 1024, 20},
		{"events-check-inline", []string{"-g", "1", "-n", "30", "-e", "-c", "-s", "300"}, 300, 30},
		{"small-rx-depth", []string{"--gid-idx=1", "-n", "25", "-r", "3", "-s", "512"}, 512, 25},
		{"one-byte", []string{"-g1", "-n", "10", "-s", "1", "-e", "-c"}, 1, 10},
		// --srq: both ends receive through an SRQ (the interop cell runs a
		// goroce --srq server against the stock client).
		{"srq", []string{"-g", "1", "-n", "40", "-r", "4", "--srq", "-c"}, 1024, 40},
		{"srq-events", []string{"-g", "1", "-n", "20", "--srq", "-e", "-s", "64"}, 64, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunPair(t, Run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d\n%s\n%s", s.Code, cl.Code, s.Stderr, cl.Stderr)
			}
			tooltest.CheckPingpongOutput(t, localRE, s, cl, strconv.Itoa(2*c.size*c.n), strconv.Itoa(c.n))
			// Each buffer ends with the GRH area of the last datagram and
			// the client's payload: 0x7b, and 0 at each page start with -c.
			want := bytes.Repeat([]byte{0x7b}, c.size)
			if strings.Contains(strings.Join(c.args, " "), "-c") {
				for i := 0; i < c.size; i += os.Getpagesize() {
					want[i] = 0
				}
			}
			for name, b := range map[string][]byte{"server": s.Final, "client": cl.Final} {
				if len(b) != 40+c.size || !bytes.Equal(b[40:], want) {
					t.Fatalf("%s buffer: %d bytes, payload differs", name, len(b))
				}
				if !bytes.Equal(b[:20], make([]byte, 20)) || b[20] != 0x45 || b[29] != 17 {
					t.Errorf("%s GRH area % x", name, b[:40])
				}
			}
		})
	}
}

// TestUDPingpongLossy: UD has no recovery; a lost datagram stalls the
// strict ping-pong, and the tool gives up at --timeout with exit 1 (the C
// tool would wait forever).
func TestUDPingpongLossy(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 7, AtoB: nic.Faults{Drop: 1}})
	args := []string{"-g", "1", "-n", "5", "--timeout=2"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
	}
}

// TestUDPingpongErrors: usage errors, a size above the port MTU, no -g.
func TestUDPingpongErrors(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	for _, args := range [][]string{{"-m", "1024"}, {"-x"}, {"a", "b"}, {"-o"}, {"-N"}, {"--timeout"}} {
		out.Reset()
		errb.Reset()
		if code := Run(env, append([]string{"-d", "a"}, args...)); code != tool.ExitUsage || errb.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	errb.Reset()
	if code := Run(env, []string{"-d", "b", "-g", "1", "-s", "1025"}); code != 1 || !strings.Contains(errb.String(), "Requested size larger than port MTU (1024)") {
		t.Errorf("-s 1025: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := Run(env, []string{"-h"}); code != 0 || !strings.Contains(out.String(), "--rx-depth") {
		t.Errorf("-h: exit %d", code)
	}

	open = tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	s, c := tooltest.RunPair(t, Run, open, []string{"-n", "5"}, []string{"-n", "5"})
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("without -g: exit codes server %d client %d", s.Code, c.Code)
	}
	if !strings.Contains(s.Stderr, "Failed to create AH") || !strings.Contains(s.Stderr, "Couldn't connect to remote QP") {
		t.Errorf("server stderr: %q", s.Stderr)
	}
	if !strings.Contains(c.Stderr, "Couldn't read/write remote address") {
		t.Errorf("client stderr: %q", c.Stderr)
	}
}

// TestUDPingpongBusyPoll runs on busy-poll devices (no device goroutines).
func TestUDPingpongBusyPoll(t *testing.T) {
	open := tooltest.MemDevicesMode(t, nic.MemConfig{Seed: 11}, qp.ModeBusyPoll)
	args := []string{"-g", "1", "-n", "20", "-c", "-s", "700"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 0 || c.Code != 0 {
		t.Fatalf("exit codes server %d client %d\n%s\n%s", s.Code, c.Code, s.Stderr, c.Stderr)
	}
	tooltest.CheckPingpongOutput(t, localRE, s, c, "28000", "20")
}
