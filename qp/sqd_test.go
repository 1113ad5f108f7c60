package qp_test

import (
	"context"
	"testing"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// noEventNow asserts that d has no async event queued right now.
func noEventNow(t *testing.T, d *qp.Device, what string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := d.AsyncEvent(ctx); err == nil {
		t.Fatalf("%s: unexpected event %v", what, ev.Type)
	}
}

// TestSQDrained: a QP moved to SQD while WRITEs are in flight finishes them,
// starts nothing posted later, and raises SQ_DRAINED once, after the last
// started WR completed (rxe req_check_sq_drain_done /
// comp_check_sq_drain_done); back in RTS the held WR goes out. A QP with
// an empty send queue reports the drain at once.
func TestSQDrained(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		ctx := context.Background()
		for i := 1; i <= 2; i++ {
			x.post(a, &qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []qp.SGE{a.sge(0, 8192)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		}
		if err := a.qp.Modify(ctx, qp.Attr{State: qp.StateSQD}, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		ev, err := a.dev.AsyncEvent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != qp.EventSQDrained || ev.QP != a.qp {
			t.Fatalf("event %v for %v, want SQ_DRAINED for A's QP", ev.Type, ev.QP)
		}
		var wcs [4]qp.WC
		if n, _ := a.scq.Poll(wcs[:]); n != 2 || wcs[0].WRID != 1 || wcs[1].WRID != 2 {
			t.Fatalf("at SQ_DRAINED the completions are %v, want WRs 1 and 2 only", wcs[:n])
		}
		x.settle()
		noEventNow(t, a.dev, "after the drain")
		noWC(t, a.scq, "the WR posted in SQD")
		if err := a.qp.Modify(ctx, qp.Attr{State: qp.StateRTS}, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		expectWC(t, a.scq, 3, transport.WCSuccess, transport.WCRDMAWrite)

		// Empty send queue: drained at once, and again on the next entry.
		for range 2 {
			if err := a.qp.Modify(ctx, qp.Attr{State: qp.StateSQD}, qp.AttrState); err != nil {
				t.Fatal(err)
			}
			if ev, err := a.dev.AsyncEvent(ctx); err != nil || ev.Type != qp.EventSQDrained {
				t.Fatalf("empty SQ: %v %v", ev.Type, err)
			}
			// SQD → SQD is not a new entry (rxe: cur_state != SQD).
			if err := a.qp.Modify(ctx, qp.Attr{State: qp.StateSQD}, qp.AttrState); err != nil {
				t.Fatal(err)
			}
			noEventNow(t, a.dev, "SQD to SQD")
			if err := a.qp.Modify(ctx, qp.Attr{State: qp.StateRTS}, qp.AttrState); err != nil {
				t.Fatal(err)
			}
		}
	})
}
