package qp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// nextEvent returns d's next async event, failing when none comes within
// a (fake, in a bubble) second.
func nextEvent(t *testing.T, d *qp.Device) qp.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ev, err := d.AsyncEvent(ctx)
	if err != nil {
		t.Fatalf("AsyncEvent: %v", err)
	}
	return ev
}

// noEvent fails if d has an async event queued.
func noEvent(t *testing.T, d *qp.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if ev, err := d.AsyncEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unexpected async event %+v (%v)", ev, err)
	}
}

// TestAsyncEventAccessErr: an RDMA WRITE with a bad rkey makes the
// responder NAK REMOTE_ACCESS_ERROR and go to ERR: QP_ACCESS_ERR on its
// device, with the QP and the NAK; the requester learns it from its
// completion only.
func TestAsyncEventAccessErr(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		x.post(x.a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{x.a.sge(0, 64)},
			RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey() ^ 0x80})
		expectWC(t, x.a.scq, 1, qp.WCRemAccessErr, qp.WCRDMAWrite)
		ev := nextEvent(t, x.b.dev)
		if ev.Type != qp.EventQPAccessErr || ev.QP != x.b.qp || ev.Syndrome != wire.NAKSyndrome(wire.NAKRemoteAccessError) {
			t.Fatalf("responder event %v QP %p syndrome %v; want QP_ACCESS_ERR for %p with REMOTE_ACCESS_ERROR", ev.Type, ev.QP, ev.Syndrome, x.b.qp)
		}
		if st := ev.QP.State(); st != qp.StateErr {
			t.Fatalf("QP state %v after QP_ACCESS_ERR, want ERR", st)
		}
		noEvent(t, x.b.dev)
		noEvent(t, x.a.dev)
	})
}

// TestAsyncEventReqErr: a WRITE to a QP without REMOTE_WRITE is an invalid
// request (rxe check_op_valid): QP_REQ_ERR on the responder.
func TestAsyncEventReqErr(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{connB: qp.ConnectOptions{Access: qp.RemoteRead}})
		x.post(x.a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{x.a.sge(0, 64)},
			RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()})
		expectWC(t, x.a.scq, 1, qp.WCRemInvReqErr, qp.WCRDMAWrite)
		ev := nextEvent(t, x.b.dev)
		if ev.Type != qp.EventQPReqErr || ev.QP != x.b.qp || ev.Syndrome.NAK() != wire.NAKInvalidRequest {
			t.Fatalf("responder event %+v, want QP_REQ_ERR with INVALID_REQUEST", ev)
		}
		noEvent(t, x.a.dev)
	})
}

// TestAsyncEventNoneForRecoverableNAKs: an RNR NAK and PSN sequence NAKs
// leave the QP up and raise nothing; neither does a successful exchange.
func TestAsyncEventNoneForRecoverableNAKs(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{connA: qp.ConnectOptions{MinRNRTimer: 1}, connB: qp.ConnectOptions{MinRNRTimer: 1}})
		// A SEND before any receive is posted: RNR NAK, then it succeeds.
		x.post(x.a, &qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: []qp.SGE{x.a.sge(0, 64)}})
		x.pause()
		x.recv(x.b, 7, x.b.sge(0, 64))
		expectWC(t, x.a.scq, 1, qp.WCSuccess, qp.WCSend)
		expectWC(t, x.b.rcq, 7, qp.WCSuccess, qp.WCRecv)
		if c := x.b.qp.Counters(); c[qp.CntSendRNRErr] == 0 {
			t.Fatal("no RNR NAK was sent; the test does not test what it says")
		}
		noEvent(t, x.b.dev)
		noEvent(t, x.a.dev)
	})
}

// TestAsyncEventCommEst: a QP in RTR that receives its first packet raises
// COMM_EST once; reaching RTS without traffic raises nothing.
func TestAsyncEventCommEst(t *testing.T) {
	bubble(t, func(t *testing.T) {
		a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer b.Close()
		mk := func(d *qp.Device) (*qp.QP, *qp.CQ, *qp.MR) {
			pd := d.AllocPD()
			mr, err := pd.RegMR(make([]byte, 64), qp.LocalWrite|qp.RemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			cq, _ := d.CreateCQ(16)
			q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}})
			if err != nil {
				t.Fatal(err)
			}
			return q, cq, mr
		}
		qa, cqa, mra := mk(a)
		qb, _, mrb := mk(b)
		gidA, _ := a.GID(a.IPv4GIDIndex())
		gidB, _ := b.GID(b.IPv4GIDIndex())
		ctx := context.Background()
		if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 5, GID: gidB}, qp.ConnectOptions{SQPSN: 9}); err != nil {
			t.Fatal(err)
		}
		// B only to RTR, as a passive side whose CM RTU was lost.
		if err := qb.Modify(ctx, qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: qp.RemoteWrite},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := qb.Modify(ctx, qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPN: qa.QPN(), RQPSN: 9,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: qp.AV{DGID: gidA, SGIDIndex: uint8(b.IPv4GIDIndex()), HopLimit: 64}},
			qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		noEvent(t, a) // qa went to RTS without receiving anything in RTR
		noEvent(t, b)
		if err := qa.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{mra.SGE(0, 8)}, RemoteAddr: mrb.IOVA(), RKey: mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		wcs := make([]qp.WC, 1)
		if _, err := cqa.Wait(ctx, wcs); err != nil || wcs[0].Status != qp.WCSuccess {
			t.Fatalf("WRITE to the RTR QP: %v %v", wcs[0].Status, err)
		}
		ev := nextEvent(t, b)
		if ev.Type != qp.EventCommEst || ev.QP != qb {
			t.Fatalf("event %+v, want COMM_EST for the RTR QP", ev)
		}
		if err := qa.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{mra.SGE(0, 8)}, RemoteAddr: mrb.IOVA(), RKey: mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		if _, err := cqa.Wait(ctx, wcs); err != nil {
			t.Fatal(err)
		}
		noEvent(t, b) // once
	})
}

// TestAsyncEventCQOverrun: the public stream carries CQ_ERR, then QP_FATAL
// with the QP and the CQ that overran.
func TestAsyncEventCQOverrun(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		scq, err := x.a.dev.CreateCQ(1)
		if err != nil {
			t.Fatal(err)
		}
		q, err := x.a.pd.CreateQP(qp.InitAttr{SendCQ: scq, RecvCQ: x.a.rcq, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		peer, err := x.b.pd.CreateQP(qp.InitAttr{SendCQ: x.b.scq, RecvCQ: x.b.rcq, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := q.Connect(ctx, qp.Remote{QPN: peer.QPN(), PSN: 1, GID: x.b.ip}, qp.ConnectOptions{SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
		if err := peer.Connect(ctx, qp.Remote{QPN: q.QPN(), PSN: 1, GID: x.a.ip}, qp.ConnectOptions{SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := q.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{x.a.sge(0, 8)},
				RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
		if ev := nextEvent(t, x.a.dev); ev.Type != qp.EventCQErr || ev.CQ != scq {
			t.Fatalf("first event %+v, want CQ_ERR for the 1-entry CQ", ev)
		}
		if ev := nextEvent(t, x.a.dev); ev.Type != qp.EventQPFatal || ev.QP != q || ev.CQ != scq {
			t.Fatalf("second event %+v, want QP_FATAL for its QP", ev)
		}
	})
}

// failingLink has only the blocking nic.Link methods (the device reads it
// with its receive goroutine); failingWaiter can also wait in the runtime
// poller (the device's driver goroutine reads it).
type failingLink struct {
	nic.Link
	fail chan struct{}
}

type failingWaiter struct {
	*nic.MemLink
	fail chan struct{}
}

func (l *failingWaiter) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	<-l.fail
	return 0, fmt.Errorf("%w: %w", nic.ErrClosed, errLinkBroke)
}

var errLinkBroke = errors.New("link broke")

func (l *failingLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	<-l.fail
	return 0, errLinkBroke
}

// TestAsyncEventDeviceFatal: the link's receive path failing while the
// device is open is DEVICE_FATAL with the link's error; closing the device
// (which fails the read too) is not.
func TestAsyncEventDeviceFatal(t *testing.T) {
	bubble(t, func(t *testing.T) {
		la, lb := nic.NewMemPair(nic.MemConfig{})
		l := &failingLink{Link: la, fail: make(chan struct{})}
		d, err := qp.Open(qp.Config{Link: l, IP: ipA})
		if err != nil {
			t.Fatal(err)
		}
		close(l.fail)
		ev := nextEvent(t, d)
		if ev.Type != qp.EventDeviceFatal || !errors.Is(ev.Err, errLinkBroke) {
			t.Fatalf("event %+v, want DEVICE_FATAL with the link's error", ev)
		}
		d.Close()

		lw, _ := nic.NewMemPair(nic.MemConfig{})
		w := &failingWaiter{MemLink: lw, fail: make(chan struct{})}
		dw, err := qp.Open(qp.Config{Link: w, IP: ipA})
		if err != nil {
			t.Fatal(err)
		}
		close(w.fail)
		ev = nextEvent(t, dw)
		if ev.Type != qp.EventDeviceFatal || !errors.Is(ev.Err, errLinkBroke) {
			t.Fatalf("driver goroutine: event %+v, want DEVICE_FATAL with the link's error", ev)
		}
		dw.Close()

		// A plain close also ends the receive path with an error: no event.
		d2, err := qp.Open(qp.Config{Link: lb, IP: ipB})
		if err != nil {
			t.Fatal(err)
		}
		d2.Close()
		synctest.Wait()
		if _, err := d2.AsyncEvent(context.Background()); !errors.Is(err, qp.ErrClosed) {
			t.Fatalf("AsyncEvent after Close: %v, want ErrClosed and no DEVICE_FATAL", err)
		}
	})
}

func TestAsyncEventTypeString(t *testing.T) {
	for ty, want := range map[qp.AsyncEventType]string{qp.EventCQErr: "CQ_ERR", qp.EventQPAccessErr: "QP_ACCESS_ERR",
		qp.EventCommEst: "COMM_EST", qp.EventPortErr: "PORT_ERR", qp.EventWQFatal: "WQ_FATAL", 42: "AsyncEventType(42)"} {
		if got := ty.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(ty), got, want)
		}
	}
}

// TestAsyncEventSRQErr: when the device fails (its link's receive path
// ends), every SRQ not destroyed raises SRQ_ERR after DEVICE_FATAL, the
// QPs on it go to ERR with QP_LAST_WQE_REACHED, and the SRQ takes no more
// receives (ErrSRQFailed). A destroyed SRQ raises nothing.
func TestAsyncEventSRQErr(t *testing.T) {
	bubble(t, func(t *testing.T) {
		la, _ := nic.NewMemPair(nic.MemConfig{})
		l := &failingLink{Link: la, fail: make(chan struct{})}
		d, err := qp.Open(qp.Config{Link: l, IP: ipA})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		pd := d.AllocPD()
		cq, err := d.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		srq, err := pd.CreateSRQ(qp.SRQInitAttr{MaxWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		gone, err := pd.CreateSRQ(qp.SRQInitAttr{MaxWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := gone.Destroy(); err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 4}, SRQ: srq, Type: qp.QPTypeUD})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(context.Background(), qp.Attr{State: qp.StateInit, Port: 1, QKey: 7}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
			t.Fatal(err)
		}
		close(l.fail)
		if ev := nextEvent(t, d); ev.Type != qp.EventDeviceFatal {
			t.Fatalf("first event %v, want DEVICE_FATAL", ev.Type)
		}
		if ev := nextEvent(t, d); ev.Type != qp.EventSRQErr || ev.SRQ != srq {
			t.Fatalf("second event %v SRQ %p, want SRQ_ERR for %p", ev.Type, ev.SRQ, srq)
		}
		if ev := nextEvent(t, d); ev.Type != qp.EventQPLastWQEReached || ev.QP != q {
			t.Fatalf("third event %v QP %p, want QP_LAST_WQE_REACHED for %p", ev.Type, ev.QP, q)
		}
		noEvent(t, d)
		if st := q.State(); st != qp.StateErr {
			t.Fatalf("QP on the failed SRQ in %v, want ERR", st)
		}
		if err := srq.PostRecv(&qp.RecvWR{WRID: 1}); !errors.Is(err, qp.ErrSRQFailed) {
			t.Fatalf("PostRecv on the failed SRQ: %v, want ErrSRQFailed", err)
		}
	})
}
