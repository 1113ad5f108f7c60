//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// latSize is write_lat's message in bench: 8 bytes, the last carrying the
// iteration count.
const latSize = 8

// latEnd is one end of write_lat's loop: its device and buffer, its QP
// (send queue depth 1, as write_lat's tx-depth) and the QP's send CQ.
type latEnd struct {
	e    *rdmaEnd
	q    *qp.QP
	scq  *qp.CQ
	busy bool
	pmtu int
	// first is the peer's first PSN. The end that waits for the peer's
	// first WRITE must know it before the peer may start: a Query then
	// can see that WRITE already executed, and the loop would wait for
	// the next one, which the peer sends only after our answer.
	first wire.PSN
}

// latLoop is one end of write_lat (cmd/goroce's latWrite): RDMA WRITE
// latSize bytes to the peer's target (rkey, vaddr), the last byte carrying
// the count; wait for the peer's WRITE (the responder's expected PSN moving
// past it, then the byte) before writing the next; wait for each WRITE's
// completion. The server writes first. post, when set, is told each post's
// time and ends the loop by returning false. stop ends it from outside
// (errStopped).
//
// Waits: a normal device sleeps in CQ.Wait for the completion and in
// MR.WaitWrite for the arrival (goroce write_lat -e); a busy-poll device
// spins on CQ.Poll and Device.Poll, which yield the OS thread every 4th
// fruitless poll, and lets other goroutines run (runtime.Gosched) only
// every 64 looks: a Gosched at each look wakes an idle P's thread (futex)
// every time, which then competes for the CPUs with the peer (qp/busypoll.go).
func latLoop(ctx context.Context, l latEnd, rkey uint32, vaddr uint64, server bool, post func(time.Time) bool, stop *atomic.Bool) error {
	wr := qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{l.e.sge(0, latSize)},
		RemoteAddr: vaddr, RKey: rkey}
	npkts := uint32(max((latSize+l.pmtu-1)/l.pmtu, 1))
	peerPSN := l.first
	pollOff := half + latSize - 1
	var wc [1]qp.WC
	for cnt := uint64(1); ; cnt++ {
		if !(cnt == 1 && server) {
			peerPSN = peerPSN.Add(npkts)
			if err := waitArrival(ctx, l, peerPSN, stop); err != nil {
				return err
			}
			want := byte(cnt) // the peer's count: the server writes first
			if server {
				want = byte(cnt - 1)
			}
			if got := l.e.buf[pollOff]; got != want {
				return fmt.Errorf("the peer's WRITE ended with %d, not its count %d", got, want)
			}
		}
		if post != nil && !post(time.Now()) {
			return nil
		}
		if stop.Load() {
			return errStopped
		}
		l.e.buf[latSize-1] = byte(cnt)
		if err := l.q.PostSend(&wr); err != nil {
			return fmt.Errorf("post %d: %w", cnt, err)
		}
		if err := waitSend(ctx, l.busy, l.scq, wc[:], stop); err != nil {
			return err
		}
		if err := wc[0].Err(); err != nil {
			return err
		}
	}
}

var errStopped = errors.New("stopped")

// waitArrival waits until q's responder expects a PSN at or after want:
// the peer's WRITE has executed (QP.Query takes the device lock the WRITE
// ran under, so the buffer may be read afterwards). A normal device sleeps
// in MR.WaitWrite between looks (goroce write_lat -e does the same); a
// busy-poll device spins on Device.Poll. The busy waits read the clock
// for their stall check only once they have looked 64 times: a clock read
// costs about 100 ns on this VM (kvm-clock), and one per wait sat on the
// busy round trip's path twice per hop, which perftest's loop does not pay.
func waitArrival(ctx context.Context, l latEnd, want wire.PSN, stop *atomic.Bool) error {
	var t0 time.Time // the stall check's clock, read from the 64th look on
	for spins := 1; ; spins++ {
		seen := l.e.mr.Writes() // before the look: a WRITE after it moves the count
		if l.q.Query().RQPSN.Diff(want) >= 0 {
			return nil
		}
		if !l.busy {
			if _, err := l.e.mr.WaitWrite(ctx, seen); err != nil {
				if stop.Load() {
					return errStopped
				}
				return err
			}
			continue
		}
		l.e.dev.Poll() // yields the OS thread every 4th fruitless poll
		if spins%64 == 0 {
			if stop.Load() {
				return errStopped
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallTime {
				return fmt.Errorf("no WRITE from the peer in %v", stallTime)
			}
			runtime.Gosched()
		}
	}
}

func waitSend(ctx context.Context, busy bool, cq *qp.CQ, wc []qp.WC, stop *atomic.Bool) error {
	if !busy {
		n, err := cq.Wait(ctx, wc)
		if err != nil && stop.Load() {
			return errStopped
		}
		if err == nil && n == 0 {
			return errors.New("CQ.Wait returned nothing")
		}
		return err
	}
	var t0 time.Time // as in waitArrival
	for spins := 1; ; spins++ {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return err
		}
		if spins%64 == 0 {
			if stop.Load() {
				return errStopped
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallTime {
				return fmt.Errorf("no send completion in %v", stallTime)
			}
			runtime.Gosched()
		}
	}
}

// latTimer is the client's post callback: it collects post times until
// lim is reached.
type latTimer struct {
	lim   limit
	start time.Time
	posts []time.Time
}

func (t *latTimer) post(now time.Time) bool {
	if t.start.IsZero() {
		t.start = now
	}
	t.posts = append(t.posts, now)
	return len(t.posts) <= t.lim.n && now.Sub(t.start) < t.lim.d
}

// rtts are the full round trips between successive posts.
func (t *latTimer) rtts() ([]time.Duration, error) {
	if len(t.posts) < 2 {
		return nil, errors.New("no round trip completed")
	}
	r := make([]time.Duration, len(t.posts)-1)
	for i := range r {
		r[i] = t.posts[i+1].Sub(t.posts[i])
	}
	return r, nil
}

// writeLat runs both ends of write_lat in this process on a new QP pair of
// p (-lat-peer goroutine): B's end in a goroutine, A's timed.
func writeLat(p *rdmaPair, lim limit, ready func()) ([]time.Duration, error) {
	c, err := p.newCQs(16)
	if err != nil {
		return nil, err
	}
	qa, qb, err := p.connect(1, 1, c)
	if err != nil {
		return nil, err
	}
	defer qa[0].Destroy()
	defer qb[0].Destroy()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if ready != nil {
		ready()
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var srvErr error
	firstA, firstB := qa[0].Query().RQPSN, qb[0].Query().RQPSN // before either end starts
	wg.Add(1)
	go func() {
		defer wg.Done()
		srvErr = latLoop(ctx, latEnd{p.b, qb[0], c.sb, p.busy, p.pmtu, firstB}, p.a.mr.RKey(), p.a.mr.IOVA()+half, true, nil, &stop)
	}()
	t := &latTimer{lim: lim}
	err = latLoop(ctx, latEnd{p.a, qa[0], c.sa, p.busy, p.pmtu, firstA}, p.b.mr.RKey(), p.b.mr.IOVA()+half, false, t.post, &stop)
	stop.Store(true)
	cancel()
	wg.Wait()
	if err == nil && !errors.Is(srvErr, errStopped) {
		err = srvErr
	}
	if err != nil {
		return nil, err
	}
	return t.rtts()
}

// writeLatPeer runs write_lat with B's end in a process of its own (bench
// -child peer-goroce, started in namespace B), as write_lat's server is:
// A's device is opened here, in A. ready, when set, runs after setup and
// before the first WRITE; info, when set, learns the backend's mode and
// the path MTU.
func writeLatPeer(pair *netns.Pair, backend string, busy bool, lim limit, ready func(), info *section) ([]time.Duration, error) {
	a, err := openEnd(pair, netns.A, backend, busy, nil)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	defer a.dev.Close()
	args := []string{"-child", "peer-goroce", "-backends", backend, "-peer-ifname", pair.B.Ifname}
	if busy {
		args = append(args, "-peer-busy")
	}
	peer, err := startPeer(pair, args...)
	if err != nil {
		return nil, err
	}
	defer peer.finish()
	l, ok := peer.lines.next(setupTimeout + 5*time.Second)
	var qpnB, rkeyB uint32
	var vaddrB uint64
	var mtuB int
	if !ok {
		return nil, errors.New("the peer process did not start")
	}
	if _, err := fmt.Sscanf(l, "qp %d %d %d %d", &qpnB, &rkeyB, &vaddrB, &mtuB); err != nil {
		return nil, fmt.Errorf("peer: %s", strings.TrimPrefix(l, "error "))
	}
	mtu := min(a.dev.ActiveMTU(), qp.MTUFromBytes(mtuB))
	if info != nil {
		info.mode, info.pmtu = a.info.Mode, mtu.Bytes()
	}
	scq, err := a.dev.CreateCQ(16)
	if err != nil {
		return nil, err
	}
	rcq, err := a.dev.CreateCQ(16)
	if err != nil {
		return nil, err
	}
	q, err := a.pd.CreateQP(qp.InitAttr{SendCQ: scq, RecvCQ: rcq, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	defer q.Destroy()
	const psnA, psnB = 0x1234, 0x5678
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	err = q.Connect(ctx, qp.Remote{QPN: qpnB, PSN: psnB, GID: pair.B.Addr, MTU: mtu}, qp.ConnectOptions{SQPSN: psnA})
	cancel()
	if err != nil {
		return nil, err
	}
	if ready != nil {
		ready()
	}
	if err := peer.send("conn %d %d %d %d %d %s %d", q.QPN(), psnA, psnB, a.mr.RKey(), a.mr.IOVA()+half, pair.A.Addr, mtu.Bytes()); err != nil {
		return nil, err
	}
	var stop atomic.Bool
	t := &latTimer{lim: lim}
	// The deadline only guards against a peer that died: the sleeping waits
	// have no stall check of their own.
	lctx, lcancel := context.WithTimeout(context.Background(), lim.d+stallTime)
	s0 := a.dev.Stats().Link
	cpu0, csw0 := procCPU()
	err = latLoop(lctx, latEnd{a, q, scq, busy, mtu.Bytes(), psnB}, rkeyB, vaddrB, false, t.post, &stop)
	cpu1, csw1 := procCPU()
	lcancel()
	if n := float64(len(t.posts) - 1); err == nil && n > 0 {
		progress("lat (%s): A per round trip: %s; process CPU %.1f µs, context switches %.2f", latMode(busy),
			linkPerRT(s0, a.dev.Stats().Link, n), float64(cpu1-cpu0)/1e3/n, float64(csw1-csw0)/n)
	}
	peer.send("stop")
	if l, ok := peer.lines.next(stallTime + 5*time.Second); ok && strings.HasPrefix(l, "error ") {
		perr := fmt.Errorf("peer: %s", strings.TrimPrefix(l, "error "))
		if err == nil {
			err = perr
		} else {
			err = fmt.Errorf("%w (%v)", err, perr)
		}
	}
	if err != nil {
		return nil, err
	}
	return t.rtts()
}

func latMode(busy bool) string {
	if busy {
		return "busy-poll"
	}
	return "sleeping"
}

// linkPerRT says what A's link did per round trip between s0 and s1: the
// frames sent (write_lat's WRITE and the ACK of the peer's), the transmit
// kicks (sendto) that carried them, the frames received and the link's
// wake-ups (system calls other than reads: kicks, fill-ring wake-ups).
func linkPerRT(s0, s1 nic.Stats, rts float64) string {
	per := func(a, b uint64) float64 { return float64(b-a) / rts }
	return fmt.Sprintf("frames sent %.2f, TX kicks %.2f, frames received %.2f, wake-ups %.2f",
		per(s0.TxFrames, s1.TxFrames), per(s0.TxKicks, s1.TxKicks), per(s0.RxFrames, s1.RxFrames), per(s0.Wakeups, s1.Wakeups))
}
