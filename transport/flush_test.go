package transport_test

import (
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// FLUSH and ATOMIC_WRITE (flush.go) between two engines.

// placementPair is an RC pair whose B grants FLUSH_GLOBAL and REMOTE_WRITE
// on the QP, with a second region at B registered for FLUSH_GLOBAL.
func placementPair(t *testing.T, accessB memreg.Access) (*epair, *memreg.MR, []byte) {
	t.Helper()
	e := newEPair(t, eopts{accessB: accessB, timeout: 10, retry: 7})
	e.rec = true
	buf := make([]byte, 4096)
	mr, err := e.b.pd.Register(buf, memreg.LocalWrite|memreg.RemoteWrite|memreg.FlushGlobal)
	must(t, err)
	return e, mr, buf
}

const allB = memreg.RemoteWrite | memreg.RemoteRead | memreg.RemoteAtomic | memreg.FlushGlobal

func TestFlushAndAtomicWrite(t *testing.T) {
	e, mr, buf := placementPair(t, allB)
	binary.LittleEndian.PutUint64(e.a.buf[0:], 0x1111)
	// A WRITE, then an ATOMIC_WRITE over its first word, then a FLUSH of the range.
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 64)}, RemoteAddr: mr.IOVA() + 128, RKey: mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRAtomicWrite, Flags: transport.SendSignaled,
		RemoteAddr: mr.IOVA() + 128, RKey: mr.RKey(), AtomicData: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}})
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRFlush, Flags: transport.SendSignaled,
		RemoteAddr: mr.IOVA() + 128, RKey: mr.RKey(), FlushLen: 64, FlushType: wire.FlushGlobal, FlushLevel: wire.FlushRange})
	// The whole region, whatever the address (selectivity MR).
	e.post(e.a, &transport.SendWR{WRID: 4, Opcode: transport.WRFlush, Flags: transport.SendSignaled,
		RKey: mr.RKey(), FlushType: wire.FlushGlobal, FlushLevel: wire.FlushMR})
	e.run(10)
	wcs := e.a.scq.take()
	want := []transport.WCOpcode{transport.WCRDMAWrite, transport.WCAtomicWrite, transport.WCFlush, transport.WCFlush}
	if len(wcs) != len(want) {
		t.Fatalf("completions %v", wcs)
	}
	for i, wc := range wcs {
		if wc.Status != transport.WCSuccess || wc.Opcode != want[i] || wc.WRID != uint64(i+1) {
			t.Fatalf("completion %d: %v", i, wc)
		}
	}
	if got := buf[128:136]; string(got) != "\x01\x02\x03\x04\x05\x06\x07\x08" {
		t.Fatalf("ATOMIC_WRITE target % x", got)
	}
	if string(buf[136:192]) != string(e.a.buf[8:64]) {
		t.Fatal("the WRITE's other bytes differ")
	}
	// The wire: each request answered by a READ RESPONSE ONLY without
	// payload at its PSN, the WRITE by an ACK.
	var seq []string
	for _, l := range e.log {
		seq = append(seq, l.p.Opcode().String())
		if l.p.Opcode() == wire.RCRDMAReadResponseOnly && (len(l.p.Payload) != 0 || l.p.AETH.Syndrome() != wire.SyndromeACKNoCredit) {
			t.Fatalf("placement response %v payload %d", l, len(l.p.Payload))
		}
	}
	wantSeq := "[RC_RDMA_WRITE_ONLY RC_ATOMIC_WRITE RC_FLUSH RC_FLUSH RC_ACKNOWLEDGE RC_RDMA_READ_RESPONSE_ONLY RC_RDMA_READ_RESPONSE_ONLY RC_RDMA_READ_RESPONSE_ONLY]"
	if got := fmtOps(seq); got != wantSeq {
		t.Fatalf("wire %s\nwant %s", got, wantSeq)
	}
}

func fmtOps(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// TestPlacementErrors: each check in rxe's order, with rxe's NAK and the
// requester's status.
func TestPlacementErrors(t *testing.T) {
	type tc struct {
		name    string
		accessB memreg.Access
		wr      func(e *epair, mr *memreg.MR) transport.SendWR
		status  transport.WCStatus
		syn     wire.Syndrome
	}
	flush := func(typ, level uint8, addr func(*memreg.MR) uint64, rkey func(*memreg.MR, *epair) uint32) func(e *epair, mr *memreg.MR) transport.SendWR {
		return func(e *epair, mr *memreg.MR) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRFlush, RemoteAddr: addr(mr), RKey: rkey(mr, e), FlushLen: 64, FlushType: typ, FlushLevel: level}
		}
	}
	at := func(off uint64) func(*memreg.MR) uint64 { return func(mr *memreg.MR) uint64 { return mr.IOVA() + off } }
	flushKey := func(mr *memreg.MR, _ *epair) uint32 { return mr.RKey() }
	plainKey := func(_ *memreg.MR, e *epair) uint32 { return e.b.mr.RKey() } // the harness region has no FLUSH_GLOBAL
	aw := func(off uint64) func(e *epair, mr *memreg.MR) transport.SendWR {
		return func(e *epair, mr *memreg.MR) transport.SendWR {
			return transport.SendWR{Opcode: transport.WRAtomicWrite, RemoteAddr: mr.IOVA() + off, RKey: mr.RKey()}
		}
	}
	nakInv, nakAcc := wire.NAKSyndrome(wire.NAKInvalidRequest), wire.NAKSyndrome(wire.NAKRemoteAccessError)
	for _, c := range []tc{
		{"flush without QP FLUSH_GLOBAL", allB &^ memreg.FlushGlobal, flush(wire.FlushGlobal, wire.FlushRange, at(0), flushKey), transport.WCRemInvReqErr, nakInv},
		{"flush persistent without QP access", allB, flush(wire.FlushPersistent, wire.FlushRange, at(0), flushKey), transport.WCRemInvReqErr, nakInv},
		{"flush persistent, region not persistent", allB | memreg.FlushPersistent, flush(wire.FlushPersistent, wire.FlushRange, at(0), flushKey), transport.WCRemAccessErr, nakAcc},
		{"flush region without FLUSH_GLOBAL", allB, flush(wire.FlushGlobal, wire.FlushMR, at(0), plainKey), transport.WCRemAccessErr, nakAcc},
		{"flush range outside the region", allB, flush(wire.FlushGlobal, wire.FlushRange, at(4090), flushKey), transport.WCRemAccessErr, nakAcc},
		{"atomic write without QP REMOTE_WRITE", allB &^ memreg.RemoteWrite, aw(0), transport.WCRemInvReqErr, nakInv},
		{"atomic write misaligned", allB, aw(4), transport.WCRemInvReqErr, nakInv},
		{"atomic write outside the region", allB, aw(4096), transport.WCRemAccessErr, nakAcc},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, mr, _ := placementPair(t, c.accessB)
			wr := c.wr(e, mr)
			wr.Flags = transport.SendSignaled
			e.post(e.a, &wr)
			e.run(10)
			wcs := e.a.scq.take()
			if len(wcs) != 1 || wcs[0].Status != c.status {
				t.Fatalf("completions %v, want status %v", wcs, c.status)
			}
			var naks []wire.Syndrome
			for _, l := range e.log {
				if !l.fromA && l.p.AETH != nil {
					naks = append(naks, l.p.AETH.Syndrome())
				}
			}
			if len(naks) != 1 || naks[0] != c.syn {
				t.Fatalf("responses %v, want one %#x", naks, c.syn)
			}
			if e.b.q.State() != transport.StateErr {
				t.Fatalf("responder in %v after a class C error", e.b.q.State())
			}
		})
	}
}

// TestPlacementRetriedOnce: the responses of an ATOMIC_WRITE and a FLUSH
// are lost; the requester's ACK timer resends both; the responder answers
// from its records and executes neither again (the word changed locally in
// between stays changed).
func TestPlacementRetriedOnce(t *testing.T) {
	e, mr, buf := placementPair(t, allB)
	drops := 0
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.b && p.Opcode() == wire.RCRDMAReadResponseOnly && drops < 2 {
			drops++
			// The ATOMIC_WRITE ran: the application at B overwrites it.
			binary.LittleEndian.PutUint64(buf[64:], 0xBBBB)
			return false
		}
		return true
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRAtomicWrite, Flags: transport.SendSignaled,
		RemoteAddr: mr.IOVA() + 64, RKey: mr.RKey(), AtomicData: [8]byte{0xAA}})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRFlush, Flags: transport.SendSignaled,
		RemoteAddr: mr.IOVA(), RKey: mr.RKey(), FlushLen: 128, FlushType: wire.FlushGlobal})
	e.run(20)
	wcs := e.a.scq.take()
	if len(wcs) != 2 || wcs[0].Status != transport.WCSuccess || wcs[1].Status != transport.WCSuccess {
		t.Fatalf("completions %v", wcs)
	}
	if v := binary.LittleEndian.Uint64(buf[64:]); v != 0xBBBB {
		t.Fatalf("the ATOMIC_WRITE ran again: %#x", v)
	}
	if drops != 2 || e.a.q.Counters[transport.CntRetransmittedPkts] != 2 || e.b.q.Counters[transport.CntDuplicateRequest] != 2 {
		t.Fatalf("drops %d, retransmitted %d, duplicates %d", drops, e.a.q.Counters[transport.CntRetransmittedPkts],
			e.b.q.Counters[transport.CntDuplicateRequest])
	}
}

// TestPlacementPostErrors: what posting refuses.
func TestPlacementPostErrors(t *testing.T) {
	e, mr, _ := placementPair(t, allB)
	for _, wr := range []transport.SendWR{
		{Opcode: transport.WRFlush, RKey: mr.RKey(), FlushType: 0},
		{Opcode: transport.WRFlush, RKey: mr.RKey(), FlushType: 4},
		{Opcode: transport.WRFlush, RKey: mr.RKey(), FlushType: 1, FlushLevel: 2},
		{Opcode: transport.WRAtomicWrite, RKey: mr.RKey(), SGL: []transport.SGE{e.a.sge(0, 8)}},
	} {
		if err := e.a.q.PostSend(&wr, e.now); err == nil {
			t.Errorf("%+v posted", wr)
		}
	}
	u := newEPair(t, eopts{uc: true})
	if err := u.a.q.PostSend(&transport.SendWR{Opcode: transport.WRAtomicWrite}, u.now); err == nil {
		t.Error("ATOMIC_WRITE posted on UC")
	}
}

// TestPlacementGolden builds the requests and the response from the fields
// of Linux rxe's source (v6.2+) and compares goroce's frames with them
// byte for byte from the BTH on:
//
//   - rxe_opcode.c, rxe_opcode[IB_OPCODE_RC_FLUSH]: mask RXE_FETH_MASK |
//     RXE_RETH_MASK | RXE_FLUSH_MASK | RXE_START_MASK | RXE_END_MASK |
//     RXE_REQ_MASK, length RXE_BTH_BYTES + RXE_FETH_BYTES + RXE_RETH_BYTES,
//     offset[RXE_FETH] = RXE_BTH_BYTES, offset[RXE_RETH] = RXE_BTH_BYTES +
//     RXE_FETH_BYTES: BTH(12) FETH(4) RETH(16), no payload.
//   - rxe_hdr.h feth_init: bits = ((level << FETH_SEL_SHIFT(4)) &
//     FETH_SEL_MASK(0x30)) | (type & FETH_PLT_MASK(0x0f)), cpu_to_be32.
//   - rxe_req.c init_req_packet: bth_init(..., pad, IB_DEFAULT_PKEY_FULL,
//     dest_qp_num, ack_req = END (1), psn); reth_set_rkey(wr.flush.rkey),
//     reth_set_va(iova), reth_set_len(dma.resid) for FLUSH; finish_packet:
//     FLUSH has no payload (oA19-2), ATOMIC_WRITE copies the 8 bytes of
//     dma.atomic_wr.
//   - rxe_opcode[IB_OPCODE_RC_ATOMIC_WRITE]: RXE_RETH_MASK |
//     RXE_PAYLOAD_MASK | ...: BTH(12) RETH(16) payload(8).
//   - rxe_resp.c acknowledge → send_read_response_ack → prepare_ack_packet
//     (IB_OPCODE_RC_RDMA_READ_RESPONSE_ONLY, payload 0, psn = the
//     request's, bth ack_req 0, aeth_set_syn(AETH_ACK_UNLIMITED 0x1f),
//     aeth_set_msn(resp.msn)): BTH(12) AETH(4).
func TestPlacementGolden(t *testing.T) {
	e, mr, _ := placementPair(t, allB)
	psn := e.a.sqPSN // 0
	e.post(e.a, &transport.SendWR{Opcode: transport.WRFlush, RemoteAddr: mr.IOVA() + 0x40, RKey: mr.RKey(),
		FlushLen: 0x100, FlushType: wire.FlushGlobal, FlushLevel: wire.FlushMR})
	e.post(e.a, &transport.SendWR{Opcode: transport.WRAtomicWrite, RemoteAddr: mr.IOVA() + 0x80, RKey: mr.RKey(),
		AtomicData: [8]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3}})
	e.run(10)
	bth := func(op byte, ackReq bool, psn wire.PSN, dqpn uint32) string {
		b := make([]byte, 12)
		b[0] = op
		binary.BigEndian.PutUint16(b[2:], 0xFFFF) // IB_DEFAULT_PKEY_FULL
		binary.BigEndian.PutUint32(b[4:], dqpn)
		v := uint32(psn)
		if ackReq {
			v |= 1 << 31
		}
		binary.BigEndian.PutUint32(b[8:], v)
		return hex.EncodeToString(b)
	}
	reth := func(va uint64, rkey, n uint32) string {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, va)
		binary.BigEndian.PutUint32(b[8:], rkey)
		binary.BigEndian.PutUint32(b[12:], n)
		return hex.EncodeToString(b)
	}
	aeth := func(msn uint32) string {
		return hex.EncodeToString([]byte{0x1f, byte(msn >> 16), byte(msn >> 8), byte(msn)})
	}
	want := []string{
		bth(0x1c, true, psn, 0x12) + "00000011" + reth(mr.IOVA()+0x40, mr.RKey(), 0x100), // FETH: level 1 << 4 | type 1
		bth(0x1d, true, psn.Add(1), 0x12) + reth(mr.IOVA()+0x80, mr.RKey(), 8) + "deadbeef00010203",
		bth(0x10, false, psn, 0x11) + aeth(1),
		bth(0x10, false, psn.Add(1), 0x11) + aeth(2),
	}
	if len(e.log) != len(want) {
		t.Fatalf("%d frames, want %d", len(e.log), len(want))
	}
	for i, l := range e.log {
		start := len(l.raw) - len(l.p.Payload) - l.p.Pad - wire.ICRCLen
		start -= l.p.Opcode().HeaderLen()
		got := hex.EncodeToString(l.raw[start : len(l.raw)-wire.ICRCLen])
		if got != want[i] {
			t.Errorf("frame %d (%v):\n got %s\nwant %s", i, l.p.Opcode(), got, want[i])
		}
		if l.p.Opcode().HeaderLen() != map[wire.Opcode]int{wire.RCFlush: 32, wire.RCAtomicWrite: 28, wire.RCRDMAReadResponseOnly: 16}[l.p.Opcode()] {
			t.Errorf("%v: header length %d", l.p.Opcode(), l.p.Opcode().HeaderLen())
		}
	}
	for _, l := range e.log {
		if !wire.VerifyICRC(l.p.L3) {
			t.Errorf("%v: ICRC", l.p.Opcode())
		}
	}
}
