package ucpingpongcmd

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

var localRE = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)

// TestUCPingpongMem runs goroce uc_pingpong against itself over the
// in-memory link: polling and events, one packet and several per message,
// a small receive depth; every frame on the wire is a UC SEND without
// AckReq, and nothing answers them.
func TestUCPingpongMem(t *testing.T) {
	cases := []struct {
		name string
		args []string
		size int
		n    int
	}{
		{"default-size", []string{"-g", "1", "-n", "20"}, 4096, 20},
		{"events", []string{"-g", "1", "-n", "30", "-e", "-s", "10000"}, 10000, 30},
		{"small-rx-depth", []string{"--gid-idx=1", "-n", "25", "-r", "3", "-s", "512", "-m", "512"}, 512, 25},
		{"one-byte", []string{"-g1", "-n", "10", "-s", "1", "-e"}, 1, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var bad []string
			var pkt wire.Packet
			check := func(frame []byte) bool {
				if wire.Parse(frame, &pkt) == nil {
					if op := pkt.Opcode(); op.Transport() != wire.TransportUC || !op.IsSend() || pkt.BTH.AckReq() {
						bad = append(bad, op.String())
					}
				}
				return false
			}
			f := nic.Faults{Filter: check}
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1, AtoB: f, BtoA: f})
			s, cl := tooltest.RunPair(t, Run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d\n%s\n%s", s.Code, cl.Code, s.Stderr, cl.Stderr)
			}
			if len(bad) != 0 {
				t.Fatalf("frames other than UC SENDs without AckReq: %v", bad)
			}
			tooltest.CheckPingpongOutput(t, localRE, s, cl, strconv.Itoa(2*c.size*c.n), strconv.Itoa(c.n))
			want := bytes.Repeat([]byte{0x7b}, c.size)
			if !bytes.Equal(s.Final, want) || !bytes.Equal(cl.Final, want) {
				t.Errorf("buffers differ from the client's data")
			}
		})
	}
}

// TestUCPingpongLossy: UC does not retransmit; a lost message stalls the
// strict ping-pong and the tool gives up at --timeout with exit 1 (the C
// tool would wait forever).
func TestUCPingpongLossy(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 7, AtoB: nic.Faults{Drop: 1}})
	args := []string{"-g", "1", "-n", "5", "--timeout=2"}
	s, c := tooltest.RunPair(t, Run, open, args, args)
	if s.Code != 1 || c.Code != 1 {
		t.Fatalf("exit codes server %d client %d", s.Code, c.Code)
	}
}

// TestUCPingpongUsage: uc_pingpong has none of rc_pingpong's own options.
func TestUCPingpongUsage(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	for _, args := range [][]string{{"-c"}, {"-o"}, {"-N"}, {"-t"}, {"a", "b"}, {"-m", "3000"}} {
		out.Reset()
		errb.Reset()
		if code := Run(env, args); code != tool.ExitUsage || !strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	out.Reset()
	if code := Run(env, []string{"-h"}); code != 0 || !strings.Contains(out.String(), "uc_pingpong") {
		t.Errorf("-h: exit %d", code)
	}
}
