//go:build linux

// Command bench measures goroce against the frame backend it runs on and
// against the kernel's TCP, on the same veth between two network
// namespaces, and prints one markdown document (stdout; progress on
// stderr) with the command line and the machine's state at the top. It is
// the instrument of issue 10: every ratio its targets 1–9 name appears as
// a column or in the final targets table.
//
//	go run ./bench                               # everything but -syscalls, ≈ 3 minutes
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
//     B (ReadBatch), over the time to B's last frame (the udp backend's two
//     ends first trade one frame, so that each sends the other UDP GSO
//     datagrams as goroce's cells do: udpgso.go): with a 64 B payload
//     (the frame of a 64-byte WRITE, 138 bytes: the issue's "122-byte
//     frame" leaves out the RETH) for the frame rate, and with a path-MTU
//     payload for the payload goodput. Busy ping-pong (latency MTU only):
//     one 8 B-payload frame A→B, B sends it back (addresses swapped), both
//     ends spinning on TryReadBatch and yielding as a busy-poll device does
//     (the OS thread every 4th empty look, other goroutines every 64th),
//     B's end in a process of its own (-lat-peer);
//     round trip from A's write to A's read. The same with two such frames
//     each way in one WriteBatch, B answering once it has both (-lat-peer
//     process only): the frames of goroce's busy write_lat round trip, a
//     WRITE and the ACK of the peer's one in each kick; on copy-mode
//     AF_XDP the kernel's work per frame, not per kick, is most of a
//     round trip.
//     On AF_XDP the receiving end of the one-way rates is a process of
//     its own in namespace B (-raw-sink process, rawsink.go; -raw-sink
//     goroutine: this process), which times its own frames, first to
//     last, as the reference's receiver does; the CPU per frame adds its
//     CPU time to this process's.
//     The one-way rates rewrite every frame's PSN and compute its ICRC
//     before each WriteBatch (the work RoCEv2 asks of any sender); the
//     batch is the link's BatchSize (AF_XDP at MTU 1500: 256, one kick each,
//     XDP_MAX_TX_SKB_BUDGET 256). The rawrate cell runs these rates alone.
//     With -rawref DIR (../shared/rawref), after each rate on AF_XDP the
//     raw AF_XDP reference sender and receiver (rawref.go) run on the same
//     veth with frames of the same length; the report compares frames/s
//     and CPU per frame.
//   - tcp (tcp.go): one Go TCP connection A→B, 64 KiB writes, goodput at
//     the receiver; iperf3 -J one stream (-t rounded to whole seconds)
//     when iperf3 is installed; and at the latency MTU a 64 B ping-pong
//     with blocking reads (each end parks in the netpoller: Go's sleeping
//     mode), the echo end in a process of its own (-lat-peer).
//   - bw (rdma.go): goroce in perftest's shape (ib_write_bw/ib_read_bw
//     defaults; cmd/goroce's bwClient): one new RC QP pair on normal
//     (sleeping) devices, tx-depth 128, every 100th WR signalled (cq-mod
//     100, each completion credits 100), each QP's window posted with one
//     PostSendList, one CQ.Poll after posting, else 64 polls and CQ.Wait
//     (-bw-wait spin; yield: a runtime.Gosched after each poll, as
//     cmd/goroce's poller; sleep: CQ.Wait at once). WRITE and READ, 64 B, 4 KiB and 64 KiB messages; READs
//     beyond max_rd_atomic (16) wait in the send queue as on a NIC.
//     Message rate and goodput from the first post to the last completion.
//     The responder, device B, runs in a process of its own started in
//     namespace B (-bw-peer process, the default; bench -child peer-bw,
//     bwpeer.go), as ib_write_bw's server does; its CPU time over each
//     stream is added to this process's. -bw-peer goroutine runs both ends
//     in this process (the shape before 8 Dec 2026). Each stream prints
//     where the posting goroutine's wall time went (appSplit: post, poll,
//     waiting with the window full) and, with a peer process, each
//     process's CPU per message.
//     -afxdp-batch, -afxdp-chunk and -afxdp-frames override the AF_XDP
//     links' BatchSize, FrameSize and NumFrames everywhere (children
//     too), to compare defaults.
//     -bw WRITE.64,WRITE.65536 runs only those streams; the devices'
//     goroutines carry the pprof label end=A or end=B and the posting
//     goroutine end=app (-cpuprofile; bench/profile.sh splits a perf
//     profile of one stream by category).
//   - lat (lat.go, latency MTU only): write_lat's loop (cmd/goroce's
//     latWrite) on devices of its own: each end WRITEs 8 B into the
//     other's buffer, the last byte carrying the count; each waits for the
//     peer's WRITE (QP.Query's expected PSN, then the byte) before writing
//     the next, and for its own WRITE's completion. Sleeping: normal
//     devices, completions in CQ.Wait, the arrival wait yielding between
//     looks (write_lat -e). Busy-poll: qp.ModeBusyPoll
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
//   - qps (rdma.go, qps.go, latency MTU only): -qps RC QP pairs (default
//     1000) on a sleeping device pair of its own, round-robin 64 B WRITEs
//     in the bw cell's loop, as `ib_write_bw -q 1000 -t 8` runs them:
//     each QP at most -qp-depth outstanding (default 8: 8000 in flight)
//     and one signalled per -qp-cqmod (default 8: perftest clamps cq-mod
//     to tx-depth); the aggregate message rate next to one QP's (tx-depth
//     128, cq-mod 100, same devices), the heap per QP
//     (runtime.MemStats.HeapAlloc after GC, before and after creating and
//     connecting them, over both ends' QPs; it grows with -qp-depth) and
//     the link memory per QP (the rings one device maps, over its QPs).
//     perftest's own per-QP shape, 128 outstanding, would put 128 000
//     frames in flight: 0.3 s of queue at this machine's rate, past the
//     67 ms local ACK timeout, so every QP would retransmit; at depth 8 the
//     queue stays under 40 ms at 200 k msg/s. The devices' AF_XDP RX rings
//     hold the whole window (qpsRings: the default 2048 slots dropped
//     thousands of frames per run at 4000 in flight, and each drop of a
//     QP's last outstanding frame stalled it for the ACK timeout).
//     Progress lines give each run's frames, kicks, ACKs and CPU per
//     message on both ends.
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
//   - heldack (heldack.go, latency MTU only, not in the default set): the
//     requester's completion latency with a one-sided responder (idle
//     WRITE and READ targets, a WRITE target waiting in MR.WaitWrite, a
//     receiver that only reposts receives), B's held ACK as shipped
//     against Device.SetAckHold(false), alternating.
//
// Files: main.go (flags, namespaces, signals), cells.go (what runs in
// which order), raw.go, rawsleep.go (the raw sleeping ping-pong),
// udpgso.go (the udp raw pair's introduction), tcp.go, rdma.go (devices,
// bw, qps, idle), qps.go (the qps cell's rings and per-message counts),
// lat.go
// (the round trips), cpu.go (/proc/stat, getrusage, machine state),
// syscalls.go (strace), peer.go (child processes), results.go
// (repetitions, medians, metric names), report.go (the markdown).
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

var allCells = []string{"raw", "rawrate", "tcp", "bw", "lat", "qps", "idle", "syscalls", "rsock", "nvmeof", "heldack", "mq"}

type config struct {
	backends []string
	mtus     []int
	cells    map[string]bool
	cell     time.Duration
	reps     int
	qpsN     int
	mqQPs    int // QP pairs of the mq cell (mq.go)
	qpsDepth int
	qpsCQMod int
	idle     time.Duration
	sysN     int
	iperf3   string
	latPeer  string          // process or goroutine
	bwPeer   string          // -bw-peer: where the bw cell's responder runs (process or goroutine)
	rttOnly  bool            // -latency: only the round trips
	rawref   string          // -rawref: the reference sender's binary (rawref.go)
	bwOnly   map[string]bool // -bw: the bw cell's op.size streams to run (nil: all)
	rawSink  string          // -raw-sink: where the AF_XDP raw rate's receiver runs
	// placements are where the sleeping round trips' ends run (pin.go).
	placements []placement
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
	flag.IntVar(&c.mqQPs, "mq-qps", 64, "QP pairs of the mq cell (multi-queue devices: 1 and 2 queues, AF_XDP, MTU 1500)")
	flag.IntVar(&c.qpsDepth, "qp-depth", 8, "outstanding WRs per QP in the qps cell (perftest's -t)")
	flag.IntVar(&c.qpsCQMod, "qp-cqmod", 8, "one signalled WR per this many in the qps cell (perftest's --cq-mod, at most -qp-depth)")
	flag.DurationVar(&c.idle, "idle", time.Second, "duration of the idle cell")
	flag.BoolVar(&c.rttOnly, "latency", false, "measure only the round trips (raw, TCP and goroce; MTU 1500): -cells raw,tcp,lat -mtus 1500 without the rate cells")
	sys := flag.Bool("syscalls", false, "also count system calls per sleeping round trip under strace (the syscalls cell)")
	flag.IntVar(&c.sysN, "syscall-n", 2000, "round trips of the syscalls cell")
	flag.BoolVar(&verbose, "v", false, "log backend warnings to stderr")
	flag.StringVar(&c.latPeer, "lat-peer", "process", "where the round trips' far end runs: process (its own, as write_lat's server) or goroutine (this process)")
	places := flag.String("placements", "free,split,shared", "where the sleeping round trips' two processes run, each measured: free (the scheduler's choice), split (pinned to two CPUs), shared (pinned to one)")
	child := flag.String("child", "", "")            // internal: a child process (peer.go)
	childCPU := flag.Int("cpu", -1, "")              // internal: the CPU a child pins itself to
	peerIfname := flag.String("peer-ifname", "", "") // internal: peer-goroce's interface
	peerBusy := flag.Bool("peer-busy", false, "")    // internal: peer-goroce in busy-poll mode
	rawref := flag.String("rawref", "", "with the raw cell on afxdp: also run the raw AF_XDP reference sender (a rawref module directory such as ../shared/rawref, or its built xsk binary) after each raw rate (rawref.go)")
	flag.StringVar(&c.bwPeer, "bw-peer", "process", "where the bw cell's responder (device B) runs: process (its own, as ib_write_bw's server; bwpeer.go) or goroutine (this process)")
	flag.StringVar(&bwWait, "bw-wait", bwWait, "how the bw cell's sender waits with its window full: spin (64 polls, then CQ.Wait), yield (a runtime.Gosched after each poll: cmd/goroce's poller, bench's before 8 Dec 2026) or sleep (CQ.Wait at once)")
	flag.StringVar(&c.rawSink, "raw-sink", "process", "where the AF_XDP raw rate's receiving end runs: process (its own, as the reference's; rawsink.go) or goroutine (this process)")
	flag.IntVar(&afxdpOpts.BatchSize, "afxdp-batch", 0, "AF_XDP links' BatchSize (0: the backend's default), for experiments")
	flag.IntVar(&afxdpOpts.FrameSize, "afxdp-chunk", 0, "AF_XDP UMEM chunk size, 2048 or 4096 (0: the backend's default)")
	flag.IntVar(&afxdpOpts.NumFrames, "afxdp-frames", 0, "AF_XDP UMEM chunks (rings of half as many; 0: the backend's default)")
	flag.BoolVar(&afxdpOpts.OneSocket, "afxdp-one-socket", false, "AF_XDP links transmit on their receiving socket (afxdp.Options.OneSocket: the layout before the transmit socket of its own), for experiments")
	flag.DurationVar(&waitSpin, "wait-spin", -1, "how long a sleeping wait on AF_XDP spins on the RX ring before it parks (qp Device.SetWaitSpin; 0: no spin; negative: the library's default), on every device and peer, for experiments")
	bwOnly := flag.String("bw", "", "the bw cell's streams to run, comma-separated op.size (WRITE.64,WRITE.65536,READ.4096...; default all)")
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
	c.mqQPs = min(max(c.mqQPs, mqSenders), 10_000)
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
	if *bwOnly != "" {
		c.bwOnly = map[string]bool{}
		for _, s := range strings.Split(*bwOnly, ",") {
			c.bwOnly[s] = true
		}
	}
	if c.rawSink != "process" && c.rawSink != "goroutine" {
		fatalf(2, "-raw-sink is process or goroutine, not %q", c.rawSink)
	}
	if bwWait != "yield" && bwWait != "spin" && bwWait != "sleep" {
		fatalf(2, "-bw-wait is yield, spin or sleep, not %q", bwWait)
	}
	if c.bwPeer != "process" && c.bwPeer != "goroutine" {
		fatalf(2, "-bw-peer is process or goroutine, not %q", c.bwPeer)
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
		if *childCPU >= 0 {
			if _, err := pinProcess(*childCPU); err != nil {
				fmt.Printf("error pinning to CPU %d: %v\n", *childCPU, err)
				os.Exit(1)
			}
		}
		os.Exit(runChild(*child, c, *peerIfname, *peerBusy))
	}
	if c.latPeer == "goroutine" {
		*places = "free" // one process: nothing to place apart
	}
	pl, err := placements(*places)
	if err != nil {
		fatalf(2, "-placements: %v", err)
	}
	c.placements = pl
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
	if *rawref != "" && *child == "" && (c.cells["raw"] || c.cells["rawrate"]) {
		bin, done, err := buildRawref(*rawref)
		if err != nil {
			fatalf(1, "-rawref: %v", err)
		}
		defer done()
		c.rawref = bin
	}
	cleanup.watchSignals()

	in := runInfo{command: "go run ./bench " + strings.Join(os.Args[1:], " "), start: time.Now(), load0: loadavg(),
		machine: readMachine(), cell: c.cell, reps: c.reps, iperf3: c.iperf3,
		qpsN: c.qpsN, mqQPs: c.mqQPs, qpsDepth: c.qpsDepth, qpsCQMod: c.qpsCQMod, idle: c.idle, latPeer: c.latPeer, bwPeer: c.bwPeer}
	in.command = strings.TrimSpace(in.command)
	res := newResults()
	res.placements = c.placements
	for _, mtu := range c.mtus {
		pair, err := newPair(mtu, "goroce-bench")
		if err != nil {
			fatalf(1, "%v", err)
		}
		progress("MTU %d: namespaces %s, %s", mtu, pair.A.NS, pair.B.NS)
		for rep := range c.reps {
			measureRep(pair, mtu, rep, &c, res)
			if c.cells["mq"] && mtu == 1500 && slices.Contains(c.backends, qp.BackendAFXDP) {
				measureMQ(rep, &c, res)
			}
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
