package transport_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// responses returns the frames B sent to A, in order.
func (e *epair) responses() []logged {
	var r []logged
	for _, l := range e.log {
		if !l.fromA {
			r = append(r, l)
		}
	}
	return r
}

func (e *epair) postRecvs(s *side, n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		must(e.t, s.q.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{s.sge(64<<10+i*256, 256)}}))
	}
}

// Ten SENDs with AckReq that arrive in one receive batch get one ACK: the
// last SEND's PSN and the MSN that counts all ten; nine are coalesced.
func TestAckCoalescedBatch(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0x100})
	e.batch, e.rec = true, true
	e.postRecvs(e.b, 10)
	for i := 0; i < 10; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(i*16, 16)}})
	}
	e.run(10)
	resp := e.responses()
	if len(resp) != 1 {
		t.Fatalf("%d responses, want one ACK: %v", len(resp), resp)
	}
	p := &resp[0].p
	if p.Opcode() != wire.RCAcknowledge || p.AETH.Syndrome().Kind() != wire.SynACK || p.BTH.PSN() != 0x100+9 || p.AETH.MSN() != 10 {
		t.Fatalf("response %v MSN %d, want ACK PSN 0x109 MSN 10", resp[0], p.AETH.MSN())
	}
	if got := e.b.q.Counters[transport.CntAckCoalesced]; got != 9 {
		t.Errorf("ack_coalesced %d, want 9", got)
	}
	if n := len(e.a.scq.wcs); n != 10 {
		t.Fatalf("%d send completions, want 10", n)
	}
	for _, wc := range e.a.scq.wcs {
		if wc.Status != transport.WCSuccess {
			t.Fatalf("completion %v", wc)
		}
	}
}

// A NAK in the same batch as an owed ACK comes after it: the ACK for the
// packets before the gap, then the sequence NAK at the lost PSN.
func TestAckOwedBeforeNAK(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0x100})
	e.batch, e.rec = true, true
	e.postRecvs(e.b, 3)
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.a && p.BTH.PSN() == 0x101 && !dropped {
			dropped = true
			return false
		}
		return true
	}
	for i := 0; i < 3; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 16)}})
	}
	e.deliver()
	resp := e.responses()
	if len(resp) < 2 {
		t.Fatalf("responses %v", resp)
	}
	if p := &resp[0].p; p.AETH.Syndrome().Kind() != wire.SynACK || p.BTH.PSN() != 0x100 {
		t.Fatalf("first response %v, want the ACK for PSN 0x100", resp[0])
	}
	if p := &resp[1].p; p.AETH.Syndrome().Kind() != wire.SynNAK || p.AETH.Syndrome().NAK() != wire.NAKPSNSequenceError || p.BTH.PSN() != 0x101 {
		t.Fatalf("second response %v, want the sequence NAK at PSN 0x101", resp[1])
	}
	e.run(10)
	if n := len(e.a.scq.wcs); n != 3 {
		t.Fatalf("%d completions after go-back-N, want 3", n)
	}
}

// An ATOMIC ACK and a READ response are sent while their request is
// handled, not at the end of the batch, and an ACK owed before them
// leaves first.
func TestAtomicAndReadNotDelayed(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0x100})
	e.rec = true
	e.postRecvs(e.b, 1)
	e.post(e.a, &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 16)}})
	e.post(e.a, &transport.SendWR{Opcode: transport.WRAtomicFetchAdd, SGL: []transport.SGE{e.a.sge(64, 8)},
		RemoteAddr: e.b.mr.IOVA() + 128, RKey: e.b.mr.RKey(), CompareAdd: 5})
	e.post(e.a, &transport.SendWR{Opcode: transport.WRRDMARead, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(256, 100)},
		RemoteAddr: e.b.mr.IOVA() + 512, RKey: e.b.mr.RKey()})
	// Hand B the three requests without ending the batch.
	var kinds []wire.Opcode
	for {
		f, ok := e.a.out.pop()
		if !ok {
			break
		}
		must(t, wire.Parse(f, &e.pkt))
		e.b.q.Receive(&e.pkt, e.now)
		for {
			g, ok := e.b.out.pop()
			if !ok {
				break
			}
			var p wire.Packet
			must(t, wire.Parse(g, &p))
			kinds = append(kinds, p.Opcode())
		}
	}
	want := []wire.Opcode{wire.RCAcknowledge, wire.RCAtomicAcknowledge, wire.RCRDMAReadResponseOnly}
	if len(kinds) != len(want) {
		t.Fatalf("B sent %v before the end of the batch, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("B sent %v, want %v", kinds, want)
		}
	}
}

// An owner that never calls EndBatch still gets the ACK: the owed ACK makes
// the deadline now, and Tick sends it.
func TestAckOwedTickSends(t *testing.T) {
	e := newEPair(t, eopts{})
	e.postRecvs(e.b, 1)
	e.post(e.a, &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 16)}})
	f, _ := e.a.out.pop()
	must(t, wire.Parse(f, &e.pkt))
	e.b.q.Receive(&e.pkt, e.now)
	if _, ok := e.b.out.pop(); ok {
		t.Fatal("ACK sent before the end of the batch")
	}
	d, ok := e.b.q.Deadline()
	if !ok || !d.Equal(e.now) {
		t.Fatalf("deadline %v %v, want now", d, ok)
	}
	e.b.q.Tick(e.now)
	g, ok := e.b.out.pop()
	if !ok {
		t.Fatal("Tick sent no ACK")
	}
	must(t, wire.Parse(g, &e.pkt))
	if e.pkt.Opcode() != wire.RCAcknowledge {
		t.Fatalf("Tick sent %v", e.pkt.Opcode())
	}
	if _, ok := e.b.q.Deadline(); ok {
		t.Fatal("deadline left after the ACK")
	}
}

const pacedPkts = 200 // READ response packets at MTU 1024

func pacedRead(t *testing.T) *epair {
	e := newEPair(t, eopts{psnA: 0x100, retry: 7, timeout: 14})
	for i := range e.b.buf[:pacedPkts*1024] {
		e.b.buf[i] = byte(i*31 + 7)
	}
	e.post(e.a, &transport.SendWR{WRID: 9, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, pacedPkts*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	f, ok := e.a.out.pop()
	if !ok {
		t.Fatal("no READ request")
	}
	must(t, wire.Parse(f, &e.pkt))
	e.b.q.Receive(&e.pkt, e.now)
	return e
}

// drain takes the frames s sent, parsed.
func drain(t *testing.T, s *side) []wire.Packet {
	var ps []wire.Packet
	for {
		f, ok := s.out.pop()
		if !ok {
			return ps
		}
		var p wire.Packet
		must(t, wire.Parse(append([]byte(nil), f...), &p))
		ps = append(ps, p)
	}
}

// A READ of 200 packets goes out ResponseBudget packets per engine call;
// the deadline is now while packets are left, and Tick continues.
func TestReadPaced(t *testing.T) {
	e := pacedRead(t)
	sent := 0
	for call := 0; ; call++ {
		ps := drain(t, e.b)
		if want := min(transport.ResponseBudget, pacedPkts-sent); len(ps) != want {
			t.Fatalf("call %d sent %d packets, want %d", call, len(ps), want)
		}
		for i := range ps {
			if ps[i].BTH.PSN() != wire.PSN(0x100+sent+i) {
				t.Fatalf("packet %d has PSN %#x", sent+i, uint32(ps[i].BTH.PSN()))
			}
			e.a.q.Receive(&ps[i], e.now)
		}
		sent += len(ps)
		d, ok := e.b.q.Deadline()
		if sent == pacedPkts {
			if ok {
				t.Fatalf("deadline %v left after the last packet", d)
			}
			break
		}
		if !ok || !d.Equal(e.now) {
			t.Fatalf("after %d packets: deadline %v %v, want now", sent, d, ok)
		}
		e.b.q.Tick(e.now)
	}
	if len(e.a.scq.wcs) != 1 || e.a.scq.wcs[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", e.a.scq.wcs)
	}
	if !bytes.Equal(e.a.buf[:pacedPkts*1024], e.b.buf[:pacedPkts*1024]) {
		t.Fatal("data differs")
	}
}

// A retry of the READ from a PSN inside the response in progress (the
// requester saw a gap) abandons the rest of the old response: the next
// packets continue from the retried PSN with READ_RESPONSE_MIDDLE, and the
// responder sends the message once plus what was in flight, not twice.
func TestReadRestartedByRetry(t *testing.T) {
	e := pacedRead(t)
	ps := drain(t, e.b)
	// Packet 10 is lost; A sees 11 and retries from 10.
	for i := range ps {
		if i != 10 {
			e.a.q.Receive(&ps[i], e.now)
		}
	}
	retry := drain(t, e.a)
	if len(retry) != 1 || !retry[0].Opcode().IsRead() || retry[0].BTH.PSN() != 0x100+10 {
		t.Fatalf("A sent %d frames, want the READ retried at PSN 0x10a", len(retry))
	}
	e.b.q.Receive(&retry[0], e.now)
	total := len(ps)
	next := drain(t, e.b)
	if len(next) == 0 || next[0].BTH.PSN() != 0x100+10 || next[0].Opcode() != wire.RCRDMAReadResponseMiddle {
		t.Fatalf("after the retry B sent %d packets, first %v", len(next), next)
	}
	if got := e.b.q.Counters[transport.CntReadRestarted]; got != 1 {
		t.Errorf("read_restarted %d, want 1", got)
	}
	total += len(next)
	for i := range next {
		e.a.q.Receive(&next[i], e.now)
	}
	for {
		if _, ok := e.b.q.Deadline(); !ok {
			break
		}
		e.b.q.Tick(e.now)
		more := drain(t, e.b)
		total += len(more)
		for i := range more {
			e.a.q.Receive(&more[i], e.now)
		}
	}
	if want := pacedPkts + transport.ResponseBudget - 10; total != want {
		t.Errorf("B sent %d response packets, want %d (the message once, plus the %d in flight after the loss)", total, want, transport.ResponseBudget-10)
	}
	if len(e.a.scq.wcs) != 1 || e.a.scq.wcs[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", e.a.scq.wcs)
	}
	if !bytes.Equal(e.a.buf[:pacedPkts*1024], e.b.buf[:pacedPkts*1024]) {
		t.Fatal("data differs")
	}
}
