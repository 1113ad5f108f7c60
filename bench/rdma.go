package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

const (
	bufSize   = 4 << 20 // per endpoint: [0, half) local, [half, bufSize) remote target
	half      = bufSize / 2
	latRecvs  = 16
	stallTime = 5 * time.Second // no completion for this long: the cell fails
)

type rdmaEnd struct {
	dev      *qp.Device
	info     *qp.InterfaceInfo
	scq, rcq *qp.CQ
	q        *qp.QP
	buf      []byte
	mr       *qp.MR
}

func (e *rdmaEnd) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

type rdmaPair struct {
	a, b *rdmaEnd
	pmtu int
}

func (p *rdmaPair) Close() {
	p.a.dev.Close()
	p.b.dev.Close()
}

// setupTimeout bounds opening and connecting a pair of devices.
const setupTimeout = 10 * time.Second

// openRDMA opens a device on each end of pair with backend and connects
// one RC QP pair at the smaller path MTU. With busy, the devices are in
// busy-poll mode (qp.InterfaceOptions.BusyPoll): no receive or timer goroutine,
// each end's CQ polling drives its device.
func openRDMA(pair *netns.Pair, backend string, depth int, busy bool) (*rdmaPair, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	mk := func(s netns.Side) (*rdmaEnd, error) {
		e := &rdmaEnd{}
		err := pair.Do(s, func() error {
			var err error
			e.dev, e.info, err = qp.OpenInterface(ctx, pair.End(s).Ifname, qp.InterfaceOptions{Backend: backend, Logger: logger, Seed: int64(s) + 1,
				BusyPoll: busy})
			return err
		})
		return e, err
	}
	a, err := mk(netns.A)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	b, err := mk(netns.B)
	if err != nil {
		a.dev.Close()
		return nil, fmt.Errorf("side B: %w", err)
	}
	p := &rdmaPair{a: a, b: b}
	// The QPs come from the shared two-endpoint harness, connected at the
	// smaller path MTU.
	o := sim.QPOptions{BufSize: bufSize, Access: qp.LocalWrite | qp.RemoteWrite | qp.RemoteRead, CQSize: 1 << 16,
		Caps: qp.Caps{MaxSendWR: max(depth, 64), MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
	oa, ob := o, o
	oa.Connect.SQPSN, ob.Connect.SQPSN = 0x100, 0x200
	ea, eb, err := sim.ConnectQPs(ctx, a.dev, b.dev, oa, ob)
	if err != nil {
		p.Close()
		return nil, err
	}
	for _, x := range []struct {
		e *rdmaEnd
		q *sim.QPEnd
	}{{a, ea}, {b, eb}} {
		x.e.scq, x.e.rcq, x.e.q, x.e.buf, x.e.mr = x.q.SendCQ, x.q.RecvCQ, x.q.QP, x.q.Buf, x.q.MR
	}
	p.pmtu = min(a.dev.ActiveMTU(), b.dev.ActiveMTU()).Bytes()
	return p, nil
}

type throughput struct {
	msgs      int
	bytes     int64
	elapsed   time.Duration
	allocsPer float64 // process-wide heap allocations per message
}

func (t throughput) bitsPerSec() float64 { return float64(t.bytes) * 8 / t.elapsed.Seconds() }
func (t throughput) msgsPerSec() float64 { return float64(t.msgs) / t.elapsed.Seconds() }

// stream keeps depth signalled WRs of size bytes outstanding from a to b
// (RDMA WRITE into b's remote half, or RDMA READ from it) until limit.d has
// passed or limit.n messages were posted, and waits for the last
// completion. Completions are taken with CQ.Wait (sleeping when empty).
func stream(p *rdmaPair, op qp.WROpcode, size, depth int, lim limit) (throughput, error) {
	a, b := p.a, p.b
	if op == qp.WRRDMARead {
		depth = min(depth, 16) // max_rd_atomic (ConnectOptions default 16)
	}
	wr := &qp.SendWR{Opcode: op, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, size)},
		RemoteAddr: b.mr.IOVA() + half, RKey: b.mr.RKey()}
	wcs := make([]qp.WC, depth)
	list := make([]qp.SendWR, depth)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	deadline := start.Add(lim.d)
	posted, done := 0, 0
	post := func() error {
		wr.WRID = uint64(posted)
		if err := a.q.PostSend(wr); err != nil {
			return fmt.Errorf("post #%d: %w", posted, err)
		}
		posted++
		return nil
	}
	for posted < depth && posted < lim.n {
		if err := post(); err != nil {
			return throughput{}, err
		}
	}
	// One context for the whole cell: a per-call WithTimeout would put the
	// benchmark's own allocations into the allocs/msg figure.
	ctx, cancel := context.WithTimeout(context.Background(), lim.d+stallTime)
	defer cancel()
	for done < posted {
		n, err := a.scq.Wait(ctx, wcs)
		if err != nil {
			return throughput{}, fmt.Errorf("%d of %d completed: %w", done, posted, err)
		}
		for _, wc := range wcs[:n] {
			if err := wc.Err(); err != nil {
				return throughput{}, err
			}
			done++
		}
		// Refill the window with one PostSendList: one batch write for the
		// n WRs instead of one system call each.
		if now := time.Now(); now.Before(deadline) {
			k := min(n, lim.n-posted)
			for j := range k {
				list[j] = *wr
				list[j].WRID = uint64(posted + j)
			}
			if k > 0 {
				m, err := a.q.PostSendList(list[:k])
				posted += m
				if err != nil {
					return throughput{}, fmt.Errorf("post #%d: %w", posted, err)
				}
			}
		}
	}
	el := time.Since(start)
	runtime.ReadMemStats(&ms1)
	return throughput{msgs: done, bytes: int64(done) * int64(size), elapsed: el,
		allocsPer: float64(ms1.Mallocs-ms0.Mallocs) / float64(done)}, nil
}

type latency struct {
	n        int
	p50, p99 time.Duration
}

// pingPong measures round trips of 64-byte RDMA WRITE_WITH_IMM messages: a
// writes into b's memory, b's receive completion triggers b's write back,
// a's receive completion ends the round trip. In busy mode (p's devices in
// busy-poll mode) each end's goroutine spins on CQ.Poll, which drives its
// device (yielding the processor between looks, runtime.Gosched): two
// spinning goroutines, one per device. Otherwise CQ.Wait sleeps until the
// device's receive goroutine delivers the completion.
func pingPong(p *rdmaPair, busy bool, lim limit) (latency, error) {
	a, b := p.a, p.b
	const size = 64
	for _, e := range []*rdmaEnd{a, b} {
		for range latRecvs {
			if err := e.q.PostRecv(&qp.RecvWR{}); err != nil {
				return latency{}, err
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), lim.d+stallTime)
	defer cancel()
	var stop atomic.Bool
	recv := func(e *rdmaEnd, busy bool) error {
		var wc [1]qp.WC
		deadline := time.Now().Add(stallTime)
		for {
			var n int
			var err error
			if busy {
				n, err = e.rcq.Poll(wc[:])
				if n == 0 && err == nil {
					if stop.Load() {
						return context.Canceled
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("no receive completion in %v", stallTime)
					}
					runtime.Gosched()
					continue
				}
			} else {
				n, err = e.rcq.Wait(ctx, wc[:])
			}
			if err != nil {
				return err
			}
			if err := wc[0].Err(); err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			// Drain the send completions of our own writes (not timed).
			var s [8]qp.WC
			for {
				k, _ := e.scq.Poll(s[:])
				if k == 0 {
					break
				}
			}
			return e.q.PostRecv(&qp.RecvWR{})
		}
	}
	write := func(from, to *rdmaEnd) error {
		return from.q.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWriteWithImm, Flags: qp.SendSignaled,
			SGL: []qp.SGE{from.sge(0, size)}, RemoteAddr: to.mr.IOVA() + half, RKey: to.mr.RKey(), Imm: 1})
	}
	var wg sync.WaitGroup
	var echoErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if err := recv(b, busy); err != nil {
				if !stop.Load() {
					echoErr = err
				}
				return
			}
			if err := write(b, a); err != nil {
				echoErr = err
				return
			}
		}
	}()
	var rtts []time.Duration
	start := time.Now()
	var err error
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if err = write(a, b); err != nil {
			break
		}
		if err = recv(a, busy); err != nil {
			break
		}
		rtts = append(rtts, time.Since(t0))
	}
	stop.Store(true)
	cancel()
	wg.Wait()
	if err == nil {
		err = echoErr
	}
	if err != nil {
		return latency{}, err
	}
	return summarize(rtts), nil
}

func summarize(rtts []time.Duration) latency {
	if len(rtts) == 0 {
		return latency{}
	}
	slices.Sort(rtts)
	return latency{n: len(rtts), p50: rtts[len(rtts)/2], p99: rtts[len(rtts)*99/100]}
}
