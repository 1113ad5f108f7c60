package transport_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestAckReqCadence: AckReq is set on the last packet of every message and,
// inside long messages, on the packet for which rxe's
// `qp->req.noack_pkts++ > RXE_MAX_PKT_PER_ACK` (rxe_req.c init_req_packet)
// is true: with RXE_MAX_PKT_PER_ACK = 64 that is the 66th packet after the
// last AckReq. A message end resets the count without incrementing it.
func TestAckReqCadence(t *testing.T) {
	e := newEPair(t, eopts{})
	e.rec = true
	// Two messages: 200 packets and 70 packets.
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 200*1024)},
		RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 70*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	if wcs := e.a.scq.take(); len(wcs) != 1 || wcs[0].WRID != 2 || wcs[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", wcs)
	}
	// rxe model.
	noack := 0
	ackReq := func(end bool) bool {
		if end {
			noack = 0
			return true
		}
		r := noack > transport.MaxPktPerAck
		noack++
		if r {
			noack = 0
		}
		return r
	}
	var want, got []int
	i := 0
	for _, l := range e.log {
		if !l.fromA {
			continue
		}
		end := l.p.Opcode().Info().Pos == wire.PosLast || l.p.Opcode().Info().Pos == wire.PosOnly
		if ackReq(end) {
			want = append(want, i)
		}
		if l.p.BTH.AckReq() {
			got = append(got, i)
		}
		i++
	}
	if i != 270 {
		t.Fatalf("%d request packets, want 270", i)
	}
	if !equalInts(got, want) {
		t.Fatalf("AckReq on packets %v, rxe sets it on %v", got, want)
	}
	// Spelled out: 66th, 132nd, 198th, 200th (end), then 66th of the second.
	if !equalInts(want, []int{65, 131, 197, 199, 265, 269}) {
		t.Fatalf("model %v", want)
	}
	// The responder ACKs exactly the AckReq packets, cumulatively.
	acks := 0
	for _, l := range e.log {
		if !l.fromA {
			acks++
			if l.p.Opcode() != wire.RCAcknowledge || l.p.AETH.Syndrome() != wire.SyndromeACKNoCredit {
				t.Fatalf("response %v", l)
			}
		}
	}
	if acks != len(want) {
		t.Fatalf("%d ACKs for %d AckReq packets", acks, len(want))
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEnginePSNWrap: a WRITE, a READ and a SEND across the 24-bit PSN wrap
// on the fake clock; data arrives, PSNs are consecutive modulo 2^24.
func TestEnginePSNWrap(t *testing.T) {
	e := newEPair(t, eopts{psnA: 0xFFFFF0, psnB: 0xFFFFFD})
	e.rec = true
	for i := range e.a.buf[:40960] {
		e.a.buf[i] = byte(i*7 + 1)
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 20*1024)}, RemoteAddr: e.b.mr.IOVA() + 1, RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(1<<19, 20*1024)}, RemoteAddr: e.b.mr.IOVA() + 1, RKey: e.b.mr.RKey()})
	if err := e.b.q.PostRecv(&transport.RecvWR{WRID: 3, SGL: []transport.SGE{e.b.sge(1<<19, 8192)}}); err != nil {
		t.Fatal(err)
	}
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8192)}})
	e.run(0)
	wcs := e.a.scq.take()
	if len(wcs) != 3 {
		t.Fatalf("completions %v", wcs)
	}
	for i, wc := range wcs {
		if wc.Status != transport.WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %v", wc)
		}
	}
	if !bytes.Equal(e.b.buf[1:1+20*1024], e.a.buf[:20*1024]) || !bytes.Equal(e.a.buf[1<<19:1<<19+20*1024], e.a.buf[:20*1024]) ||
		!bytes.Equal(e.b.buf[1<<19:1<<19+8192], e.a.buf[:8192]) {
		t.Fatal("data differs")
	}
	next := wire.PSN(0xFFFFF0)
	for _, l := range e.log {
		if !l.fromA {
			continue
		}
		if l.p.BTH.PSN() != next {
			t.Fatalf("request %v, want PSN %#x", l, uint32(next))
		}
		n := uint32(1)
		if l.p.Opcode() == wire.RCRDMAReadRequest {
			n = 20
		}
		next = next.Add(n)
	}
	if next != 0x20 || e.a.q.Attr().SQPSN != next {
		t.Fatalf("next PSN %#x (attr %#x), want 0x20", uint32(next), uint32(e.a.q.Attr().SQPSN))
	}
}

// TestWindow: the requester sends PSNs up to comp_psn + RXE_MAX_UNACKED_PSNS
// inclusive and stalls only when req.psn > comp.psn + 128 (rxe_requester),
// i.e. 129 packets are in flight before the first ACK; each ACK reopens it.
func TestWindow(t *testing.T) {
	e := newEPair(t, eopts{})
	// Nothing is delivered until e.run: A's frames wait in its ring.
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 300*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	if n := e.a.out.tail - e.a.out.head; n != transport.MaxUnackedPSNs+1 {
		t.Fatalf("%d packets sent before any ACK, rxe sends %d", n, transport.MaxUnackedPSNs+1)
	}
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
}

// TestSEBit: IBV_SEND_SOLICITED sets BTH.SE only on the last packet of a
// SEND or RDMA_WRITE_WITH_IMM (rxe init_req_packet); a plain WRITE, a READ
// and an atomic never carry it; the receive completion reports it.
func TestSEBit(t *testing.T) {
	e := newEPair(t, eopts{})
	e.rec = true
	for range 2 {
		must(t, e.b.q.PostRecv(&transport.RecvWR{SGL: []transport.SGE{e.b.sge(0, 4096)}}))
	}
	for _, op := range []transport.WROpcode{transport.WRSend, transport.WRRDMAWriteWithImm, transport.WRRDMAWrite,
		transport.WRRDMARead, transport.WRAtomicFetchAdd} {
		e.post(e.a, &transport.SendWR{Opcode: op, Flags: transport.SendSolicited, SGL: []transport.SGE{e.a.sge(8192, 3000)},
			RemoteAddr: e.b.mr.IOVA() + 8192, RKey: e.b.mr.RKey()})
	}
	e.run(0)
	for _, l := range e.log {
		if !l.fromA {
			continue
		}
		op := l.p.Opcode()
		want := (op == wire.RCSendLast || op == wire.RCRDMAWriteLastWithImm)
		if l.p.BTH.SE() != want {
			t.Errorf("%v: SE=%v", l, l.p.BTH.SE())
		}
	}
	w := e.b.rcq.take()
	if len(w) != 2 || w[0].Flags&transport.WCSolicited == 0 || w[1].Flags&transport.WCSolicited == 0 {
		t.Fatalf("receive completions %v", w)
	}
}
