package sim_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// Scenario tests: one precisely placed fault each, with exact expectations
// about what goes on the wire, when, and what completes.

// sent is one frame as the sender put it on the link.
type sent struct {
	at      time.Duration // simulated time since Epoch
	op      wire.Opcode
	psn     wire.PSN
	syn     wire.Syndrome
	rethVA  uint64
	rethLen uint32
	orig    uint64
	dropped bool
}

type scen struct {
	t      *testing.T
	n      *sim.Net
	a, b   *scenEnd
	ab, ba []sent                         // frames sent A→B and B→A
	dropAB func(s sent, seen []sent) bool // decides drops A→B
	dropBA func(s sent, seen []sent) bool
}

type scenEnd struct {
	pd  *qp.PD
	cq  *qp.CQ
	qp  *qp.QP
	mem []byte
	mr  *qp.MR
}

func record(c *sim.Clock, log *[]sent, drop *func(sent, []sent) bool) func([]byte) bool {
	return func(frame []byte) bool {
		var p wire.Packet
		if err := wire.Parse(frame, &p); err != nil {
			return false
		}
		s := sent{at: c.Elapsed(), op: p.Opcode(), psn: p.BTH.PSN()}
		if p.AETH != nil {
			s.syn = p.AETH.Syndrome()
		}
		if p.RETH != nil {
			s.rethVA, s.rethLen = p.RETH.VA(), p.RETH.DMALen()
		}
		if p.AtomicAckETH != nil {
			s.orig = p.AtomicAckETH.OrigValue()
		}
		if *drop != nil && (*drop)(s, *log) {
			s.dropped = true
		}
		*log = append(*log, s)
		return s.dropped
	}
}

const scenSQPSN, scenRQPSN = 0x1000, 0x2000

func newScen(t *testing.T, opts qp.ConnectOptions, infinite7 bool) *scen {
	s := &scen{t: t}
	n := simtest.NewPair(t, sim.Config{Seed: 1, RetryCnt7Infinite: infinite7})
	s.n = n
	n.A.Link.SetFaults(nic.Faults{Filter: record(n.Clock(), &s.ab, &s.dropAB)})
	n.B.Link.SetFaults(nic.Faults{Filter: record(n.Clock(), &s.ba, &s.dropBA)})
	o := sim.QPOptions{BufSize: 1 << 16, CQSize: 256, SharedCQ: true, Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16}, Connect: opts}
	oa, ob := o, o
	oa.Connect.SQPSN, ob.Connect.SQPSN = scenSQPSN, scenRQPSN
	a, b := simtest.ConnectQPs(t, n, oa, ob)
	s.a, s.b = scenEndOf(a), scenEndOf(b)
	return s
}

func scenEndOf(e *sim.QPEnd) *scenEnd {
	return &scenEnd{pd: e.PD, cq: e.SendCQ, qp: e.QP, mem: e.Buf, mr: e.MR}
}

func (e *scenEnd) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

// waitWC runs the simulation until cq yields a completion.
func (s *scen) waitWC(cq *qp.CQ) qp.WC {
	s.t.Helper()
	var wc [1]qp.WC
	if _, err := s.n.Wait(cq, wc[:], time.Hour); err != nil {
		s.t.Fatal(err)
	}
	return wc[0]
}

func count(log []sent, pred func(sent) bool) int {
	k := 0
	for _, s := range log {
		if pred(s) {
			k++
		}
	}
	return k
}

// One lost packet in the middle of a 10-packet WRITE: exactly one NAK
// (sequence error, carrying the lost PSN), the requester resends from that
// PSN, nothing is executed twice.
func TestScenarioLostWriteMiddle(t *testing.T) {
	s := newScen(t, qp.ConnectOptions{}, false)
	lost := wire.PSN(scenSQPSN + 4)
	s.dropAB = func(x sent, seen []sent) bool {
		return x.psn == lost && count(seen, func(y sent) bool { return y.psn == lost }) == 0
	}
	for i := 0; i < 10240; i++ {
		s.a.mem[i] = byte(i*13 + 1)
	}
	if err := s.a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{s.a.sge(0, 10240)}, RemoteAddr: s.b.mr.IOVA() + 100, RKey: s.b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := s.waitWC(s.a.cq); wc.Status != transport.WCSuccess {
		t.Fatalf("completion %v", wc)
	}
	if !bytes.Equal(s.b.mem[100:100+10240], s.a.mem[:10240]) || s.b.mem[99] != 0 || s.b.mem[100+10240] != 0 {
		t.Fatal("remote memory differs or canary touched")
	}
	naks := count(s.ba, func(x sent) bool { return x.op == wire.RCAcknowledge && x.syn.Kind() == wire.SynNAK })
	if naks != 1 {
		t.Fatalf("%d NAKs, want 1: %+v", naks, s.ba)
	}
	for _, x := range s.ba {
		if x.syn.Kind() == wire.SynNAK && (x.syn.NAK() != wire.NAKPSNSequenceError || x.psn != lost) {
			t.Fatalf("NAK %v at PSN %#x, want PSN_SEQUENCE_ERROR at %#x", x.syn, x.psn, lost)
		}
	}
	// On the wire A→B: PSNs 0..9 (4 lost), then 4..9 again.
	var psns []wire.PSN
	for _, x := range s.ab {
		psns = append(psns, x.psn-scenSQPSN)
	}
	want := []wire.PSN{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 4, 5, 6, 7, 8, 9}
	if len(psns) != len(want) {
		t.Fatalf("A sent PSNs %v, want %v", psns, want)
	}
	for i := range want {
		if psns[i] != want[i] {
			t.Fatalf("A sent PSNs %v, want %v", psns, want)
		}
	}
	if s.ab[10].op != wire.RCRDMAWriteMiddle || s.ab[15].op != wire.RCRDMAWriteLast {
		t.Fatalf("resend opcodes %v … %v, want MIDDLE … LAST", s.ab[10].op, s.ab[15].op)
	}
	cb := s.n.B.Dev.Counters()
	if cb[transport.CntDuplicateRequest] != 0 || cb[transport.CntOutOfSeqRequest] != 1 {
		t.Fatalf("responder: duplicate_request=%d out_of_seq_request=%d, want 0 and 1 (one gap NAKed, as rxe counts)",
			cb[transport.CntDuplicateRequest], cb[transport.CntOutOfSeqRequest])
	}
}

// A lost READ response in the middle: the requester re-issues a READ for
// the remaining bytes at the lost PSN, and the responder's replay starts
// with READ_RESPONSE_MIDDLE (rxe's behaviour).
func TestScenarioLostReadResponse(t *testing.T) {
	s := newScen(t, qp.ConnectOptions{}, false)
	lost := wire.PSN(scenSQPSN + 4)
	s.dropBA = func(x sent, seen []sent) bool {
		return x.psn == lost && x.op.IsReadResponse() && count(seen, func(y sent) bool { return y.psn == lost }) == 0
	}
	for i := 0; i < 10240; i++ {
		s.b.mem[i] = byte(i*7 + 3)
	}
	if err := s.a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []qp.SGE{s.a.sge(8, 10240)}, RemoteAddr: s.b.mr.IOVA(), RKey: s.b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := s.waitWC(s.a.cq); wc.Status != transport.WCSuccess || wc.ByteLen != 10240 {
		t.Fatalf("completion %v", wc)
	}
	if !bytes.Equal(s.a.mem[8:8+10240], s.b.mem[:10240]) || s.a.mem[7] != 0 || s.a.mem[8+10240] != 0 {
		t.Fatal("local memory differs or canary touched")
	}
	reqs := []sent{}
	for _, x := range s.ab {
		if x.op == wire.RCRDMAReadRequest {
			reqs = append(reqs, x)
		}
	}
	if len(reqs) != 2 || reqs[0].psn != scenSQPSN || reqs[0].rethLen != 10240 ||
		reqs[1].psn != lost || reqs[1].rethLen != 6144 || reqs[1].rethVA != s.b.mr.IOVA()+4096 {
		t.Fatalf("READ requests %+v, want the original and one for the remaining 6144 bytes at PSN %#x", reqs, lost)
	}
	var replay []sent
	for _, x := range s.ba {
		if x.op.IsReadResponse() && !x.dropped && x.psn == lost {
			replay = append(replay, x)
		}
	}
	if len(replay) != 1 || replay[0].op != wire.RCRDMAReadResponseMiddle {
		t.Fatalf("replay at the lost PSN: %+v, want one READ_RESPONSE_MIDDLE", replay)
	}
}

// A lost ATOMIC ACK: the requester times out and resends the request; the
// responder answers from the saved original value; the counter moves once.
func TestScenarioLostAtomicAck(t *testing.T) {
	s := newScen(t, qp.ConnectOptions{Timeout: 14}, false)
	s.dropBA = func(x sent, seen []sent) bool {
		return x.op == wire.RCAtomicAcknowledge && count(seen, func(y sent) bool { return y.op == wire.RCAtomicAcknowledge }) == 0
	}
	binary.LittleEndian.PutUint64(s.b.mem[64:], 1000)
	if err := s.a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
		SGL: []qp.SGE{s.a.sge(0, 8)}, RemoteAddr: s.b.mr.IOVA() + 64, RKey: s.b.mr.RKey(), CompareAdd: 5}); err != nil {
		t.Fatal(err)
	}
	if wc := s.waitWC(s.a.cq); wc.Status != transport.WCSuccess {
		t.Fatalf("completion %v", wc)
	}
	if got := binary.LittleEndian.Uint64(s.b.mem[64:]); got != 1005 {
		t.Fatalf("counter %d, want 1005 (executed exactly once)", got)
	}
	if got := binary.LittleEndian.Uint64(s.a.mem[0:]); got != 1000 {
		t.Fatalf("returned %d, want 1000", got)
	}
	if len(s.ab) != 2 || s.ab[0].psn != s.ab[1].psn || s.ab[1].op != wire.RCFetchAdd {
		t.Fatalf("requests %+v, want the FETCH_ADD twice at one PSN", s.ab)
	}
	timeout := time.Duration(4096<<14) * time.Nanosecond
	if d := s.ab[1].at - s.ab[0].at; d != timeout {
		t.Fatalf("resent after %v, want the local ACK timeout %v", d, timeout)
	}
	if len(s.ba) != 2 || s.ba[1].orig != 1000 || s.ba[0].orig != 1000 {
		t.Fatalf("ATOMIC ACKs %+v, want two carrying 1000", s.ba)
	}
	if c := s.n.B.Dev.Counters(); c[transport.CntDuplicateRequest] != 1 {
		t.Fatalf("duplicate_request = %d, want 1", c[transport.CntDuplicateRequest])
	}
}

// A black-holed link: every request is transmitted retry_cnt+1 times, one
// local ACK timeout apart, then the oldest WR completes with RETRY_EXC_ERR
// and the others with WR_FLUSH_ERR.
func TestScenarioBlackHole(t *testing.T) {
	for _, tc := range []struct {
		retry     uint8
		infinite7 bool
		sends     int // transmissions of each packet (0: unbounded)
	}{{0, false, 1}, {3, false, 4}, {7, false, 8}, {7, true, 0}} {
		s := newScen(t, qp.ConnectOptions{Timeout: 8, RetryCnt: tc.retry, SetRetry: true, RNRRetry: 7}, tc.infinite7)
		s.dropAB = func(sent, []sent) bool { return true }
		for i := uint64(1); i <= 3; i++ {
			if err := s.a.qp.PostSend(&qp.SendWR{WRID: i, Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []qp.SGE{s.a.sge(0, 16)}}); err != nil {
				t.Fatal(err)
			}
		}
		timeout := time.Duration(4096<<8) * time.Nanosecond
		if tc.sends == 0 {
			// rxe mode: retry_cnt 7 is infinite; after 50 timeouts it still retries.
			var wc [1]qp.WC
			err := s.n.RunUntil(func() bool { k, _ := s.a.cq.Poll(wc[:]); return k > 0 || len(s.ab) >= 150 }, time.Hour)
			if err != nil || len(s.ab) < 150 {
				t.Fatalf("retry_cnt 7 (rxe mode): %v, %d transmissions, wc %v", err, len(s.ab), wc[0])
			}
			continue
		}
		wc := s.waitWC(s.a.cq)
		if wc.WRID != 1 || wc.Status != transport.WCRetryExcErr {
			t.Fatalf("retry_cnt %d: first completion %v, want wr 1 RETRY_EXC_ERR", tc.retry, wc)
		}
		for i := uint64(2); i <= 3; i++ {
			if wc := s.waitWC(s.a.cq); wc.WRID != i || wc.Status != transport.WCWRFlushErr {
				t.Fatalf("retry_cnt %d: completion %v, want wr %d WR_FLUSH_ERR", tc.retry, wc, i)
			}
		}
		if len(s.ab) != 3*tc.sends {
			t.Fatalf("retry_cnt %d: %d transmissions, want %d", tc.retry, len(s.ab), 3*tc.sends)
		}
		for i, x := range s.ab {
			round := i / 3
			if want := s.ab[0].at + time.Duration(round)*timeout; x.at != want {
				t.Fatalf("retry_cnt %d: transmission %d at %v, want %v", tc.retry, i, x.at, want)
			}
		}
		if st := s.a.qp.State(); st != transport.StateErr {
			t.Fatalf("QP state %v, want ERR", st)
		}
	}
}

// RNR: no RECV posted. rnr_retry 0 fails at the first RNR NAK, 3 after four
// transmissions, each one RNR timer apart; 7 retries until a RECV appears.
func TestScenarioRNR(t *testing.T) {
	const code = 14 // 1.28 ms
	rnrTime := wire.RNRTimerDuration(code)
	for _, retry := range []uint8{0, 3, 7} {
		s := newScen(t, qp.ConnectOptions{RNRRetry: retry, RetryCnt: 7, Timeout: 14, SetRetry: true, MinRNRTimer: code}, false)
		if err := s.a.qp.PostSend(&qp.SendWR{WRID: 9, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []qp.SGE{s.a.sge(0, 100)}}); err != nil {
			t.Fatal(err)
		}
		if retry == 7 {
			if err := s.n.RunUntil(func() bool { return len(s.ab) >= 20 }, time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := s.b.qp.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{s.b.sge(0, 100)}}); err != nil {
				t.Fatal(err)
			}
			if wc := s.waitWC(s.a.cq); wc.Status != transport.WCSuccess {
				t.Fatalf("rnr_retry 7: %v", wc)
			}
			if wc := s.waitWC(s.b.cq); wc.Status != transport.WCSuccess || wc.ByteLen != 100 {
				t.Fatalf("rnr_retry 7: receiver %v", wc)
			}
		} else {
			wc := s.waitWC(s.a.cq)
			if wc.Status != transport.WCRNRRetryExcErr {
				t.Fatalf("rnr_retry %d: %v, want RNR_RETRY_EXC_ERR", retry, wc)
			}
			if len(s.ab) != int(retry)+1 {
				t.Fatalf("rnr_retry %d: %d transmissions, want %d", retry, len(s.ab), retry+1)
			}
		}
		rnrs := 0
		for _, x := range s.ba {
			if x.syn.Kind() == wire.SynRNRNAK {
				rnrs++
				if x.syn.RNRTimer() != code || x.psn != scenSQPSN {
					t.Fatalf("RNR NAK %v at %#x, want timer %d at %#x", x.syn, x.psn, code, scenSQPSN)
				}
			}
		}
		if retry != 7 && rnrs != int(retry)+1 {
			t.Fatalf("rnr_retry %d: %d RNR NAKs, want %d", retry, rnrs, retry+1)
		}
		for i := 1; i < len(s.ab) && i < 20; i++ {
			if d := s.ab[i].at - s.ab[i-1].at; d != rnrTime {
				t.Fatalf("rnr_retry %d: retransmission %d after %v, want the RNR timer %v", retry, i, d, rnrTime)
			}
		}
	}
}

// Ten SENDs posted in one list reach the responder in one link batch: the
// device ends that batch with one cumulative ACK (the last PSN), not ten.
func TestScenarioAckCoalesced(t *testing.T) {
	s := newScen(t, qp.ConnectOptions{}, false)
	for i := 0; i < 10; i++ {
		if err := s.b.qp.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{s.b.sge(i*256, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	wrs := make([]qp.SendWR, 10)
	for i := range wrs {
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{s.a.sge(i*16, 16)}}
	}
	if n, err := s.a.qp.PostSendList(wrs); err != nil || n != 10 {
		t.Fatalf("posted %d: %v", n, err)
	}
	for i := 0; i < 10; i++ {
		if wc := s.waitWC(s.a.cq); wc.Status != transport.WCSuccess {
			t.Fatalf("completion %v", wc)
		}
	}
	if len(s.ba) != 1 || s.ba[0].op != wire.RCAcknowledge || s.ba[0].psn != scenSQPSN+9 {
		t.Fatalf("B sent %+v, want one ACK for PSN %#x", s.ba, scenSQPSN+9)
	}
	if c := s.b.qp.Counters(); c[transport.CntAckCoalesced] != 9 {
		t.Errorf("ack_coalesced %d, want 9", c[transport.CntAckCoalesced])
	}
}
