//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nvmeof"
	"github.com/goroce/goroce/qp"
)

// The nvmeof cell: goroce's NVMe-oF host against goroce's NVMe-oF target
// (package nvmeof, a memory namespace) on the same veth and devices as
// goroce's own RDMA WRITE and READ message rates, measured in the same
// cell: 4 KiB random read and write IOPS at QD 32 against the 4 KiB WRITE
// message rate, 128 KiB sequential read goodput against the 64 KiB READ
// goodput (issue 22's targets: ≥ 0.8× and ≥ 0.9×).
const (
	mNVMeRandRead  = "nvme.randread4k.iops"
	mNVMeRandWrite = "nvme.randwrite4k.iops"
	mNVMeSeqRead   = "nvme.seqread128k.gbps"
	mNVMeWrite4k   = "nvme.write4k.mps" // goroce 4 KiB WRITE msg/s, this cell
	mNVMeRead64k   = "nvme.read64k.gbps"
	// Process CPU (getrusage, user + system) per operation, µs: the
	// load-independent side of the comparison (per 64 KiB for the
	// sequential read and the READ baseline).
	mNVMeRandReadCPU  = "nvme.randread4k.cpu_us"
	mNVMeRandWriteCPU = "nvme.randwrite4k.cpu_us"
	mNVMeSeqReadCPU   = "nvme.seqread128k.cpu_us_per64k"
	mNVMeWrite4kCPU   = "nvme.write4k.cpu_us"
	mNVMeRead64kCPU   = "nvme.read64k.cpu_us"
	// Per operation (per 64 KiB for the sequential read and the READ):
	// system calls of every kind, and context switches (getrusage).
	sufSys   = ".syscalls"
	sufCSW   = ".csw"
	nvmePort = 4420
	nvmeQD   = 32
)

// nvmeQueues is the host's I/O queues in the nvmeof cell (one by default:
// the figures of docs/performance.md); the QD 32 is spread over them.
var nvmeQueues = flag.Int("nvme-queues", 1, "I/O queues of the nvmeof cell's host (QD 32 over all), for experiments")

// nvmeNoHold turns the held ACK off on both devices for the NVMe-oF runs
// (qp.Device.SetAckHold), for experiments.
var nvmeNoHold = flag.Bool("nvme-no-ackhold", false, "turn the held ACK off on both devices for the nvmeof cell's NVMe-oF runs, for experiments")

// nvmeWindow is the requester window of the host's and the target's QPs
// in the nvmeof cell (nvmeof.Target.Window, HostOptions.Window; 0: rxe's
// 128, nvmeof's default).
var nvmeWindow = flag.Int("nvme-window", 0, "requester window of the nvmeof cell's host and target QPs in PSNs (0: rxe's 128, the default), for experiments")

func measureNVMe(pair *netns.Pair, mtu int, b, tag string, c *config, res *results) {
	k := func(m string) key { return key{b, mtu, m} }
	p, err := openRDMA(pair, b, false)
	if err != nil {
		progress("%s: goroce devices: %v", tag, err)
		res.fail(k(mNVMeRandRead), err)
		return
	}
	defer p.Close()
	res.addSection(section{backend: b, mtu: mtu, mode: p.a.info.Mode, pmtu: p.pmtu})
	lim := limit{c.cell, maxMsgs}
	sc := newSysCounter()
	defer sc.close()
	runtime.GC()
	s0, y0 := snapWire(p), sc.snap()
	w, err := bw(p, qp.WRRDMAWrite, 4096, lim)
	record(res, k(mNVMeWrite4k), w.msgsPerSec(), err)
	recordCPU(res, k(mNVMeWrite4kCPU), w, 1, err)
	recordCounts(res, k(mNVMeWrite4k), sc.snap(), y0, w, 1, err)
	s1 := snapWire(p)
	progress("%s: nvmeof baseline: WRITE 4 KiB %s msg/s; %s%s%s%s", tag, fmtRate(w.msgsPerSec()), s1.perMsg(s0, w.msgs), txKicks(s1, s0, w.msgs), w.cpuPerMsg()+cswPerMsg(w), sc.perOp(sc.snap(), y0, w.msgs))
	runtime.GC()
	s0, y0 = snapWire(p), sc.snap()
	r, err := bw(p, qp.WRRDMARead, 65536, lim)
	record(res, k(mNVMeRead64k), r.bitsPerSec()/1e9, err)
	recordCPU(res, k(mNVMeRead64kCPU), r, 1, err)
	recordCounts(res, k(mNVMeRead64k), sc.snap(), y0, r, 1, err)
	s1 = snapWire(p)
	progress("%s: nvmeof baseline: READ 64 KiB %s; %s%s%s%s", tag, fmtGbit(r.bitsPerSec()/1e9), s1.perMsg(s0, r.msgs), txKicks(s1, s0, r.msgs), r.cpuPerMsg()+cswPerMsg(r), sc.perOp(sc.snap(), y0, r.msgs))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+3*c.cell)
	defer cancel()
	const size = 256 << 20
	mem := nvmeof.NewMemory(size)
	prefault(mem, size)
	t := &nvmeof.Target{Window: *nvmeWindow, Subsystems: []*nvmeof.Subsystem{{NQN: "nqn.2026-12.io.goroce:bench",
		Namespaces: []*nvmeof.Namespace{{Backend: mem, Size: size, BlockSize: 4096}}}}}
	addr := netip.AddrPortFrom(pair.B.Addr, nvmePort).String()
	l, err := t.Listen(ctx, p.b.dev, addr)
	if err != nil {
		res.fail(k(mNVMeRandRead), err)
		return
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { t.Serve(sctx, l); close(served) }()
	defer func() { stop(); l.Close(); <-served }()
	h, err := nvmeof.Dial(ctx, p.a.dev, addr, "nqn.2026-12.io.goroce:bench", &nvmeof.HostOptions{Queues: max(*nvmeQueues, 1), QueueDepth: nvmeQD, Window: *nvmeWindow})
	if err != nil {
		res.fail(k(mNVMeRandRead), err)
		return
	}
	defer h.Close()
	ns := h.Namespaces()[0]
	if *nvmeNoHold {
		p.a.dev.SetAckHold(false)
		p.b.dev.SetAckHold(false)
		defer p.a.dev.SetAckHold(true)
		defer p.b.dev.SetAckHold(true)
	}
	for _, m := range []struct {
		metric, cpu string
		write       bool
		bs          int
		seq         bool
	}{{mNVMeRandRead, mNVMeRandReadCPU, false, 4096, false}, {mNVMeRandWrite, mNVMeRandWriteCPU, true, 4096, false},
		{mNVMeSeqRead, mNVMeSeqReadCPU, false, 128 << 10, true}} {
		runtime.GC()
		s0, y0, c0, wa0, wb0 := snapWire(p), sc.snap(), markCPU(), windowFull(p.a.dev), windowFull(p.b.dev)
		ios, el, err := nvmeRun(ctx, ns, m.write, m.bs, m.seq, c.cell)
		cu, cerr := markCPU().since(c0)
		s1, y1 := snapWire(p), sc.snap()
		wire := s1.perMsg(s0, ios) + txKicks(s1, s0, ios) + sc.perOp(y1, y0, ios) +
			fmt.Sprintf("; window full A %.3f, B %.3f", float64(windowFull(p.a.dev)-wa0)/float64(max(ios, 1)), float64(windowFull(p.b.dev)-wb0)/float64(max(ios, 1)))
		t := throughput{msgs: ios, cpu: cu, cpuErr: cerr}
		if cerr == nil && ios > 0 {
			wire += t.cpuPerMsg() + cswPerMsg(t)
		}
		per := 1.0 // operations per reported unit
		if m.seq {
			per = 65536 / float64(m.bs)
		}
		recordCPU(res, k(m.cpu), t, per, err)
		recordCounts(res, k(m.metric), y1, y0, t, per, err)
		if m.seq {
			record(res, k(m.metric), float64(ios)*float64(m.bs)*8/el.Seconds()/1e9, err)
		} else {
			record(res, k(m.metric), float64(ios)/el.Seconds(), err)
		}
		progress("%s: nvmeof %s: %d I/Os of %d B in %v (%v); A = host, B = target, %s", tag, m.metric, ios, m.bs, el.Round(time.Millisecond), err, wire)
	}
}

// windowFull is d's requester steps stopped by a full window, over its
// QPs (qp.CntWindowFull).
func windowFull(d *qp.Device) uint64 { return d.Stats().Counters[qp.CntWindowFull] }

// txKicks formats each end's transmit kicks (AF_XDP: sendto) per
// operation and the frames each carried, over s−s0: the rest of a link's
// "kicks" in perMsg are its receive side's wake-ups.
func txKicks(s, s0 wireSnap, ops int64) string {
	m := float64(max(ops, 1))
	per := func(f, k uint64) float64 { return float64(f) / float64(max(k, 1)) }
	return fmt.Sprintf("; TX kicks A %.3f (%.1f frames each), B %.3f (%.1f)", float64(s.txkA-s0.txkA)/m,
		per(s.txA-s0.txA, s.txkA-s0.txkA), float64(s.txkB-s0.txkB)/m, per(s.txB-s0.txB, s.txkB-s0.txkB))
}

// cswPerMsg is t's context switches (getrusage, voluntary + involuntary)
// per message.
func cswPerMsg(t throughput) string {
	if t.cpuErr != nil || t.msgs == 0 {
		return ""
	}
	return fmt.Sprintf(", context switches %.3f", float64(t.cpu.csw)/float64(t.msgs))
}

// recordCounts records the system calls (when counted) and context
// switches per operation of t times per under at's metric with sufSys and
// sufCSW.
func recordCounts(res *results, at key, y1, y0 sysSnap, t throughput, per float64, err error) {
	if err != nil || t.msgs == 0 {
		return
	}
	n := float64(t.msgs)
	if y1.counts && y0.counts && len(y1.n) > 0 && len(y0.n) == len(y1.n) {
		res.add(key{at.backend, at.mtu, at.metric + sufSys}, float64(y1.n[0]-y0.n[0])/n*per)
	}
	if t.cpuErr == nil {
		res.add(key{at.backend, at.mtu, at.metric + sufCSW}, float64(t.cpu.csw)/n*per)
	}
}

// recordCPU records t's process CPU in µs per operation times per (per
// 64 KiB for 128 KiB I/Os: 0.5), when it was measured.
func recordCPU(res *results, at key, t throughput, per float64, err error) {
	if err != nil || t.cpuErr != nil || t.msgs == 0 {
		return
	}
	res.add(at, t.cpu.proc/float64(t.msgs)*1e6*per)
}

// prefault writes the whole namespace once before it is measured: a fresh
// allocation's pages are otherwise first touched by the timed reads and
// writes (a page fault each, tens of µs in a VM), which no backend that
// holds data pays and the WRITE baseline's warm buffers do not either.
func prefault(w io.WriterAt, size int64) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 0xa5
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		w.WriteAt(buf[:min(int64(len(buf)), size-off)], off)
	}
}

// nvmeRun keeps nvmeQD commands in flight for d.
func nvmeRun(ctx context.Context, ns *nvmeof.HostNamespace, write bool, bs int, seq bool, d time.Duration) (int64, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ios, next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	blocks := ns.Size() / int64(bs)
	start := time.Now()
	for w := range nvmeQD {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, bs)
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for ctx.Err() == nil {
				o := rng.Int64N(blocks)
				if seq {
					o = (next.Add(1) - 1) % blocks
				}
				var err error
				if write {
					_, err = ns.WriteAtContext(ctx, buf, o*int64(bs))
				} else {
					_, err = ns.ReadAtContext(ctx, buf, o*int64(bs))
				}
				if err != nil {
					if ctx.Err() == nil {
						e := err // only this escapes: err's own heap cell would cost an allocation per I/O
						first.Store(&e)
					}
					return
				}
				ios.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if e := first.Load(); e != nil {
		return ios.Load(), el, *e
	}
	return ios.Load(), el, nil
}

// writeNVMe is the nvmeof cell's table.
func writeNVMe(w io.Writer, r *results) {
	writeVersus(w, r, "NVMe over Fabrics against goroce's own verbs", "goroce's NVMe-oF host against goroce's target "+
		"(package nvmeof, a 256 MiB memory namespace, one I/O queue of depth 32, both in this process), and goroce's "+
		"RDMA WRITE/READ rates on the same devices in the same cell. The CPU rows are this process's CPU "+
		"(getrusage, user + system: host, target and both links' kernel work) per operation, lower is better; "+
		"they move with other tenants' load less than the rates do. The system call rows count every thread's calls (perf "+
		"tracepoints; absent without the permission), the context switch rows are getrusage's (voluntary + involuntary); "+
		"the cell's progress lines break both down per link and per kind.", "NVMe-oF | goroce verbs | ratio", []versusRow{
		{"4 KiB random read IOPS, QD 32 / 4 KiB WRITE msg/s", mNVMeRandRead, mNVMeWrite4k, fmtRate},
		{"4 KiB random write IOPS, QD 32 / 4 KiB WRITE msg/s", mNVMeRandWrite, mNVMeWrite4k, fmtRate},
		{"128 KiB sequential read Gbit/s / 64 KiB READ Gbit/s", mNVMeSeqRead, mNVMeRead64k, fmtGbit},
		{"process CPU per 4 KiB random read / per 4 KiB WRITE message", mNVMeRandReadCPU, mNVMeWrite4kCPU, fmtMicros},
		{"process CPU per 4 KiB random write / per 4 KiB WRITE message", mNVMeRandWriteCPU, mNVMeWrite4kCPU, fmtMicros},
		{"process CPU per 64 KiB, 128 KiB sequential read / 64 KiB READ", mNVMeSeqReadCPU, mNVMeRead64kCPU, fmtMicros},
		{"system calls per 4 KiB random read / per 4 KiB WRITE message", mNVMeRandRead + sufSys, mNVMeWrite4k + sufSys, fmtNum},
		{"system calls per 4 KiB random write / per 4 KiB WRITE message", mNVMeRandWrite + sufSys, mNVMeWrite4k + sufSys, fmtNum},
		{"system calls per 64 KiB, 128 KiB sequential read / 64 KiB READ", mNVMeSeqRead + sufSys, mNVMeRead64k + sufSys, fmtNum},
		{"context switches per 4 KiB random read / per 4 KiB WRITE message", mNVMeRandRead + sufCSW, mNVMeWrite4k + sufCSW, fmtNum},
		{"context switches per 4 KiB random write / per 4 KiB WRITE message", mNVMeRandWrite + sufCSW, mNVMeWrite4k + sufCSW, fmtNum},
		{"context switches per 64 KiB, 128 KiB sequential read / 64 KiB READ", mNVMeSeqRead + sufCSW, mNVMeRead64k + sufCSW, fmtNum},
	})
}
