//go:build linux

package main

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
)

func TestSummarizeValues(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want stat
	}{
		{nil, stat{}},
		{[]float64{7}, stat{7, 7, 7, 1}},
		{[]float64{3, 1, 2}, stat{2, 1, 3, 3}},
		{[]float64{4, 1, 3, 2}, stat{2.5, 1, 4, 4}},
	} {
		in := slices.Clone(tc.in)
		if got := summarizeValues(in); got != tc.want {
			t.Errorf("summarizeValues(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("summarizeValues reordered its input: %v", in)
		}
	}
}

func TestSummarizeRTTs(t *testing.T) {
	var rtts []time.Duration
	for i := 100; i >= 1; i-- {
		rtts = append(rtts, time.Duration(i)*time.Microsecond)
	}
	l := summarizeRTTs(rtts)
	want := latency{n: 100, p50: 50 * time.Microsecond, mean: 50500 * time.Nanosecond, p99: 99 * time.Microsecond}
	if l != want {
		t.Errorf("summarizeRTTs(1..100 µs) = %+v, want %+v", l, want)
	}
	if l := summarizeRTTs([]time.Duration{time.Millisecond}); l.p50 != time.Millisecond || l.p99 != time.Millisecond || l.mean != time.Millisecond {
		t.Errorf("one sample: %+v", l)
	}
	if l := summarizeRTTs(nil); l.n != 0 {
		t.Errorf("no samples: %+v", l)
	}
}

const procStat = `cpu  1000 20 300 5000 40 5 6 7 0 0
cpu0 500 10 150 2500 20 2 3 3 0 0
cpu1 500 10 150 2500 20 3 3 4 0 0
intr 12345
ctxt 999
`

func TestParseProcStat(t *testing.T) {
	c, err := parseProcStat(procStat)
	if err != nil {
		t.Fatal(err)
	}
	want := cpuTimes{user: 1000, nice: 20, system: 300, idle: 5000, iowait: 40, irq: 5, softirq: 6, steal: 7}
	if c != want {
		t.Fatalf("parseProcStat = %+v, want %+v", c, want)
	}
	if b := c.busy(); b != 1000+20+300+5+6+7 {
		t.Errorf("busy = %d, want user+nice+system+irq+softirq+steal = 1338", b)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
}

func TestCPUMarkSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuMark{machine: cpuTimes{user: 100, system: 50, idle: 1000}, proc: time.Second, wall: t0}
	b := cpuMark{machine: cpuTimes{user: 250, system: 60, idle: 1100, softirq: 40}, proc: 3 * time.Second, wall: t0.Add(2 * time.Second)}
	u, err := b.since(a)
	if err != nil {
		t.Fatal(err)
	}
	if u != (cpuUse{machine: 2, proc: 2, wall: 2}) {
		t.Errorf("since = %+v, want 2 busy CPU-s (200 ticks), 2 process CPU-s, 2 s", u)
	}
	bad := cpuMark{err: errors.New("no /proc")}
	if _, err := bad.since(a); err == nil {
		t.Error("a failed mark gave a CPU use")
	}
}

const straceOut = `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 40.00    0.004000           2      1800       120 futex
 30.00    0.003000           1      2000           nanosleep
 20.00    0.002000           2      1000           sendto
 10.00    0.001000           1       550        12 ppoll
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           1      5350       132 total
`

func TestParseStraceSummary(t *testing.T) {
	calls, err := parseStraceSummary(straceOut)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"futex": 1800, "nanosleep": 2000, "sendto": 1000, "ppoll": 550}
	if len(calls) != len(want) {
		t.Fatalf("calls = %v, want %v", calls, want)
	}
	for k, v := range want {
		if calls[k] != v {
			t.Errorf("calls[%s] = %d, want %d", k, calls[k], v)
		}
	}
	per, top := perRoundTrip(calls, 500, 3)
	if per != 10.7 {
		t.Errorf("per round trip = %v, want 5350/500 = 10.7", per)
	}
	if top != "nanosleep 4.00, futex 3.60, sendto 2.00" {
		t.Errorf("top = %q", top)
	}
	if _, err := parseStraceSummary("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"); err == nil {
		t.Error("a text without the summary table parsed")
	}
}

func TestParseIperf3(t *testing.T) {
	bps, err := parseIperf3([]byte(`{"start":{},"end":{"sum_sent":{"bits_per_second":2.1e10},"sum_received":{"bits_per_second":2.05e10}}}`))
	if err != nil || bps != 2.05e10 {
		t.Errorf("parseIperf3 = %v, %v; want the receiver's 2.05e10", bps, err)
	}
	if _, err := parseIperf3([]byte(`{"error":"unable to connect to server"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("iperf3 error report: %v", err)
	}
	if _, err := parseIperf3([]byte(`not json`)); err == nil {
		t.Error("garbage parsed")
	}
}

func TestFmtStat(t *testing.T) {
	for _, tc := range []struct {
		s    stat
		u    unit
		want string
	}{
		{stat{5.1, 4.9, 5.3, 3}, fmtGbit, "5.10 (4.90–5.30) Gbit/s"},
		{stat{5.1, 5.1, 5.1, 1}, fmtGbit, "5.10 Gbit/s"},
		{stat{5.1, 5.1, 5.1, 3}, fmtGbit, "5.10 Gbit/s (n=3)"},
		{stat{0.5, 0.4, 1.2, 3}, fmtGbit, "500 Mbit/s (400 Mbit/s–1.20 Gbit/s)"},
		{stat{1.5e6, 1.2e6, 1.6e6, 3}, fmtRate, "1.50 (1.20–1.60) M"},
		{stat{12.34, 11, 1500, 5}, fmtMicros, "12.3 µs (11.0 µs–1.50 ms)"},
	} {
		if got := fmtStat(tc.s, tc.u); got != tc.want {
			t.Errorf("fmtStat(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

// sampleResults is one backend at MTU 1500 and 9000 with every cell
// filled in, three repetitions where it matters.
func sampleResults() *results {
	r := newResults()
	r.placements = []placement{{"free", -1, -1}, {"split", 0, 1}}
	r.addSection(section{backend: "afxdp", mtu: 1500, mode: "native", pmtu: 1024})
	r.addSection(section{backend: "afxdp", mtu: 9000, mode: "native", pmtu: 2048})
	add := func(b string, mtu int, m string, v ...float64) {
		for _, x := range v {
			r.add(key{b, mtu, m}, x)
		}
	}
	add("afxdp", 1500, mRawSmallFPS, 1.2e6, 1.0e6, 1.4e6)
	add("afxdp", 1500, mRawSmallLen, 138)
	add("afxdp", 1500, mRawFullLen, 1098)
	add("afxdp", 1500, mRawFullGbps, 8, 9, 10)
	add("afxdp", 1500, mRawGbPerCPU, 4)
	add("tcp", 1500, mTCPGbps, 18)
	add("afxdp", 1500, "bw.WRITE.64.mps", 0.45e6, 0.42e6, 0.47e6)
	add("afxdp", 1500, "bw.WRITE.65536.gbps", 6)
	add("afxdp", 1500, "bw.READ.65536.gbps", 9)
	add("afxdp", 1500, "bw.WRITE.65536.gbpcpu", 3.6)
	add("afxdp", 1500, "lat.busy.p50", 6)
	add("afxdp", 1500, "raw.rtt.p50", 3)
	add("afxdp", 1500, "lat.sleep.mean", 40)
	add("afxdp", 1500, "lat.sleep.p99", 90)
	add("tcp", 1500, "tcp.rtt.mean", 50)
	add("tcp", 1500, "tcp.rtt.p99", 100)
	add("afxdp", 1500, "lat.sleep@split.mean", 60)
	add("afxdp", 1500, "lat.sleep@split.p99", 120)
	add("tcp", 1500, "tcp.rtt@split.mean", 80)
	add("tcp", 1500, "tcp.rtt@split.p99", 110)
	add("afxdp", 1500, mQPsAgg, 0.4e6)
	add("afxdp", 1500, mQPsOne, 0.45e6)
	add("afxdp", 1500, mQPsHeap, 10240)
	add("afxdp", 1500, mQPsLink, 16*1024)
	add("afxdp", 1500, mIdleProc, 0.002)
	add("afxdp", 1500, mIdleMachine, 1.5)
	add("afxdp", 1500, mSysGoroce, 11)
	add("tcp", 1500, mSysTCP, 3.8)
	r.note(key{"afxdp", 1500, mSysGoroce}, "futex 3.60")
	add("afxdp", 9000, "bw.WRITE.65536.gbps", 11)
	add("tcp", 9000, mTCPGbps, 20)
	r.fail(key{"afxdp", 9000, "bw.READ.65536.gbps"}, errors.New("post on QP 0: boom | pipe\nsecond line"))
	return r
}

func TestTargets(t *testing.T) {
	got := map[string]target{}
	for _, tg := range targets(sampleResults()) {
		got[tg.n+" "+tg.what] = tg
	}
	want := map[string][2]string{ // number and what → measured, met
		"1 sleeping 8 B WRITE RTT vs Go TCP ping-pong, free placement":  {"mean 0.80×, p99 0.90×", "yes"},
		"1 sleeping 8 B WRITE RTT vs Go TCP ping-pong, split placement": {"mean 0.75×, p99 1.09×", "no"},
		"2 busy-poll RTT p50 vs raw busy ping-pong":                     {"2.00×", "no"},
		"3 64 B WRITE msg rate vs raw frame rate":                       {"0.38×", "no"},
		"4 64 KiB WRITE and READ goodput vs raw payload goodput":        {"WRITE 0.67×, READ 1.00×", "no"},
		"5 goodput per busy CPU-s (sleeping) vs raw's":                  {"0.90×", "yes"},
		"6 AF_XDP path MTU at MTU 9000":                                 {"2048", "no"},
		"6 MTU 9000, 64 KiB WRITE vs one TCP stream (best backend)":     {"0.55×", "no"},
		"7 many-QP aggregate msg rate vs one QP (MTU 1500)":             {"0.89×", "yes"},
		"8 idle pair of devices, CPU-s per s":                           {"0.0020", "yes"},
		"9 syscalls per sleeping round trip vs Go TCP's":                {"2.89×", "no"},
	}
	for k, w := range want {
		tg, ok := got[k]
		if !ok {
			t.Errorf("no target %q", k)
			continue
		}
		if tg.measured != w[0] || tg.met != w[1] {
			t.Errorf("target %q: measured %q met %q, want %q %q", k, tg.measured, tg.met, w[0], w[1])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d targets, want %d: %v", len(got), len(want), got)
	}
}

func TestWriteReport(t *testing.T) {
	var b strings.Builder
	writeReport(&b, sampleResults(), runInfo{command: "go run ./bench -reps 3", start: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		elapsed: 200 * time.Second, load0: "1.00 2.00 3.00", load1: "1.50 2.00 3.00",
		machine: machineState{kernel: "6.1.0", cpuModel: "Test CPU", cpus: 2, maxprocs: 2, goVersion: "go1.26"},
		cell:    time.Second, reps: 3, qpsN: 1000, qpsDepth: 16, qpsCQMod: 8, idle: time.Second})
	out := b.String()
	for _, want := range []string{
		"```\ngo run ./bench -reps 3\n```",
		"- 2026-12-01 09:00 UTC, 3m20s; every cell ≤ 1s",
		"- Linux 6.1.0, Test CPU, 2 CPUs, GOMAXPROCS 2, go1.26",
		"- load average before 1.00 2.00 3.00, after 1.50 2.00 3.00",
		"## afxdp (native), MTU 1500, path MTU 1024",
		"| 64 B WRITE, msg/s · raw: one-way 64 B WRITE frames/s | 1.20 (1.00–1.40) M | – | 450.0 (420.0–470.0) k | 0.38× | – |",
		"| 64 KiB WRITE goodput · raw: path-MTU frames' payload | 9.00 (8.00–10.00) Gbit/s | 18.00 Gbit/s | 6.00 Gbit/s | 0.67× | 0.33× |",
		"| 8 B WRITE round trip, sleeping, free (the scheduler's choice), mean · raw: sleeping 1-frame ping-pong; TCP: sleeping 64 B ping-pong | – | 50.0 µs | 40.0 µs | – | 0.80× |",
		"| 8 B WRITE round trip, sleeping, split (A's process on CPU 0, B's on CPU 1), p99 · raw: sleeping 1-frame ping-pong; TCP: sleeping 64 B ping-pong | – | 110 µs | 120 µs | – | 1.09× |",
		"Raw frames: 138 bytes (a 64 B WRITE ONLY) and 1098 bytes",
		"## afxdp (native), MTU 9000, path MTU 2048",
		"| 64 KiB READ goodput · raw: path-MTU frames' payload | – | 20.00 Gbit/s | error: post on QP 0: boom / pipe | – | – |",
		"| afxdp | 1500 | 400.0 k | 450.0 k | 0.89× | 10.0 KiB | 16.0 KiB |",
		"receive rings hold the 16000 frames in flight (a 16384-slot AF_XDP RX ring (NumFrames 32768 of 2048 B), 32 MiB of AF_PACKET ring, 62 MiB UDP socket buffers)",
		"| afxdp | 1500 | 0.0020 | 1.50 |",
		"| afxdp | 1500 | 11.0 | 3.80 | 2.89× | futex 3.60 | – |",
		"| 9 | syscalls per sleeping round trip vs Go TCP's | afxdp | 2.89× | ≤ 1.0× | no |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "| 4 KiB READ goodput") {
		t.Error("a row with no goroce value was printed")
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestRecordRate(t *testing.T) {
	r := newResults()
	recordRate(r, key{"afxdp", 1500, ""}, "raw.full", 2e9, 2*time.Second, cpuUse{machine: 4, proc: 1, wall: 2}, nil, nil)
	for m, want := range map[string]float64{"raw.full.gbps": 8, "raw.full.cpugb": 2, "raw.full.procgb": 0.5, "raw.full.gbpcpu": 4} {
		s, err := r.get(key{"afxdp", 1500, m})
		if err != nil || s.med != want {
			t.Errorf("%s = %v, %v; want %v", m, s.med, err, want)
		}
	}
	recordRate(r, key{"udp", 1500, ""}, "raw.full", 0, 0, cpuUse{}, nil, errors.New("down"))
	if _, err := r.get(key{"udp", 1500, "raw.full.gbps"}); err == nil || err.Error() != "down" {
		t.Errorf("failed rate: %v", err)
	}
	if _, err := r.get(key{"udp", 1500, "raw.full.cpugb"}); !errors.Is(err, errNotMeasured) {
		t.Errorf("CPU of a failed rate: %v", err)
	}
}

func TestSwapAddrs(t *testing.T) {
	f := make([]byte, 42)
	copy(f[0:], []byte{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0x08, 0x00})
	copy(f[26:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	f[40] = 0xAA
	swapAddrs(f)
	want := make([]byte, 42)
	copy(want[0:], []byte{2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0x08, 0x00})
	copy(want[26:], []byte{198, 18, 0, 2, 198, 18, 0, 1})
	want[40] = 0xAA
	if !slices.Equal(f, want) {
		t.Errorf("swapAddrs = % x, want % x", f, want)
	}
	short := []byte{1, 2, 3}
	swapAddrs(short) // must not panic
}

// TestQPsRings checks the qps cell's ring plan: the default rings while
// the window fits them, else rings of at least the window (AF_XDP with
// 2 KiB chunks), and the link memory reported for it.
func TestQPsRings(t *testing.T) {
	if r := qpsRings(2048); r != (ringPlan{}) {
		t.Errorf("qpsRings(2048) = %+v, want the defaults", r)
	}
	for _, c := range []struct{ window, frames, blocks int }{{2049, 8192, 0}, {4000, 8192, 0}, {8000, 16384, 16}, {16000, 32768, 32}} {
		r := qpsRings(c.window)
		if r.numFrames != c.frames || r.frameSize != 2048 || r.numFrames/2 < c.window || r.afpBlocks != c.blocks {
			t.Errorf("qpsRings(%d) = %+v, want %d frames of 2048 B and %d AF_PACKET blocks", c.window, r, c.frames, c.blocks)
		}
		if r.afpBlocks != 0 && r.afpBlocks*afpBlockSize/afpSlot < c.window {
			t.Errorf("qpsRings(%d): %d AF_PACKET blocks hold fewer slots than the window", c.window, r.afpBlocks)
		}
	}
	if got, want := (ringPlan{}).linkBytes("afxdp"), 4096*4096+2048*48; got != want {
		t.Errorf("default AF_XDP link bytes %d, want %d", got, want)
	}
	if got, want := qpsRings(8000).linkBytes("afxdp"), 16384*2048+8192*48; got != want {
		t.Errorf("AF_XDP link bytes for 8000 in flight %d, want %d", got, want)
	}
	if got, want := qpsRings(8000).linkBytes("afpacket"), 16<<20; got != want {
		t.Errorf("AF_PACKET link bytes for 8000 in flight %d, want %d", got, want)
	}
	if got := qpsRings(8000).linkBytes("udp"); got != 0 {
		t.Errorf("UDP link bytes %d, want 0", got)
	}
	var o qp.InterfaceOptions
	qpsRings(8000).tune(&o)
	if o.AFXDP.NumFrames != 16384 || o.AFXDP.FrameSize != 2048 || o.AFPacket.NumBlocks != 16 ||
		o.AFPacket.BlockSize != 1<<20 || o.UDPSocketBuffer != 8000*4096 {
		t.Errorf("tuned options %+v %+v %d", o.AFXDP, o.AFPacket, o.UDPSocketBuffer)
	}
}

// TestPlacements: -placements parses against this process's CPUs, and
// pinProcess pins every thread (threads made later too) and undoes it.
func TestPlacements(t *testing.T) {
	if _, err := placements("free,bogus"); err == nil {
		t.Error("placement bogus accepted")
	}
	pl, err := placements("free,shared")
	if err != nil || len(pl) != 2 || pl[0].a != -1 || pl[1].a != pl[1].b || pl[1].a < 0 {
		t.Fatalf("free,shared: %v, %v", pl, err)
	}
	allowed := func() map[string]bool {
		seen := map[string]bool{}
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, tk := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + tk.Name() + "/status")
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
					seen[strings.TrimSpace(v)] = true
				}
			}
		}
		return seen
	}
	before := allowed()
	restore, err := pinProcess(pl[1].a)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // likely on a thread made now
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		close(done)
	}()
	<-done
	if got, want := allowed(), strconv.Itoa(pl[1].a); len(got) != 1 || !got[want] {
		t.Errorf("pinned: threads allowed %v, want only %s", got, want)
	}
	restore()
	if got := allowed(); len(got) != len(before) {
		t.Errorf("restored: threads allowed %v, before %v", got, before)
	}
}

// TestWriteRawref: with only the raw rates and the reference's measured
// (the rawrate cell with -rawref), the AF_XDP section is the comparison
// table, ratios of medians.
func TestWriteRawref(t *testing.T) {
	r := newResults()
	r.addSection(section{backend: "afxdp", mtu: 1500, mode: "native", pmtu: 1024})
	for m, v := range map[string][]float64{
		mRawSmallFPS: {400e3, 500e3}, mRawRefSmallFPS: {500e3}, mRawSmallLen: {138},
		mRawFullFPS: {270e3}, mRawRefFullFPS: {300e3}, mRawFullLen: {1098},
		mRawFullFPS + ".cpu": {2.0}, mRawRefFullFPS + ".cpu": {2.5},
	} {
		for _, x := range v {
			r.add(key{"afxdp", 1500, m}, x)
		}
	}
	var b strings.Builder
	writeSection(&b, r, r.sections[0])
	out := b.String()
	for _, want := range []string{"## afxdp (native), MTU 1500, path MTU 1024", "| 64 B WRITE frames (138 bytes) |", "0.90×", "| path-MTU WRITE frames (1098 bytes) |", "0.80×"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteHeldAck: the heldack cell's table puts held and immediate side
// by side, with their ratio, for the sections that have them.
func TestWriteHeldAck(t *testing.T) {
	r := newResults()
	r.addSection(section{backend: "afxdp", mtu: 1500})
	us := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Microsecond
		}
		return d
	}
	for _, shape := range []string{"write.idle", "write.wait"} {
		recordLat(r, key{"afxdp", 1500, heldAckMetric(shape, true)}, us(9, 10, 30), nil)
		recordLat(r, key{"afxdp", 1500, heldAckMetric(shape, false)}, us(9, 10, 20), nil)
	}
	var b strings.Builder
	writeHeldAck(&b, r)
	out := b.String()
	for _, want := range []string{
		"## Held ACK: the requester's completion latency, one-sided responder",
		"| afxdp | 1500 | write.wait, completion µs, p50 | 10.0 µs | 10.0 µs | 1.00× |",
		"| afxdp | 1500 | write.wait, completion µs, p99 | 30.0 µs | 20.0 µs | 1.50× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q\n%s", want, out)
		}
	}
	if strings.Contains(out, "send.recv") {
		t.Error("a shape that was not measured has rows")
	}
}
