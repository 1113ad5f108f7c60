package transport_test

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// evString prints events compactly for failure messages.
func evString(evs []transport.Event) string {
	s := ""
	for _, ev := range evs {
		s += fmt.Sprintf("[%v qpn=%#x class=%v status=%v nak=%d syn=%#x] ", ev.Kind, ev.QPN, ev.Class, ev.Status, ev.NAK, uint8(ev.Syndrome))
	}
	return s
}

// TestEventCommEst: a QP in RTR reports COMM_EST when it accepts its
// first packet, once; the QP in RTS (which got the ACKs) reports nothing.
func TestEventCommEst(t *testing.T) {
	e := newEPair(t, eopts{bRTR: true})
	for i := range 2 {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 64)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
		e.run(0)
	}
	if w := e.a.scq.take(); len(w) != 2 || w[1].Status != transport.WCSuccess {
		t.Fatalf("WRITE completions %v", w)
	}
	if evs := e.b.events.take(); len(evs) != 1 || evs[0].Kind != transport.EventCommEst || evs[0].QPN != e.b.q.QPN() {
		t.Fatalf("B's events %s; want one COMM_EST", evString(evs))
	}
	if evs := e.a.events.take(); len(evs) != 0 {
		t.Fatalf("A (RTS) reported %s", evString(evs))
	}
	// Past RTR it never comes again.
	must(t, e.b.q.Modify(&transport.Attr{State: transport.StateRTS, SQPSN: e.b.sqPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic, e.now))
	e.post(e.a, &transport.SendWR{WRID: 9, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 8)},
		RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	if evs := e.b.events.take(); len(evs) != 0 {
		t.Fatalf("B in RTS reported %s", evString(evs))
	}
}

// TestEventCommEstNotAfterRTR: a QP that moved on to RTS before any packet
// never reports COMM_EST.
func TestEventCommEstNotAfterRTR(t *testing.T) {
	e := newEPair(t, eopts{})
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 8)},
		RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	if evs := append(e.a.events.take(), e.b.events.take()...); len(evs) != 0 {
		t.Fatalf("events %s; want none", evString(evs))
	}
}

// TestEventErrorNAK: a WRITE with a bad rkey makes the responder NAK it
// with REMOTE_ACCESS_ERROR and go to ERR: B reports QP_ACCESS_ERR with the
// syndrome it sent, then (it is on an SRQ) LAST_WQE; A reports the error
// with the NAK it received and the status of its failed WR, no affiliated
// class (IBTA reports the requester's side by its completion).
func TestEventErrorNAK(t *testing.T) {
	srq, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 4})
	must(t, err)
	e := newEPair(t, eopts{srqB: srq})
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey() ^ 0x80})
	e.run(0)
	syn := wire.NAKSyndrome(wire.NAKRemoteAccessError)
	evs := e.b.events.take()
	if len(evs) != 2 || evs[0] != (transport.Event{Kind: transport.EventError, QPN: e.b.q.QPN(), Class: transport.ErrorAccess,
		Status: transport.WCRemAccessErr, NAK: transport.NAKSent, Syndrome: syn}) ||
		evs[1] != (transport.Event{Kind: transport.EventLastWQE, QPN: e.b.q.QPN()}) {
		t.Fatalf("B's events %s; want QP_ACCESS_ERR (NAK sent), LAST_WQE", evString(evs))
	}
	evs = e.a.events.take()
	if len(evs) != 1 || evs[0] != (transport.Event{Kind: transport.EventError, QPN: e.a.q.QPN(), Class: transport.ErrorNone,
		Status: transport.WCRemAccessErr, NAK: transport.NAKRcvd, Syndrome: syn}) {
		t.Fatalf("A's events %s; want ERROR (NAK received, REM_ACCESS_ERR)", evString(evs))
	}
	if e.a.q.State() != transport.StateErr || e.b.q.State() != transport.StateErr {
		t.Fatalf("states %v %v, want ERR both", e.a.q.State(), e.b.q.State())
	}
}

// TestEventErrorClasses: each error NAK the responder sends maps to its
// affiliated error: INVALID_REQUEST (a SEND longer than the receive
// buffer) to QP_REQ_ERR; REMOTE_OPERATIONAL_ERROR (a receive WQE with a
// bad lkey) to QP_FATAL.
func TestEventErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sge    func(e *epair) transport.SGE
		class  transport.ErrorClass
		code   wire.NAKCode
		status transport.WCStatus
	}{
		{"too long", func(e *epair) transport.SGE { return e.b.sge(0, 4) }, transport.ErrorRequest, wire.NAKInvalidRequest, transport.WCLocLenErr},
		{"bad lkey", func(e *epair) transport.SGE {
			s := e.b.sge(0, 64)
			s.LKey ^= 0x80
			return s
		}, transport.ErrorFatal, wire.NAKRemoteOperationalError, transport.WCLocProtErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEPair(t, eopts{})
			must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{tc.sge(e)}}))
			e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 16)}})
			e.run(0)
			evs := e.b.events.take()
			if len(evs) != 1 || evs[0].Kind != transport.EventError || evs[0].Class != tc.class ||
				evs[0].NAK != transport.NAKSent || evs[0].Syndrome != wire.NAKSyndrome(tc.code) {
				t.Fatalf("B's events %s; want one ERROR of class %v, NAK %v sent", evString(evs), tc.class, tc.code)
			}
			wcs := e.b.rcq.take()
			if len(wcs) != 1 || wcs[0].Status != evs[0].Status {
				t.Fatalf("B's receive completions %v; the event says status %v", wcs, evs[0].Status)
			}
		})
	}
}

// TestEventErrorLocal: the requester's retries running out is an error
// without a NAK: ERROR with RETRY_EXC_ERR, no class.
func TestEventErrorLocal(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 1})
	e.hook = func(from *side, p *wire.Packet) bool { return false } // the link loses everything
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 8)},
		RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(10)
	evs := e.a.events.take()
	if len(evs) != 1 || evs[0] != (transport.Event{Kind: transport.EventError, QPN: e.a.q.QPN(), Status: transport.WCRetryExcErr}) {
		t.Fatalf("A's events %s; want ERROR, RETRY_EXC_ERR, no NAK", evString(evs))
	}
}

// TestEventLastWQEOnModify: a QP on an SRQ moved to ERR by Modify reports
// LAST_WQE (and no ERROR: nothing failed), once per entry into ERR.
func TestEventLastWQEOnModify(t *testing.T) {
	srq, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 4})
	must(t, err)
	e := newEPair(t, eopts{srqB: srq})
	must(t, e.b.q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, e.now))
	must(t, e.b.q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, e.now))
	if evs := e.b.events.take(); len(evs) != 1 || evs[0] != (transport.Event{Kind: transport.EventLastWQE, QPN: e.b.q.QPN()}) {
		t.Fatalf("events %s; want one LAST_WQE", evString(evs))
	}
	// A QP without an SRQ has no such event.
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, e.now))
	if evs := e.a.events.take(); len(evs) != 0 {
		t.Fatalf("A's events %s; want none", evString(evs))
	}
}

// TestEventSRQLimit: the SRQ's limit event is reported by the QP whose
// message took the WQE below the limit, once per arming.
func TestEventSRQLimit(t *testing.T) {
	srq, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 4, Limit: 2})
	must(t, err)
	e := newEPair(t, eopts{srqB: srq})
	for i := range 4 {
		must(t, srq.Post(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{e.b.sge(i*64, 64)}}))
	}
	send := func() {
		e.post(e.a, &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 8)}})
		e.run(0)
	}
	send() // 3 left
	if n := e.b.events.count(transport.EventSRQLimit); n != 0 {
		t.Fatalf("limit event with 3 WRs left of limit 2")
	}
	send() // 2 left
	send() // 1 left: below
	send() // 0 left: disarmed
	if evs := e.b.events.take(); len(evs) != 1 || evs[0] != (transport.Event{Kind: transport.EventSRQLimit, QPN: e.b.q.QPN()}) {
		t.Fatalf("events %s; want one SRQ_LIMIT", evString(evs))
	}
}

// TestEventNoAlloc: handing an event to the sink allocates nothing.
func TestEventNoAlloc(t *testing.T) {
	e := newEPair(t, eopts{})
	e.a.events.evs = make([]transport.Event, 0, 256) // the recorder itself does not allocate
	sqd, rts := &transport.Attr{State: transport.StateSQD}, &transport.Attr{State: transport.StateRTS}
	allocs := testing.AllocsPerRun(100, func() {
		_ = e.a.q.Modify(sqd, transport.AttrState, e.now) // SQ_DRAINED at once: nothing outstanding
		_ = e.a.q.Modify(rts, transport.AttrState, e.now)
	})
	if n := e.a.events.count(transport.EventSQDrained); allocs != 0 || n != 101 {
		t.Fatalf("%v allocations per event, %d events (want 0, 101)", allocs, n)
	}
}
