//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// The bw cell with its responder in a process of its own (-bw-peer
// process, the default): perftest's ib_write_bw and ib_read_bw run client
// and server as two processes, and so does the raw rate's reference
// (rawsink.go), so that each end has a Go runtime (GOMAXPROCS, scheduler,
// GC) of its own and gets the scheduler's share a process gets. Device
// B, its CQs and a QP per stream live in the child (bench -child peer-bw,
// started in namespace B); the parent opens device A in namespace A and
// runs bwRun as in the one-process shape. The child's CPU time over each
// stream (getrusage, from the parent's "mark" to its "end") and its
// context switches are added to the parent's, so CPU per message covers
// both ends as before; the heap allocations per message are the parent's
// (A's end and the application) only.
//
// The child's protocol, one line each way:
//
//	child:  bw RKEY VADDR MTU            (ready: its buffer's target half)
//	parent: qp                           child: qp QPN
//	parent: conn QPN-A PSN-A PSN-B GID-A MTU
//	                                     child: ok   (connected)
//	parent: mark                         child: ok   (CPU and counters marked)
//	parent: end                          child: end CPU-NS CSW SNAP (the QP destroyed)
//	parent: stop, or stdin's end         the child exits

// endSnap is one end's link and engine counters (wireSnap's half).
type endSnap struct {
	tx, wake, txk, full, coal, retrans, rxDrop, bad uint64
}

func snapEnd(dev *qp.Device) endSnap {
	s := dev.Stats()
	return endSnap{tx: s.Link.TxFrames, wake: s.Link.Wakeups, txk: s.Link.TxKicks, full: s.Link.RingFull,
		coal: s.Counters[qp.Counter(transport.CntAckCoalesced)], retrans: s.Counters[qp.CntRetransmittedPkts],
		rxDrop: s.Link.RxDrops, bad: dev.RxStats().BadICRC}
}

func (s endSnap) sub(s0 endSnap) endSnap {
	return endSnap{s.tx - s0.tx, s.wake - s0.wake, s.txk - s0.txk, s.full - s0.full, s.coal - s0.coal,
		s.retrans - s0.retrans, s.rxDrop - s0.rxDrop, s.bad - s0.bad}
}

const endSnapFormat = "%d %d %d %d %d %d %d %d"

func (s endSnap) format() string {
	return fmt.Sprintf(endSnapFormat, s.tx, s.wake, s.txk, s.full, s.coal, s.retrans, s.rxDrop, s.bad)
}

// wireOf is the wireSnap of A's and B's counters.
func wireOf(a, b endSnap) wireSnap {
	return wireSnap{txA: a.tx, txB: b.tx, kickA: a.wake, kickB: b.wake, txkA: a.txk, txkB: b.txk,
		fullA: a.full, fullB: b.full, coalB: b.coal, retransA: a.retrans, rxDropA: a.rxDrop, rxDrB: b.rxDrop,
		badA: a.bad, badB: b.bad}
}

// bwRemote is device A in this process and device B in a peer-bw child.
type bwRemote struct {
	pair  *netns.Pair
	a     *rdmaEnd
	peer  *peerProc
	rkey  uint32
	vaddr uint64
	mtu   qp.MTU
	psn   uint32
}

// openBWPeer opens device A (in namespace A, labelled end=A for
// -cpuprofile) and starts the peer-bw child in namespace B.
func openBWPeer(pair *netns.Pair, backend string) (*bwRemote, error) {
	a, err := openEnd(pair, netns.A, backend, false, nil)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	peer, err := startPeer(pair, "-child", "peer-bw", "-backends", backend, "-peer-ifname", pair.B.Ifname)
	if err != nil {
		a.dev.Close()
		return nil, err
	}
	r := &bwRemote{pair: pair, a: a, peer: peer, psn: 0x100}
	l, ok := peer.lines.next(setupTimeout + 5*time.Second)
	var mtuB int
	if !ok {
		err = errors.New("the peer-bw process did not start")
	} else if _, err = fmt.Sscanf(l, "bw %d %d %d", &r.rkey, &r.vaddr, &mtuB); err != nil {
		err = fmt.Errorf("peer-bw: %s", strings.TrimPrefix(l, "error "))
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	r.mtu = min(a.dev.ActiveMTU(), qp.MTUFromBytes(mtuB))
	return r, nil
}

func (r *bwRemote) Close() {
	r.peer.send("stop")
	r.peer.finish()
	r.a.dev.Close()
}

// ask sends a command line to the child and returns its answer, which must
// start with want.
func (r *bwRemote) ask(want string, d time.Duration, format string, a ...any) (string, error) {
	if err := r.peer.send(format, a...); err != nil {
		return "", err
	}
	l, ok := r.peer.lines.next(d)
	if !ok {
		return "", fmt.Errorf("peer-bw: no answer to %q", strings.Fields(format)[0])
	}
	if !strings.HasPrefix(l, want) {
		return "", fmt.Errorf("peer-bw: %s", strings.TrimPrefix(l, "error "))
	}
	return l, nil
}

// stream is bw with B's end in the child: one new QP pair, perftest's
// shape. It returns the counters of both ends over the stream (w0, w1).
func (r *bwRemote) stream(op qp.WROpcode, size int, lim limit) (t throughput, w0, w1 wireSnap, err error) {
	a := r.a
	sa, err := a.dev.CreateCQ(bwTxDepth + 16)
	if err != nil {
		return t, w0, w1, err
	}
	ra, err := a.dev.CreateCQ(16)
	if err != nil {
		return t, w0, w1, err
	}
	caps := qp.Caps{MaxSendWR: bwTxDepth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	q, err := a.pd.CreateQP(qp.InitAttr{SendCQ: sa, RecvCQ: ra, Cap: caps})
	if err != nil {
		return t, w0, w1, err
	}
	defer q.Destroy()
	l, err := r.ask("qp ", setupTimeout, "qp")
	if err != nil {
		return t, w0, w1, err
	}
	var qpnB uint32
	if _, err := fmt.Sscanf(l, "qp %d", &qpnB); err != nil {
		return t, w0, w1, fmt.Errorf("peer-bw: %q: %w", l, err)
	}
	psnA, psnB := r.psn, r.psn+0x1000
	r.psn = (r.psn + 1) & 0x7FFFF
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	err = q.Connect(ctx, qp.Remote{QPN: qpnB, PSN: psnB, GID: r.pair.B.Addr, MTU: r.mtu}, qp.ConnectOptions{SQPSN: psnA})
	cancel()
	if err != nil {
		return t, w0, w1, err
	}
	if _, err := r.ask("ok", setupTimeout, "conn %d %d %d %s %d", q.QPN(), psnA, psnB, r.pair.A.Addr, r.mtu.Bytes()); err != nil {
		return t, w0, w1, err
	}
	if _, err := r.ask("ok", setupTimeout, "mark"); err != nil {
		return t, w0, w1, err
	}
	a0 := snapEnd(a.dev)
	wr := qp.SendWR{Opcode: op, SGL: []qp.SGE{a.sge(0, size)}, RemoteAddr: r.vaddr, RKey: r.rkey}
	t, err = bwRun([]*qp.QP{q}, sa, []qp.SendWR{wr}, bwTxDepth, bwCQMod, size, lim)
	a1 := snapEnd(a.dev)
	l, aerr := r.ask("end ", stallTime+5*time.Second, "end")
	if err != nil {
		return t, w0, w1, err
	}
	if aerr != nil {
		return t, w0, w1, aerr
	}
	var ns, csw int64
	var b endSnap
	if _, err := fmt.Sscanf(l, "end %d %d "+endSnapFormat, &ns, &csw,
		&b.tx, &b.wake, &b.txk, &b.full, &b.coal, &b.retrans, &b.rxDrop, &b.bad); err != nil {
		return t, w0, w1, fmt.Errorf("peer-bw: %q: %w", l, err)
	}
	t.peerCPU = time.Duration(ns).Seconds()
	t.cpu.proc += t.peerCPU
	t.cpu.csw += csw
	return t, wireOf(a0, endSnap{}), wireOf(a1, b), nil
}

// bwPeerChild is the peer-bw child: device B on ifname (see above).
func bwPeerChild(ifname, backend string) error {
	in := newLineReader(os.Stdin)
	e, err := openEndOn(func(fn func() error) error { return fn() }, ifname, backend, false, 2, nil)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	sb, err := e.dev.CreateCQ(bwTxDepth + 16)
	if err != nil {
		return err
	}
	rb, err := e.dev.CreateCQ(16)
	if err != nil {
		return err
	}
	fmt.Printf("bw %d %d %d\n", e.mr.RKey(), e.mr.IOVA()+half, e.dev.ActiveMTU().Bytes())
	var q *qp.QP
	defer func() {
		if q != nil {
			q.Destroy()
		}
	}()
	var c0 cpuMark
	var s0 endSnap
	for {
		l, ok := in.next(time.Minute)
		if !ok || l == "stop" {
			return nil
		}
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "qp":
			if q != nil {
				q.Destroy()
			}
			caps := qp.Caps{MaxSendWR: bwTxDepth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
			if q, err = e.pd.CreateQP(qp.InitAttr{SendCQ: sb, RecvCQ: rb, Cap: caps}); err != nil {
				return err
			}
			fmt.Printf("qp %d\n", q.QPN())
		case "conn":
			var qpnA, psnA, psnB uint32
			var gid string
			var mtu int
			if _, err := fmt.Sscanf(l, "conn %d %d %d %s %d", &qpnA, &psnA, &psnB, &gid, &mtu); err != nil {
				return fmt.Errorf("connection line %q: %w", l, err)
			}
			addr, err := netip.ParseAddr(gid)
			if err != nil {
				return err
			}
			if q == nil {
				return errors.New("conn before qp")
			}
			ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
			err = q.Connect(ctx, qp.Remote{QPN: qpnA, PSN: psnA, GID: addr, MTU: qp.MTUFromBytes(mtu)}, qp.ConnectOptions{SQPSN: psnB})
			cancel()
			if err != nil {
				return err
			}
			fmt.Println("ok")
		case "mark":
			c0, s0 = markCPU(), snapEnd(e.dev)
			fmt.Println("ok")
		case "end":
			c1, s1 := markCPU(), snapEnd(e.dev)
			if q != nil {
				q.Destroy()
				q = nil
			}
			fmt.Printf("end %d %d %s\n", (c1.proc - c0.proc).Nanoseconds(), c1.csw-c0.csw, s1.sub(s0).format())
		default:
			return fmt.Errorf("unknown command %q", l)
		}
	}
}
