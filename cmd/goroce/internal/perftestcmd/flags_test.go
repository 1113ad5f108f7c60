package perftestcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// tableLines returns the lines between the table header and the closing
// ResultLine: everything after the header, the last ResultLine cut.
func tableLines(t *testing.T, out, header string) []string {
	t.Helper()
	i := strings.Index(out, header)
	if i < 0 {
		t.Fatalf("no table header in\n%s", out)
	}
	rest := strings.TrimSuffix(out[i+len(header):], perftest.ResultLine)
	return strings.Split(strings.TrimSuffix(rest, "\n"), "\n")
}

func bwLine(t *testing.T, l string) (size, iters uint64, peak, avg, rate float64) {
	t.Helper()
	m := bwRE.FindStringSubmatch(l)
	if m == nil {
		t.Fatalf("not a BW line: %q", l)
	}
	size, _ = strconv.ParseUint(m[1], 10, 64)
	iters, _ = strconv.ParseUint(m[2], 10, 64)
	peak, _ = strconv.ParseFloat(m[3], 64)
	avg, _ = strconv.ParseFloat(m[4], 64)
	rate, _ = strconv.ParseFloat(m[5], 64)
	return
}

// TestBidirectional: with -b both sides of write_bw, read_bw, atomic_bw
// and send_bw run the traffic (the server's data lands in the client's
// target area as the client's in the server's), both print the
// "Bidirectional" title with the TX depth (and a SEND client its RX
// depth), and both print one line: the sum of the two directions, which
// the --report-both sections then show one by one.
func TestBidirectional(t *testing.T) {
	const page = 4096
	for _, c := range []struct {
		test perftest.Test
		args []string
		size uint64
		n    int
	}{
		{perftest.WriteBW, []string{"-b", "-s", "64", "-n", "20", "--report-both"}, 64, 20},
		{perftest.WriteBW, []string{"-b", "-s", "3000", "-n", "30", "-q", "2", "-t", "8", "-Q", "4"}, 3000, 30},
		{perftest.ReadBW, []string{"-b", "-s", "256", "-n", "20"}, 256, 20},
		{perftest.AtomicBW, []string{"-b", "-n", "40"}, 8, 40},
		{perftest.SendBW, []string{"-b", "-s", "64", "-n", "50", "-r", "8", "-t", "16", "--report-both"}, 64, 50},
		{perftest.SendBW, []string{"-b", "-s", "2100", "-n", "30", "-e"}, 2100, 30},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 9})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			f, _ := perftest.ParseFlags(c.test, c.args)
			qps := f.NumQPs
			for _, side := range []struct {
				name string
				o    tooltest.Outcome
			}{{"server", s}, {"client", cl}} {
				out := side.o.Stdout
				if !strings.Contains(out, "Bidirectional BW Test\n") || !strings.Contains(out, fmt.Sprintf(" TX depth        : %d\n", f.TxDepth)) {
					t.Errorf("%s: test information without the bidirectional title or the TX depth:\n%s", side.name, out)
				}
				if c.test == perftest.SendBW && !strings.Contains(out, fmt.Sprintf(" RX depth        : %d\n", f.RxDepth)) {
					t.Errorf("%s: no RX depth:\n%s", side.name, out)
				}
				lines := tableLines(t, out, perftest.BWHeader(false))
				size, iters, _, sum, _ := bwLine(t, lines[0])
				if size != c.size || iters != uint64(c.n*qps) {
					t.Errorf("%s: sum line %q", side.name, lines[0])
				}
				if !f.ReportBoth {
					if len(lines) != 1 {
						t.Errorf("%s: table %q", side.name, lines)
					}
					continue
				}
				// ResultLine, "", " Local results: ", ResultLine, header, line, and again for Remote.
				if len(lines) != 13 || lines[3] != " Local results: " || lines[9] != " Remote results: " {
					t.Fatalf("%s: --report-both sections %q", side.name, lines)
				}
				_, _, _, local, _ := bwLine(t, lines[6])
				_, _, _, remote, _ := bwLine(t, lines[12])
				if d := local + remote - sum; d > 0.02 || d < -0.02 {
					t.Errorf("%s: local %.2f + remote %.2f != sum %.2f", side.name, local, remote, sum)
				}
			}
			// Each direction moved its data.
			switch c.test {
			case perftest.WriteBW:
				n := int(c.size)
				off := page
				if c.size > page/2 {
					off = qps * page
				}
				sameBytes(t, "server target", s.Final[off:off+n], "client source", cl.Initial[:n])
				sameBytes(t, "client target", cl.Final[off:off+n], "server source", s.Initial[:n])
			case perftest.ReadBW:
				sameBytes(t, "client local", cl.Final[:256], "server target", s.Initial[page:page+256])
				sameBytes(t, "server local", s.Final[:256], "client target", cl.Initial[page:page+256])
			case perftest.SendBW:
				if uint64(f.RxDepth) < f.Iters {
					// The reposted receives start again at the area's
					// start (ctx_set_recv_wqes resets the address), so
					// later messages overwrite the first slots.
					break
				}
				n := int(c.size)
				sameBytes(t, "server receive area", s.Final[page:page+n], "client source", cl.Initial[:n])
				sameBytes(t, "client receive area", cl.Final[page:page+n], "server source", s.Initial[:n])
			}
		})
	}
}

// TestBidirectionalAllSizesAndDuration: -b with -a (a handshake before and
// after each size, reports each way) and with -D (send_bw: each side
// prints its own line, no reports are exchanged).
func TestBidirectionalAllSizesAndDuration(t *testing.T) {
	if raceEnabled {
		t.Skip("-a moves 2 × 16 MiB per iteration each way; the plain run covers it")
	}
	for _, c := range []struct {
		test  perftest.Test
		args  []string
		lines int
	}{
		{perftest.WriteBW, []string{"-b", "-a", "-n", "5"}, 23},
		{perftest.SendBW, []string{"-b", "-a", "-n", "5"}, 23},
		{perftest.SendBW, []string{"-b", "-D", "1", "-s", "512"}, 1},
		{perftest.WriteBW, []string{"-b", "-D", "1", "-s", "512"}, 1},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 9})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			for _, out := range []string{s.Stdout, cl.Stdout} {
				lines := tableLines(t, out, perftest.BWHeader(false))
				if len(lines) != c.lines {
					t.Fatalf("%d table lines, want %d:\n%s", len(lines), c.lines, out)
				}
				for _, l := range lines {
					if _, iters, _, _, _ := bwLine(t, l); iters == 0 {
						t.Errorf("line %q", l)
					}
				}
			}
		})
	}
}

// TestPostList: -l posts lists of WRs (the title and "Post List" line
// say so; without -Q the CQ moderation becomes the list length, with the
// note perftest prints), and the data lands where the list's addresses
// point (cycling inside the list).
func TestPostList(t *testing.T) {
	const page = 4096
	for _, c := range []struct {
		test perftest.Test
		args []string
		note bool
	}{
		{perftest.WriteBW, []string{"-l", "4", "-s", "64", "-n", "40"}, true},
		{perftest.SendBW, []string{"-l", "8", "-Q", "2", "-s", "64", "-n", "32", "-t", "16"}, false},
		{perftest.WriteBW, []string{"-l", "2", "-b", "-s", "128", "-n", "20"}, true},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 4})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			f, _ := perftest.ParseFlags(c.test, c.args)
			note := perftest.ResultLine + "Post List requested - CQ moderation will be the size of the post list\n"
			if strings.HasPrefix(cl.Stdout, note) != c.note {
				t.Errorf("client output starts %q", cl.Stdout[:min(len(cl.Stdout), 200)])
			}
			if !strings.Contains(cl.Stdout, " Post List BW Test\n") || !strings.Contains(cl.Stdout, fmt.Sprintf(" Post List       : %d\n CQ Moderation   : %d\n", f.PostList, f.CQMod)) {
				t.Errorf("client test information:\n%s", cl.Stdout)
			}
			lines := tableLines(t, cl.Stdout, perftest.BWHeader(false))
			if _, iters, _, _, _ := bwLine(t, lines[0]); iters != f.Iters {
				t.Errorf("line %q", lines[0])
			}
			n := f.PostList * 64 // one list's messages: one INC (a cache line) apart
			sameBytes(t, "server target", s.Final[page:page+n], "client source", cl.Initial[:n])
		})
	}
}

// TestLatencyRawOutput: -U lists every sample in order, -H the sorted
// samples without the two largest, each "#, usec" then "i, %g", followed by
// the header again and the usual line; the samples' t_min and t_max agree
// with the listing.
func TestLatencyRawOutput(t *testing.T) {
	for _, c := range []struct {
		test perftest.Test
		args []string
	}{
		{perftest.SendLat, []string{"-U", "-n", "20"}},
		{perftest.ReadLat, []string{"-H", "-n", "20"}},
		{perftest.WriteLat, []string{"-U", "-H", "-n", "12"}},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 2})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			f, _ := perftest.ParseFlags(c.test, c.args)
			lines := tableLines(t, cl.Stdout, perftest.LatHeader)
			sample := regexp.MustCompile(`^(\d+), (\S+)$`)
			var lists [][]float64
			i := 0
			for i < len(lines) && lines[i] == "#, usec" {
				i++
				var l []float64
				for i < len(lines) && sample.MatchString(lines[i]) {
					m := sample.FindStringSubmatch(lines[i])
					if m[1] != strconv.Itoa(len(l)+1) {
						t.Fatalf("sample line %q", lines[i])
					}
					v, err := strconv.ParseFloat(m[2], 64)
					if err != nil {
						t.Fatalf("sample line %q", lines[i])
					}
					l = append(l, v)
					i++
				}
				lists = append(lists, l)
			}
			want := 0
			if f.Unsorted {
				want++
			}
			if f.Histogram {
				want++
			}
			if len(lists) != want || i+3 != len(lines) || lines[i]+"\n" != perftest.ResultLine || lines[i+1]+"\n" != perftest.LatHeader {
				t.Fatalf("raw output %q", lines)
			}
			n := int(f.Iters) - 1
			if f.Unsorted && len(lists[0]) != n {
				t.Errorf("-U: %d samples, want %d", len(lists[0]), n)
			}
			if f.Histogram {
				h := lists[len(lists)-1]
				if len(h) != n-2 {
					t.Errorf("-H: %d samples, want %d", len(h), n-2)
				}
				for k := 1; k < len(h); k++ {
					if h[k] < h[k-1] {
						t.Errorf("-H not sorted at %d: %v", k, h)
					}
				}
				m := latRE.FindStringSubmatch(lines[i+2])
				if m == nil {
					t.Fatalf("latency line %q", lines[i+2])
				}
				if tmin, _ := strconv.ParseFloat(m[3], 64); fmt.Sprintf("%.2f", h[0]) != fmt.Sprintf("%.2f", tmin) {
					t.Errorf("t_min %v, first sorted sample %v", tmin, h[0])
				}
			}
		})
	}
}

// TestOutJSON: --out_json writes upstream's JSON report (test_info and
// results, with perftest's keys) to --out_json_file, for a BW client, a BW
// server (the client's report), a bidirectional sum and a latency test;
// the numbers are those of the printed line.
func TestOutJSON(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		test perftest.Test
		args []string
		name string
	}{
		{perftest.WriteBW, []string{"-s", "128", "-n", "20"}, "RDMA_Write_BW_Test"},
		{perftest.SendBW, []string{"-b", "-s", "128", "-n", "20"}, "Send_Bidirectional_BW_Test"},
		{perftest.AtomicBW, []string{"-n", "20", "-l", "2"}, "Atomic_FETCH_AND_ADD_Post_List_BW_Test"},
		{perftest.WriteLat, []string{"-n", "20"}, "RDMA_Write_Latency_Test"},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 6})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			sf, cf := filepath.Join(dir, c.test.String()+"-s.json"), filepath.Join(dir, c.test.String()+"-c.json")
			s, cl := tooltest.RunPair(t, run, open, append([]string{"--out_json", "--out_json_file", sf}, c.args...),
				append([]string{"--out_json", "--out_json_file=" + cf}, c.args...))
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			for _, side := range []struct {
				file, out string
				server    bool
			}{{sf, s.Stdout, true}, {cf, cl.Stdout, false}} {
				b, err := os.ReadFile(side.file)
				if err != nil {
					t.Fatal(err)
				}
				var doc struct {
					Info    map[string]any     `json:"test_info"`
					Results map[string]float64 `json:"results"`
				}
				if err := json.Unmarshal(b, &doc); err != nil {
					t.Fatalf("%s is not JSON: %v\n%s", side.file, err, b)
				}
				if doc.Info["test"] != c.name || doc.Info["Device"] != infoDev[side.server] || doc.Info["Data_ex_method"] != "Ethernet" || doc.Info["Mtu"] != 1024.0 {
					t.Errorf("test_info %v", doc.Info)
				}
				if _, tx := doc.Info["TX_depth"]; tx != (!side.server || strings.Contains(c.name, "Bidirectional")) {
					t.Errorf("TX_depth in %v", doc.Info)
				}
				if c.test.BW() {
					lines := tableLines(t, side.out, perftest.BWHeader(false))
					size, iters, peak, avg, rate := bwLine(t, lines[0])
					r := doc.Results
					if r["MsgSize"] != float64(size) || r["n_iterations"] != float64(iters) ||
						fmt.Sprintf("%.2f %.2f %.6f", r["BW_peak"], r["BW_average"], r["MsgRate"]) != fmt.Sprintf("%.2f %.2f %.6f", peak, avg, rate) {
						t.Errorf("results %v, line %q", r, lines[0])
					}
				} else {
					lines := tableLines(t, side.out, perftest.LatHeader)
					m := latRE.FindStringSubmatch(lines[0])
					if m == nil || fmt.Sprintf("%.2f", doc.Results["t_typical"]) != m[5] || fmt.Sprintf("%.2f", doc.Results["percentile_99.9"]) != m[9] {
						t.Errorf("results %v, line %q", doc.Results, lines[0])
					}
				}
			}
		})
	}
}

// TestLimits: -w fails the run (exit 1, "Error: BW result is below bw
// limit") on the sides that check it when no report reached the limit,
// and passes with a reachable one; -y alone checks nothing, as perftest's
// is_limit_bw condition has it. No outcome depends on the machine's speed:
// a limit that must be met is 0.0001 MB/s, one that must fail is 1e9.
func TestLimits(t *testing.T) {
	for _, c := range []struct {
		test           perftest.Test
		args           []string
		server, client int
		msg            string
	}{
		{perftest.WriteBW, []string{"-w", "1e9", "-s", "64", "-n", "20"}, 0, 1, "Error: BW result is below bw limit"},
		{perftest.WriteBW, []string{"-w", "0.0001", "-s", "64", "-n", "20"}, 0, 0, ""},
		{perftest.SendBW, []string{"-w", "0.0001", "-y", "1e9", "-s", "64", "-n", "20"}, 1, 1, "Error: Msg rate  is below msg_rate limit"},
		{perftest.SendBW, []string{"-y", "1e9", "-s", "64", "-n", "20"}, 0, 0, ""},
		{perftest.WriteBW, []string{"-b", "-w", "1e9", "-s", "64", "-n", "20"}, 1, 1, "Error: BW result is below bw limit"},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_"), func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 6})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != c.server || cl.Code != c.client {
				t.Fatalf("exit codes: server %d, client %d; want %d, %d", s.Code, cl.Code, c.server, c.client)
			}
			if c.client != 0 && !strings.Contains(cl.Stderr, c.msg) {
				t.Errorf("client stderr %q", cl.Stderr)
			}
			for _, o := range []tooltest.Outcome{s, cl} {
				if !strings.HasSuffix(o.Stdout, perftest.ResultLine) {
					t.Errorf("the test did not run to its end:\n%s", o.Stdout)
				}
			}
		})
	}
}

// setInterrupt makes --run_infinitely's interruption, in this process, end
// the n-th tool started (1: the server of a RunPair, 2: the client) after
// d; the others run until their peer ends. It restores the signal hook.
func setInterrupt(t *testing.T, d time.Duration, which ...int) {
	var mu sync.Mutex
	calls := 0
	old := interruptContext
	interruptContext = func(ctx context.Context) (context.Context, context.CancelFunc) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		for _, w := range which {
			if w == n {
				return context.WithTimeout(ctx, d)
			}
		}
		return context.WithCancel(ctx)
	}
	t.Cleanup(func() { interruptContext = old })
}

// TestRunInfinitely: --run_infinitely -D 1 prints a line every period
// (no peak, what completed in that period) until interrupted. Interrupting
// a write_bw client ends the test as upstream's SIGINT handler does: the
// last exchanges run and the server says " Client closed connection"; a
// bidirectional or send_bw run ends on either side's interruption, the
// other side following when the exchange closes. All exit 0.
func TestRunInfinitely(t *testing.T) {
	for _, c := range []struct {
		test      perftest.Test
		args      []string
		interrupt []int
		serverRep bool // the server prints periodic lines too
	}{
		{perftest.WriteBW, []string{"--run_infinitely", "-D", "1", "-s", "1024"}, []int{2}, false},
		{perftest.ReadBW, []string{"--run_infinitely", "-D", "1", "-s", "1024", "-q", "2"}, []int{2}, false},
		{perftest.WriteBW, []string{"--run_infinitely", "-D", "1", "-s", "1024", "-b"}, []int{2}, true},
		{perftest.WriteBW, []string{"--run_infinitely", "-D", "1", "-s", "1024", "-b"}, []int{1}, true},
		{perftest.SendBW, []string{"--run_infinitely", "-D", "1", "-s", "1024"}, []int{2}, true},
	} {
		t.Run(c.test.String()+"/"+strings.Join(c.args, "_")+fmt.Sprint(c.interrupt), func(t *testing.T) {
			setInterrupt(t, 3500*time.Millisecond, c.interrupt...)
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 8})
			run := func(env tool.Env, args []string) int { return Run(env, c.test, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			check := func(side, out string, closed bool) {
				lines := tableLines(t, out, perftest.BWHeader(false))
				if closed {
					if len(lines) != 1 || lines[0]+"\n" != perftest.ClientClosed {
						t.Errorf("%s: %q, want only %q", side, lines, perftest.ClientClosed)
					}
					return
				}
				if len(lines) < 1 {
					t.Fatalf("%s: no periodic line:\n%s", side, out)
				}
				for _, l := range lines {
					size, iters, peak, _, _ := bwLine(t, l)
					if size != 1024 || iters == 0 || peak != 0 {
						t.Errorf("%s: periodic line %q (size 1024, no peak) in\n%s", side, l, out)
					}
				}
			}
			check("client", cl.Stdout, false)
			check("server", s.Stdout, !c.serverRep)
		})
	}
}

// TestTrafficClass: -T (and --tclass) put the traffic class in the IP TOS
// byte of every RoCEv2 packet both sides send.
func TestTrafficClass(t *testing.T) {
	for _, c := range []struct {
		args []string
		tos  uint8
	}{
		{[]string{"-T", "106", "-s", "2000", "-n", "10"}, 106},
		{[]string{"--tclass=0x60", "-s", "64", "-n", "10", "-b"}, 0x60},
	} {
		t.Run(strings.Join(c.args, "_"), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[uint8]int{}
			frames := 0
			open := tooltest.MemDevicesWrap(t, nic.MemConfig{Seed: 1}, func(l nic.Link, side uint64) nic.Link {
				return tapLink{Link: l, tap: func(b []byte) {
					var p wire.Packet
					if wire.Parse(b, &p) != nil || p.BTH == nil || p.IPv4 == nil {
						return
					}
					mu.Lock()
					seen[p.IPv4.TOS()]++
					frames++
					mu.Unlock()
				}}
			})
			run := func(env tool.Env, args []string) int { return Run(env, perftest.WriteBW, args) }
			s, cl := tooltest.RunPair(t, run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes: server %d, client %d", s.Code, cl.Code)
			}
			mu.Lock()
			defer mu.Unlock()
			if frames == 0 || seen[c.tos] != frames {
				t.Errorf("traffic classes of %d frames: %v, want all %#x", frames, seen, c.tos)
			}
		})
	}
}

// tapLink shows every transmitted frame to tap.
type tapLink struct {
	nic.Link
	tap func([]byte)
}

func (l tapLink) WriteBatch(frames [][]byte) (int, error) {
	for _, f := range frames {
		l.tap(f)
	}
	return l.Link.WriteBatch(frames)
}
