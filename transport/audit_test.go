package transport_test

// Tests from the audit of the engine against Linux rxe (docs/rxe-audit.md):
// each pins one behaviour to rxe's, named by the rxe function that has it.

import (
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// injectA delivers a frame built from f, addressed from B to A, straight into
// A's engine, then lets the pair run. It returns what A sent in answer.
func (e *epair) injectA(f wire.Frame, payload []byte) []logged {
	e.t.Helper()
	return e.injectInto(true, f, payload)
}

// A READ whose responder fails mid-way (its MR is invalidated before the
// re-issued READ arrives) ends with REM_ACCESS_ERR at the first NAK, as in
// rxe (check_psn/check_ack since "Handle remote errors in the midst of a
// Read reply"), not by taking the NAK for a lost response and retrying until
// the dead responder has let every retry time out (RETRY_EXC_ERR).
func TestAuditReadErrorNAKMidRead(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 3})
	first := e.a.sqPSN
	lost := first.Add(2)
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.b && p.Opcode().IsReadResponse() && p.BTH.PSN() == lost && !dropped {
			dropped = true
			return false
		}
		if from == e.a && p.Opcode() == wire.RCRDMAReadRequest && p.BTH.PSN() == lost {
			// The re-issued READ: the responder's MR goes away first.
			must(t, e.b.mrs.Invalidate(e.b.mr.RKey(), e.b.pd))
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 4096)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(20)
	w := e.a.scq.take()
	if len(w) != 1 || w[0].WRID != 1 || w[0].Status != transport.WCRemAccessErr {
		t.Fatalf("completions %v, want the READ with REM_ACCESS_ERR", w)
	}
	if e.a.q.State() != transport.StateErr {
		t.Fatalf("requester state %v, want ERR", e.a.q.State())
	}
	if c := e.a.q.Counters[transport.CntLocalAckTimeoutErr]; c != 0 {
		t.Fatalf("%d ACK timeouts, want 0: the NAK ends the READ", c)
	}
}

// rxe's responder NAKs a READ that fails mid-way at the READ request's PSN
// (read_reply → do_class_ac_error → send_ack(pkt->psn)), which is before
// the responses already received. That NAK must end the READ, not be taken
// for a stale response.
func TestAuditReadErrorNAKAtRequestPSN(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 3})
	first := e.a.sqPSN
	e.hook = func(from *side, p *wire.Packet) bool {
		// B answers only the first two of the four responses.
		return !(from == e.b && p.Opcode().IsReadResponse() && p.BTH.PSN().Diff(first) >= 2)
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 4096)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.deliver()
	e.hook = nil
	e.injectA(wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: first},
		AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccessError), MSN: 1}}, nil)
	w := e.a.scq.take()
	if len(w) != 1 || w[0].Status != transport.WCRemAccessErr || e.a.q.State() != transport.StateErr {
		t.Fatalf("completions %v, state %v: want REM_ACCESS_ERR and ERR", w, e.a.q.State())
	}
}

// A READ response for a WQE that is not a READ completes it with FATAL_ERR
// and moves the QP to ERR (rxe check_ack); it is not ignored.
func TestAuditReadResponseOnSend(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 3})
	e.hook = func(from *side, p *wire.Packet) bool { return from != e.b } // B's ACK is lost
	e.post(e.a, &transport.SendWR{WRID: 7, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 64)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.deliver()
	e.hook = nil
	e.injectA(wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseOnly, PSN: e.a.sqPSN},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 1}}, make([]byte, 64))
	w := e.a.scq.take()
	if len(w) != 1 || w[0].WRID != 7 || w[0].Status != transport.WCFatalErr || e.a.q.State() != transport.StateErr {
		t.Fatalf("completions %v, state %v: want the WRITE with FATAL_ERR and ERR", w, e.a.q.State())
	}
}

// A duplicated sequence NAK starts one go-back-N, not two: rxe does not
// stack retries (COMPST_ERROR_RETRY ignores a retry request while one is
// started and no response has been accepted since, unless the timer fired).
// The copy must neither resend the window again nor spend a second unit of
// retry_cnt.
func TestAuditDuplicateSeqNAK(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 3})
	lost := e.a.sqPSN.Add(4)
	var sent []wire.PSN
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.a {
			sent = append(sent, p.BTH.PSN())
			if p.BTH.PSN() == lost && !dropped {
				dropped = true
				return false
			}
		}
		if from == e.b && p.AETH != nil && p.AETH.Syndrome().Kind() == wire.SynNAK {
			e.a.q.Receive(p, e.now) // the network delivers the NAK twice
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 10*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(10)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
	if len(sent) != 16 {
		t.Fatalf("A sent PSNs %v (%d frames), want 0..9 then 4..9 once", sent, len(sent))
	}
	if c := e.a.q.Counters[transport.CntCompleterRetryErr]; c != 1 {
		t.Fatalf("completer_retry_err %d, want 1", c)
	}
}

// rxeAckReq is rxe's init_req_packet rule, applied to every request packet
// in transmission order, retransmissions included:
// ack_req = END || (noack_pkts++ > RXE_MAX_PKT_PER_ACK); if ack_req, noack_pkts = 0.
type rxeAckReq struct{ noack int }

func (m *rxeAckReq) next(op wire.Opcode) bool {
	pos := op.Info().Pos
	ack := pos == wire.PosLast || pos == wire.PosOnly
	if !ack {
		ack = m.noack > transport.MaxPktPerAck
		m.noack++
	}
	if ack {
		m.noack = 0
	}
	return ack
}

// AckReq falls on exactly the packets rxe would mark, also after a
// go-back-N: rxe's req_retry leaves noack_pkts alone, so the count runs on
// through the resent packets; the retry does not restart it.
func TestAuditAckReqAcrossRetry(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 3})
	lost := e.a.sqPSN.Add(100)
	var model rxeAckReq
	dropped, n, acks := false, 0, 0
	e.hook = func(from *side, p *wire.Packet) bool {
		if from != e.a {
			return true
		}
		want := model.next(p.Opcode())
		if p.BTH.AckReq() != want {
			t.Errorf("packet %d (%v PSN +%d): AckReq %v, rxe sets %v", n, p.Opcode(), p.BTH.PSN().Diff(e.a.sqPSN), p.BTH.AckReq(), want)
		}
		if want {
			acks++
		}
		n++
		if p.BTH.PSN() == lost && !dropped {
			dropped = true
			return false
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 300*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 200*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(10)
	if w := e.a.scq.take(); len(w) != 2 || w[0].Status != transport.WCSuccess || w[1].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
	if !dropped || n <= 500 || acks < 8 {
		t.Fatalf("%d packets, %d with AckReq, lost PSN dropped %v: the test did not exercise a retry", n, acks, dropped)
	}
}

// A duplicate SEND/WRITE is acknowledged at the PSN of the last SEND, WRITE
// or atomic packet executed (rxe duplicate_request: resp.ack_psn - 1), not
// at expected PSN - 1: a READ executed since does not move it. Acknowledging
// a READ's last PSN would make a requester whose READ responses are still
// missing start a needless go-back-N.
func TestAuditDuplicateAckPSNSkipsReads(t *testing.T) {
	e := newEPair(t, eopts{})
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(8192, 4096)}}))
	e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, make([]byte, 8))
	got := e.inject(wire.Frame{BTH: bth(wire.RCRDMAReadRequest, 1),
		RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), DMALen: 2048}}, nil)
	if len(got) != 2 {
		t.Fatalf("READ answers %v, want two responses", got)
	}
	got = e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, make([]byte, 8))
	if len(got) != 1 || got[0].p.Opcode() != wire.RCAcknowledge || got[0].p.AETH.Syndrome() != wire.SyndromeACKNoCredit ||
		got[0].p.BTH.PSN() != 0 {
		t.Fatalf("answer to the duplicate SEND %v, want an ACK at PSN 0 (the SEND), not 2 (the READ's last)", got)
	}
	if w := e.b.rcq.take(); len(w) != 1 {
		t.Fatalf("RECV completions %v, want the one SEND", w)
	}
}

// Responder check order for atomics and WRITE_ONLY: rxe's check_rkey
// (R_Key and range: NAK 0x62) runs before the atomic alignment check
// (rxe_mr_do_atomic_op: NAK 0x61) and before the WRITE payload/RETH length
// comparison (also in check_rkey, after the range).
func TestAuditRKeyBeforeAlignmentAndLength(t *testing.T) {
	for _, c := range []struct {
		name    string
		f       func(e *epair) wire.Frame
		payload int
	}{
		{"atomic_misaligned_bad_rkey", func(e *epair) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCFetchAdd, 0),
				AtomicETH: wire.AtomicETHFields{VA: e.b.mr.IOVA() + 4, RKey: e.b.mr.RKey() ^ 1, SwapAdd: 1}}
		}, 0},
		{"atomic_misaligned_out_of_range", func(e *epair) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCCompareSwap, 0),
				AtomicETH: wire.AtomicETHFields{VA: e.b.mr.IOVA() + uint64(len(e.b.buf)) - 4, RKey: e.b.mr.RKey()}}
		}, 0},
		{"write_only_length_mismatch_bad_rkey", func(e *epair) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAWriteOnly, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey() ^ 1, DMALen: 100}}
		}, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, eopts{})
			got := e.inject(c.f(e), make([]byte, c.payload))
			want := wire.NAKSyndrome(wire.NAKRemoteAccessError)
			if len(got) != 1 || got[0].p.Opcode() != wire.RCAcknowledge || got[0].p.AETH.Syndrome() != want {
				t.Fatalf("answers %v, want NAK %#x", got, uint8(want))
			}
			if e.b.q.State() != transport.StateErr {
				t.Fatalf("responder state %v, want ERR", e.b.q.State())
			}
		})
	}
	// Aligned and in range, the misalignment alone is still an invalid request.
	e := newEPair(t, eopts{})
	got := e.inject(wire.Frame{BTH: bth(wire.RCFetchAdd, 0),
		AtomicETH: wire.AtomicETHFields{VA: e.b.mr.IOVA() + 4, RKey: e.b.mr.RKey(), SwapAdd: 1}}, nil)
	if len(got) != 1 || got[0].p.AETH.Syndrome() != wire.NAKSyndrome(wire.NAKInvalidRequest) {
		t.Fatalf("misaligned atomic: answers %v, want NAK 0x61", got)
	}
}

// rxe rounds max_dest_rd_atomic up to a power of two (rxe_qp_from_attr:
// roundup_pow_of_two) and so does its requester with max_rd_atomic: an rxe
// peer set to 3 keeps up to 4 READs/atomics in flight. goroce's responder
// remembers as many, so a duplicate of the oldest is still answered.
func TestAuditDestRdAtomicRounding(t *testing.T) {
	e := newEPair(t, eopts{maxRdAtomic: 3})
	read := func(psn wire.PSN) []logged {
		return e.inject(wire.Frame{BTH: bth(wire.RCRDMAReadRequest, psn),
			RETH: wire.RETHFields{VA: e.b.mr.IOVA() + uint64(psn)*8, RKey: e.b.mr.RKey(), DMALen: 8}}, nil)
	}
	for psn := wire.PSN(0); psn < 4; psn++ {
		if got := read(psn); len(got) != 1 {
			t.Fatalf("READ %d: answers %v", psn, got)
		}
	}
	if got := read(0); len(got) != 1 || got[0].p.Opcode() != wire.RCRDMAReadResponseOnly || got[0].p.BTH.PSN() != 0 {
		t.Fatalf("duplicate of the oldest of 4 READs (max_dest_rd_atomic 3): answers %v, want its READ_RESPONSE_ONLY", got)
	}
	fadd := func(psn wire.PSN) []logged {
		return e.inject(wire.Frame{BTH: bth(wire.RCFetchAdd, psn),
			AtomicETH: wire.AtomicETHFields{VA: e.b.mr.IOVA() + 4096, RKey: e.b.mr.RKey(), SwapAdd: 1}}, nil)
	}
	for psn := wire.PSN(4); psn < 8; psn++ {
		if got := fadd(psn); len(got) != 1 {
			t.Fatalf("FETCH_ADD %d: answers %v", psn, got)
		}
	}
	if got := fadd(4); len(got) != 1 || got[0].p.Opcode() != wire.RCAtomicAcknowledge || got[0].p.AtomicAckETH.OrigValue() != 0 {
		t.Fatalf("duplicate of the oldest of 4 atomics: answers %v, want its ATOMIC_ACK with 0", got)
	}
	if v := e.b.buf[4096]; v != 4 {
		t.Fatalf("counter %d, want 4 (the duplicate not executed)", v)
	}
}

// SEND_WITH_INVALIDATE naming a key that cannot be invalidated (class J):
// rxe's execute returns before counting the message in the MSN, so the ACK
// it still sends (acknowledge: no NAK syndrome, AckReq set) carries the MSN
// without it; the RECV completes with REM_INV_REQ_ERR and the QP goes to ERR.
func TestAuditInvalidateFailureMSN(t *testing.T) {
	e := newEPair(t, eopts{})
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(8192, 4096)}}))
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 2, SGL: []transport.SGE{e.b.sge(8192, 4096)}}))
	if got := e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, make([]byte, 8)); len(got) != 1 || got[0].p.AETH.MSN() != 1 {
		t.Fatalf("first SEND: answers %v, want an ACK with MSN 1", got)
	}
	got := e.inject(wire.Frame{BTH: bth(wire.RCSendOnlyWithInvalidate, 1), IETH: 0x7F0000}, make([]byte, 8))
	if len(got) != 1 || got[0].p.Opcode() != wire.RCAcknowledge || got[0].p.AETH.Syndrome() != wire.SyndromeACKNoCredit ||
		got[0].p.BTH.PSN() != 1 || got[0].p.AETH.MSN() != 1 {
		t.Fatalf("SEND_WITH_INV with a bad rkey: answers %v, want an ACK at PSN 1 with MSN still 1", got)
	}
	w := e.b.rcq.take()
	if len(w) != 2 || w[1].WRID != 2 || w[1].Status != transport.WCRemInvReqErr || e.b.q.State() != transport.StateErr {
		t.Fatalf("RECV completions %v, state %v", w, e.b.q.State())
	}
}

// out_of_seq_request counts the gaps NAKed, not the packets dropped: rxe's
// check_psn increments RXE_CNT_OUT_OF_SEQ_REQ only when it sends the one
// sequence NAK of a gap (sent_psn_nak).
func TestAuditOutOfSeqCounter(t *testing.T) {
	e := newEPair(t, eopts{})
	for i := wire.PSN(5); i < 8; i++ {
		e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, i)}, make([]byte, 8))
	}
	c := e.b.q.Counters
	if c[transport.CntOutOfSeqRequest] != 1 || c[transport.CntSentNAKs] != 1 {
		t.Fatalf("out_of_seq_request=%d sent_naks=%d after 3 packets of one gap, want 1 and 1",
			c[transport.CntOutOfSeqRequest], c[transport.CntSentNAKs])
	}
}

// rcvd_pkts counts the packets that passed the receive checks (rxe_rcv
// increments RXE_CNT_RCVD_PKTS after hdr_check); a packet for a QP in the
// wrong state, or from another address, is not received.
func TestAuditRcvdPktsAfterChecks(t *testing.T) {
	e := newEPair(t, eopts{})
	e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 5)}, make([]byte, 8)) // out of sequence: received, NAKed
	must(t, e.b.q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, e.now))
	e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, make([]byte, 8)) // ERR: dropped
	c := e.b.q.Counters
	if c[transport.CntRcvdPkts] != 1 || c[transport.CntRcvdWrongState] != 1 {
		t.Fatalf("rcvd_pkts=%d rcvd_wrong_state=%d, want 1 and 1", c[transport.CntRcvdPkts], c[transport.CntRcvdWrongState])
	}
}

// The outer headers are rxe's (rxe_net.c prepare4, rxe_verbs.c
// rxe_modify_qp): IPv4 TOS = grh.traffic_class, TTL = grh.hop_limit, DF set,
// UDP destination 4791 with checksum 0, and source port
// rdma_get_udp_sport(flow_label, qpn, dest_qpn) — from the QPN hash, or from
// the AV's flow label when it has one.
func TestAuditOuterHeaders(t *testing.T) {
	e := newEPair(t, eopts{})
	av := transport.AV{DGID: e.b.ip, SGID: e.a.ip, HopLimit: 9, TrafficClass: 0x6A, FlowLabel: 0x12345,
		DMAC: e.b.mac, SMAC: e.a.mac}
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD}, transport.AttrState, e.now))
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateSQD, AV: av}, transport.AttrState|transport.AttrAV, e.now))
	must(t, e.a.q.Modify(&transport.Attr{State: transport.StateRTS}, transport.AttrState, e.now))
	type hdr struct {
		tos, ttl     uint8
		df           bool
		sport, dport uint16
		csum         uint16
	}
	var fromA, fromB []hdr
	e.hook = func(from *side, p *wire.Packet) bool {
		h := hdr{p.IPv4.TOS(), p.IPv4.TTL(), p.IPv4.DF(), p.UDP.SrcPort(), p.UDP.DstPort(), p.UDP.Checksum()}
		if from == e.a {
			fromA = append(fromA, h)
		} else {
			fromB = append(fromB, h)
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 3000)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	wantA := hdr{0x6A, 9, true, wire.FlowLabelToUDPSport(0x12345), 4791, 0}
	wantB := hdr{0, 64, true, wire.RCSourcePort(e.b.q.QPN(), e.a.q.QPN()), 4791, 0}
	if len(fromA) != 3 || len(fromB) != 1 {
		t.Fatalf("%d frames from A, %d from B, want 3 and 1", len(fromA), len(fromB))
	}
	for _, h := range fromA {
		if h != wantA {
			t.Fatalf("A's headers %+v, want %+v", h, wantA)
		}
	}
	if fromB[0] != wantB || wantB.sport != wire.RCSourcePort(e.a.q.QPN(), e.b.q.QPN()) {
		t.Fatalf("B's ACK headers %+v, want %+v (the same hash both ways)", fromB[0], wantB)
	}
}

// Inline data up to rxe's RXE_MAX_INLINE_DATA (400 bytes) is accepted and
// copied at post time; one byte more is EINVAL (rxe validate_send_wr).
func TestAuditInlineLimit(t *testing.T) {
	e := newEPair(t, eopts{})
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(8192, 4096)}}))
	for i := range 400 {
		e.a.buf[i] = byte(i*3 + 1)
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendInline | transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 400)}})
	clear(e.a.buf[:400]) // the buffer may be reused once PostSend returns
	e.run(0)
	if w := e.b.rcq.take(); len(w) != 1 || w[0].ByteLen != 400 || e.b.buf[8192+399] != byte((399*3+1)%256) {
		t.Fatalf("receiver %v", w)
	}
	if err := e.a.q.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendInline,
		SGL: []transport.SGE{e.a.sge(0, 401)}}, e.now); err == nil {
		t.Fatal("401 inline bytes accepted")
	}
}
