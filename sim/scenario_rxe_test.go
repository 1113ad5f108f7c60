package sim_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// Scenarios from the audit against Linux rxe (docs/rxe-audit.md): whole
// devices on the simulated link, with exact expectations on the wire.

// newRxeScen is newScen with a chosen path MTU and memory size per side.
func newRxeScen(t *testing.T, opts qp.ConnectOptions, mtu qp.MTU, memSize int) *scen {
	s := &scen{t: t}
	n := simtest.NewPair(t, sim.Config{Seed: 1})
	s.n = n
	n.A.Link.SetFaults(nic.Faults{Filter: record(n.Clock(), &s.ab, &s.dropAB)})
	n.B.Link.SetFaults(nic.Faults{Filter: record(n.Clock(), &s.ba, &s.dropBA)})
	o := sim.QPOptions{BufSize: memSize, CQSize: 256, SharedCQ: true, Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16},
		Connect: opts, PathMTU: mtu}
	oa, ob := o, o
	oa.Connect.SQPSN, ob.Connect.SQPSN = scenSQPSN, scenRQPSN
	a, b := simtest.ConnectQPs(t, n, oa, ob)
	s.a, s.b = scenEndOf(a), scenEndOf(b)
	return s
}

// A SEND and a READ are answered, but every answer of the first round is
// lost; after one ACK timeout the requester resends both. The responder
// acknowledges the duplicate SEND at the SEND's PSN (rxe duplicate_request:
// resp.ack_psn - 1), not at the READ's last PSN, and replays the READ. So
// the requester completes both with exactly one retry: two READ requests on
// the wire, not three (an ACK past the READ made it take the READ's
// responses for lost and re-issue it once more).
func TestScenarioRxeDuplicateAckAfterRead(t *testing.T) {
	s := newScen(t, qp.ConnectOptions{Timeout: 10}, false)
	timeout := time.Duration(4096<<10) * time.Nanosecond
	s.dropBA = func(x sent, _ []sent) bool { return x.at < timeout }
	for i := 0; i < 4096; i++ {
		s.b.mem[8192+i] = byte(i*11 + 5)
	}
	if err := s.b.qp.PostRecv(&qp.RecvWR{WRID: 50, SGL: []qp.SGE{s.b.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []qp.SGE{s.a.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.a.qp.PostSend(&qp.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []qp.SGE{s.a.sge(4096, 4096)}, RemoteAddr: s.b.mr.IOVA() + 8192, RKey: s.b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint64{1, 2} {
		if wc := s.waitWC(s.a.cq); wc.WRID != want || wc.Status != transport.WCSuccess {
			t.Fatalf("completion %v, want wr %d SUCCESS", wc, want)
		}
	}
	if !bytes.Equal(s.a.mem[4096:8192], s.b.mem[8192:12288]) {
		t.Fatal("READ data differs")
	}
	var reads, acks []sent
	for _, x := range s.ab {
		if x.op == wire.RCRDMAReadRequest {
			reads = append(reads, x)
		}
	}
	for _, x := range s.ba {
		if x.op == wire.RCAcknowledge && !x.dropped {
			acks = append(acks, x)
		}
	}
	if len(reads) != 2 {
		t.Fatalf("%d READ requests on the wire, want 2 (the original and one after the timeout): %+v", len(reads), reads)
	}
	if len(acks) != 1 || acks[0].psn != scenSQPSN {
		t.Fatalf("delivered ACKs %+v, want one, for the duplicate SEND at PSN %#x", acks, scenSQPSN)
	}
	if c := s.n.A.Dev.Counters(); c[transport.CntCompleterRetryErr] != 1 || c[transport.CntLocalAckTimeoutErr] != 1 {
		t.Fatalf("completer_retry_err=%d local_ack_timeout_err=%d, want 1 and 1",
			c[transport.CntCompleterRetryErr], c[transport.CntLocalAckTimeoutErr])
	}
}

// rxeAckModel is rxe's init_req_packet AckReq rule over the request packets
// of one QP in transmission order, retransmissions included.
type rxeAckModel struct{ noack int }

func (m *rxeAckModel) next(op wire.Opcode) bool {
	pos := op.Info().Pos
	ack := pos == wire.PosLast || pos == wire.PosOnly
	if !ack {
		ack = m.noack > transport.MaxPktPerAck // noack_pkts++ > RXE_MAX_PKT_PER_ACK
		m.noack++
	}
	if ack {
		m.noack = 0
	}
	return ack
}

// Two long WRITEs (240 packets each at path MTU 256) with a packet lost in
// each: on the wire, every request packet — first transmissions and
// go-back-N resends alike — carries AckReq exactly where rxe would set it,
// and at most 129 PSNs are ever unacknowledged (rxe stalls on
// psn_compare(req.psn, comp.psn + RXE_MAX_UNACKED_PSNS) > 0).
func TestScenarioRxeAckReqAndWindow(t *testing.T) {
	const pkts = 240
	s := newRxeScen(t, qp.ConnectOptions{Timeout: 12}, transport.MTU256, pkts*256)
	lost := map[wire.PSN]bool{scenSQPSN + 100: true, scenSQPSN + pkts + 60: true}
	var model rxeAckModel
	acked := wire.PSN(scenSQPSN) // one past the highest PSN acknowledged on the wire
	var bad []string
	sent, maxOut := 0, 0
	s.n.A.Link.SetFaults(nic.Faults{Filter: func(frame []byte) bool {
		var p wire.Packet
		if wire.Parse(frame, &p) != nil {
			return false
		}
		sent++
		psn := p.BTH.PSN()
		if want := model.next(p.Opcode()); p.BTH.AckReq() != want && len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("%v at +%d (frame %d): AckReq %v", p.Opcode(), psn.Diff(scenSQPSN), sent, p.BTH.AckReq()))
		}
		maxOut = max(maxOut, int(psn.Diff(acked))+1)
		if lost[psn] {
			delete(lost, psn)
			return true
		}
		return false
	}})
	s.n.B.Link.SetFaults(nic.Faults{Filter: func(frame []byte) bool {
		var p wire.Packet
		if wire.Parse(frame, &p) != nil || p.AETH == nil {
			return false
		}
		next := p.BTH.PSN().Add(1) // an ACK acknowledges its PSN
		if syn := p.AETH.Syndrome(); syn.Kind() == wire.SynNAK && syn.NAK() == wire.NAKPSNSequenceError {
			next = p.BTH.PSN() // a sequence NAK everything before its PSN
		} else if syn.Kind() != wire.SynACK {
			return false
		}
		if next.After(acked) {
			acked = next
		}
		return false
	}})
	for i := range s.a.mem {
		s.a.mem[i] = byte(i*7 + 1)
	}
	for i := uint64(1); i <= 2; i++ {
		if err := s.a.qp.PostSend(&qp.SendWR{WRID: i, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{s.a.sge(0, pkts*256)}, RemoteAddr: s.b.mr.IOVA(), RKey: s.b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for want := uint64(1); want <= 2; want++ {
		if wc := s.waitWC(s.a.cq); wc.WRID != want || wc.Status != transport.WCSuccess {
			t.Fatalf("completion %v, want wr %d SUCCESS", wc, want)
		}
	}
	if !bytes.Equal(s.a.mem, s.b.mem) {
		t.Fatal("remote memory differs")
	}
	if len(bad) != 0 {
		t.Fatalf("AckReq differs from rxe's: %v", bad)
	}
	if len(lost) != 0 || sent <= 2*pkts {
		t.Fatalf("%d frames sent, PSNs never dropped %v: no retry happened", sent, lost)
	}
	if maxOut != transport.MaxUnackedPSNs+1 {
		t.Fatalf("at most %d PSNs unacknowledged, want %d (rxe's window)", maxOut, transport.MaxUnackedPSNs+1)
	}
	if c := s.n.A.Dev.Counters(); c[transport.CntRcvdSeqErr] != 2 {
		t.Fatalf("rcvd_seq_err %d, want 2 (one NAK per lost packet)", c[transport.CntRcvdSeqErr])
	}
}
