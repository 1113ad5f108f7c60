//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// The mq cell: multi-queue devices (qp.InterfaceOptions.Queues), 1 against
// 2 queues, AF_XDP on a veth pair made with numtxqueues 2 numrxqueues 2.
// Both configurations run the same application: mqSenders goroutines, each
// streaming 64 B WRITEs round-robin over its own half of the QPs into its
// own CQ (bwRun, perftest's loop); only the device's queue count differs.
// The two run alternately, 1 then 2 queues in odd repetitions, 2 then 1 in
// even ones, so the machine's load drifts over both alike. Measured: the
// aggregate message rate, and the CPU per message (the whole machine's busy
// CPU and this process's, which holds both ends) — the counts that say
// whether a queue's reader costs more than it brings.

const (
	mqSenders = 2
	mqMaxQ    = 2
)

func mqKey(q int, what string) key {
	return key{qp.BackendAFXDP, 1500, fmt.Sprintf("mq.q%d.%s", q, what)}
}

// newPairQueues is newPair with queues transmit and receive queues on each
// veth end.
func newPairQueues(mtu int, prefix string, queues int) (*netns.Pair, error) {
	cleanup.mu.Lock()
	defer cleanup.mu.Unlock()
	p, err := netns.New(netns.Options{MTU: mtu, Prefix: prefix, Queues: queues})
	if err != nil {
		return nil, err
	}
	cleanup.pairs[p] = true
	return p, nil
}

// measureMQ is one repetition of the mq cell (AF_XDP, MTU 1500).
func measureMQ(rep int, c *config, res *results) {
	tag := fmt.Sprintf("mq rep %d", rep+1)
	pair, err := newPairQueues(1500, "goroce-mq", mqMaxQ)
	if err != nil {
		progress("%s: namespaces: %v", tag, err)
		for q := 1; q <= mqMaxQ; q++ {
			res.fail(mqKey(q, "mps"), err)
		}
		return
	}
	defer cleanup.closePair(pair)
	order := []int{1, 2}
	if rep%2 == 1 {
		order = []int{2, 1}
	}
	ring := qpsRings(c.mqQPs * c.qpsDepth)
	for _, nq := range order {
		p, err := openRDMAWith(pair, qp.BackendAFXDP, false, func(o *qp.InterfaceOptions) {
			ring.tune(o)
			o.Queues = nq
		})
		if err != nil {
			progress("%s: %d queue(s): devices: %v", tag, nq, err)
			res.fail(mqKey(nq, "mps"), err)
			continue
		}
		t, perQueue, err := mqRun(p, c.mqQPs, c.qpsDepth, c.qpsCQMod, limit{c.cell, maxMsgs})
		p.Close()
		record(res, mqKey(nq, "mps"), t.msgsPerSec(), err)
		if err == nil && t.cpuErr == nil && t.msgs > 0 {
			m := float64(t.msgs)
			res.add(mqKey(nq, "cpu"), t.cpu.machine/m*1e6)
			res.add(mqKey(nq, "proc"), t.cpu.proc/m*1e6)
		}
		progress("%s: %d queue(s), %d QPs, %d senders: %s msg/s%s; frames sent per queue (A, B): %s (%v)", tag, nq,
			c.mqQPs, mqSenders, fmtRate(t.msgsPerSec()), t.cpuPerMsg(), perQueue, err)
	}
}

// mqRun connects n QP pairs (mqSenders groups, each with its own CQs) and
// runs bwRun on every group at once; the result sums the groups' messages
// over the longest group's time, with the CPU of the whole run.
func mqRun(p *rdmaPair, n, depth, cqMod int, lim limit) (throughput, string, error) {
	type group struct {
		c      cqs
		qa, qb []*qp.QP
		tmpl   []qp.SendWR
		t      throughput
		err    error
	}
	groups := make([]*group, mqSenders)
	defer func() {
		for _, g := range groups {
			if g != nil {
				for _, q := range append(g.qa, g.qb...) {
					q.Destroy()
				}
			}
		}
	}()
	per := max(n/mqSenders, 1)
	for i := range groups {
		g := &group{}
		groups[i] = g
		var err error
		if g.c, err = p.newCQs(per*depth + 16); err != nil {
			return throughput{}, "", err
		}
		if g.qa, g.qb, err = p.connect(per, depth, g.c); err != nil {
			return throughput{}, "", fmt.Errorf("connecting %d QPs: %w", per, err)
		}
		for j := range g.qa {
			off := ((i*per + j) % 1024) * sizeSmall
			g.tmpl = append(g.tmpl, qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{p.a.sge(off, sizeSmall)},
				RemoteAddr: p.b.mr.IOVA() + half + uint64(off), RKey: p.b.mr.RKey()})
		}
	}
	sa0, sb0 := p.a.dev.Stats(), p.b.dev.Stats()
	c0 := markCPU()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.t, g.err = bwRun(g.qa, g.c.sa, g.tmpl, depth, cqMod, sizeSmall, limit{lim.d, lim.n / mqSenders})
		}()
	}
	wg.Wait()
	cpu, cpuErr := markCPU().since(c0)
	sa1, sb1 := p.a.dev.Stats(), p.b.dev.Stats()
	var t throughput
	var errs []error
	for _, g := range groups {
		t.msgs += g.t.msgs
		t.bytes += g.t.bytes
		t.elapsed = max(t.elapsed, g.t.elapsed)
		errs = append(errs, g.err)
	}
	t.cpu, t.cpuErr = cpu, cpuErr
	return t, queueFrames(sa0, sa1) + ", " + queueFrames(sb0, sb1), errors.Join(errs...)
}

// queueFrames lists the frames each queue sent between two snapshots.
func queueFrames(s0, s1 qp.Stats) string {
	if len(s1.Queues) == 0 {
		return fmt.Sprint(s1.Link.TxFrames - s0.Link.TxFrames)
	}
	var f []string
	for i := range s1.Queues {
		f = append(f, fmt.Sprint(s1.Queues[i].TxFrames-s0.Queues[i].TxFrames))
	}
	return strings.Join(f, "/")
}

// writeMQ is the mq cell's table.
func writeMQ(w io.Writer, r *results, in runInfo) {
	if _, err := r.get(mqKey(1, "mps")); errors.Is(err, errNotMeasured) {
		return
	}
	fmt.Fprintf(w, "## Multi-queue devices: 1 and 2 queues\n\n")
	fmt.Fprintf(w, "AF_XDP, MTU 1500, a veth pair with 2 queues; %d QP pairs, 64 B WRITEs, each QP at most %d outstanding, "+
		"one signalled per %d, from %d sender goroutines (each over its own half of the QPs and its own CQ), the same "+
		"application for both; only qp.InterfaceOptions.Queues differs. Runs alternate (1, 2 / 2, 1). CPU per message: "+
		"the whole machine's busy CPU and this process's (both ends), in µs.\n\n", in.mqQPs, in.qpsDepth, in.qpsCQMod, mqSenders)
	fmt.Fprintln(w, "| queues | aggregate msg/s | vs 1 queue | machine CPU per msg | process CPU per msg |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for q := 1; q <= mqMaxQ; q++ {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", q, r.cell(mqKey(q, "mps"), fmtRate), r.ratioCell(mqKey(q, "mps"), mqKey(1, "mps")),
			r.cell(mqKey(q, "cpu"), fmtNum), r.cell(mqKey(q, "proc"), fmtNum))
	}
	fmt.Fprintln(w)
}
