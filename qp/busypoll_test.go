package qp_test

// Busy-poll mode (busypoll.go) over the in-memory link on the real clock:
// every operation class with each end driven only by its own CQ polling,
// a lost request recovered by the retransmission timer firing from a poll,
// CQ.Wait/WaitEvent ending with their context, and the line between
// busy-poll mode (CQs drive the device) and manual mode (they never do).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// driveByCQ keeps e's device going the way an application's own polling
// loop does: it spins on CQ.Poll of e's send CQ (empty here, it only drives
// the device), never on Device.Poll. Completions on e's receive CQ stay for
// the test. It stops at cleanup, before the devices close.
func driveByCQ(t testing.TB, e *xend) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if n, err := e.scq.Poll(nil); n != 0 || err != nil {
				panic(fmt.Sprintf("driver: Poll(nil) = %d, %v", n, err))
			}
			runtime.Gosched()
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
}

// TestBusyPollOps runs SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE,
// RDMA_WRITE_WITH_IMM and RDMA_READ at 0, 1, MTU+1, 3·MTU and 1 MiB, and
// FETCH_ADD and CMP_SWAP, between two busy-poll devices: A is driven only by
// the test's CQ.Wait calls, B only by a goroutine polling its CQ (and by
// the test's CQ.Wait on B's receive CQ). Data, canaries, completions, the
// frames on the wire and the counters are checked as in TestOpsMatrix.
func TestBusyPollOps(t *testing.T) {
	x := newX(t, xopts{size: 1<<20 + 4096, busyPoll: true})
	if x.a.dev.Mode() != qp.ModeBusyPoll || x.b.dev.Mode() != qp.ModeBusyPoll {
		t.Fatal("devices not in busy-poll mode")
	}
	driveByCQ(t, x.b)
	x.next()
	const mtu = 1024
	wrID := uint64(0)
	for _, n := range []int{0, 1, mtu + 1, 3 * mtu, 1 << 20} {
		for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRSendWithInv,
			transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead} {
			wrID++
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				x.t = t
				runOp(t, x, op, n, mtu, wrID)
			})
		}
	}
	x.t = t
	t.Run("atomics", func(t *testing.T) {
		x.t = t
		runAtomics(t, x)
	})
	x.t = t
	x.settle()
	checkCounters(t, x)
}

// TestBusyPollRetransmit: the only frame of a WRITE is lost on the way to
// B, so nothing tells A (no NAK); A's ACK timer must fire inside A's own
// CQ.Wait, which resends it. The WRITE then completes with the data in
// place, and A counted one ACK timeout and one retransmitted packet.
func TestBusyPollRetransmit(t *testing.T) {
	var dropped atomic.Int32
	var drop sim.Faults
	drop.Filter = func(f []byte) bool {
		var p wire.Packet
		if wire.Parse(f, &p) == nil && p.Opcode() == wire.RCRDMAWriteOnly && dropped.Load() == 0 {
			dropped.Add(1)
			return true
		}
		return false
	}
	// Timeout 14: 4.096 µs · 2^14 ≈ 67 ms (IBTA C9-140); 7 retries. A shorter
	// timer ran out 8 times in a row when -race and a parallel test binary
	// kept B's polling goroutine off the CPU for ~35 ms (RETRY_EXC_ERR).
	x := newX(t, xopts{busyPoll: true, faultsAB: drop, connA: qp.ConnectOptions{Timeout: 14}})
	driveByCQ(t, x.b)
	a, b := x.a, x.b
	a.reset()
	b.reset()
	data := pattern(42, 200)
	copy(a.buf[srcOff:], data)
	x.post(a, &qp.SendWR{WRID: 7, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(srcOff, len(data))}, RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()})
	expectWC(t, a.scq, 7, transport.WCSuccess, transport.WCRDMAWrite)
	checkBuf(t, "responder", b.buf, region{dstOff, data})
	if dropped.Load() != 1 {
		t.Fatalf("the filter dropped %d frames, want 1", dropped.Load())
	}
	c := a.qp.Counters()
	if c[transport.CntLocalAckTimeoutErr] < 1 || c[transport.CntRetransmittedPkts] < 1 {
		t.Fatalf("A: local_ack_timeout_err %d, retransmitted_pkts %d; want ≥ 1 each",
			c[transport.CntLocalAckTimeoutErr], c[transport.CntRetransmittedPkts])
	}
	if c[transport.CntRetryExceededErr] != 0 || a.qp.State() != transport.StateRTS {
		t.Fatalf("A: retry exceeded %d, state %v", c[transport.CntRetryExceededErr], a.qp.State())
	}
}

// TestBusyPollWaitCancel: with nothing to complete, CQ.Wait and
// CQ.WaitEvent on a busy-poll device spin until their context ends and
// return its error; after Close they return ErrClosed.
func TestBusyPollWaitCancel(t *testing.T) {
	x := newX(t, xopts{busyPoll: true, noTap: true})
	var wc [4]qp.WC
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(20 * time.Millisecond) // any delay works; the outcome does not depend on it
		cancel()
	}()
	if n, err := x.a.scq.Wait(ctx, wc[:]); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %d, %v; want 0, context.Canceled", n, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	x.a.rcq.ReqNotify(false)
	if err := x.a.rcq.WaitEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvent = %v; want context.DeadlineExceeded", err)
	}
	x.a.dev.Close()
	if n, err := x.a.scq.Wait(context.Background(), wc[:]); n != 0 || !errors.Is(err, qp.ErrClosed) {
		t.Fatalf("Wait after Close = %d, %v; want ErrClosed", n, err)
	}
	if err := x.a.rcq.WaitEvent(context.Background()); !errors.Is(err, qp.ErrClosed) {
		t.Fatalf("WaitEvent after Close = %v; want ErrClosed", err)
	}
	if err := x.a.dev.Progress(context.Background()); !errors.Is(err, qp.ErrClosed) {
		t.Fatalf("Progress after Close = %v; want ErrClosed", err)
	}
}

// TestBusyPollWaitEvent: a solicited SEND wakes WaitEvent on B's receive
// CQ, B being driven only by that wait.
func TestBusyPollWaitEvent(t *testing.T) {
	x := newX(t, xopts{busyPoll: true, noTap: true})
	a, b := x.a, x.b
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a hang guard only
	defer cancel()
	x.recv(b, 1, b.sge(0, 64))
	b.rcq.ReqNotify(true)
	x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled | transport.SendSolicited,
		SGL: []qp.SGE{a.sge(0, 64)}})
	if err := b.rcq.WaitEvent(ctx); err != nil {
		t.Fatal(err)
	}
	expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv)
	expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCSend)
}

// TestBusyPollProgress: Device.Progress alone keeps a target device
// answering (nobody polls B's CQs), and returns with its context.
func TestBusyPollProgress(t *testing.T) {
	x := newX(t, xopts{busyPoll: true, noTap: true})
	a, b := x.a, x.b
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.dev.Progress(ctx) }()
	a.reset()
	b.reset()
	data := pattern(9, 3000)
	copy(b.buf[srcOff:], data)
	x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(dstOff, len(data))}, RemoteAddr: b.mr.IOVA() + srcOff, RKey: b.mr.RKey()})
	expectWC(t, a.scq, 3, transport.WCSuccess, transport.WCRDMARead)
	checkBuf(t, "requester", a.buf, region{dstOff, data})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Progress = %v; want context.Canceled", err)
	}
	la, lb := nic.NewMemPair(nic.MemConfig{})
	defer lb.Close()
	d, err := qp.Open(qp.Config{Link: la, IP: ipA})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Progress(context.Background()); err == nil || d.Mode() == qp.ModeBusyPoll {
		t.Fatalf("Progress on a normal device = %v", err)
	}
}

// plainLink hides the in-memory link's TryReadBatch.
type plainLink struct{ nic.Link }

// TestBusyPollOpenErrors: busy-poll needs a link with TryReadBatch, and
// the mode must be one of the three.
func TestBusyPollOpenErrors(t *testing.T) {
	la, lb := nic.NewMemPair(nic.MemConfig{})
	defer la.Close()
	defer lb.Close()
	if _, err := qp.Open(qp.Config{Link: la, IP: ipA, Mode: qp.ModeManual + 1}); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("unknown mode: %v", err)
	}
	if _, err := qp.Open(qp.Config{Link: plainLink{la}, IP: ipA, Mode: qp.ModeBusyPoll}); err == nil {
		t.Fatal("busy-poll on a link without TryReadBatch accepted")
	}
	if _, err := qp.Open(qp.Config{Link: plainLink{la}, IP: ipA, Mode: qp.ModeManual}); err == nil {
		t.Fatal("manual mode on a link without TryReadBatch accepted")
	}
}

// TestCQPollDrivesOnlyBusyDevices: a frame waiting on the link is read by
// CQ.Poll of a busy-poll device, but not by CQ.Poll (or Wait) of a manual
// device, whose owner (the simulator) alone calls Device.Poll.
func TestCQPollDrivesOnlyBusyDevices(t *testing.T) {
	for _, mode := range []string{"manual", "busy"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				la, lb := nic.NewMemPair(nic.MemConfig{})
				defer la.Close()
				defer lb.Close()
				d, err := qp.Open(qp.Config{Link: lb, IP: ipB, Mode: map[string]qp.Mode{"manual": qp.ModeManual, "busy": qp.ModeBusyPoll}[mode],
					Neighbors: map[netip.Addr]net.HardwareAddr{ipA: la.HardwareAddr()}})
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				cq, _ := d.CreateCQ(4)
				if _, err := la.WriteBatch([][]byte{make([]byte, 60)}); err != nil { // not RoCE: counted
					t.Fatal(err)
				}
				var wc [1]qp.WC
				cq.Poll(wc[:])
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				if mode == "manual" {
					cq.Wait(ctx, wc[:]) // sleeps until ctx ends, reads nothing
				}
				cancel()
				read := d.RxStats().Frames
				switch {
				case mode == "manual" && (read != 0 || lb.Pending() != 1):
					t.Fatalf("manual: CQ.Poll drove the device (frames read %d, pending %d)", read, lb.Pending())
				case mode == "busy" && (read != 1 || lb.Pending() != 0):
					t.Fatalf("busy: CQ.Poll did not drive the device (frames read %d, pending %d)", read, lb.Pending())
				}
				if mode == "manual" {
					if n := d.Poll(); n != 1 || d.RxStats().NotRoCE+d.RxStats().ParseErrors != 1 {
						t.Fatalf("manual: Device.Poll handled %d events, rx %+v", n, d.RxStats())
					}
				}
			})
		})
	}
}

// BenchmarkBusyPollWrite64: one goroutine posts a signalled 64-byte RDMA
// WRITE and polls both ends' CQs (which drive both devices) until the
// completion: the whole path without a goroutine hand-off.
func BenchmarkBusyPollWrite64(b *testing.B) {
	x := newX(b, xopts{busyPoll: true, noTap: true})
	a, bb := x.a, x.b
	wr := &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(0, 64)}, RemoteAddr: bb.mr.IOVA(), RKey: bb.mr.RKey()}
	var wc [1]qp.WC
	step := func() {
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		for {
			bb.scq.Poll(nil)
			k, err := a.scq.Poll(wc[:])
			if err != nil || (k == 1 && wc[0].Status != transport.WCSuccess) {
				b.Fatalf("completion %v %v", wc[0], err)
			}
			if k == 1 {
				return
			}
		}
	}
	step()
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

// TestBusyPollHeldAckWhenPollingStops: a busy-poll Device.Poll that takes
// a WRITE holds its ACK for the poller's next post (ackhold.go). When the
// poller never posts or polls again (perftest's loops stop polling after
// their last completion), the device's hold timer still sends it: the
// requester's WRITE completes with nothing retransmitted, long before its
// ACK timeout (timeout 20: 4.096 µs · 2^20 ≈ 4.3 s).
func TestBusyPollHeldAckWhenPollingStops(t *testing.T) {
	x := newX(t, xopts{busyPoll: true, connA: qp.ConnectOptions{Timeout: 20}})
	a, b := x.a, x.b
	a.reset()
	b.reset()
	data := pattern(7, 64)
	copy(a.buf[srcOff:], data)
	x.post(a, &qp.SendWR{WRID: 9, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(srcOff, len(data))}, RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()})
	// B polls until the WRITE is placed, then never again.
	deadline := time.Now().Add(10 * time.Second)
	for b.mr.Writes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("B's polls never placed A's WRITE")
		}
		b.dev.Poll()
	}
	checkBuf(t, "responder", b.buf, region{dstOff, data})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	wcs := make([]qp.WC, 1)
	n, err := a.scq.Wait(ctx, wcs)
	if err != nil || n != 1 || wcs[0].WRID != 9 || wcs[0].Status != transport.WCSuccess {
		t.Fatalf("A's WRITE with B no longer polling: %d %v %v (the held ACK never left)", n, wcs[0], err)
	}
	if c := a.qp.Counters(); c[transport.CntRetransmittedPkts] != 0 {
		t.Fatalf("A retransmitted %d packets", c[transport.CntRetransmittedPkts])
	}
}
