package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestQueueFull: the send queue holds exactly MaxSendWR WRs; one more is
// ErrQueueFull and is not queued.
func TestQueueFull(t *testing.T) {
	e := newEPair(t, eopts{sqWR: 8})
	for i := 0; i < 8; i++ {
		e.post(e.a, &transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	}
	err := e.a.q.PostSend(&transport.SendWR{WRID: 99, Opcode: transport.WRSend}, e.now)
	if !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("ninth post: %v", err)
	}
	e.run(0)
	if w := e.a.scq.take(); len(w) != 8 || w[7].WRID != 7 {
		t.Fatalf("completions %v", w)
	}
	e.post(e.a, &transport.SendWR{WRID: 9, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
}

// TestFence: a WR with IBV_SEND_FENCE waits until the READ before it has
// completed; an unfenced one does not.
func TestFence(t *testing.T) {
	for _, fence := range []bool{false, true} {
		e := newEPair(t, eopts{})
		e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 64)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
		f := transport.SendSignaled
		if fence {
			f |= transport.SendFence
		}
		e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: f,
			SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
		if n, want := e.a.out.tail-e.a.out.head, map[bool]int{false: 2, true: 1}[fence]; n != want {
			t.Fatalf("fence=%v: %d frames before the READ completed, want %d", fence, n, want)
		}
		e.run(0)
		if w := e.a.scq.take(); len(w) != 2 || w[0].WRID != 1 || w[1].WRID != 2 || w[1].Status != transport.WCSuccess {
			t.Fatalf("completions %v", w)
		}
	}
}

// TestRetryExceeded: with every request lost, the ACK timer fires
// retry_cnt times (each a go-back-N retransmission), then the WR fails
// with RETRY_EXC_ERR and the QP goes to ERR.
func TestRetryExceeded(t *testing.T) {
	for _, retry := range []uint8{0, 3} {
		e := newEPair(t, eopts{timeout: 10, retry: retry})
		sent := 0
		e.hook = func(s *side, p *wire.Packet) bool {
			if s == e.a {
				sent++
				return false
			}
			return true
		}
		e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
		e.run(20)
		if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCRetryExcErr {
			t.Fatalf("retry_cnt %d: completions %v", retry, w)
		}
		if sent != int(retry)+1 || e.a.q.State() != transport.StateErr {
			t.Fatalf("retry_cnt %d: %d transmissions, state %v", retry, sent, e.a.q.State())
		}
		if c := e.a.q.Counters; c[transport.CntRetryExceededErr] != 1 || c[transport.CntLocalAckTimeoutErr] != uint64(retry)+1 {
			t.Fatalf("counters retry_exceeded_err %d local_ack_timeout_err %d", c[transport.CntRetryExceededErr], c[transport.CntLocalAckTimeoutErr])
		}
	}
}

// TestDuplicateAtomic: when the ATOMIC ACK is lost, the requester resends
// the atomic; the responder answers from its saved result and does not
// execute it twice (C9-107, rxe duplicate_request).
func TestDuplicateAtomic(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 7})
	binary.LittleEndian.PutUint64(e.b.buf[64:], 100)
	dropped := 0
	e.hook = func(s *side, p *wire.Packet) bool {
		if s == e.b && p.Opcode() == wire.RCAtomicAcknowledge && dropped < 2 {
			dropped++
			return false
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA() + 64, RKey: e.b.mr.RKey(), CompareAdd: 5})
	e.run(10)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
	if v := binary.LittleEndian.Uint64(e.b.buf[64:]); v != 105 {
		t.Fatalf("target %d, want 105 (executed once)", v)
	}
	if v := binary.LittleEndian.Uint64(e.a.buf[0:]); v != 100 {
		t.Fatalf("result %d, want the original 100", v)
	}
	if d := e.b.q.Counters[transport.CntDuplicateRequest]; d != 2 {
		t.Fatalf("duplicate_request %d, want 2", d)
	}
}

// TestSequenceNAK: a lost middle packet of a WRITE gets exactly one NAK
// 0x60 carrying the expected PSN, however many later packets arrive; the
// requester goes back and the data arrives intact.
func TestSequenceNAK(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 7})
	e.rec = true
	for i := range e.a.buf[:10*1024] {
		e.a.buf[i] = byte(i*13 + 5)
	}
	lost := false
	e.hook = func(s *side, p *wire.Packet) bool {
		if s == e.a && p.BTH.PSN() == 3 && !lost {
			lost = true
			return false
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 10*1024)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(10)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
	for i := range 10 * 1024 {
		if e.b.buf[i] != e.a.buf[i] {
			t.Fatalf("byte %d differs", i)
		}
	}
	naks := 0
	for _, l := range e.log {
		if !l.fromA && l.p.AETH != nil && l.p.AETH.Syndrome() == wire.NAKSyndrome(wire.NAKPSNSequenceError) {
			naks++
			if l.p.BTH.PSN() != 3 {
				t.Fatalf("sequence NAK %v, want PSN 3", l)
			}
		}
	}
	if naks != 1 {
		t.Fatalf("%d sequence NAKs, want 1", naks)
	}
}

// TestRNRWriteWithImmLast: a multi-packet WRITE_WITH_IMM meets the missing
// RECV only at its LAST packet (rxe check_resource: RWR mask); the RNR NAK
// names that PSN, the earlier packets stay placed, and after the back-off
// the requester resends the LAST packet alone.
func TestRNRWriteWithImmLast(t *testing.T) {
	e := newEPair(t, eopts{rnr: 7, minRNR: 1, timeout: 14, retry: 7})
	e.rec = true
	for i := range e.a.buf[:3000] {
		e.a.buf[i] = byte(i*3 + 1)
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled, Imm: 0x55,
		SGL: []transport.SGE{e.a.sge(0, 3000)}, RemoteAddr: e.b.mr.IOVA() + 100, RKey: e.b.mr.RKey()})
	e.deliver()
	var rnr []logged
	for _, l := range e.log {
		if !l.fromA {
			rnr = append(rnr, l)
		}
	}
	if len(rnr) != 1 || rnr[0].p.AETH.Syndrome() != 0x21 || rnr[0].p.BTH.PSN() != 2 {
		t.Fatalf("responses %v, want one RNR NAK 0x21 at PSN 2 (the LAST packet)", rnr)
	}
	e.log = nil
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 9}))
	e.run(5)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("requester completions %v", w)
	}
	if w := e.b.rcq.take(); len(w) != 1 || w[0].WRID != 9 || w[0].Imm != 0x55 || w[0].ByteLen != 3000 ||
		w[0].Opcode != transport.WCRecvRDMAWithImm {
		t.Fatalf("responder completions %v", w)
	}
	for i := range 3000 {
		if e.b.buf[100+i] != e.a.buf[i] {
			t.Fatalf("byte %d differs", i)
		}
	}
	var resent []logged
	for _, l := range e.log {
		if l.fromA {
			resent = append(resent, l)
		}
	}
	if len(resent) != 1 || resent[0].p.Opcode() != wire.RCRDMAWriteLastWithImm || resent[0].p.BTH.PSN() != 2 {
		t.Fatalf("retransmission %v, want the LAST packet alone", resent)
	}
}

// TestLocalInvFailure: a LOCAL_INV of a key that cannot be invalidated
// completes with LOC_QP_OP_ERR and moves the QP to ERR, flushing what
// follows (rxe rxe_do_local_ops → requester err → completer error).
func TestLocalInvFailure(t *testing.T) {
	e := newEPair(t, eopts{})
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRLocalInv, InvRKey: 0x7F0000})
	if e.a.q.State() != transport.StateErr {
		e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	} else {
		must(t, e.a.q.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite}, e.now))
	}
	e.run(0)
	w := e.a.scq.take()
	if len(w) != 2 || w[0].WRID != 1 || w[0].Status != transport.WCLocQPOpErr || w[1].WRID != 2 || w[1].Status != transport.WCWRFlushErr {
		t.Fatalf("completions %v, want LOCAL_INV LOC_QP_OP_ERR then WR_FLUSH_ERR", w)
	}
	if e.a.q.State() != transport.StateErr || e.a.out.tail != 0 {
		t.Fatalf("state %v, %d frames sent", e.a.q.State(), e.a.out.tail)
	}
	// A good LOCAL_INV (also unsignalled: no CQE) succeeds.
	e2 := newEPair(t, eopts{})
	mr, err := e2.a.pd.Register(make([]byte, 64), memreg.RemoteRead)
	must(t, err)
	e2.post(e2.a, &transport.SendWR{WRID: 3, Opcode: transport.WRLocalInv, InvRKey: mr.RKey()})
	e2.post(e2.a, &transport.SendWR{WRID: 4, Opcode: transport.WRLocalInv, Flags: transport.SendSignaled, InvRKey: mr.RKey()})
	e2.run(0)
	if w := e2.a.scq.take(); len(w) != 1 || w[0].WRID != 4 || w[0].Status != transport.WCSuccess || w[0].Opcode != transport.WCLocalInv || mr.Valid() {
		t.Fatalf("completions %v, MR valid %v", w, mr.Valid())
	}
}

// TestAckForUnsentPSN: an ACK for a PSN the requester assigned but has not
// sent (the window is full) is ignored as a PSN never sent; it must not
// complete the WRITE whose last packets never left. The WRITE then completes
// for real, with every byte at the responder.
func TestAckForUnsentPSN(t *testing.T) {
	e := newEPair(t, eopts{mtu: transport.MTU256, timeout: 10, retry: 3})
	first := e.a.sqPSN
	const n = 200 * 256 // 200 packets; the window lets 129 out
	for i := range e.a.buf[:n] {
		e.a.buf[i] = byte(i*13 + 1)
	}
	e.hook = func(from *side, p *wire.Packet) bool { return from != e.a } // the requests are lost
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, n)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.deliver()
	e.hook = nil
	e.injectA(wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: first.Add(199)},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 1}}, nil)
	if w := e.a.scq.take(); len(w) != 0 {
		t.Fatalf("completions %v after an ACK for PSNs never sent, want none", w)
	}
	if c := e.a.q.Counters[transport.CntRcvdUnknownPSN]; c != 1 {
		t.Fatalf("rcvd_unknown_psn %d, want 1", c)
	}
	e.run(20)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v, want the WRITE with SUCCESS", w)
	}
	if !bytes.Equal(e.b.buf[:n], e.a.buf[:n]) {
		t.Fatal("the responder's memory does not hold the WRITE")
	}
}
