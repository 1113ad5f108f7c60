package transport_test

import (
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestEmitICRCAsBuild: the emitter computes every RC and UC frame's ICRC
// from its QP's precomputed header (wire.BuildICRC with the template's
// wire.ICRCHeader); everything else in the frame comes from the same
// wire.Build code as before. Each frame of a workload that sends every
// opcode the engine emits (WRITE, SEND and READ in FIRST/MIDDLE/LAST/ONLY
// shapes, with immediate, atomics and their ACKs, FLUSH, ATOMIC_WRITE, ACK
// and a sequence NAK after a dropped packet, and UC's WRITE and SEND) must
// carry exactly the trailer wire.ICRC computes over its bytes, which is
// the frame the old path (wire.Build) wrote, byte for byte.
func TestEmitICRCAsBuild(t *testing.T) {
	seen := map[wire.Opcode]int{}
	check := func(e *epair) {
		t.Helper()
		for _, l := range e.log {
			l2 := wire.EthernetLen
			l3 := l.raw[l2 : len(l.raw)-wire.ICRCLen]
			got := binary.LittleEndian.Uint32(l.raw[len(l.raw)-wire.ICRCLen:])
			if want := wire.ICRC(l3); got != want {
				t.Errorf("%v: ICRC %#08x, wire.ICRC %#08x", l, got, want)
			}
			seen[l.p.Opcode()]++
		}
		e.log = nil
	}

	// RC, path MTU 1024, every requester opcode and every response.
	e := newEPair(t, eopts{accessB: allB, timeout: 10, retry: 7})
	e.rec = true
	mr, err := e.b.pd.Register(make([]byte, 64<<10), memreg.LocalWrite|allB)
	must(t, err)
	for range 8 {
		must(t, e.b.q.PostRecv(&transport.RecvWR{SGL: []transport.SGE{e.b.sge(0, 8192)}}))
	}
	rw := func(op transport.WROpcode, n int) *transport.SendWR {
		return &transport.SendWR{Opcode: op, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(0, n)},
			RemoteAddr: mr.IOVA(), RKey: mr.RKey(), Imm: 7}
	}
	for _, wr := range []*transport.SendWR{
		rw(transport.WRRDMAWrite, 5000), rw(transport.WRRDMAWrite, 61),
		rw(transport.WRRDMAWriteWithImm, 5000), rw(transport.WRRDMAWriteWithImm, 64),
		rw(transport.WRSend, 3000), rw(transport.WRSend, 63),
		rw(transport.WRSendWithImm, 3000), rw(transport.WRSendWithImm, 6),
		rw(transport.WRRDMARead, 5000), rw(transport.WRRDMARead, 33),
		{Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(0, 8)},
			RemoteAddr: mr.IOVA() + 64, RKey: mr.RKey(), CompareAdd: 1},
		{Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled, SGL: []transport.SGE{e.a.sge(0, 8)},
			RemoteAddr: mr.IOVA() + 64, RKey: mr.RKey(), CompareAdd: 1, Swap: 9},
		{Opcode: transport.WRAtomicWrite, Flags: transport.SendSignaled, RemoteAddr: mr.IOVA() + 128, RKey: mr.RKey(),
			AtomicData: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Opcode: transport.WRFlush, Flags: transport.SendSignaled, RemoteAddr: mr.IOVA() + 128, RKey: mr.RKey(),
			FlushLen: 64, FlushType: wire.FlushGlobal, FlushLevel: wire.FlushRange},
	} {
		e.post(e.a, wr)
		e.run(20)
	}
	// A lost MIDDLE: B answers the next packet with a sequence NAK.
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.a && p.Opcode() == wire.RCRDMAWriteMiddle && !dropped {
			dropped = true
			return false
		}
		return true
	}
	e.post(e.a, rw(transport.WRRDMAWrite, 5000))
	e.run(50)
	wcs := e.a.scq.take()
	for _, wc := range wcs {
		if wc.Status != transport.WCSuccess {
			t.Errorf("completion %v", wc)
		}
	}
	if len(wcs) != 15 {
		t.Errorf("%d RC completions, want 15", len(wcs))
	}
	check(e)

	// UC.
	u := newEPair(t, eopts{uc: true})
	u.rec = true
	for range 4 {
		must(t, u.b.q.PostRecv(&transport.RecvWR{SGL: []transport.SGE{u.b.sge(0, 8192)}}))
	}
	for _, wr := range []*transport.SendWR{
		{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{u.a.sge(0, 3000)}, RemoteAddr: u.b.mr.IOVA(), RKey: u.b.mr.RKey()},
		{Opcode: transport.WRRDMAWriteWithImm, SGL: []transport.SGE{u.a.sge(0, 10)}, RemoteAddr: u.b.mr.IOVA(), RKey: u.b.mr.RKey(), Imm: 1},
		{Opcode: transport.WRSend, SGL: []transport.SGE{u.a.sge(0, 3000)}},
		{Opcode: transport.WRSendWithImm, SGL: []transport.SGE{u.a.sge(0, 3)}, Imm: 2},
	} {
		u.post(u.a, wr)
		u.run(20)
	}
	check(u)

	for _, op := range []wire.Opcode{
		wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle, wire.RCRDMAWriteLast, wire.RCRDMAWriteOnly,
		wire.RCRDMAWriteLastWithImm, wire.RCRDMAWriteOnlyWithImm,
		wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly,
		wire.RCSendLastWithImmediate, wire.RCSendOnlyWithImmediate,
		wire.RCRDMAReadRequest, wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
		wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly,
		wire.RCCompareSwap, wire.RCFetchAdd, wire.RCAtomicAcknowledge, wire.RCAcknowledge,
		wire.RCFlush, wire.RCAtomicWrite,
		wire.UCRDMAWriteFirst, wire.UCRDMAWriteLast, wire.UCRDMAWriteOnlyWithImm,
		wire.UCSendFirst, wire.UCSendLast, wire.UCSendOnlyWithImmediate,
	} {
		if seen[op] == 0 {
			t.Errorf("the workload sent no %v", op)
		}
	}
	if !dropped {
		t.Error("no MIDDLE was dropped: no NAK checked")
	}
}
