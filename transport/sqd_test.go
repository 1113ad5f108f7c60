package transport_test

import (
	"testing"

	"github.com/goroce/goroce/transport"
)

// TestSQDrained: moved to SQD with two WRITEs unacknowledged, the QP is not
// drained; once their ACKs arrive it is, exactly once, while the WR posted
// in SQD has not started; back in RTS that WR goes out.
func TestSQDrained(t *testing.T) {
	e := newEPair(t, eopts{})
	for i := 1; i <= 2; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 4096)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	}
	if e.a.q.SQDrained() {
		t.Fatal("drained in RTS")
	}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD}, transport.AttrState, e.now))
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	if e.a.q.SQDrained() {
		t.Fatal("drained with two WRITEs unacknowledged")
	}
	e.run(0)
	if w := e.a.scq.take(); len(w) != 2 || w[1].WRID != 2 {
		t.Fatalf("completions in SQD %v, want WRs 1 and 2", w)
	}
	if !e.a.q.SQDrained() {
		t.Fatal("not drained after the ACKs")
	}
	if e.a.q.SQDrained() {
		t.Fatal("drained reported twice for one entry into SQD")
	}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateRTS}, transport.AttrState, e.now))
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 3 || w[0].Status != transport.WCSuccess {
		t.Fatalf("after RTS %v", w)
	}
	if e.a.q.SQDrained() {
		t.Fatal("drained reported in RTS")
	}
}
