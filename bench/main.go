// Command bench measures goroce against the frame backend it runs on and
// against the kernel's TCP, on the same veth between two network
// namespaces, and prints one markdown document (stdout; progress on
// stderr) with the command line and the machine's state at the top. It is
// the instrument of issue 10: every ratio its targets 1–9 name appears as
// a column or in the final targets table.
//
//	go run ./bench                               # everything, ≈ 4 minutes
//	go run ./bench -time 300ms -reps 1           # a quick look
//	go run ./bench -backends afxdp -mtus 1500 -cells lat,bw
//	go run ./bench -syscalls                     # also strace the round trips
//
// Per veth MTU (-mtus, default 1500 and 9000; the path MTU is the
// largest IB MTU ≤ the backend's IP MTU − 80, as rxe), per backend
// (-backends: afxdp, afpacket, udp), -reps times (default 3, reported as
// median and min–max), each cell bounded by -time (default 700ms, at most
// 3s) and by a count:
//
//   - raw (raw.go): the backend's own links opened as qp.OpenInterface
//     would, no device. One-way rate: batches of RDMA WRITE ONLY frames
//     A→B through nic.Link.WriteBatch as fast as it takes them, counted at
//     B (ReadBatch), over the time to B's last frame: with a 64 B payload
//     (the frame of a 64-byte WRITE, 138 bytes: the issue's "122-byte
//     frame" leaves out the RETH) for the frame rate, and with a path-MTU
//     payload for the payload goodput. Busy ping-pong (latency MTU only):
//     one 8 B-payload frame A→B, B sends it back (addresses swapped), both
//     ends spinning on TryReadBatch and yielding between empty looks, as a
//     busy-poll device does, B's end in a process of its own (-lat-peer);
//     round trip from A's write to A's read.
//   - tcp (tcp.go): one Go TCP connection A→B, 64 KiB writes, goodput at
//     the receiver; iperf3 -J one stream (-t rounded to whole seconds)
//     when iperf3 is installed; and at the latency MTU a 64 B ping-pong
//     with blocking reads (each end parks in the netpoller: Go's sleeping
//     mode), the echo end in a process of its own (-lat-peer).
//   - bw (rdma.go): goroce in perftest's shape (ib_write_bw/ib_read_bw
//     defaults; cmd/goroce's bwClient): one new RC QP pair on normal
//     (sleeping) devices, tx-depth 128, every 100th WR signalled (cq-mod
//     100, each completion credits 100), each QP's window posted with one
//     PostSendList, one CQ.Poll after posting, else 64 yielding polls and
//     CQ.Wait. WRITE and READ, 64 B, 4 KiB and 64 KiB messages; READs
//     beyond max_rd_atomic (16) wait in the send queue as on a NIC.
//     Message rate and goodput from the first post to the last completion.
//   - lat (lat.go, latency MTU only): write_lat's loop (cmd/goroce's
//     latWrite) on devices of its own: each end WRITEs 8 B into the
//     other's buffer, the last byte carrying the count; each waits for the
//     peer's WRITE (QP.Query's expected PSN, then the byte) before writing
//     the next, and for its own WRITE's completion. Sleeping: normal
//     devices, completions in CQ.Wait, the arrival wait yielding between
//     looks (write_lat -e). Busy-poll: qp.InterfaceOptions.BusyPoll
//     devices, every wait spinning on CQ.Poll/Device.Poll
//     (GOROCE_BUSYPOLL=1). B's end (write_lat's server) runs in a process
//     of its own started in namespace B (bench -child peer-goroce), as
//     write_lat's does; -lat-peer goroutine runs it in this process
//     instead (on this 2-vCPU machine that alone makes the sleeping round
//     trip several times longer: the two ends share GOMAXPROCS). Full
//     round trips from A's successive posts (write_lat prints half).
//   - cpu (cpu.go): around the raw path-MTU rate, the TCP stream and each
//     bw cell, the whole machine's busy CPU-seconds from /proc/stat (user
//   - nice + system + irq + softirq + steal) and this process's
//     (getrusage): CPU-seconds per GB moved and Gbit per busy CPU-second.
//     The whole machine includes everything else running on it.
//   - qps (rdma.go, latency MTU only): -qps RC QP pairs (default 1000) on
//     one sleeping device pair, round-robin 64 B WRITEs, each QP at most
//     -qp-depth outstanding (default 4: 4000 in flight; at 16 goroce's
//     QPs end in RETRY_EXC_ERR on this machine) and one signalled per
//     -qp-cqmod (2); the aggregate message rate next to one QP's (tx-depth
//     128, cq-mod 100, same devices), and the heap per QP
//     (runtime.MemStats.HeapAlloc after GC, before and after creating and
//     connecting them, over both ends' QPs; it grows with -qp-depth).
//   - idle (rdma.go, latency MTU only): two opened sleeping devices with a
//     connected QP pair doing nothing for -idle: this process's
//     CPU-seconds per second.
//   - syscalls (syscalls.go, -syscalls, latency MTU only): bench runs
//     the lat cell's client as a child (-child trace-goroce|trace-tcp)
//     with a namespace pair and a peer process of its own, and attaches
//     `strace -f -c -p` to that client for its timed loop only (the peer
//     is not traced, as issue 10 counted the client): the sleeping 8 B
//     WRITE round trip and the TCP ping-pong, -syscall-n round trips;
//     system calls per round trip and the largest four.
//
// -cells picks cells (raw,tcp,bw,lat,qps,idle,syscalls; default all but
// syscalls). The latency MTU is 1500 if -mtus has it, else the first.
// Nothing here is a pass/fail test; the unit tests cover the arithmetic
// and the report.
//
// Needs root. Namespaces are named goroce-bench-PID-N-{a,b}, use
// 198.18.X.0/24 with no routes out, and are deleted at the end and on
// SIGINT/SIGTERM (with any child process, killed by its PID).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

var logger = slog.New(slog.NewTextHandler(io.Discard, nil))

// verbose (-v) logs backend warnings, in child processes too.
var verbose bool

type limit struct {
	d time.Duration
	n int
}

// Count bounds of the cells (the time bound is -time).
const (
	maxFrames  = 50_000_000
	maxMsgs    = 20_000_000
	maxRTTs    = 200_000
	maxStreamN = 1_000_000 // 64 KiB TCP writes
)

var allCells = []string{"raw", "tcp", "bw", "lat", "qps", "idle", "syscalls"}

type config struct {
	backends []string
	mtus     []int
	cells    map[string]bool
	cell     time.Duration
	reps     int
	qpsN     int
	qpsDepth int
	qpsCQMod int
	idle     time.Duration
	sysN     int
	iperf3   string
	latPeer  string // process or goroutine
	rttOnly  bool   // -latency: only the round trips
}

func (c *config) latMTU() int {
	if slices.Contains(c.mtus, 1500) {
		return 1500
	}
	return c.mtus[0]
}

func main() {
	var c config
	backends := flag.String("backends", "afxdp,afpacket,udp", "comma-separated backends to measure")
	mtus := flag.String("mtus", "1500,9000", "comma-separated veth MTUs")
	cells := flag.String("cells", "raw,tcp,bw,lat,qps,idle", "comma-separated cells: "+strings.Join(allCells, ","))
	flag.DurationVar(&c.cell, "time", 700*time.Millisecond, "time bound of each cell (at most 3s)")
	flag.IntVar(&c.reps, "reps", 3, "repetitions of every cell (medians and min–max are reported)")
	flag.IntVar(&c.qpsN, "qps", 1000, "QP pairs of the qps cell")
	flag.IntVar(&c.qpsDepth, "qp-depth", 4, "outstanding WRs per QP in the qps cell")
	flag.IntVar(&c.qpsCQMod, "qp-cqmod", 2, "one signalled WR per this many in the qps cell")
	flag.DurationVar(&c.idle, "idle", time.Second, "duration of the idle cell")
	flag.BoolVar(&c.rttOnly, "latency", false, "measure only the round trips (raw, TCP and goroce; MTU 1500): -cells raw,tcp,lat -mtus 1500 without the rate cells")
	sys := flag.Bool("syscalls", false, "also count system calls per sleeping round trip under strace (the syscalls cell)")
	flag.IntVar(&c.sysN, "syscall-n", 2000, "round trips of the syscalls cell")
	flag.BoolVar(&verbose, "v", false, "log backend warnings to stderr")
	flag.StringVar(&c.latPeer, "lat-peer", "process", "where the round trips' far end runs: process (its own, as write_lat's server) or goroutine (this process)")
	child := flag.String("child", "", "")            // internal: a child process (peer.go)
	peerIfname := flag.String("peer-ifname", "", "") // internal: peer-goroce's interface
	peerBusy := flag.Bool("peer-busy", false, "")    // internal: peer-goroce in busy-poll mode
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	flag.Parse()
	if verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.cell <= 0 || c.cell > 3*time.Second {
		c.cell = 3 * time.Second
	}
	c.reps = min(max(c.reps, 1), 20)
	c.qpsN = min(max(c.qpsN, 1), 10_000)
	c.qpsDepth = min(max(c.qpsDepth, 1), 128)
	c.qpsCQMod = min(max(c.qpsCQMod, 1), c.qpsDepth)
	c.idle = min(max(c.idle, 100*time.Millisecond), 30*time.Second)
	c.sysN = min(max(c.sysN, 10), 100_000)
	for _, s := range strings.Split(*mtus, ",") {
		var m int
		if _, err := fmt.Sscan(s, &m); err != nil || m < 1280 || m > 9000 {
			fatalf(2, "bad MTU %q (1280..9000)", s)
		}
		c.mtus = append(c.mtus, m)
	}
	for _, b := range strings.Split(*backends, ",") {
		switch b {
		case qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP:
			c.backends = append(c.backends, b)
		default:
			fatalf(2, "unknown backend %q (afxdp, afpacket, udp)", b)
		}
	}
	c.cells = map[string]bool{}
	for _, s := range strings.Split(*cells, ",") {
		if !slices.Contains(allCells, s) {
			fatalf(2, "unknown cell %q (%s)", s, strings.Join(allCells, ", "))
		}
		c.cells[s] = true
	}
	if c.latPeer != "process" && c.latPeer != "goroutine" {
		fatalf(2, "-lat-peer is process or goroutine, not %q", c.latPeer)
	}
	if *sys {
		c.cells["syscalls"] = true
	}
	if c.rttOnly {
		c.mtus = []int{c.latMTU()}
		c.cells = map[string]bool{"raw": true, "tcp": true, "lat": true, "syscalls": c.cells["syscalls"]}
	}
	if *child != "" {
		os.Exit(runChild(*child, c, *peerIfname, *peerBusy))
	}
	if *memprofile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatalf(1, "%v", err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if c.cells["tcp"] {
		c.iperf3 = lookIperf3()
	}
	cleanup.watchSignals()

	in := runInfo{command: "go run ./bench " + strings.Join(os.Args[1:], " "), start: time.Now(), load0: loadavg(),
		machine: readMachine(), cell: c.cell, reps: c.reps, iperf3: c.iperf3,
		qpsN: c.qpsN, qpsDepth: c.qpsDepth, qpsCQMod: c.qpsCQMod, idle: c.idle, latPeer: c.latPeer}
	in.command = strings.TrimSpace(in.command)
	res := newResults()
	for _, mtu := range c.mtus {
		pair, err := newPair(mtu, "goroce-bench")
		if err != nil {
			fatalf(1, "%v", err)
		}
		progress("MTU %d: namespaces %s, %s", mtu, pair.A.NS, pair.B.NS)
		for rep := range c.reps {
			measureRep(pair, mtu, rep, &c, res)
		}
		if c.cells["syscalls"] && mtu == c.latMTU() {
			measureSyscalls(mtu, &c, res)
		}
		cleanup.closePair(pair)
	}
	in.elapsed, in.load1 = time.Since(in.start), loadavg()
	writeReport(os.Stdout, res, in)
}

func fatalf(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	cleanup.all()
	os.Exit(code)
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
}

// cleanup holds what a signal must tear down: namespace pairs and child
// processes (by PID).
var cleanup = &liveSet{pairs: map[*netns.Pair]bool{}, pids: map[int]bool{}}

type liveSet struct {
	mu    sync.Mutex
	pairs map[*netns.Pair]bool
	pids  map[int]bool
}

func newPair(mtu int, prefix string) (*netns.Pair, error) {
	cleanup.mu.Lock()
	defer cleanup.mu.Unlock()
	p, err := netns.New(netns.Options{MTU: mtu, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	cleanup.pairs[p] = true
	return p, nil
}

func (l *liveSet) closePair(p *netns.Pair) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pairs, p)
	p.Close()
}

func (l *liveSet) addPID(pid int) {
	l.mu.Lock()
	l.pids[pid] = true
	l.mu.Unlock()
}

func (l *liveSet) donePID(pid int) {
	l.mu.Lock()
	delete(l.pids, pid)
	l.mu.Unlock()
}

func (l *liveSet) all() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for pid := range l.pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for p := range l.pairs {
		p.Close()
	}
}

func (l *liveSet) watchSignals() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		l.all()
		fmt.Fprintf(os.Stderr, "bench: %v: child processes killed, namespaces removed\n", s)
		os.Exit(130)
	}()
}

// measureRep runs one repetition of every selected cell at one MTU.
func measureRep(pair *netns.Pair, mtu, rep int, c *config, res *results) {
	lat := mtu == c.latMTU()
	lim := func(n int) limit { return limit{c.cell, n} }
	tag := fmt.Sprintf("MTU %d rep %d", mtu, rep+1)
	if c.cells["tcp"] && !c.rttOnly {
		t, err := tcpStream(pair, lim(maxStreamN))
		recordRate(res, key{"tcp", mtu, ""}, "tcp.stream", t.bytes, t.elapsed, t.cpu, firstErr(err, t.cpuErr), err)
		progress("%s: TCP stream %s (%v)", tag, fmtGbit(t.bitsPerSec()/1e9), err)
		if c.iperf3 != "" {
			bps, err := iperf3Stream(pair, c.iperf3, c.cell)
			record(res, key{"tcp", mtu, mIperfGbps}, bps/1e9, err)
			progress("%s: iperf3 %s (%v)", tag, fmtGbit(bps/1e9), err)
		}
	}
	if c.cells["tcp"] {
		if lat {
			ping := tcpPingPongPeer
			if c.latPeer == "goroutine" {
				ping = tcpPingPong
			}
			rtts, err := ping(pair, lim(maxRTTs), nil)
			recordLat(res, key{"tcp", mtu, latTCP}, rtts, err)
			progress("%s: TCP ping-pong %s (%v)", tag, latLine(rtts), err)
		}
	}
	for _, b := range c.backends {
		measureBackend(pair, mtu, rep, b, lat, c, res)
	}
}

func measureBackend(pair *netns.Pair, mtu, rep int, b string, lat bool, c *config, res *results) {
	tag := fmt.Sprintf("%s MTU %d rep %d", b, mtu, rep+1)
	lim := func(n int) limit { return limit{c.cell, n} }
	if c.cells["raw"] {
		measureRaw(pair, mtu, b, lat, c, tag, lim, res)
	}
	if c.cells["bw"] || (lat && (c.cells["qps"] || c.cells["idle"])) {
		p, err := openRDMA(pair, b, false)
		if err != nil {
			progress("%s: goroce devices: %v", tag, err)
			for _, m := range []string{bwKey(b, mtu, "WRITE", sizeSmall, "mps").metric, mQPsAgg, mIdleProc} {
				res.fail(key{b, mtu, m}, err)
			}
		} else {
			res.addSection(section{backend: b, mtu: mtu, mode: p.a.info.Mode, pmtu: p.pmtu})
			measureGoroce(p, mtu, b, lat, tag, c, res)
			p.Close()
		}
	}
	if lat && c.cells["lat"] {
		var info section
		rtts, err := roundTrips(pair, b, false, lim(maxRTTs), c.latPeer, &info)
		if err == nil {
			info.backend, info.mtu = b, mtu
			res.addSection(info)
		}
		recordLat(res, key{b, mtu, latSleep}, rtts, err)
		progress("%s: goroce sleeping 8 B WRITE RTT %s (%v)", tag, latLine(rtts), err)
		rtts, err = roundTrips(pair, b, true, lim(maxRTTs), c.latPeer, nil)
		recordLat(res, key{b, mtu, latBusy}, rtts, err)
		progress("%s: goroce busy-poll 8 B WRITE RTT %s (%v)", tag, latLine(rtts), err)
	}
}

// roundTrips is the lat cell: write_lat's loop on devices of their own,
// the far end in a process of its own or (goroutine) in this one.
// info, when set, learns the backend's mode and the path MTU.
func roundTrips(pair *netns.Pair, b string, busy bool, lim limit, where string, info *section) ([]time.Duration, error) {
	runtime.GC()
	if where == "process" {
		return writeLatPeer(pair, b, busy, lim, nil, info)
	}
	p, err := openRDMA(pair, b, busy)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if info != nil {
		info.mode, info.pmtu = p.a.info.Mode, p.pmtu
	}
	return writeLat(p, lim, nil)
}

func measureRaw(pair *netns.Pair, mtu int, b string, lat bool, c *config, tag string, lim func(int) limit, res *results) {
	if !c.rttOnly {
		measureRawRates(pair, mtu, b, tag, lim, res)
	}
	if !lat {
		return
	}
	runtime.GC()
	var rtts []time.Duration
	var err error
	if c.latPeer == "process" {
		rtts, err = rawBusyRTTPeer(pair, b, lim(maxRTTs))
	} else {
		var r *rawPair
		if r, err = openRaw(pair, b); err == nil {
			rtts, err = rawBusyRTT(r, lim(maxRTTs))
			r.Close()
		}
	}
	recordLat(res, key{b, mtu, latRaw}, rtts, err)
	progress("%s: raw busy ping-pong %s (%v)", tag, latLine(rtts), err)
}

// measureRawRates is the raw cell's one-way rates.
func measureRawRates(pair *netns.Pair, mtu int, b string, tag string, lim func(int) limit, res *results) {
	r, err := openRaw(pair, b)
	if err != nil {
		progress("%s: raw links: %v", tag, err)
		res.fail(key{b, mtu, mRawSmallFPS}, err)
		res.fail(key{b, mtu, mRawFullGbps}, err)
		return
	}
	pmtu := min(r.infoA.PathMTU, r.infoB.PathMTU)
	res.addSection(section{backend: b, mtu: mtu, pmtu: pmtu})
	small, err := rate(r, sizeSmall, lim(maxFrames)) // closes B's link
	r.Close()
	record(res, key{b, mtu, mRawSmallFPS}, small.framesPerSec(), err)
	if err == nil {
		res.add(key{b, mtu, mRawSmallLen}, float64(small.frameLen))
	}
	progress("%s: raw %d B frames %s/s, %d of %d sent received (%v)", tag, small.frameLen, fmtRate(small.framesPerSec()), small.frames, small.sent, err)
	if r, err = openRaw(pair, b); err != nil {
		res.fail(key{b, mtu, mRawFullGbps}, err)
		return
	}
	full, err := rate(r, pmtu, lim(maxFrames))
	r.Close()
	recordRate(res, key{b, mtu, ""}, "raw.full", int64(full.frames)*int64(full.payload), full.elapsed, full.cpu, firstErr(err, full.cpuErr), err)
	if err == nil {
		res.add(key{b, mtu, mRawFullLen}, float64(full.frameLen))
	}
	progress("%s: raw %d B frames %s payload, %d of %d sent received (%v)", tag, full.frameLen, fmtGbit(full.payloadBitsPerSec()/1e9), full.frames, full.sent, err)
}

func measureGoroce(p *rdmaPair, mtu int, b string, lat bool, tag string, c *config, res *results) {
	lim := func(n int) limit { return limit{c.cell, n} }
	if c.cells["bw"] {
		for _, op := range []struct {
			name string
			op   qp.WROpcode
		}{{"WRITE", qp.WRRDMAWrite}, {"READ", qp.WRRDMARead}} {
			for _, size := range []int{sizeSmall, sizeMid, sizeLarge} {
				runtime.GC()
				t, err := bw(p, op.op, size, lim(maxMsgs))
				record(res, bwKey(b, mtu, op.name, size, "mps"), t.msgsPerSec(), err)
				recordRate(res, key{b, mtu, ""}, fmt.Sprintf("%s%s.%d", bwPrefix, op.name, size), t.bytes, t.elapsed, t.cpu, firstErr(err, t.cpuErr), err)
				if err == nil {
					res.add(bwKey(b, mtu, op.name, size, "allocs"), t.allocsPer)
				}
				progress("%s: goroce %s %s: %s msg/s, %s, %.2f allocs/msg (%v)", tag, op.name, sizeName(size),
					fmtRate(t.msgsPerSec()), fmtGbit(t.bitsPerSec()/1e9), t.allocsPer, err)
			}
		}
	}
	if !lat {
		return
	}
	if c.cells["qps"] {
		q, err := manyQPs(p, c.qpsN, c.qpsDepth, c.qpsCQMod, lim(maxMsgs))
		record(res, key{b, mtu, mQPsAgg}, q.agg.msgsPerSec(), err)
		if q.one.msgs > 0 {
			res.add(key{b, mtu, mQPsOne}, q.one.msgsPerSec())
		} else {
			res.fail(key{b, mtu, mQPsOne}, err)
		}
		if q.heapPerQP != 0 {
			res.add(key{b, mtu, mQPsHeap}, q.heapPerQP)
		} else {
			res.fail(key{b, mtu, mQPsHeap}, err)
		}
		progress("%s: %d QPs %s msg/s, one QP %s msg/s, %s per QP (%v)", tag, c.qpsN, fmtRate(q.agg.msgsPerSec()),
			fmtRate(q.one.msgsPerSec()), fmtBytes(q.heapPerQP), err)
	}
	if c.cells["idle"] {
		u, err := idleCPU(p, c.idle)
		record(res, key{b, mtu, mIdleProc}, u.proc/u.wall, err)
		record(res, key{b, mtu, mIdleMachine}, u.machine/u.wall, err)
		progress("%s: idle devices %.4f CPU-s/s (%v)", tag, u.proc/u.wall, err)
	}
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func record(res *results, k key, v float64, err error) {
	if err != nil {
		res.fail(k, err)
		return
	}
	res.add(k, v)
}

// recordRate records a stream's goodput (base.gbps) and, when the CPU was
// measured (cpuErr nil), its CPU cost: base.cpugb, base.procgb,
// base.gbpcpu.
func recordRate(res *results, at key, base string, bytes int64, el time.Duration, cpu cpuUse, cpuErr, err error) {
	k := func(m string) key { return key{at.backend, at.mtu, base + "." + m} }
	if err != nil {
		res.fail(k("gbps"), err)
		return
	}
	gb := float64(bytes) / 1e9
	res.add(k("gbps"), gb*8/el.Seconds())
	if cpuErr != nil {
		res.fail(k("cpugb"), cpuErr)
		return
	}
	if gb > 0 {
		res.add(k("cpugb"), cpu.machine/gb)
		res.add(k("procgb"), cpu.proc/gb)
	}
	if cpu.machine > 0 {
		res.add(k("gbpcpu"), gb*8/cpu.machine)
	}
}

// recordLat records p50, mean and p99 of rtts in microseconds.
func recordLat(res *results, base key, rtts []time.Duration, err error) {
	k := func(q string) key { return key{base.backend, base.mtu, base.metric + "." + q} }
	if err == nil && len(rtts) == 0 {
		err = fmt.Errorf("no round trip")
	}
	if err != nil {
		for _, q := range []string{"p50", "mean", "p99"} {
			res.fail(k(q), err)
		}
		return
	}
	l := summarizeRTTs(rtts)
	res.add(k("p50"), us(l.p50))
	res.add(k("mean"), us(l.mean))
	res.add(k("p99"), us(l.p99))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type latency struct {
	n              int
	p50, mean, p99 time.Duration
}

// summarizeRTTs sorts rtts in place and returns the nearest-rank
// percentiles and the mean.
func summarizeRTTs(rtts []time.Duration) latency {
	if len(rtts) == 0 {
		return latency{}
	}
	slices.Sort(rtts)
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	n := len(rtts)
	return latency{n: n, p50: rtts[(n-1)/2], mean: sum / time.Duration(n), p99: rtts[(n*99+99)/100-1]}
}

func latLine(rtts []time.Duration) string {
	if len(rtts) == 0 {
		return "–"
	}
	l := summarizeRTTs(slices.Clone(rtts))
	return fmt.Sprintf("p50 %s mean %s p99 %s n %d", fmtMicros(us(l.p50)), fmtMicros(us(l.mean)), fmtMicros(us(l.p99)), l.n)
}

// lineReader reads the child protocol's lines with a bound.
type lineReader struct{ ch chan string }

func newLineReader(r io.Reader) *lineReader {
	l := &lineReader{ch: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.ch <- sc.Text()
		}
		close(l.ch)
	}()
	return l
}

func (l *lineReader) next(d time.Duration) (string, bool) {
	select {
	case s, ok := <-l.ch:
		return s, ok
	case <-time.After(d):
		return "", false
	}
}
