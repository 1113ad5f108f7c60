package transport_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// UC tests (uc.go): the engine pair with both QPs UC.

const ucSlot = 8192 // bytes per receive buffer at B

// ucRecv posts n receives at B, each its own slot, WRIDs from first on.
func ucRecv(t *testing.T, e *epair, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{e.b.sge(i%64*ucSlot, ucSlot)}}))
	}
}

// fill writes a pattern unique to message id into A's buffer at off.
func fill(buf []byte, id int) {
	for i := range buf {
		buf[i] = byte(id*31 + i*7 + 1)
	}
}

func TestUCSendWrite(t *testing.T) {
	e := newEPair(t, eopts{uc: true})
	e.rec = true
	ucRecv(t, e, 0, 8)
	mtu := 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 5}
	for i, n := range sizes {
		fill(e.a.buf[i*ucSlot:i*ucSlot+n], i)
		op := transport.WRSend
		if i%2 == 1 {
			op = transport.WRSendWithImm
		}
		e.post(e.a, &transport.SendWR{WRID: uint64(100 + i), Opcode: op, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(i*ucSlot, n)}, Imm: uint32(0xabc0 + i)})
	}
	// A WRITE into B's second half, then a WRITE_WITH_IMM that takes a receive.
	wrOff := 512 << 10
	fill(e.a.buf[100*ucSlot:100*ucSlot+2*mtu+7], 77)
	e.post(e.a, &transport.SendWR{WRID: 200, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(100*ucSlot, 2*mtu+7)}, RemoteAddr: e.b.mr.IOVA() + uint64(wrOff), RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 201, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(100*ucSlot, 10)}, RemoteAddr: e.b.mr.IOVA() + uint64(wrOff+ucSlot), RKey: e.b.mr.RKey(), Imm: 0x5151})

	// Every send completed when its packets left, before anything arrived.
	wcs := e.a.scq.take()
	if len(wcs) != len(sizes)+2 {
		t.Fatalf("send completions before delivery: %d, want %d", len(wcs), len(sizes)+2)
	}
	for _, wc := range wcs {
		if wc.Status != transport.WCSuccess {
			t.Fatalf("send completion %v", wc)
		}
	}
	e.run(10)
	for _, l := range e.log {
		if !l.fromA {
			t.Fatalf("B sent %v: UC has no responses", l)
		}
		op := l.p.Opcode()
		if op.Transport() != wire.TransportUC || l.p.BTH.AckReq() {
			t.Fatalf("A sent %v, want UC opcodes without AckReq", l)
		}
	}
	if n := e.b.q.Counters[transport.CntSentPkts] + uint64(e.b.out.tail); n != 0 {
		t.Fatalf("B sent %d frames", n)
	}
	rw := e.b.rcq.take()
	if len(rw) != len(sizes)+1 {
		t.Fatalf("receive completions %d, want %d: %v", len(rw), len(sizes)+1, rw)
	}
	for i, n := range sizes {
		wc := rw[i]
		if wc.Status != transport.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != uint32(n) || wc.Opcode != transport.WCRecv {
			t.Fatalf("receive %d: %v", i, wc)
		}
		if i%2 == 1 && (wc.Flags&transport.WCWithImm == 0 || wc.Imm != uint32(0xabc0+i)) {
			t.Fatalf("receive %d: immediate missing: %v", i, wc)
		}
		if !bytes.Equal(e.b.buf[i*ucSlot:i*ucSlot+n], e.a.buf[i*ucSlot:i*ucSlot+n]) {
			t.Fatalf("receive %d: payload differs", i)
		}
	}
	if wc := rw[len(sizes)]; wc.Opcode != transport.WCRecvRDMAWithImm || wc.Imm != 0x5151 || wc.ByteLen != 10 {
		t.Fatalf("WRITE_WITH_IMM receive: %v", wc)
	}
	if !bytes.Equal(e.b.buf[wrOff:wrOff+2*mtu+7], e.a.buf[100*ucSlot:100*ucSlot+2*mtu+7]) {
		t.Fatal("WRITE payload differs")
	}
	// The opcodes on the wire, in order.
	var got []wire.Opcode
	for _, l := range e.log {
		got = append(got, l.p.Opcode())
	}
	want := []wire.Opcode{wire.UCSendOnly, wire.UCSendOnlyWithImmediate, wire.UCSendOnly, wire.UCSendOnlyWithImmediate,
		wire.UCSendFirst, wire.UCSendLast, // mtu+1, SEND
		wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendMiddle, wire.UCSendLastWithImmediate,
		wire.UCRDMAWriteFirst, wire.UCRDMAWriteMiddle, wire.UCRDMAWriteLast, wire.UCRDMAWriteOnlyWithImm}
	if len(got) != len(want) {
		t.Fatalf("opcodes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("opcode %d: %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}

// ucMsg is one message of the loss tests.
type ucMsg struct {
	id, size int
	write    bool
}

// runUCLoss sends msgs from A to B (SENDs into receives, WRITEs_WITH_IMM
// into B's upper half), drops the frames drop selects, and checks the
// outcome IBTA asks for: exactly the messages none of whose packets was
// dropped arrive, in order and intact; the others leave no completion.
func runUCLoss(t *testing.T, msgs []ucMsg, drop func(msg, pkt int) bool) {
	t.Helper()
	e := newEPair(t, eopts{uc: true})
	ucRecv(t, e, 0, len(msgs))
	mtu := 1024
	// Which message and packet each frame belongs to, in sending order.
	type tag struct{ msg, pkt int }
	var tags []tag
	for _, m := range msgs {
		n := max(1, (m.size+mtu-1)/mtu)
		for p := range n {
			tags = append(tags, tag{m.id, p})
		}
	}
	frame := 0
	lost := map[int]bool{}
	e.hook = func(from *side, p *wire.Packet) bool {
		if from != e.a {
			t.Fatalf("B sent %v", p.Opcode())
		}
		tg := tags[frame]
		frame++
		if drop(tg.msg, tg.pkt) {
			lost[tg.msg] = true
			return false
		}
		return true
	}
	next := 0 // WRID of the next receive to complete
	var pending []ucMsg
	check := func(m ucMsg, wc transport.WC) {
		t.Helper()
		if wc.Status != transport.WCSuccess || wc.Imm != 0 && wc.Imm != uint32(m.id) || wc.ByteLen != uint32(m.size) {
			t.Fatalf("message %d: completion %v", m.id, wc)
		}
		// Receives are used in order, one per delivered message: the WQE a
		// lost message had begun to fill is reused.
		if wc.WRID != uint64(next) {
			t.Fatalf("message %d completed receive %d, want %d", m.id, wc.WRID, next)
		}
		next++
		src := e.a.buf[m.id%32*ucSlot : m.id%32*ucSlot+m.size]
		off := int(wc.WRID) % 64 * ucSlot
		if m.write {
			off = 512<<10 + m.id%32*ucSlot
		}
		if !bytes.Equal(src, e.b.buf[off:off+m.size]) {
			t.Fatalf("message %d arrived corrupted", m.id)
		}
	}
	for _, m := range msgs {
		off := m.id % 32 * ucSlot
		fill(e.a.buf[off:off+m.size], m.id)
		wr := &transport.SendWR{WRID: uint64(m.id), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(off, m.size)}, Imm: uint32(m.id)}
		if m.write {
			wr.Opcode = transport.WRRDMAWriteWithImm
			wr.RemoteAddr, wr.RKey = e.b.mr.IOVA()+uint64(512<<10+m.id%32*ucSlot), e.b.mr.RKey()
		}
		e.post(e.a, wr)
		e.run(10)
		// A message is complete at B once its LAST packet arrived; the
		// ones before it that lost a packet never complete.
		pending = append(pending, m)
		for _, wc := range e.b.rcq.take() {
			for len(pending) > 0 && lost[pending[0].id] {
				pending = pending[1:]
			}
			if len(pending) == 0 {
				t.Fatalf("receive completion %v for no message", wc)
			}
			check(pending[0], wc)
			pending = pending[1:]
		}
		for len(pending) > 0 && lost[pending[0].id] {
			pending = pending[1:]
		}
		if len(pending) != 0 {
			t.Fatalf("message %d (no packet lost) did not arrive", pending[0].id)
		}
	}
	if frame != len(tags) {
		t.Fatalf("%d frames sent, want %d", frame, len(tags))
	}
	if wcs := e.a.scq.take(); len(wcs) != len(msgs) {
		t.Fatalf("%d send completions, want %d (UC completes every send)", len(wcs), len(msgs))
	}
	if e.b.out.tail != 0 {
		t.Fatalf("B sent %d frames", e.b.out.tail)
	}
}

func TestUCLossMidMessage(t *testing.T) {
	msgs := []ucMsg{{0, 3000, false}, {1, 3000, false}, {2, 3000, false}, {3, 100, false}}
	t.Run("middle", func(t *testing.T) {
		runUCLoss(t, msgs, func(m, p int) bool { return m == 1 && p == 1 })
	})
	t.Run("last then only", func(t *testing.T) {
		// rxe also drops message 3 here (do_class_d1e_error); IBTA and goroce deliver it.
		runUCLoss(t, []ucMsg{{0, 3000, false}, {1, 3000, false}, {2, 100, false}}, func(m, p int) bool { return m == 1 && p == 2 })
	})
	t.Run("first", func(t *testing.T) {
		runUCLoss(t, msgs, func(m, p int) bool { return m == 1 && p == 0 })
	})
	t.Run("write middle", func(t *testing.T) {
		w := []ucMsg{{0, 3000, true}, {1, 3000, true}, {2, 3000, true}, {3, 100, false}}
		runUCLoss(t, w, func(m, p int) bool { return m == 1 && p == 1 })
	})
	t.Run("whole message", func(t *testing.T) {
		runUCLoss(t, msgs, func(m, p int) bool { return m == 2 })
	})
}

// TestUCRandomLoss: seeded random loss over mixed SENDs and WRITEs; every
// message that lost no packet arrives, intact and in order, and nothing
// else completes.
func TestUCRandomLoss(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var msgs []ucMsg
	for i := range 200 {
		msgs = append(msgs, ucMsg{i, rng.IntN(4*1024 + 1), rng.IntN(3) == 0})
	}
	drops := map[[2]int]bool{}
	for _, m := range msgs {
		for p := range max(1, (m.size+1023)/1024) {
			if rng.IntN(20) == 0 {
				drops[[2]int{m.id, p}] = true
			}
		}
	}
	runUCLoss(t, msgs, func(m, p int) bool { return drops[[2]int{m, p}] })
}

func TestUCDropsWithoutAnswer(t *testing.T) {
	t.Run("no receive", func(t *testing.T) {
		e := newEPair(t, eopts{uc: true})
		e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 2000)}})
		e.run(10)
		if got := e.b.q.Counters[transport.CntUCMsgDropped]; got != 1 {
			t.Fatalf("uc_msg_dropped %d, want 1", got)
		}
		ucRecv(t, e, 0, 1)
		e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 2000)}})
		e.run(10)
		if rw := e.b.rcq.take(); len(rw) != 1 || rw[0].Status != transport.WCSuccess || rw[0].ByteLen != 2000 {
			t.Fatalf("after posting a receive: %v", rw)
		}
		if e.b.out.tail != 0 || e.b.q.State() != transport.StateRTS {
			t.Fatalf("B sent %d frames, state %v", e.b.out.tail, e.b.q.State())
		}
	})
	t.Run("bad rkey and no remote write", func(t *testing.T) {
		e := newEPair(t, eopts{uc: true, accessB: memreg.LocalWrite})
		ucRecv(t, e, 0, 2)
		e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 64)},
			RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
		e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 64)}})
		e.run(10)
		if rw := e.b.rcq.take(); len(rw) != 1 || rw[0].WRID != 0 {
			t.Fatalf("receives %v, want the SEND only", rw)
		}
		e2 := newEPair(t, eopts{uc: true})
		e2.post(e2.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e2.a.sge(0, 64)},
			RemoteAddr: e2.b.mr.IOVA(), RKey: e2.b.mr.RKey() ^ 0x100})
		e2.run(10)
		if e2.b.q.Counters[transport.CntUCMsgDropped] != 1 || e2.b.out.tail != 0 || e2.b.q.State() != transport.StateRTS {
			t.Fatalf("bad R_Key: dropped %d, B sent %d, state %v", e2.b.q.Counters[transport.CntUCMsgDropped], e2.b.out.tail, e2.b.q.State())
		}
	})
}

func TestUCPostErrors(t *testing.T) {
	e := newEPair(t, eopts{uc: true})
	for _, op := range []transport.WROpcode{transport.WRRDMARead, transport.WRAtomicFetchAdd, transport.WRAtomicCmpAndSwp, transport.WRSendWithInv} {
		err := e.a.q.PostSend(&transport.SendWR{Opcode: op, SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()}, e.now)
		if !errors.Is(err, transport.ErrInvalidArgument) {
			t.Errorf("%v on UC: %v, want ErrInvalidArgument", op, err)
		}
	}
}

func TestUCModify(t *testing.T) {
	mk := func() *transport.QP {
		s := &side{out: newRing(4, frameCap), scq: &cq{}, rcq: &cq{}, mrs: memreg.NewTable(1)}
		s.pd = s.mrs.AllocPD()
		q, err := transport.New(transport.Config{QPN: 0x20, PD: s.pd, MRs: s.mrs, Out: s.out, SendCQ: s.scq, RecvCQ: s.rcq,
			Caps: transport.Caps{MaxSendWR: 4, MaxRecvWR: 4}, Type: transport.QPTypeUC})
		must(t, err)
		now := time.Unix(1, 0)
		must(t, q.Modify(&transport.Attr{State: transport.StateInit, Port: 1},
			transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags, now))
		return q
	}
	av := transport.AV{DGID: netip.MustParseAddr("198.18.0.2"), SGID: netip.MustParseAddr("198.18.0.1")}
	rtr := transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
	q := mk()
	now := time.Unix(1, 0)
	a := &transport.Attr{State: transport.StateRTR, AV: av, PathMTU: transport.MTU1024, DestQPN: 0x21}
	var me *transport.ModifyError
	if err := q.Modify(a, rtr|transport.AttrMaxDestRdAtomic, now); !errors.As(err, &me) || me.Extra != transport.AttrMaxDestRdAtomic {
		t.Fatalf("UC RTR with max_dest_rd_atomic: %v", err)
	}
	if err := q.Modify(a, rtr&^transport.AttrRQPSN, now); !errors.As(err, &me) || me.Missing != transport.AttrRQPSN {
		t.Fatalf("UC RTR without rq_psn: %v", err)
	}
	must(t, q.Modify(a, rtr, now))
	rts := &transport.Attr{State: transport.StateRTS, SQPSN: 5, Timeout: 14}
	if err := q.Modify(rts, transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout, now); !errors.As(err, &me) || me.Extra != transport.AttrTimeout {
		t.Fatalf("UC RTS with timeout: %v", err)
	}
	must(t, q.Modify(rts, transport.AttrState|transport.AttrSQPSN, now))
	if q.State() != transport.StateRTS {
		t.Fatalf("state %v", q.State())
	}
}

// TestUCOnSRQ: a UC responder on an SRQ; a message loses its middle
// packet, the WQE it took stays with the QP for the next message (no
// receive lost to the peer's loss), and the rest arrive in order.
func TestUCOnSRQ(t *testing.T) {
	srq, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 8, MaxSGE: 1})
	must(t, err)
	e := newEPair(t, eopts{uc: true, srqB: srq})
	for i := range 3 {
		must(t, srq.Post(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{e.b.sge(i*ucSlot, ucSlot)}}))
	}
	frame := 0
	e.hook = func(from *side, p *wire.Packet) bool {
		frame++
		return frame != 5 // message 1's second packet (3 packets each)
	}
	for id := range 3 {
		fill(e.a.buf[id*ucSlot:id*ucSlot+3000], id)
		e.post(e.a, &transport.SendWR{WRID: uint64(id), Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(id*ucSlot, 3000)}})
		e.run(10)
	}
	rw := e.b.rcq.take()
	if len(rw) != 2 || rw[0].WRID != 0 || rw[1].WRID != 1 || srq.Len() != 1 {
		t.Fatalf("receives %v, %d left in the SRQ", rw, srq.Len())
	}
	if !bytes.Equal(e.b.buf[ucSlot:ucSlot+3000], e.a.buf[2*ucSlot:2*ucSlot+3000]) {
		t.Fatal("message 2 is not in the reused receive")
	}
	if e.b.q.Counters[transport.CntUCMsgDropped] != 1 {
		t.Fatalf("uc_msg_dropped %d", e.b.q.Counters[transport.CntUCMsgDropped])
	}
}

// TestUCEngineAllocs: a UC SEND of three packets, sent and received, and
// an RC ATOMIC_WRITE and FLUSH with their responses, allocate nothing.
func TestUCEngineAllocs(t *testing.T) {
	e := newEPair(t, eopts{uc: true})
	e.a.scq.wcs = make([]transport.WC, 0, 4096)
	e.b.rcq.wcs = make([]transport.WC, 0, 4096)
	send := &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 3000)}}
	recv := &transport.RecvWR{SGL: []transport.SGE{e.b.sge(0, ucSlot)}}
	n := testing.AllocsPerRun(100, func() {
		if err := e.b.q.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if err := e.a.q.PostSend(send, e.now); err != nil {
			t.Fatal(err)
		}
		e.deliver()
	})
	if n != 0 {
		t.Fatalf("%v allocations per UC message", n)
	}

	p, mr, _ := placementPair(t, allB)
	p.rec = false
	p.a.scq.wcs = make([]transport.WC, 0, 4096)
	aw := &transport.SendWR{Opcode: transport.WRAtomicWrite, RemoteAddr: mr.IOVA(), RKey: mr.RKey()}
	fl := &transport.SendWR{Opcode: transport.WRFlush, RemoteAddr: mr.IOVA(), RKey: mr.RKey(), FlushLen: 64, FlushType: wire.FlushGlobal}
	n = testing.AllocsPerRun(100, func() {
		if err := p.a.q.PostSend(aw, p.now); err != nil {
			t.Fatal(err)
		}
		if err := p.a.q.PostSend(fl, p.now); err != nil {
			t.Fatal(err)
		}
		p.deliver()
	})
	if n != 0 {
		t.Fatalf("%v allocations per ATOMIC_WRITE + FLUSH", n)
	}
}
