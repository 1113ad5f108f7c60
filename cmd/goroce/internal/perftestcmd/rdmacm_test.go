package perftestcmd

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// TestRDMACMMem runs every perftest tool with -R against itself over the
// in-memory link: both connections through package cm on port 18515, the
// exchanges as SENDs on the control QP, the same output as without -R but
// for the rdma_cm lines, and the data where it belongs.
func TestRDMACMMem(t *testing.T) {
	const page = 4096
	for _, tc := range []perftestCase{
		{perftest.WriteBW, []string{"-R", "-s", "4096", "-n", "20"}, 4096, 20, 1, 1},
		{perftest.ReadBW, []string{"-R", "-s", "64", "-n", "20"}, 64, 20, 1, 1},
		{perftest.SendBW, []string{"-R", "-s", "4096", "-n", "20"}, 4096, 20, 1, 1},
		{perftest.AtomicBW, []string{"-R", "-n", "50"}, 8, 50, 1, 1},
		{perftest.WriteLat, []string{"-R", "-n", "20"}, 2, 20, 1, 1},
		{perftest.ReadLat, []string{"-R", "-s", "64", "-n", "20"}, 64, 20, 1, 1},
		{perftest.SendLat, []string{"-R", "-n", "20"}, 2, 20, 1, 1},
		{perftest.AtomicLat, []string{"-R", "-n", "10"}, 8, 10, 1, 1},
		{perftest.WriteBW, []string{"-R", "-s", "64", "-n", "20", "-q", "2"}, 64, 20, 2, 1},
	} {
		t.Run(tc.test.String()+"/"+strings.Join(tc.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 3})
			run := func(env tool.Env, args []string) int { return Run(env, tc.test, args) }
			s, c := tooltest.RunCMPair(t, run, open, append([]string{"-d", "a"}, tc.args...),
				append([]string{"-d", "b"}, append(tc.args, "198.18.0.1")...))
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, c.Code)
			}
			checkPerftestOutput(t, tc, true, s.Stdout)
			checkPerftestOutput(t, tc, false, c.Stdout)
			switch tc.test {
			case perftest.WriteBW:
				sameBytes(t, "server target", s.Final[page*tc.qps:page*tc.qps+int(tc.size)], "client source", c.Initial[:tc.size])
			case perftest.SendBW:
				sameBytes(t, "server receive area", s.Final[page:page+int(tc.size)], "client source", c.Initial[:tc.size])
			case perftest.ReadLat:
				sameBytes(t, "client local", c.Final[:tc.size], "server target", s.Initial[page:page+int(tc.size)])
			}
		})
	}
}
