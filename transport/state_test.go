package transport_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// Required and optional attributes of each RC transition, as
// ib_modify_qp_is_ok's qp_state_table (drivers/infiniband/core/verbs.c)
// and PROTOCOL.md §4.
var rcTable = []struct {
	from, to      transport.State
	req, optional transport.AttrMask
}{
	{transport.StateReset, transport.StateInit, transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags, 0},
	{transport.StateInit, transport.StateInit, 0, transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags},
	{transport.StateInit, transport.StateRTR,
		transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer,
		transport.AttrAltPath | transport.AttrAccessFlags | transport.AttrPKeyIndex},
	{transport.StateRTR, transport.StateRTS,
		transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrSQPSN | transport.AttrMaxQPRdAtomic,
		transport.AttrCurState | transport.AttrAltPath | transport.AttrAccessFlags | transport.AttrMinRNRTimer | transport.AttrPathMigState},
	{transport.StateRTS, transport.StateRTS, 0,
		transport.AttrCurState | transport.AttrAccessFlags | transport.AttrAltPath | transport.AttrPathMigState | transport.AttrMinRNRTimer},
	{transport.StateRTS, transport.StateSQD, 0, transport.AttrEnSQDAsyncNotify},
	{transport.StateSQD, transport.StateRTS, 0,
		transport.AttrCurState | transport.AttrAltPath | transport.AttrAccessFlags | transport.AttrMinRNRTimer | transport.AttrPathMigState},
	{transport.StateSQD, transport.StateSQD, 0,
		transport.AttrPort | transport.AttrAV | transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry |
			transport.AttrMaxQPRdAtomic | transport.AttrMaxDestRdAtomic | transport.AttrAltPath | transport.AttrAccessFlags |
			transport.AttrPKeyIndex | transport.AttrMinRNRTimer | transport.AttrPathMigState},
}

// fullAttr holds valid values for every attribute.
func fullAttr(to transport.State) *transport.Attr {
	return &transport.Attr{State: to, CurState: 0, AccessFlags: memreg.RemoteWrite, Port: 1, PathMTU: transport.MTU1024,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, RQPSN: 5, SQPSN: 6, MaxRdAtomic: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12, DestQPN: 0x22,
		AV: transport.AV{DGID: netip.MustParseAddr("198.18.0.2"), SGID: netip.MustParseAddr("198.18.0.1"), HopLimit: 64}}
}

type nopOut struct{ buf [frameCap]byte }

func (o *nopOut) Frame() []byte { return o.buf[:] }
func (o *nopOut) Send(int)      {}

func newQP(t *testing.T) (*transport.QP, *cq) {
	t.Helper()
	tbl := memreg.NewTable(1)
	c := &cq{}
	q, err := transport.New(transport.Config{QPN: 0x11, PD: tbl.AllocPD(), MRs: tbl, Out: &nopOut{}, SendCQ: c, RecvCQ: c,
		Caps: transport.Caps{MaxSendWR: 8, MaxRecvWR: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return q, c
}

// walkTo moves q from RESET to st (INIT, RTR, RTS, SQD or ERR) with
// exactly the required attributes of each step.
func walkTo(t *testing.T, q *transport.QP, st transport.State) {
	t.Helper()
	now := time.Unix(0, 0)
	if st == transport.StateErr {
		walkTo(t, q, transport.StateInit)
		must(t, q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, now))
		return
	}
	for _, row := range rcTable[:6] {
		if q.State() == st {
			return
		}
		if row.from != q.State() || row.from == row.to {
			continue
		}
		if err := q.Modify(fullAttr(row.to), transport.AttrState|row.req, now); err != nil {
			t.Fatalf("%v→%v: %v", row.from, row.to, err)
		}
	}
	if q.State() != st {
		t.Fatalf("reached %v, want %v", q.State(), st)
	}
}

// TestModifyMasks: every transition rejects each missing required
// attribute and each attribute it does not accept, reporting them in
// ModifyError.Missing/Extra (EINVAL), and leaves the state unchanged.
func TestModifyMasks(t *testing.T) {
	for _, row := range rcTable {
		t.Run(fmt.Sprintf("%v_%v", row.from, row.to), func(t *testing.T) {
			now := time.Unix(0, 0)
			for bit := transport.AttrMask(1); bit < 1<<21; bit <<= 1 {
				q, _ := newQP(t)
				walkTo(t, q, row.from)
				mask := transport.AttrState | row.req
				var wantMissing, wantExtra transport.AttrMask
				switch {
				case row.req&bit != 0:
					mask &^= bit
					wantMissing = bit
				case row.optional&bit == 0 && bit != transport.AttrState && bit != transport.AttrCap:
					mask |= bit
					wantExtra = bit
				default:
					continue
				}
				a := fullAttr(row.to)
				a.CurState = row.from
				err := q.Modify(a, mask, now)
				var me *transport.ModifyError
				if !errors.As(err, &me) || !errors.Is(err, transport.ErrInvalidArgument) {
					t.Fatalf("mask %v: err %v, want a ModifyError", mask, err)
				}
				if me.Missing != wantMissing || me.Extra != wantExtra {
					t.Fatalf("mask %v: missing %v extra %v, want %v / %v", mask, me.Missing, me.Extra, wantMissing, wantExtra)
				}
				if q.State() != row.from {
					t.Fatalf("state changed to %v by a rejected Modify", q.State())
				}
			}
			// The full required mask with all optional attributes works.
			q, _ := newQP(t)
			walkTo(t, q, row.from)
			a := fullAttr(row.to)
			a.CurState = row.from
			if err := q.Modify(a, transport.AttrState|row.req|row.optional&^transport.AttrAltPath&^transport.AttrPathMigState&^transport.AttrEnSQDAsyncNotify, now); err != nil {
				t.Fatalf("required+optional: %v", err)
			}
		})
	}
	// Transitions that do not exist.
	for _, bad := range [][2]transport.State{{transport.StateReset, transport.StateRTR}, {transport.StateReset, transport.StateRTS},
		{transport.StateInit, transport.StateRTS}, {transport.StateRTR, transport.StateInit}, {transport.StateRTS, transport.StateRTR},
		{transport.StateErr, transport.StateRTS}, {transport.StateRTS, transport.StateSQE},
		// qp_state_table has no RESET→ERR entry.
		{transport.StateReset, transport.StateErr}} {
		q, _ := newQP(t)
		walkTo(t, q, bad[0])
		if err := q.Modify(fullAttr(bad[1]), transport.AttrState, time.Unix(0, 0)); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Fatalf("%v→%v accepted: %v", bad[0], bad[1], err)
		}
	}
}

// TestPostInWrongState: PostSend is EINVAL in RESET, INIT and RTR;
// PostRecv is EINVAL in RESET only; in ERR both complete at once with
// WR_FLUSH_ERR.
func TestPostInWrongState(t *testing.T) {
	for _, st := range []transport.State{transport.StateReset, transport.StateInit, transport.StateRTR} {
		q, c := newQP(t)
		walkTo(t, q, st)
		if err := q.PostSend(&transport.SendWR{Opcode: transport.WRSend}, time.Unix(0, 0)); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Fatalf("PostSend in %v: %v", st, err)
		}
		err := q.PostRecv(&transport.RecvWR{WRID: 1})
		if (st == transport.StateReset) != errors.Is(err, transport.ErrInvalidArgument) {
			t.Fatalf("PostRecv in %v: %v", st, err)
		}
		if len(c.wcs) != 0 {
			t.Fatalf("completions in %v: %v", st, c.wcs)
		}
	}
	q, c := newQP(t)
	walkTo(t, q, transport.StateRTS)
	must(t, q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, time.Unix(0, 0)))
	must(t, q.PostSend(&transport.SendWR{WRID: 5, Opcode: transport.WRSend}, time.Unix(0, 0)))
	must(t, q.PostRecv(&transport.RecvWR{WRID: 6}))
	if len(c.wcs) != 2 || c.wcs[0].WRID != 5 || c.wcs[0].Status != transport.WCWRFlushErr ||
		c.wcs[1].WRID != 6 || c.wcs[1].Status != transport.WCWRFlushErr || c.wcs[1].Opcode != transport.WCRecv {
		t.Fatalf("completions in ERR: %v", c.wcs)
	}
}

// TestResetClearsQueues: RECVs posted in INIT and sends in flight are
// discarded (no completion) by a transition to RESET; after reconnecting,
// a SEND finds no RECV (RNR) instead of a stale one.
func TestResetClearsQueues(t *testing.T) {
	e := newEPair(t, eopts{minRNR: 1, rnr: 0, timeout: 0})
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	e.hook = func(*side, *wire.Packet) bool { return false } // the SEND is lost
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(0, 8)}})
	e.deliver()
	for _, s := range []*side{e.a, e.b} {
		must(t, s.q.Modify(&transport.Attr{State: transport.StateReset}, transport.AttrState, e.now))
		if len(s.scq.wcs)+len(s.rcq.wcs) != 0 {
			t.Fatalf("%s: completions on RESET: %v %v", s.name, s.scq.wcs, s.rcq.wcs)
		}
		if a := s.q.Attr(); a.State != transport.StateReset || a.DestQPN != 0 || a.PathMTU != 0 {
			t.Fatalf("%s: attributes after RESET %+v", s.name, a)
		}
	}
	// Reconnect (same PSNs) and send again: B's old RECV is gone.
	e.hook = nil
	for _, s := range []*side{e.a, e.b} {
		must(t, s.q.Modify(&transport.Attr{State: transport.StateInit, Port: 1, AccessFlags: s.access},
			transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags, e.now))
		must(t, s.q.Modify(&transport.Attr{State: transport.StateRTR, PathMTU: transport.MTU1024, DestQPN: s.peer.q.QPN(),
			RQPSN: s.peer.sqPSN, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: transport.AV{DGID: s.peer.ip, SGID: s.ip, HopLimit: 64, DMAC: s.peer.mac, SMAC: s.mac}},
			transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN|
				transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer, e.now))
		must(t, s.q.Modify(&transport.Attr{State: transport.StateRTS, SQPSN: s.sqPSN, MaxRdAtomic: 1},
			transport.AttrState|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrSQPSN|
				transport.AttrMaxQPRdAtomic, e.now))
	}
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(0, 8)}})
	e.run(10)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 3 || w[0].Status != transport.WCRNRRetryExcErr {
		t.Fatalf("requester completions %v, want WR 3 RNR_RETRY_EXC_ERR", w)
	}
	if w := e.b.rcq.take(); len(w) != 0 {
		t.Fatalf("responder completions %v: a RECV survived RESET", w)
	}
}

// TestSQDDrain: in SQD the WQEs already being sent finish and complete,
// new ones wait; back in RTS they go out.
func TestSQDDrain(t *testing.T) {
	e := newEPair(t, eopts{})
	e.rec = true
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 4096)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD}, transport.AttrState, e.now))
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions in SQD %v, want WR 1 only", w)
	}
	reqs := 0
	for _, l := range e.log {
		if l.fromA {
			reqs++
		}
	}
	if reqs != 4 {
		t.Fatalf("%d request packets in SQD, want the 4 of WR 1", reqs)
	}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateRTS}, transport.AttrState, e.now))
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 2 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions after RTS %v, want WR 2", w)
	}
}
