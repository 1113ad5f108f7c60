//go:build linux

package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

const (
	bufSize   = 4 << 20 // per endpoint: [0, half) local sources, [half, bufSize) the peer's target
	half      = bufSize / 2
	stallTime = 5 * time.Second // no progress for this long: the cell fails

	// perftest's bandwidth defaults (perftest 4.5; cmd/goroce's tools).
	bwTxDepth = 128
	bwCQMod   = 100
)

// setupTimeout bounds opening a pair of devices and connecting a QP pair.
const setupTimeout = 10 * time.Second

type rdmaEnd struct {
	dev  *qp.Device
	info *qp.InterfaceInfo
	pd   *qp.PD
	buf  []byte
	mr   *qp.MR
}

func (e *rdmaEnd) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

// rdmaPair is a device on each end of a netns pair, with one buffer
// registered on each; QPs are made per cell (connect).
type rdmaPair struct {
	pair *netns.Pair
	a, b *rdmaEnd
	mtu  qp.MTU
	pmtu int
	busy bool
	psn  uint32 // the next QP pair's starting PSNs
}

func (p *rdmaPair) Close() {
	p.a.dev.Close()
	p.b.dev.Close()
}

// openEnd opens a device on side s of pair with backend (in busy-poll
// mode with busy: qp.ModeBusyPoll, no receive or timer
// goroutine, the application's polling drives the device) and registers
// a buffer on it.
//
// The device's goroutines carry the pprof label end=A or end=B (they
// inherit it from the opening goroutine), so that a CPU profile of a run
// (-cpuprofile) splits by end: go tool pprof -tagfocus end=B.
func openEnd(pair *netns.Pair, s netns.Side, backend string, busy bool, tune func(*qp.InterfaceOptions)) (e *rdmaEnd, err error) {
	pprof.Do(context.Background(), pprof.Labels("end", s.String()), func(context.Context) {
		e, err = openEndOn(func(fn func() error) error { return pair.Do(s, fn) }, pair.End(s).Ifname, backend, busy, int64(s)+1, tune)
	})
	return e, err
}

// openEndOn opens the device of ifname, calling OpenInterface inside do
// (a namespace switch, or a plain call in a process started inside the
// namespace); tune, when set, adjusts the options first.
func openEndOn(do func(func() error) error, ifname, backend string, busy bool, seed int64, tune func(*qp.InterfaceOptions)) (*rdmaEnd, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	e := &rdmaEnd{}
	err := do(func() error {
		var err error
		o := linkOptions(backend)
		o.Seed = seed
		if busy {
			o.Mode = qp.ModeBusyPoll
		}
		if tune != nil {
			tune(&o)
		}
		e.dev, e.info, err = qp.OpenInterface(ctx, ifname, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	if waitSpin >= 0 {
		e.dev.SetWaitSpin(waitSpin)
	}
	e.pd = e.dev.AllocPD()
	e.buf = make([]byte, bufSize)
	e.mr, err = e.pd.RegMR(e.buf, qp.LocalWrite|qp.RemoteWrite|qp.RemoteRead)
	if err != nil {
		e.dev.Close()
		return nil, err
	}
	return e, nil
}

// openRDMA opens a device on each end of pair (openEnd).
func openRDMA(pair *netns.Pair, backend string, busy bool) (*rdmaPair, error) {
	return openRDMAWith(pair, backend, busy, nil)
}

// openRDMAWith is openRDMA with tune adjusting both ends' options.
func openRDMAWith(pair *netns.Pair, backend string, busy bool, tune func(*qp.InterfaceOptions)) (*rdmaPair, error) {
	a, err := openEnd(pair, netns.A, backend, busy, tune)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	b, err := openEnd(pair, netns.B, backend, busy, tune)
	if err != nil {
		a.dev.Close()
		return nil, fmt.Errorf("side B: %w", err)
	}
	p := &rdmaPair{pair: pair, a: a, b: b, busy: busy, psn: 0x100}
	p.mtu = min(a.dev.ActiveMTU(), b.dev.ActiveMTU())
	p.pmtu = p.mtu.Bytes()
	return p, nil
}

// cqs are the completion queues of a set of QPs on both ends.
type cqs struct{ sa, ra, sb, rb *qp.CQ }

func (p *rdmaPair) newCQs(n int) (cqs, error) {
	var c cqs
	for _, x := range []struct {
		dev *qp.Device
		cq  **qp.CQ
	}{{p.a.dev, &c.sa}, {p.a.dev, &c.ra}, {p.b.dev, &c.sb}, {p.b.dev, &c.rb}} {
		cq, err := x.dev.CreateCQ(n)
		if err != nil {
			return cqs{}, err
		}
		*x.cq = cq
	}
	return c, nil
}

// connect creates n RC QP pairs with depth send WRs each, on c, and
// connects them at the pair's path MTU with perftest's defaults
// (qp.ConnectOptions zero values).
func (p *rdmaPair) connect(n, depth int, c cqs) (qa, qb []*qp.QP, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout+time.Duration(n)*20*time.Millisecond)
	defer cancel()
	caps := qp.Caps{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	destroy := func() {
		for _, q := range append(qa, qb...) {
			q.Destroy()
		}
	}
	for range n {
		a, err := p.a.pd.CreateQP(qp.InitAttr{SendCQ: c.sa, RecvCQ: c.ra, Cap: caps})
		if err != nil {
			destroy()
			return nil, nil, err
		}
		qa = append(qa, a)
		b, err := p.b.pd.CreateQP(qp.InitAttr{SendCQ: c.sb, RecvCQ: c.rb, Cap: caps})
		if err != nil {
			destroy()
			return nil, nil, err
		}
		qb = append(qb, b)
		psnA, psnB := p.psn, p.psn+0x1000
		p.psn = (p.psn + 1) & 0x7FFFF
		if err := a.Connect(ctx, qp.Remote{QPN: b.QPN(), PSN: psnB, GID: p.pair.B.Addr, MTU: p.mtu}, qp.ConnectOptions{SQPSN: psnA}); err != nil {
			destroy()
			return nil, nil, err
		}
		if err := b.Connect(ctx, qp.Remote{QPN: a.QPN(), PSN: psnA, GID: p.pair.A.Addr, MTU: p.mtu}, qp.ConnectOptions{SQPSN: psnB}); err != nil {
			destroy()
			return nil, nil, err
		}
	}
	return qa, qb, nil
}

type throughput struct {
	msgs      int64
	bytes     int64
	elapsed   time.Duration
	allocsPer float64 // process-wide heap allocations per message
	cpu       cpuUse
	cpuErr    error
	app       appSplit // the posting goroutine's wall time (bwRun)
	peerCPU   float64  // -bw-peer process: the responder process's CPU-seconds (inside cpu.proc)
}

// appSplit is where bwRun's goroutine (the application: perftest's
// sender) spent its wall time: in PostSendList (the engine, and the kicks
// it writes: sendto), in the poll after a post, and waiting with its
// window full, first in polls (pollWait), then in CQ.Wait (which drives
// device A while it sleeps: the ACKs are read there). It is load-robust
// in one respect: a waiting share the sender does not use its CPU in.
type appSplit struct {
	post, poll, spin, wait time.Duration
	posts, waits           int64 // PostSendList calls; window-full waits
	spinHits, waitCalls    int64 // waits ended by a poll; CQ.Wait calls
	polls, entries         int64 // CQ.Poll calls (all); completions read
}

// String gives the shares of the wall time d and the counts per message.
func (a appSplit) String(d time.Duration, msgs int64) string {
	pct := func(x time.Duration) float64 { return 100 * x.Seconds() / max(d.Seconds(), 1e-9) }
	m := float64(max(msgs, 1))
	other := d - a.post - a.poll - a.spin - a.wait
	return fmt.Sprintf("sender goroutine's wall time: post %.1f %% (%.2f µs per msg), poll %.1f %%, waiting %.1f %% (polls %.1f %%, CQ.Wait %.1f %%), other %.1f %%; per msg: %.4f posts, %.4f waits (%.2f of them ended while polling), %.4f CQ.Wait calls, %.4f polls, %.4f completions",
		pct(a.post), a.post.Seconds()*1e6/m, pct(a.poll), pct(a.spin+a.wait), pct(a.spin), pct(a.wait), pct(other),
		float64(a.posts)/m, float64(a.waits)/m, float64(a.spinHits)/float64(max(a.waits, 1)), float64(a.waitCalls)/m, float64(a.polls)/m, float64(a.entries)/m)
}

func (t throughput) bitsPerSec() float64 { return float64(t.bytes) * 8 / t.elapsed.Seconds() }
func (t throughput) msgsPerSec() float64 { return float64(t.msgs) / t.elapsed.Seconds() }

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// bwRun is perftest's run_iter_bw (cmd/goroce's bwClient) over qps, all
// completing into cq: each QP keeps up to txDepth WRs outstanding, every
// cqMod-th is signalled (and credits cqMod), each QP's window goes out in
// one PostSendList, and the loop polls once after posting or waits (64
// polls, then CQ.Wait: pollWait) when every window is full. tmpl[i] is QP
// i's work request. It stops posting after lim.d (rounding each QP up to a
// signalled WR) or lim.n messages, and ends at the last completion.
func bwRun(qps []*qp.QP, cq *qp.CQ, tmpl []qp.SendWR, txDepth, cqMod int, size int, lim limit) (throughput, error) {
	nq := len(qps)
	cqMod = min(cqMod, txDepth)
	mod := int64(max(cqMod, 1))
	depth := int64(txDepth)
	perQP := roundUp(max(int64(lim.n)/int64(nq), 1), mod)
	iters := make([]int64, nq)
	for i := range iters {
		iters[i] = perQP
	}
	scnt, ccnt := make([]int64, nq), make([]int64, nq)
	list := make([]qp.SendWR, txDepth)
	var wcs [16]qp.WC // CTX_POLL_BATCH
	ctx, cancel := context.WithTimeout(context.Background(), lim.d+stallTime)
	defer cancel()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	c0 := markCPU()
	start := time.Now()
	deadline := start.Add(lim.d)
	stopped := false
	var tot, totc int64 = perQP * int64(nq), 0
	var app appSplit
	for totc < tot {
		if !stopped && !time.Now().Before(deadline) {
			stopped = true
			tot = 0
			for i := range iters {
				iters[i] = min(iters[i], roundUp(scnt[i], mod))
				tot += iters[i]
			}
			if totc >= tot {
				break
			}
		}
		posted := false
		t0 := time.Now()
		for idx, q := range qps {
			k := 0
			for scnt[idx] < iters[idx] && scnt[idx]-ccnt[idx] < depth {
				list[k] = tmpl[idx]
				list[k].WRID = uint64(idx)
				if scnt[idx]%mod == mod-1 {
					list[k].Flags |= qp.SendSignaled
				} else {
					list[k].Flags &^= qp.SendSignaled
				}
				k++
				scnt[idx]++
			}
			if k > 0 {
				posted = true
				app.posts++
				if n, err := q.PostSendList(list[:k]); err != nil {
					return throughput{}, fmt.Errorf("post on QP %d (%d of %d taken): %w", idx, n, k, err)
				}
			}
		}
		var n int
		var err error
		t1 := time.Now()
		if posted {
			app.post += t1.Sub(t0)
			n, err = cq.Poll(wcs[:])
			app.polls++
			app.poll += time.Since(t1)
		} else {
			app.waits++
			n, err = pollWait(ctx, cq, wcs[:], &app)
		}
		app.entries += int64(n)
		if err != nil {
			return throughput{}, fmt.Errorf("%d of %d completed: %w", totc, tot, err)
		}
		for i := range n {
			if err := wcs[i].Err(); err != nil {
				return throughput{}, err
			}
			if id := int(wcs[i].WRID); id < nq {
				ccnt[id] += mod
			}
			totc += mod
		}
	}
	el := time.Since(start)
	cpu, cpuErr := markCPU().since(c0)
	runtime.ReadMemStats(&ms1)
	return throughput{msgs: totc, bytes: totc * int64(size), elapsed: el,
		allocsPer: float64(ms1.Mallocs-ms0.Mallocs) / float64(max(totc, 1)), cpu: cpu, cpuErr: cpuErr, app: app}, nil
}

// spinPolls is how many empty polls a waiter makes before it
// sleeps in CQ.Wait (cmd/goroce's poller).
const spinPolls = 64

// bwWait is how bwRun waits with its window full (-bw-wait): "spin" (the
// default: spinPolls polls, then CQ.Wait; perftest's busy ibv_poll_cq
// loop has no scheduler to yield to), "yield" (a runtime.Gosched after
// each empty poll: cmd/goroce's poller, and bench's until 8 Dec 2026) or
// "sleep" (CQ.Wait at once, as with -e). The yields cannot make a
// completion appear: the self-driving waiter gave device A's link up when
// its CQ.Wait returned, so nobody reads the ACK until the next CQ.Wait
// (0-4 % of the waits ended while yielding), and each Gosched with an idle
// P wakes a thread for it (wakep): 0.2 µs of CPU per 64 B message
// (docs/performance.md, "2026-12-08: the 64 B rate").
var bwWait = "spin"

// waitSpin is -wait-spin: the devices' sleeping-wait spin budget
// (qp.Device.SetWaitSpin), negative for the library's default.
var waitSpin time.Duration = -1

// pollWait is the perftest tools' default wait (without -e): spinPolls
// polls, then CQ.Wait (bwWait: the polls yielding, or none). It adds its
// time and calls to a.
func pollWait(ctx context.Context, cq *qp.CQ, wcs []qp.WC, a *appSplit) (int, error) {
	t0 := time.Now()
	polls := spinPolls
	if bwWait == "sleep" {
		polls = 0
	}
	for range polls {
		a.polls++
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			a.spinHits++
			a.spin += time.Since(t0)
			return n, err
		}
		if bwWait == "yield" {
			runtime.Gosched()
		}
	}
	t1 := time.Now()
	a.spin += t1.Sub(t0)
	a.waitCalls++
	n, err := cq.Wait(ctx, wcs)
	a.wait += time.Since(t1)
	return n, err
}

// bw is one perftest-shaped stream on one new QP pair: tx-depth 128,
// cq-mod 100, A → B (WRITE into B's target half, or READ from it). READs
// beyond max_rd_atomic (16) wait in the QP's send queue, as on a NIC.
func bw(p *rdmaPair, op qp.WROpcode, size int, lim limit) (throughput, error) {
	c, err := p.newCQs(bwTxDepth + 16)
	if err != nil {
		return throughput{}, err
	}
	qa, qb, err := p.connect(1, bwTxDepth, c)
	if err != nil {
		return throughput{}, err
	}
	defer qa[0].Destroy()
	defer qb[0].Destroy()
	wr := qp.SendWR{Opcode: op, SGL: []qp.SGE{p.a.sge(0, size)}, RemoteAddr: p.b.mr.IOVA() + half, RKey: p.b.mr.RKey()}
	return bwRun(qa, c.sa, []qp.SendWR{wr}, bwTxDepth, bwCQMod, size, lim)
}

// qpsResult is the many-QP cell's outcome.
type qpsResult struct {
	agg, one  throughput
	heapPerQP float64
	// oneWire and aggWire are the frames, kicks and ACKs per message of
	// each run (wireSnap.perMsg).
	oneWire, aggWire string
}

// manyQPs connects n QP pairs on p's devices and streams round-robin
// 64-byte WRITEs over all of them (each at most depth outstanding, one
// signalled per cqMod), after one QP alone in the bandwidth cell's shape.
func manyQPs(p *rdmaPair, n, depth, cqMod int, lim limit) (qpsResult, error) {
	var res qpsResult
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h0 := ms.HeapAlloc
	c, err := p.newCQs(n*depth + 16)
	if err != nil {
		return res, err
	}
	qa, qb, err := p.connect(n, depth, c)
	if err != nil {
		return res, fmt.Errorf("connecting %d QPs: %w", n, err)
	}
	defer func() {
		for _, q := range append(qa, qb...) {
			q.Destroy()
		}
	}()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	res.heapPerQP = (float64(ms.HeapAlloc) - float64(h0)) / float64(2*n)

	w0 := snapWire(p)
	if res.one, err = bw(p, qp.WRRDMAWrite, sizeSmall, lim); err != nil {
		return res, fmt.Errorf("one QP: %w", err)
	}
	w1 := snapWire(p)
	res.oneWire = w1.perMsg(w0, res.one.msgs) + res.one.cpuPerMsg()
	tmpl := make([]qp.SendWR, n)
	for i := range tmpl {
		off := (i % 1024) * sizeSmall
		tmpl[i] = qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{p.a.sge(off, sizeSmall)},
			RemoteAddr: p.b.mr.IOVA() + half + uint64(off), RKey: p.b.mr.RKey()}
	}
	w1 = snapWire(p)
	if res.agg, err = bwRun(qa, c.sa, tmpl, depth, cqMod, sizeSmall, lim); err != nil {
		return res, fmt.Errorf("%d QPs: %w", n, err)
	}
	res.aggWire = snapWire(p).perMsg(w1, res.agg.msgs) + res.agg.cpuPerMsg()
	return res, nil
}

// idleCPU opens nothing: p's devices (normal mode) with one connected QP
// pair sit idle for d, and the process's and machine's CPU use is
// measured.
func idleCPU(p *rdmaPair, d time.Duration) (cpuUse, error) {
	c, err := p.newCQs(16)
	if err != nil {
		return cpuUse{}, err
	}
	qa, qb, err := p.connect(1, 16, c)
	if err != nil {
		return cpuUse{}, err
	}
	defer qa[0].Destroy()
	defer qb[0].Destroy()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	c0 := markCPU()
	time.Sleep(d)
	return markCPU().since(c0)
}
