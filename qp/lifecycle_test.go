package qp_test

// Lifecycle and misuse: what a destroyed QP, a closed device, an empty
// Wait, a foreign CQ and a failed completion's error do (the overrun CQ,
// the QPN wrap and a flooding link, which reach into the device, are in
// lifecycle_internal_test.go). Each test failed before the fix it covers.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
)

// TestDestroyedQPRefusesWork: after Destroy, PostSend, PostSendList,
// PostRecv, Modify and a second Destroy fail with ErrDestroyed, the QP puts
// nothing on the wire and the peer's memory stays untouched.
func TestDestroyedQPRefusesWork(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		b.reset()
		x.settle()
		x.next()
		if err := a.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		write := &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, 64)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}
		for _, c := range []struct {
			what string
			err  error
		}{
			{"PostSend", a.qp.PostSend(write)},
			{"PostSendList", func() error { _, err := a.qp.PostSendList([]qp.SendWR{*write}); return err }()},
			{"PostRecv", a.qp.PostRecv(&qp.RecvWR{WRID: 2, SGL: []qp.SGE{a.sge(0, 64)}})},
			{"PostRecvList", func() error {
				_, err := a.qp.PostRecvList([]qp.RecvWR{{WRID: 3, SGL: []qp.SGE{a.sge(0, 64)}}})
				return err
			}()},
			{"Modify", a.qp.Modify(context.Background(), qp.Attr{State: qp.StateErr}, qp.AttrState)},
			{"Destroy", a.qp.Destroy()},
		} {
			if !errors.Is(c.err, qp.ErrDestroyed) {
				t.Errorf("%s after Destroy: %v, want ErrDestroyed", c.what, c.err)
			}
		}
		x.settle()
		for _, p := range x.next() {
			if p.fromA {
				t.Errorf("the destroyed QP sent %v", p)
			}
		}
		checkBuf(t, "peer", b.buf)
		noWC(t, a.scq, "destroyed QP")
	})
}

// TestClosedDeviceRefusesWork: after Device.Close every call that would
// start work fails with ErrClosed instead of accepting a WR nobody will
// ever complete.
func TestClosedDeviceRefusesWork(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		if err := a.dev.Close(); err != nil {
			t.Fatal(err)
		}
		_, errCQ := a.dev.CreateCQ(4)
		_, errQP := a.pd.CreateQP(qp.InitAttr{SendCQ: a.scq, RecvCQ: a.rcq, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1}})
		_, errMR := a.pd.RegMR(make([]byte, 64), qp.LocalWrite)
		_, errMRIOVA := a.pd.RegMRIOVA(make([]byte, 64), 0x1000, qp.LocalWrite)
		for _, c := range []struct {
			what string
			err  error
		}{
			{"PostSend", a.qp.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, 8)},
				RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})},
			{"PostRecv", a.qp.PostRecv(&qp.RecvWR{SGL: []qp.SGE{a.sge(0, 8)}})},
			{"Modify", a.qp.Modify(context.Background(), qp.Attr{State: qp.StateErr}, qp.AttrState)},
			{"CreateCQ", errCQ},
			{"CreateQP", errQP},
			{"RegMR", errMR},
			{"RegMRIOVA", errMRIOVA},
		} {
			if !errors.Is(c.err, qp.ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", c.what, c.err)
			}
		}
	})
}

// TestWaitEmptySlice: Wait with no room for a completion returns an error
// at once, with or without completions queued, instead of blocking until
// the context ends.
func TestWaitEmptySlice(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.post(a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		x.settle()
		for _, wcs := range [][]qp.WC{nil, {}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n, err := a.scq.Wait(ctx, wcs)
			cancel()
			if n != 0 || !errors.Is(err, qp.ErrInvalidArgument) {
				t.Fatalf("Wait(%v): %d, %v; want 0 and ErrInvalidArgument", wcs, n, err)
			}
		}
		expectWC(t, a.scq, 1, qp.WCSuccess, qp.WCRDMAWrite) // still queued
	})
}

// TestCreateQPForeignCQ: a QP's CQs must belong to its own device (the
// other device's engine would complete into them under another lock).
func TestCreateQPForeignCQ(t *testing.T) {
	bubble(t, func(t *testing.T) {
		a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer b.Close()
		mine, _ := a.CreateCQ(4)
		theirs, _ := b.CreateCQ(4)
		for _, ia := range []qp.InitAttr{{SendCQ: theirs, RecvCQ: mine}, {SendCQ: mine, RecvCQ: theirs}} {
			ia.Cap = qp.Caps{MaxSendWR: 1, MaxRecvWR: 1}
			if q, err := a.AllocPD().CreateQP(ia); !errors.Is(err, qp.ErrInvalidArgument) {
				t.Fatalf("CreateQP with a CQ of another device: %v, %v; want ErrInvalidArgument", q, err)
			}
		}
	})
}

// TestCompletionErrorIsAs: a failed completion's Err is a *CompletionError
// that errors.Is matches against its status and errors.As unpacks; a
// successful one's Err is nil.
func TestCompletionErrorIsAs(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.post(a, &qp.SendWR{WRID: 7, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		if wc := waitWC(t, a.scq); wc.Err() != nil {
			t.Fatalf("successful completion: Err() = %v", wc.Err())
		}
		x.post(a, &qp.SendWR{WRID: 8, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x80})
		wc := waitWC(t, a.scq)
		err := wc.Err()
		if !errors.Is(err, qp.WCRemAccessErr) || errors.Is(err, qp.WCRemOpErr) {
			t.Fatalf("Err() = %v: want errors.Is REM_ACCESS_ERR only", err)
		}
		var ce *qp.CompletionError
		if !errors.As(err, &ce) || ce.Status != qp.WCRemAccessErr || ce.WRID != 8 || ce.QPN != a.qp.QPN() {
			t.Fatalf("errors.As: %+v", ce)
		}
		t.Log(err)
	})
}
