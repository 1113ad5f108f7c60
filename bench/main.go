// Command bench measures goroce's RC stack over each real frame backend
// (AF_XDP, AF_PACKET, UDP) between two network namespaces joined by veth,
// next to the raw frame rate of the same backend on the same veth and a
// single-stream Go TCP connection, and prints one markdown table.
//
//	go run ./bench                          # all backends, MTU 1500 and 9000
//	go run ./bench -backends afxdp,afpacket -time 1s
//	go run ./bench -latency                 # only the round-trip rows (MTU 1500)
//
// Per backend and MTU (path MTU 1024 at 1500; 4096 at 9000, 2048 when AF_XDP
// runs, whose 4096-byte UMEM chunk carries IP MTU 3822):
//
//   - RDMA WRITE and READ goodput at 64 B, 4 KiB and 64 KiB messages, one QP,
//     -depth signalled WRs outstanding (READ: at most 16, max_rd_atomic),
//     and the 64-byte WRITE message rate; process-wide heap allocations per
//     message from runtime.MemStats;
//   - 64-byte WRITE_WITH_IMM ping-pong round trips at MTU 1500: busy-poll
//     (both devices in busy-poll mode, qp.InterfaceOptions.BusyPoll: no device
//     goroutines; each end's goroutine spins on CQ.Poll, which reads the
//     link and runs the timers — a core per device) and blocking (normal
//     devices, both sides sleep in CQ.Wait);
//   - the raw backend: RDMA WRITE ONLY frames from A to B through
//     nic.Link.WriteBatch as fast as it takes them, counted at B (138-byte
//     frames for the message rate, path-MTU frames for the goodput), and
//     single-frame round trips;
//   - TCP: one connection, 64 KiB writes, and 64-byte ping-pong.
//
// Every cell is bounded in time (-time, at most 3 s) and count. Needs root.
// Namespaces are named goroce-bench-PID-N-{a,b}, use 198.18.X.0/24 without
// routes out, and are deleted at the end and on SIGINT/SIGTERM.
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/goroce/goroce/qp"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

var logger = slog.New(slog.NewTextHandler(io.Discard, nil))

type limit struct {
	d time.Duration
	n int
}

type row struct {
	backend, mtu, what             string
	goroce, raw, vsRaw, tcp, vsTCP string
	allocs                         string
}

func main() {
	backends := flag.String("backends", "afxdp,afpacket,udp", "comma-separated backends to measure")
	mtus := flag.String("mtus", "1500,9000", "comma-separated veth MTUs")
	cell := flag.Duration("time", 2*time.Second, "time bound of each measurement (at most 3s)")
	depth := flag.Int("depth", 32, "outstanding WRs in the goodput streams")
	verbose := flag.Bool("v", false, "log backend warnings to stderr")
	flag.BoolVar(&latencyOnly, "latency", false, "measure only the round trips (MTU 1500: goroce, raw backend, TCP); skips other MTUs")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	flag.Parse()
	if *memprofile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			f, err := os.Create(*memprofile)
			if err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *cell <= 0 || *cell > 3*time.Second {
		*cell = 3 * time.Second
	}
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var mtuList []int
	for _, s := range strings.Split(*mtus, ",") {
		var m int
		if _, err := fmt.Sscan(s, &m); err != nil || m < 1280 || m > 9000 {
			fmt.Fprintf(os.Stderr, "bench: bad MTU %q\n", s)
			os.Exit(2)
		}
		mtuList = append(mtuList, m)
	}
	var list []string
	for _, b := range strings.Split(*backends, ",") {
		switch b {
		case qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP:
			list = append(list, b)
		default:
			fmt.Fprintf(os.Stderr, "bench: unknown backend %q (afxdp, afpacket, udp)\n", b)
			os.Exit(2)
		}
	}

	// Namespaces in use, deleted on a signal.
	var mu sync.Mutex
	live := map[*netns.Pair]bool{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		mu.Lock()
		for p := range live {
			p.Close()
		}
		mu.Unlock()
		fmt.Fprintf(os.Stderr, "bench: %v: namespaces removed\n", s)
		os.Exit(130)
	}()

	start := time.Now()
	load0 := loadavg()
	var rows []row
	for _, mtu := range mtuList {
		if latencyOnly && mtu != 1500 {
			continue
		}
		pair, err := netns.New(netns.Options{MTU: mtu, Prefix: "goroce-bench"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		mu.Lock()
		live[pair] = true
		mu.Unlock()
		progress("MTU %d: namespaces %s, %s", mtu, pair.A.NS, pair.B.NS)
		rows = append(rows, measureMTU(pair, mtu, list, limit{*cell, 0}, *depth)...)
		mu.Lock()
		delete(live, pair)
		pair.Close()
		mu.Unlock()
	}
	printTable(rows, *cell, *depth, load0, loadavg(), time.Since(start))
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// latencyOnly (-latency) skips the goodput, message-rate and raw-rate cells.
var latencyOnly bool

var errSkipped = errors.New("not measured (-latency)")

func measureMTU(pair *netns.Pair, mtu int, backends []string, cell limit, depth int) []row {
	tcpBits, tcpErr := 0.0, errSkipped
	if !latencyOnly {
		tcpBits, tcpErr = tcpStream(pair, limit{cell.d, 200_000})
	}
	var tcpLat latency
	var tcpLatErr error
	if mtu == 1500 {
		tcpLat, tcpLatErr = tcpPingPong(pair, limit{cell.d, 20_000})
	}
	if latencyOnly {
		progress("MTU %d: TCP RTT %s", mtu, dur(tcpLat.p50, tcpLatErr))
	} else {
		progress("MTU %d: TCP %s, RTT %s", mtu, gbit(tcpBits, tcpErr), dur(tcpLat.p50, tcpLatErr))
	}
	var rows []row
	for _, backend := range backends {
		rows = append(rows, measureBackend(pair, mtu, backend, cell, depth, tcpBits, tcpErr, tcpLat, tcpLatErr)...)
	}
	return rows
}

func measureBackend(pair *netns.Pair, mtu int, backend string, cell limit, depth int,
	tcpBits float64, tcpErr error, tcpLat latency, tcpLatErr error) []row {
	fail := func(err error) []row {
		progress("%s MTU %d: %v", backend, mtu, err)
		return []row{{backend: backend, mtu: fmt.Sprint(mtu), what: "(setup)", goroce: "error: " + err.Error()}}
	}
	// goroce first, then the raw links on the same veth.
	p, err := openRDMA(pair, backend, depth, false)
	if err != nil {
		return fail(err)
	}
	mode := p.a.info.Mode
	mtuCol := fmt.Sprintf("%d (%d)", mtu, p.pmtu)
	type streamRes struct {
		op   string
		size int
		t    throughput
		err  error
	}
	var streams []streamRes
	ops := []struct {
		name string
		op   qp.WROpcode
	}{{"WRITE", qp.WRRDMAWrite}, {"READ", qp.WRRDMARead}}
	if latencyOnly {
		ops = nil
	}
	for _, op := range ops {
		for _, size := range []int{64, 4 << 10, 64 << 10} {
			t, err := stream(p, op.op, size, depth, limit{cell.d, 2_000_000})
			progress("%s MTU %d: %s %d B: %s, %.0f msg/s, %.2f allocs/msg, err %v", backend, mtu, op.name, size,
				gbit(t.bitsPerSec(), err), t.msgsPerSec(), t.allocsPer, err)
			streams = append(streams, streamRes{op.name, size, t, err})
		}
	}
	// Round trips: [0] busy-poll devices, [1] normal devices in CQ.Wait.
	lats := make([]latency, 2)
	latErrs := make([]error, 2)
	if mtu == 1500 {
		runtime.GC()
		lats[1], latErrs[1] = pingPong(p, false, limit{cell.d, 20_000})
	}
	p.Close()
	if mtu == 1500 {
		if bp, err := openRDMA(pair, backend, depth, true); err != nil {
			latErrs[0] = err
		} else {
			runtime.GC()
			lats[0], latErrs[0] = pingPong(bp, true, limit{cell.d, 20_000})
			bp.Close()
		}
		for i, m := range []string{"busy-poll", "blocking"} {
			progress("%s MTU %d: ping-pong %s: p50 %v p99 %v n %d err %v", backend, mtu, m, lats[i].p50, lats[i].p99, lats[i].n, latErrs[i])
		}
	}

	r, err := openRaw(pair, backend)
	var small, full rawRate
	var smallErr, fullErr, rttErr error
	var rtt latency
	if err != nil {
		smallErr, fullErr, rttErr = err, err, err
	} else {
		if mtu == 1500 {
			rtt, rttErr = rawRTT(r, limit{cell.d, 20_000})
			r.Close()
			if latencyOnly {
				err = errSkipped
			} else {
				r, err = openRaw(pair, backend) // rawRTT closed B's link
			}
		}
		if err != nil {
			smallErr, fullErr = err, err
		} else {
			small, smallErr = rate(r, 64, limit{cell.d, 20_000_000})
			r.Close()
			if r, err = openRaw(pair, backend); err != nil {
				fullErr = err
			} else {
				full, fullErr = rate(r, p.pmtu, limit{cell.d, 20_000_000})
				r.Close()
			}
		}
	}
	if latencyOnly {
		progress("%s MTU %d: raw RTT %v (%v)", backend, mtu, rtt.p50, rttErr)
	} else {
		progress("%s MTU %d: raw %d-byte frames %.0f/s (%v), %d-byte frames %s (%v), RTT %v (%v)", backend, mtu,
			small.frameLen, small.framesPerSec(), smallErr, full.frameLen, gbit(full.payloadBitsPerSec(), fullErr), fullErr, rtt.p50, rttErr)
	}

	name := backend + " (" + mode + ")"
	var rows []row
	for _, s := range streams {
		rw := row{backend: name, mtu: mtuCol, what: fmt.Sprintf("RDMA %s %s", s.op, size(s.size))}
		if s.err != nil {
			rw.goroce = "error: " + s.err.Error()
			rows = append(rows, rw)
			continue
		}
		rw.allocs = fmt.Sprintf("%.2f", s.t.allocsPer)
		if s.size == 64 {
			rw.what += " (message rate)"
			rw.goroce = fmt.Sprintf("%s msg/s (%s)", kilo(s.t.msgsPerSec()), gbit(s.t.bitsPerSec(), nil))
			rw.raw = fmt.Sprintf("%s frames/s (%d B)", kiloErr(small.framesPerSec(), smallErr), small.frameLen)
			rw.vsRaw = ratio(s.t.msgsPerSec(), small.framesPerSec(), smallErr)
		} else {
			rw.goroce = gbit(s.t.bitsPerSec(), nil)
			rw.raw = fmt.Sprintf("%s (%d B frames)", gbit(full.payloadBitsPerSec(), fullErr), full.frameLen)
			rw.vsRaw = ratio(s.t.bitsPerSec(), full.payloadBitsPerSec(), fullErr)
			rw.tcp = gbit(tcpBits, tcpErr)
			rw.vsTCP = ratio(s.t.bitsPerSec(), tcpBits, tcpErr)
		}
		rows = append(rows, rw)
	}
	if mtu == 1500 {
		modes := []string{"busy-poll devices (CQ.Poll drives each device; a spinning core per device)",
			"blocking (device goroutines, CQ.Wait)"}
		for i, modeName := range modes {
			rw := row{backend: name, mtu: mtuCol, what: "64 B WRITE_WITH_IMM round trip, " + modeName}
			if latErrs[i] != nil {
				rw.goroce = "error: " + latErrs[i].Error()
			} else {
				rw.goroce = fmt.Sprintf("%s (p99 %s, n=%d)", dur(lats[i].p50, nil), dur(lats[i].p99, nil), lats[i].n)
				rw.raw = dur(rtt.p50, rttErr)
				rw.vsRaw = ratio(float64(lats[i].p50), float64(rtt.p50), rttErr)
				rw.tcp = dur(tcpLat.p50, tcpLatErr)
				rw.vsTCP = ratio(float64(lats[i].p50), float64(tcpLat.p50), tcpLatErr)
			}
			rows = append(rows, rw)
		}
	}
	return rows
}

func size(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func gbit(bps float64, err error) string {
	if err != nil {
		return "error"
	}
	if bps < 1e9 {
		return fmt.Sprintf("%.0f Mbit/s", bps/1e6)
	}
	return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
}

func kilo(v float64) string {
	if v >= 1e6 {
		return fmt.Sprintf("%.2f M", v/1e6)
	}
	return fmt.Sprintf("%.1f k", v/1e3)
}

func kiloErr(v float64, err error) string {
	if err != nil {
		return "error"
	}
	return kilo(v)
}

func dur(d time.Duration, err error) string {
	if err != nil {
		return "error"
	}
	return fmt.Sprintf("%.1f µs", float64(d)/1e3)
}

func ratio(a, b float64, err error) string {
	if err != nil || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func printTable(rows []row, cell time.Duration, depth int, load0, load1 string, total time.Duration) {
	fmt.Printf("goroce bench: %s, GOMAXPROCS %d, %d CPUs, each cell ≤ %v, %d WRs outstanding (READ ≤ 16); load average %s → %s; total %v\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), cell, depth, load0, load1, total.Round(time.Second))
	fmt.Println("| backend (mode) | MTU (path MTU) | measurement | goroce | raw backend, same veth | goroce/raw | TCP, same veth | goroce/TCP | allocs/msg |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.backend, r.mtu, r.what, r.goroce, r.raw, r.vsRaw, r.tcp, r.vsTCP, r.allocs)
	}
}
