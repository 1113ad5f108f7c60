package transport_test

import (
	"testing"

	"github.com/goroce/goroce/transport"
)

// TestSQDrained: moved to SQD with two WRITEs unacknowledged, the QP does
// not report SQ_DRAINED; once their ACKs arrive it does, exactly once,
// while the WR posted in SQD has not started; back in RTS that WR goes out.
func TestSQDrained(t *testing.T) {
	e := newEPair(t, eopts{})
	drained := func() int { return e.a.events.count(transport.EventSQDrained) }
	for i := 1; i <= 2; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 4096)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	}
	if drained() != 0 {
		t.Fatal("drained in RTS")
	}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD}, transport.AttrState, e.now))
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	if drained() != 0 {
		t.Fatal("drained with two WRITEs unacknowledged")
	}
	e.run(0)
	if w := e.a.scq.take(); len(w) != 2 || w[1].WRID != 2 {
		t.Fatalf("completions in SQD %v, want WRs 1 and 2", w)
	}
	if n := drained(); n != 1 {
		t.Fatalf("SQ_DRAINED reported %d times after the ACKs, want once", n)
	}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateRTS}, transport.AttrState, e.now))
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 3 || w[0].Status != transport.WCSuccess {
		t.Fatalf("after RTS %v", w)
	}
	if n := drained(); n != 1 {
		t.Fatalf("SQ_DRAINED reported %d times in all, want once", n)
	}
	if evs := e.a.events.take(); len(evs) != 1 || evs[0].QPN != e.a.q.QPN() {
		t.Fatalf("events of A %+v, want SQ_DRAINED alone, for its QPN", evs)
	}
}

// TestSQDrainedAtOnce: a QP with nothing outstanding reports SQ_DRAINED as
// it enters SQD, and again after each new entry (SQD → RTS → SQD).
func TestSQDrainedAtOnce(t *testing.T) {
	e := newEPair(t, eopts{})
	for i := 1; i <= 2; i++ {
		must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD}, transport.AttrState, e.now))
		if n := e.a.events.count(transport.EventSQDrained); n != i {
			t.Fatalf("entry %d into SQD: SQ_DRAINED %d times in all, want %d", i, n, i)
		}
		must(t, e.a.q.Modify(&transport.Attr{State: transport.StateRTS}, transport.AttrState, e.now))
	}
}
