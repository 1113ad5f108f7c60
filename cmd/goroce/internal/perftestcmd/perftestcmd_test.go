package perftestcmd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

var (
	addrRE  = regexp.MustCompile(`^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{1,6}( OUT 0x[0-9a-f]{2,4})?( RKey 0x[0-9a-f]{6,8} VAddr 0x[0-9a-f]{14,16})?$`)
	gidRE   = regexp.MustCompile(`^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:0[12]$`)
	bwRE    = regexp.MustCompile(`^ (\d+) +(\d+) +(\d+\.\d\d|\d+\.\d{6}) +(\d+\.\d\d|\d+\.\d{6})\s+(\d+\.\d{6})$`)
	latRE   = regexp.MustCompile(`^ (\d+) +(\d+) +(\d+\.\d\d) +(\d+\.\d\d) +(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d) *$`)
	infoDev = map[bool]string{true: "goroce-a", false: "goroce-b"}
)

// perftestCase is one tool run, server and client with the same options.
type perftestCase struct {
	test  perftest.Test
	args  []string
	size  uint64
	iters uint64
	qps   int
	sizes int // table lines (-a)
}

// checkPerftestOutput checks what each side printed against what the tool
// prints: the banner (server), the test information block, one address
// pair per QP with the verb's fields, the table header and its lines.
func checkPerftestOutput(t *testing.T, c perftestCase, server bool, stdout string) {
	t.Helper()
	f, err := perftest.ParseFlags(c.test, c.args)
	if err != nil {
		t.Fatal(err)
	}
	out := stdout
	if server {
		if !strings.HasPrefix(out, perftest.WaitingBanner) {
			t.Fatalf("server output does not start with the banner:\n%s", out)
		}
		out = strings.TrimPrefix(out, perftest.WaitingBanner)
	}
	outReads := 1
	if v := c.test.Verb(); v == perftest.Read || v == perftest.Atomic {
		outReads = defaultOutReads
	}
	info := perftest.FormatTestInfo(perftest.TestInfo{Test: c.test, Server: server, AtomicType: f.AtomicType,
		Device: infoDev[server], NumQPs: c.qps, Transport: "IB", PCIeRelax: c.test.BW(), TxDepth: f.TxDepth,
		RxDepth: f.RxDepth, CQMod: f.CQMod, MTU: perftest.MTU1024, LinkType: "Ethernet", GIDIndex: 1, OutReads: outReads,
		UseSRQ: f.UseSRQ, RDMACM: f.RDMACM, Connection: f.Connection})
	if !strings.HasPrefix(out, info) {
		t.Fatalf("server=%v: test information:\n%s\nwant\n%s", server, out, info)
	}
	lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(out, info), "\n"), "\n")
	if len(lines) < 4*c.qps {
		t.Fatalf("server=%v: %d lines after the header:\n%s", server, len(lines), out)
	}
	for i := 0; i < 2*c.qps; i++ {
		side := "local"
		if i >= c.qps {
			side = "remote"
		}
		m := addrRE.FindStringSubmatch(lines[2*i])
		if m == nil || m[1] != side || !gidRE.MatchString(lines[2*i+1]) {
			t.Fatalf("server=%v: address lines %q %q", server, lines[2*i], lines[2*i+1])
		}
		v := c.test.Verb()
		if (m[2] != "") != (v == perftest.Read) || (m[3] != "") != (v == perftest.Read || v == perftest.Write) {
			t.Errorf("server=%v: fields of %q for %v", server, lines[2*i], v)
		}
	}
	rest := lines[4*c.qps:]
	if server && (c.test == perftest.ReadLat || c.test == perftest.AtomicLat) {
		if len(rest) != 1 || rest[0]+"\n" != perftest.ResultLine {
			t.Fatalf("server=%v: after the addresses %q", server, rest)
		}
		return
	}
	header := perftest.LatHeader
	if c.test.BW() {
		header = perftest.BWHeader(f.ReportGbits)
	}
	want := 3 + c.sizes
	if len(rest) != want || rest[0]+"\n" != perftest.ResultLine || rest[1]+"\n" != header || rest[want-1]+"\n" != perftest.ResultLine {
		t.Fatalf("server=%v: table %q", server, rest)
	}
	for k, l := range rest[2 : want-1] {
		size := c.size
		if c.sizes > 1 {
			size = 2 << k
		}
		re := latRE
		if c.test.BW() {
			re = bwRE
		}
		m := re.FindStringSubmatch(l)
		iters := c.iters * uint64(c.qps)
		if !c.test.BW() {
			iters = c.iters
		}
		if m == nil || m[1] != fmt.Sprint(size) || m[2] != fmt.Sprint(iters) {
			t.Errorf("server=%v: table line %q (size %d, iterations %d)", server, l, size, iters)
		}
	}
}

// TestPerftestMem runs every perftest tool of goroce against itself over
// the in-memory link (exchange on 127.0.0.1) and checks exit codes, output
// and where the data went: the WRITE/SEND targets hold the sender's
// source bytes, READs bring the server's bytes back, FETCH_AND_ADD adds 1
// per operation at the cycling addresses, CMP_AND_SWAP (compare 0, swap 0)
// leaves random data alone, write_lat leaves its last count.
func TestPerftestMem(t *testing.T) {
	const page = 4096 // the cycle buffer both sides agree on (BUFF_SIZE for small messages)
	cases := []struct {
		perftestCase
		check func(t *testing.T, s, c tooltest.Outcome)
	}{
		{perftestCase{perftest.WriteBW, []string{"-s", "64", "-n", "20", "-F", "-x", "1"}, 64, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// 20 WRITEs of 64 bytes at cache-line steps: the first 1280
			// bytes of the target area are the client's source bytes.
			sameBytes(t, "server target", s.Final[page:page+20*64], "client source", c.Initial[:20*64])
		}},
		{perftestCase{perftest.WriteBW, []string{"-s", "3000", "-n", "30", "-q", "2", "-t", "8", "-Q", "4", "--report_gbits"}, 3000, 30, 2, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// 3000 > page/2: no cycling, every WRITE of QP i lands at
			// target i (buffer: 2 sources then 2 targets of one page each).
			for i := range 2 {
				sameBytes(t, fmt.Sprintf("server target %d", i), s.Final[(2+i)*page:(2+i)*page+3000],
					fmt.Sprintf("client source %d", i), c.Initial[i*page:i*page+3000])
			}
		}},
		{perftestCase{perftest.ReadBW, []string{"-s", "64", "-n", "20"}, 64, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "client local", c.Final[:20*64], "server target", s.Initial[page:page+20*64])
		}},
		{perftestCase{perftest.ReadBW, []string{"-s", "5000", "-n", "12", "-e"}, 5000, 12, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "client local", c.Final[:5000], "server target", s.Initial[5000:10000])
		}},
		{perftestCase{perftest.SendBW, []string{"-s", "64", "-n", "20"}, 64, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server receive area", s.Final[page:page+20*64], "client source", c.Initial[:20*64])
		}},
		{perftestCase{perftest.SendBW, []string{"-s", "2100", "-n", "50", "-r", "8", "-t", "16", "-e"}, 2100, 50, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// rx_depth 8 < 50 messages: the receives are reposted. 2100 >
			// page/2: every message uses the start of its area.
			sameBytes(t, "server receive area", s.Final[page:page+2100], "client source", c.Initial[:2100])
		}},
		{perftestCase{perftest.SendBW, []string{"-s", "64", "-n", "20", "-q", "4", "-r", "8", "--use_srq"}, 64, 20, 4, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// One SRQ of 8 WRs on the server, 2 posted per QP's slot: a
			// message takes whichever slot's WR is oldest, so each 64-byte
			// piece of the receive areas that changed holds some 64-byte
			// piece of the client's sources, and every area received.
			src := map[string]bool{}
			for off := 0; off < 4*page; off += 64 {
				src[string(c.Initial[off:off+64])] = true
			}
			for i := range 4 {
				changed := 0
				for off := (4 + i) * page; off < (5+i)*page; off += 64 {
					if got := s.Final[off : off+64]; !bytes.Equal(got, s.Initial[off:off+64]) {
						changed++
						if !src[string(got)] {
							t.Errorf("server receive area %d at %d holds bytes the client never sent", i, off)
						}
					}
				}
				if changed == 0 {
					t.Errorf("server receive area %d received nothing", i)
				}
			}
			if !strings.Contains(s.Stdout, "Using SRQ      : ON") || !strings.Contains(c.Stdout, "Using SRQ      : ON") {
				t.Error("no \"Using SRQ : ON\"")
			}
		}},
		{perftestCase{perftest.SendLat, []string{"-n", "12", "-s", "32", "-r", "4", "--use-srq"}, 32, 12, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server receive area", s.Final[page:page+32], "client source", c.Initial[:32])
			sameBytes(t, "client receive area", c.Final[page:page+32], "server source", s.Initial[:32])
		}},
		{perftestCase{perftest.AtomicBW, []string{"-n", "100", "-A", "FETCH_AND_ADD"}, 8, 100, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// 64 slots of 64 bytes: slots 0..35 get two adds, 36..63 one.
			for k := range 64 {
				off := page + 64*k
				before := binary.NativeEndian.Uint64(s.Initial[off:])
				after := binary.NativeEndian.Uint64(s.Final[off:])
				want := before + 1
				if k < 36 {
					want++
				}
				if after != want {
					t.Errorf("slot %d: %#x → %#x, want %#x", k, before, after, want)
				}
			}
			if !bytes.Equal(s.Final[page+8:page+64], s.Initial[page+8:page+64]) {
				t.Error("bytes next to the counter changed")
			}
		}},
		{perftestCase{perftest.AtomicBW, []string{"-n", "50", "-A", "CMP_AND_SWAP", "-q", "2"}, 8, 50, 2, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server buffer after", s.Final, "before", s.Initial)
		}},
		// -c UC: the same data movement on UC QPs (SEND and WRITE only).
		{perftestCase{perftest.WriteBW, []string{"-s", "64", "-n", "20", "-c", "UC"}, 64, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server target", s.Final[page:page+20*64], "client source", c.Initial[:20*64])
			ucHeader(t, s, c)
		}},
		{perftestCase{perftest.SendBW, []string{"-s", "2100", "-n", "50", "-c", "UC"}, 2100, 50, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server receive area", s.Final[page:page+2100], "client source", c.Initial[:2100])
			ucHeader(t, s, c)
		}},
		{perftestCase{perftest.WriteLat, []string{"-n", "20", "-s", "3000", "-c", "UC"}, 3000, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			if s.Final[page+2999] != 20 || c.Final[page+2999] != 20 {
				t.Errorf("last counts %d %d", s.Final[page+2999], c.Final[page+2999])
			}
			ucHeader(t, s, c)
		}},
		{perftestCase{perftest.SendLat, []string{"-n", "12", "-s", "32", "-c", "UC"}, 32, 12, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server receive area", s.Final[page:page+32], "client source", c.Initial[:32])
			sameBytes(t, "client receive area", c.Final[page:page+32], "server source", s.Initial[:32])
			ucHeader(t, s, c)
		}},
		{perftestCase{perftest.WriteLat, []string{"-n", "20"}, 2, 20, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			for _, r := range []tooltest.Outcome{s, c} {
				if r.Final[page+1] != 20 || r.Final[1] != 20 {
					t.Errorf("last counts: received %d, sent %d", r.Final[page+1], r.Final[1])
				}
			}
		}},
		{perftestCase{perftest.WriteLat, []string{"-n", "15", "-s", "3000"}, 3000, 15, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// Multi-packet WRITEs: the count is in the LAST packet.
			if s.Final[page+2999] != 15 || c.Final[page+2999] != 15 {
				t.Errorf("last counts %d %d", s.Final[page+2999], c.Final[page+2999])
			}
		}},
		{perftestCase{perftest.WriteLat, []string{"-n", "15", "-s", "3000", "-e"}, 3000, 15, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			// -e: the arrivals are awaited in MR.WaitWrite, not by spinning.
			if s.Final[page+2999] != 15 || c.Final[page+2999] != 15 {
				t.Errorf("last counts %d %d", s.Final[page+2999], c.Final[page+2999])
			}
		}},
		{perftestCase{perftest.ReadLat, []string{"-n", "10", "-s", "100"}, 100, 10, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "client local", c.Final[:100], "server target", s.Initial[page:page+100])
		}},
		{perftestCase{perftest.SendLat, []string{"-n", "12", "-s", "32", "-r", "4"}, 32, 12, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			sameBytes(t, "server receive area", s.Final[page:page+32], "client source", c.Initial[:32])
			sameBytes(t, "client receive area", c.Final[page:page+32], "server source", s.Initial[:32])
		}},
		{perftestCase{perftest.AtomicLat, []string{"-n", "10"}, 8, 10, 1, 1}, func(t *testing.T, s, c tooltest.Outcome) {
			before := binary.NativeEndian.Uint64(s.Initial[page:])
			if after := binary.NativeEndian.Uint64(s.Final[page:]); after != before+10 {
				t.Errorf("counter %#x → %#x, want +10", before, after)
			}
			// Each FETCH_AND_ADD returns the old value into the client's
			// source area: the last one saw before+9.
			if got := binary.NativeEndian.Uint64(c.Final); got != before+9 {
				t.Errorf("last fetched value %#x, want %#x", got, before+9)
			}
		}},
	}
	for _, tc := range cases {
		name := tc.test.String() + "/" + strings.Join(tc.args, "_")
		t.Run(name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 3})
			run := func(env tool.Env, args []string) int { return Run(env, tc.test, args) }
			s, c := tooltest.RunPair(t, run, open, tc.args, tc.args)
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, c.Code)
			}
			checkPerftestOutput(t, tc.perftestCase, true, s.Stdout)
			checkPerftestOutput(t, tc.perftestCase, false, c.Stdout)
			if len(s.Final) == 0 || len(c.Final) == 0 || len(s.Initial) == 0 || len(c.Initial) == 0 {
				t.Fatal("buffers not reported")
			}
			tc.check(t, s, c)
		})
	}
}

func ucHeader(t *testing.T, s, c tooltest.Outcome) {
	t.Helper()
	if !strings.Contains(s.Stdout, " Connection type : UC") || !strings.Contains(c.Stdout, " Connection type : UC") {
		t.Error("no \"Connection type : UC\"")
	}
}

func sameBytes(t *testing.T, what string, got []byte, other string, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s differs from %s at byte %d of %d", what, other, i, len(want))
	}
}

// TestPerftestAllSizesAndDuration: -a runs the 23 sizes from 2 to 2^23
// (one table line each, the send tests re-posting receives per size), and
// -D runs for a time and reports what completed in it.
func TestPerftestAllSizesAndDuration(t *testing.T) {
	for _, c := range []perftestCase{
		{perftest.WriteLat, []string{"-a", "-n", "5"}, 0, 5, 1, 23},
		{perftest.WriteLat, []string{"-a", "-n", "5", "-e"}, 0, 5, 1, 23},
		{perftest.SendBW, []string{"-a", "-n", "5", "-e"}, 0, 5, 1, 23},
	} {
		t.Run(c.test.String()+"/-a", func(t *testing.T) {
			if raceEnabled {
				t.Skip("-a moves 2 × 16 MiB per iteration: half a minute under the race detector; the plain run covers it")
			}
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 5})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			checkPerftestOutput(t, c, true, s.Stdout)
			checkPerftestOutput(t, c, false, cl.Stdout)
		})
	}
	for _, test := range []perftest.Test{perftest.WriteBW, perftest.SendBW} {
		t.Run(test.String()+"/-D", func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 5})
			run := func(env tool.Env, args []string) int { return Run(env, test, args) }
			args := []string{"-D", "1", "-s", "1024"}
			s, cl := tooltest.RunPair(t, run, open, args, args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			for _, out := range []string{s.Stdout, cl.Stdout} {
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				m := bwRE.FindStringSubmatch(lines[len(lines)-2])
				if m == nil || m[1] != "1024" || m[2] == "0" {
					t.Errorf("table line %q", lines[len(lines)-2])
				}
			}
		})
	}
}

// TestBusyPoll runs the tools on devices in busy-poll mode (no device
// goroutines): the traffic loops must drive the device through their CQ
// polls, and between phases, and on a server that is only an RDMA target,
// the tool's Progressor must keep it answering.
func TestBusyPoll(t *testing.T) {
	for _, tc := range []perftestCase{
		{perftest.WriteBW, []string{"-s", "4096", "-n", "50"}, 4096, 50, 1, 1},
		{perftest.ReadLat, []string{"-n", "10"}, 2, 10, 1, 1},
		{perftest.WriteLat, []string{"-n", "10", "-s", "2000", "-e"}, 2000, 10, 1, 1},
		{perftest.SendBW, []string{"-s", "64", "-n", "30"}, 64, 30, 1, 1},
	} {
		t.Run(tc.test.String(), func(t *testing.T) {
			open := tooltest.MemDevicesMode(t, nic.MemConfig{Seed: 11}, qp.ModeBusyPoll)
			run := func(env tool.Env, args []string) int { return Run(env, tc.test, args) }
			s, c := tooltest.RunPair(t, run, open, tc.args, tc.args)
			if s.Code != 0 || c.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, c.Code)
			}
			checkPerftestOutput(t, tc, true, s.Stdout)
			checkPerftestOutput(t, tc, false, c.Stdout)
		})
	}
}
