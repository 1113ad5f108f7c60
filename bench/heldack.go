//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// The heldack cell (issue 24 item 10): the requester's completion latency
// when the responder's application is one-sided, with the held ACK
// (qp/ackhold.go, the default) and with the hold off on the responder's
// device (Device.SetAckHold(false): every receive batch ACKs at its end).
// Sleeping devices at the latency MTU, both ends in this process. A posts
// one signalled 8 B work request at a time (depth 1: each completion waits
// for its own ACK, the case the hold could delay most) and sleeps in
// CQ.Wait; the latency is from the post to CQ.Wait's return. B's
// application, per shape:
//
//   - write.idle: nothing (a WRITE target nobody watches);
//   - write.wait: loops on MR.WaitWrite (a target waiting for a flag);
//   - write.work: the same, working heldAckWork (a spin) after each
//     arrival before it waits again: a target that takes what arrives and
//     does something with it, never posting;
//   - send.recv: A SENDs; B keeps 64 receives posted and loops on CQ.Wait,
//     reposting each receive it consumed (a receiver that only posts
//     receives);
//   - read.idle: A READs 8 B from B, whose application does nothing (READ
//     responses are never held: the control).
//
// Hold and immediate alternate, each shape both ways per repetition.
const (
	mHeldAck    = "heldack."
	heldAckWork = 30 * time.Microsecond
	heldAckRecv = 64
)

var heldAckShapes = []string{"write.idle", "write.wait", "write.work", "send.recv", "read.idle"}

func measureHeldAck(pair *netns.Pair, mtu int, b, tag string, rep int, c *config, res *results) {
	lim := limit{c.cell, maxRTTs}
	res.addSection(section{backend: b, mtu: mtu})
	for _, shape := range heldAckShapes {
		order := []bool{true, false}
		if rep%2 == 1 {
			order = []bool{false, true}
		}
		for _, hold := range order {
			runtime.GC()
			lats, err := heldAckRun(pair, b, shape, hold, lim)
			recordLat(res, key{b, mtu, heldAckMetric(shape, hold)}, lats, err)
			progress("%s: held-ACK %s hold=%v: completion %s (%v)", tag, shape, hold, latLine(lats), err)
		}
	}
}

func heldAckMetric(shape string, hold bool) string {
	if hold {
		return mHeldAck + shape + ".hold"
	}
	return mHeldAck + shape + ".now"
}

// heldAckRun opens a device pair, sets B's hold, connects one QP pair and
// runs one shape until lim; it returns A's completion latencies.
func heldAckRun(pair *netns.Pair, backend, shape string, hold bool, lim limit) ([]time.Duration, error) {
	p, err := openRDMA(pair, backend, false)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	p.b.dev.SetAckHold(hold)
	c, err := p.newCQs(heldAckRecv + 4)
	if err != nil {
		return nil, err
	}
	qa, qb, err := p.connectCaps(qp.Caps{MaxSendWR: 4, MaxRecvWR: heldAckRecv, MaxSendSGE: 1, MaxRecvSGE: 1}, c)
	if err != nil {
		return nil, err
	}
	defer qa.Destroy()
	defer qb.Destroy()

	ctx, cancel := context.WithTimeout(context.Background(), lim.d+stallTime)
	defer cancel()
	var wg sync.WaitGroup
	var bErr error
	bctx, bstop := context.WithCancel(ctx)
	defer func() { bstop(); wg.Wait() }()
	wr := qp.SendWR{Flags: qp.SendSignaled, SGL: []qp.SGE{p.a.sge(0, latSize)}, RemoteAddr: p.b.mr.IOVA() + half, RKey: p.b.mr.RKey()}
	switch shape {
	case "write.idle":
		wr.Opcode = qp.WRRDMAWrite
	case "write.wait", "write.work":
		wr.Opcode = qp.WRRDMAWrite
		work := time.Duration(0)
		if shape == "write.work" {
			work = heldAckWork
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := p.b.mr.Writes()
			for {
				var err error
				if seen, err = p.b.mr.WaitWrite(bctx, seen); err != nil {
					if bctx.Err() == nil {
						bErr = err
					}
					return
				}
				for t0 := time.Now(); time.Since(t0) < work; {
				}
			}
		}()
	case "send.recv":
		wr.Opcode = qp.WRSend
		recv := func(i uint64) error {
			return qb.PostRecv(&qp.RecvWR{WRID: i, SGL: []qp.SGE{p.b.sge(half+int(i)*64, 64)}})
		}
		for i := range uint64(heldAckRecv) {
			if err := recv(i); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc [8]qp.WC
			for {
				n, err := c.rb.Wait(bctx, wc[:])
				if err != nil {
					if bctx.Err() == nil {
						bErr = err
					}
					return
				}
				for _, w := range wc[:n] {
					if err := w.Err(); err != nil {
						bErr = err
						return
					}
					if err := recv(w.WRID); err != nil {
						bErr = err
						return
					}
				}
			}
		}()
	case "read.idle":
		wr.Opcode = qp.WRRDMARead
	default:
		return nil, fmt.Errorf("unknown shape %q", shape)
	}
	// The first posts find B's driver goroutine on the link; B's own wait
	// takes it over after a pass that found the waiter asleep.
	const warm = 50
	lats := make([]time.Duration, 0, 4096)
	var wc [1]qp.WC
	start := time.Now()
	for i := 0; i < lim.n+warm && time.Since(start) < lim.d; i++ {
		t0 := time.Now()
		if err := qa.PostSend(&wr); err != nil {
			return nil, err
		}
		n, err := c.sa.Wait(ctx, wc[:])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, errors.New("CQ.Wait returned nothing")
		}
		if err := wc[0].Err(); err != nil {
			return nil, err
		}
		if i >= warm {
			lats = append(lats, time.Since(t0))
		}
	}
	bstop()
	wg.Wait()
	if bErr != nil {
		return nil, fmt.Errorf("responder: %w", bErr)
	}
	return lats, nil
}

// connectCaps connects one RC QP pair with caps on c (connect's with the
// caps given).
func (p *rdmaPair) connectCaps(caps qp.Caps, c cqs) (*qp.QP, *qp.QP, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	a, err := p.a.pd.CreateQP(qp.InitAttr{SendCQ: c.sa, RecvCQ: c.ra, Cap: caps})
	if err != nil {
		return nil, nil, err
	}
	b, err := p.b.pd.CreateQP(qp.InitAttr{SendCQ: c.sb, RecvCQ: c.rb, Cap: caps})
	if err != nil {
		a.Destroy()
		return nil, nil, err
	}
	psnA, psnB := p.psn, p.psn+0x1000
	p.psn = (p.psn + 1) & 0x7FFFF
	err = a.Connect(ctx, qp.Remote{QPN: b.QPN(), PSN: psnB, GID: p.pair.B.Addr, MTU: p.mtu}, qp.ConnectOptions{SQPSN: psnA})
	if err == nil {
		err = b.Connect(ctx, qp.Remote{QPN: a.QPN(), PSN: psnA, GID: p.pair.A.Addr, MTU: p.mtu}, qp.ConnectOptions{SQPSN: psnB})
	}
	if err != nil {
		a.Destroy()
		b.Destroy()
		return nil, nil, err
	}
	return a, b, nil
}

// writeHeldAck is the heldack cell's table: A's completion latency with
// B's hold on against B's immediate ACK, per shape.
func writeHeldAck(w io.Writer, r *results) {
	var rows []versusRow
	for _, s := range heldAckShapes {
		for _, q := range []string{"p50", "mean", "p99"} {
			rows = append(rows, versusRow{s + ", completion µs, " + q, heldAckMetric(s, true) + "." + q, heldAckMetric(s, false) + "." + q, fmtMicros})
		}
	}
	writeVersus(w, r, "Held ACK: the requester's completion latency, one-sided responder",
		"A posts one signalled 8 B WRITE (SEND, READ) at a time and sleeps in CQ.Wait; B's application does nothing "+
			"(idle), takes each WRITE in MR.WaitWrite (wait) and works 30 µs after it (work), or only reposts receives (recv). "+
			"held: B's device as shipped (qp/ackhold.go); immediate: Device.SetAckHold(false) on B. Alternating per repetition.",
		"held | immediate | held/immediate", rows)
}
