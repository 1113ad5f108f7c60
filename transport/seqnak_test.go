package transport_test

import (
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestSendSequenceNAKAsRXE is the responder's side of the sequence the Linux
// 6.1 kernel NVMe host stalls on under loss (docs/nvmeof.md): six one-packet
// SENDs in flight, the fourth lost. The responder answers as rxe_resp.c
// does: one PSN-sequence NAK carrying the expected PSN and the MSN of the
// messages completed (check_psn's sent_psn_nak, send_ack(qp,
// AETH_NAK_PSN_SEQ_ERROR, qp->resp.psn)), nothing to the later SENDs of the
// same gap, and an ACK of the resent SEND at its own PSN with the MSN one
// higher. Every RECV then completes once, in order.
func TestSendSequenceNAKAsRXE(t *testing.T) {
	const psn0, lost, sends = 100, 103, 6
	e := newEPair(t, eopts{psnA: psn0, timeout: 10, retry: 7})
	e.rec = true
	for i := range sends {
		must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{e.b.sge(8192+i*64, 64)}}))
	}
	dropped := false
	e.hook = func(s *side, p *wire.Packet) bool {
		if s == e.a && p.BTH.PSN() == lost && !dropped {
			dropped = true
			return false
		}
		return true
	}
	for i := range sends {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(i*64, 64)}})
	}
	e.run(10)
	if !dropped {
		t.Fatal("the SEND at PSN 103 was never sent")
	}

	// The log is in delivery order: the requester's frames of a round, then
	// the responder's answers to them.
	nak, resent, acked := -1, -1, false
	for i, l := range e.log {
		switch {
		case l.fromA:
			if nak >= 0 && resent < 0 && l.p.BTH.PSN() == lost {
				resent = i
			}
		case l.p.AETH == nil:
			t.Fatalf("#%d: a responder frame without AETH: %v", i, l.p.BTH)
		case l.p.AETH.Syndrome() == wire.NAKSyndrome(wire.NAKPSNSequenceError):
			if nak >= 0 {
				t.Fatalf("a second sequence NAK at #%d (first #%d)", i, nak)
			}
			nak = i
			if l.p.BTH.PSN() != lost || l.p.AETH.MSN() != uint32(lost-psn0) {
				t.Fatalf("NAK PSN %d MSN %d, want PSN %d MSN %d (rxe: the expected PSN, the messages completed)", l.p.BTH.PSN(), l.p.AETH.MSN(), lost, lost-psn0)
			}
		case resent < 0:
			// Before the resent SEND: ACKs of the SENDs before the gap only;
			// the SENDs after it are dropped without an answer.
			if !l.p.AETH.Syndrome().IsACK() || l.p.BTH.PSN() >= lost {
				t.Fatalf("#%d: the responder answered %v %v before the resent SEND; rxe drops the rest of the gap silently", i, l.p.BTH.PSN(), l.p.AETH.Syndrome())
			}
		case !acked:
			if l.p.BTH.PSN() != lost || l.p.AETH.MSN() != uint32(lost-psn0+1) || !l.p.AETH.Syndrome().IsACK() {
				t.Fatalf("first response after the resent SEND: PSN %d MSN %d %v, want an ACK at PSN %d MSN %d", l.p.BTH.PSN(), l.p.AETH.MSN(), l.p.AETH.Syndrome(), lost, lost-psn0+1)
			}
			acked = true
		}
	}
	if nak < 0 || resent < 0 || !acked {
		t.Fatalf("NAK at #%d, resent SEND at #%d, its ACK seen: %v", nak, resent, acked)
	}
	if w := e.b.rcq.take(); len(w) != sends {
		t.Fatalf("%d receive completions, want %d: %v", len(w), sends, w)
	} else {
		for i, c := range w {
			if c.WRID != uint64(i) || c.Status != transport.WCSuccess {
				t.Fatalf("receive completion %d: %+v", i, c)
			}
		}
	}
}
