package transport_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// receiveAll hands every frame A queued to B as one receive batch, without
// ending it, and returns how many there were.
func (e *epair) receiveAll() int {
	n := 0
	for {
		f, ok := e.a.out.pop()
		if !ok {
			return n
		}
		if err := wire.Parse(f, &e.pkt); err != nil {
			e.t.Fatal(err)
		}
		e.b.q.Receive(&e.pkt, e.now)
		n++
	}
}

// sent returns the frames B queued, parsed, and empties its ring.
func (e *epair) sentByB() []wire.Packet {
	var ps []wire.Packet
	for {
		f, ok := e.b.out.pop()
		if !ok {
			return ps
		}
		var p wire.Packet
		if err := wire.Parse(append([]byte(nil), f...), &p); err != nil {
			e.t.Fatal(err)
		}
		ps = append(ps, p)
	}
}

// A held ACK stays owed, with the hold's end as the QP's deadline; the
// next EndBatch sends it ahead of the request posted in the same pass; a
// later HoldAck does not extend the hold; Tick at the hold's end sends it.
func TestHoldAck(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0x100, psnB: 0x500})
	for i := 0; i < 3; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	}
	if n := e.receiveAll(); n != 3 {
		t.Fatalf("%d frames from A, want 3", n)
	}
	until := e.now.Add(200 * time.Microsecond)
	if !e.b.q.HoldAck(e.now, until) {
		t.Fatal("HoldAck with an ACK owed reported nothing held")
	}
	if ps := e.sentByB(); len(ps) != 0 {
		t.Fatalf("B sent %d frames while holding its ACK", len(ps))
	}
	if d, ok := e.b.q.Deadline(); !ok || !d.Equal(until) {
		t.Fatalf("deadline %v %v while holding, want the hold's end %v", d, ok, until)
	}
	// The application answers: its WRITE and the ACK in one pass, ACK first.
	e.b.q.EndBatch(e.now)
	e.post(e.b, &transport.SendWR{WRID: 7, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.b.sge(0, 8)}, RemoteAddr: e.a.mr.IOVA(), RKey: e.a.mr.RKey()})
	ps := e.sentByB()
	if len(ps) != 2 || ps[0].Opcode() != wire.RCAcknowledge || ps[0].BTH.PSN() != 0x102 || ps[0].AETH.MSN() != 3 ||
		ps[1].Opcode() != wire.RCRDMAWriteOnly || ps[1].BTH.PSN() != 0x500 {
		t.Fatalf("B sent %v, want the ACK of PSN 0x102 (MSN 3), then its WRITE at 0x500", ps)
	}

	// A second batch is held, and a later hold keeps the earlier end.
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.receiveAll()
	until = e.now.Add(200 * time.Microsecond)
	e.b.q.HoldAck(e.now, until)
	e.now = e.now.Add(50 * time.Microsecond)
	e.b.q.HoldAck(e.now, e.now.Add(200*time.Microsecond))
	if d, _ := e.b.q.Deadline(); !d.Equal(until) {
		t.Fatalf("deadline %v after a second hold, want the first hold's end %v", d, until)
	}
	e.now = until.Add(-time.Nanosecond)
	e.b.q.Tick(e.now)
	if ps := e.sentByB(); len(ps) != 0 {
		t.Fatalf("B sent %d frames before the hold's end", len(ps))
	}
	e.now = until
	e.b.q.Tick(e.now)
	if ps := e.sentByB(); len(ps) != 1 || ps[0].Opcode() != wire.RCAcknowledge || ps[0].BTH.PSN() != 0x103 {
		t.Fatalf("at the hold's end B sent %v, want the ACK of PSN 0x103", ps)
	}
	if _, ok := e.b.q.Deadline(); ok {
		t.Fatal("B still has a deadline after its held ACK left")
	}
}

// Nothing to hold: a batch that owes no ACK holds nothing, and a READ
// response is never held (it and the owed ACK before it leave at once).
func TestHoldAckNeverHoldsResponses(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0x100})
	if e.b.q.HoldAck(e.now, e.now.Add(time.Millisecond)) {
		t.Fatal("HoldAck with nothing owed reported a held ACK")
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(64, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.receiveAll()
	if e.b.q.HoldAck(e.now, e.now.Add(time.Millisecond)) {
		t.Fatal("an ACK is held after a READ request")
	}
	ps := e.sentByB()
	if len(ps) != 2 || ps[0].Opcode() != wire.RCAcknowledge || ps[0].BTH.PSN() != 0x100 || ps[1].Opcode() != wire.RCRDMAReadResponseOnly {
		t.Fatalf("B sent %v, want the WRITE's ACK, then the READ response", ps)
	}
}
