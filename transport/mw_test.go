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

// mwSide gives B an MR that only windows expose: LOCAL_WRITE|MW_BIND, no
// remote rights of its own (its rkey is 0), filled with 0xEE.
func mwSide(t *testing.T, e *epair) (*memreg.MR, []byte) {
	t.Helper()
	buf := bytes.Repeat([]byte{0xEE}, 8192)
	mr, err := e.b.pd.RegisterIOVA(buf, 0x100000, memreg.LocalWrite|memreg.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	return mr, buf
}

// bind posts a BIND_MW on s and runs the pair; it returns s's send
// completions.
func bind(e *epair, s *side, mw *memreg.MW, mr *memreg.MR, addr, length uint64, access memreg.Access, key byte) []transport.WC {
	e.t.Helper()
	e.post(s, &transport.SendWR{WRID: 77, Opcode: transport.WRBindMW, Flags: transport.SendSignaled,
		BindMW: transport.BindInfo{MWRKey: mw.RKey(), RKey: uint32(key), MRLKey: mr.LKey(), Addr: addr, Length: length, Access: access}})
	e.run(0)
	return s.scq.take()
}

func wantWC(t *testing.T, wcs []transport.WC, status transport.WCStatus, op transport.WCOpcode) {
	t.Helper()
	if len(wcs) == 0 || wcs[0].Status != status || (status == transport.WCSuccess && wcs[0].Opcode != op) {
		t.Fatalf("completions %v, want first %v %v", wcs, status, op)
	}
}

// write posts an RDMA WRITE of n bytes of 0x5A from A to (va, rkey).
func write(e *epair, va uint64, rkey uint32, n int) []transport.WC {
	e.t.Helper()
	for i := range n {
		e.a.buf[i] = 0x5A
	}
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, n)}, RemoteAddr: va, RKey: rkey})
	e.run(10)
	return e.a.scq.take()
}

// TestMWType2WriteReadAtomic: a type 2 window bound by a BIND_MW WR on B's
// QP opens [0x100100, 0x100400) of an MR without remote rights; A's WRITE,
// READ and atomic through it land exactly there.
func TestMWType2WriteReadAtomic(t *testing.T) {
	e := newEPair(t, eopts{mtu: transport.MTU256})
	mr, buf := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	k0 := mw.RKey()
	wcs := bind(e, e.b, mw, mr, 0x100100, 0x300, memreg.RemoteWrite|memreg.RemoteRead|memreg.RemoteAtomic, 0x33)
	wantWC(t, wcs, transport.WCSuccess, transport.WCBindMW)
	if wcs[0].ByteLen != 0 || mw.RKey() != k0&^0xff|0x33 {
		t.Fatalf("bind: %v, rkey %#x", wcs[0], mw.RKey())
	}
	rk := mw.RKey()
	// A 3-packet WRITE filling the window's first 600 bytes.
	wantWC(t, write(e, 0x100100, rk, 600), transport.WCSuccess, transport.WCRDMAWrite)
	for i, v := range buf {
		in := i >= 0x100 && i < 0x100+600
		if in && v != 0x5A || !in && v != 0xEE {
			t.Fatalf("byte %#x = %#x after the WRITE through the window", i, v)
		}
	}
	// READ the window's last 16 bytes back.
	copy(buf[0x2f0:], "0123456789abcdef")
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(4096, 16)}, RemoteAddr: 0x1002f0, RKey: rk})
	e.run(0)
	wantWC(t, e.a.scq.take(), transport.WCSuccess, transport.WCRDMARead)
	if got := string(e.a.buf[4096:4112]); got != "0123456789abcdef" {
		t.Fatalf("READ through the window: %q", got)
	}
	// FETCH_ADD on an aligned word inside it.
	binary.LittleEndian.PutUint64(buf[0x200:], 40)
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(8192, 8)}, RemoteAddr: 0x100200, RKey: rk, CompareAdd: 2})
	e.run(0)
	wantWC(t, e.a.scq.take(), transport.WCSuccess, transport.WCFetchAdd)
	if binary.LittleEndian.Uint64(buf[0x200:]) != 42 || binary.LittleEndian.Uint64(e.a.buf[8192:]) != 40 {
		t.Fatal("FETCH_ADD through the window")
	}
}

// TestMWOutOfWindowNAK: a WRITE that starts inside the window and runs one
// byte past it is NAKed with remote access error before any byte is placed
// (check_rkey runs on the FIRST packet); A completes REM_ACCESS_ERR, B's QP
// goes to ERR (class C), nothing outside — or inside — the window changes.
// The window's MR extends past the window, so this is goroce's window range
// check, not the MR's.
func TestMWOutOfWindowNAK(t *testing.T) {
	for _, c := range []struct {
		name string
		va   uint64
		n    int
		need memreg.Access
	}{
		{"one byte past the end", 0x100300 - 299, 300, memreg.RemoteWrite},
		{"before start", 0x1000ff, 8, memreg.RemoteWrite},
		{"no write right", 0x100100, 8, memreg.RemoteRead},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, eopts{mtu: transport.MTU256})
			mr, buf := mwSide(t, e)
			mw, err := e.b.pd.AllocMW(memreg.MWType2)
			must(t, err)
			wantWC(t, bind(e, e.b, mw, mr, 0x100100, 0x200, c.need, 1), transport.WCSuccess, transport.WCBindMW)
			wcs := write(e, c.va, mw.RKey(), c.n)
			wantWC(t, wcs, transport.WCRemAccessErr, 0)
			if e.b.q.State() != transport.StateErr || e.a.q.State() != transport.StateErr {
				t.Fatalf("states A %v B %v, want ERR both", e.a.q.State(), e.b.q.State())
			}
			for i, v := range buf {
				if v != 0xEE {
					t.Fatalf("byte %#x written by a NAKed WRITE", i)
				}
			}
		})
	}
}

// TestMWSendWithInv: a SEND_WITH_INV naming the window's rkey invalidates
// it at B (the receive WC says WITH_INV and the key); a WRITE with that key
// afterwards is NAKed, and B can bind the window again with a new key.
func TestMWSendWithInv(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, buf := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, 64, memreg.RemoteWrite, 9), transport.WCSuccess, transport.WCBindMW)
	rk := mw.RKey()
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	e.post(e.a, &transport.SendWR{WRID: 4, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 16)}, InvRKey: rk})
	e.run(0)
	wantWC(t, e.a.scq.take(), transport.WCSuccess, transport.WCSend)
	r := e.b.rcq.take()
	if len(r) != 1 || r[0].Status != transport.WCSuccess || r[0].Flags&transport.WCWithInv == 0 || r[0].InvRKey != rk {
		t.Fatalf("receive completion %v", r)
	}
	if mw.Bound() {
		t.Fatal("window still bound after SEND_WITH_INV")
	}
	// Rebind (type 2 is free again) and check the old key no longer works
	// while the new one does.
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, 64, memreg.RemoteWrite, 10), transport.WCSuccess, transport.WCBindMW)
	if mw.RKey() == rk {
		t.Fatal("rebind kept the old key")
	}
	wantWC(t, write(e, 0x100000, mw.RKey(), 8), transport.WCSuccess, transport.WCRDMAWrite)
	// A zero-length WRITE is not checked at all (rxe check_rkey: "a
	// zero-byte op is not required to set an addr or rkey"), so the stale
	// key passes.
	wantWC(t, write(e, 0x100000, rk, 0), transport.WCSuccess, transport.WCRDMAWrite)
	wantWC(t, write(e, 0x100000, rk, 8), transport.WCRemAccessErr, 0)
	if buf[8] != 0xEE {
		t.Fatal("write beyond the 8 bytes")
	}
}

// TestMWSendWithInvType1: a type 1 window cannot be invalidated
// (o10-37.2.26): rxe's class J error — the RECV completes with
// REM_INV_REQ_ERR and B's QP goes to ERR.
func TestMWSendWithInvType1(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, _ := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType1)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, 64, memreg.RemoteWrite, 1), transport.WCSuccess, transport.WCBindMW)
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	e.post(e.a, &transport.SendWR{WRID: 4, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 16)}, InvRKey: mw.RKey()})
	e.run(0)
	if r := e.b.rcq.take(); len(r) != 1 || r[0].Status != transport.WCRemInvReqErr {
		t.Fatalf("receive completion %v", r)
	}
	if e.b.q.State() != transport.StateErr || !mw.Bound() {
		t.Fatalf("B %v, window bound %v", e.b.q.State(), mw.Bound())
	}
}

// TestMWLocalInv: LOCAL_INV of a type 2 window frees it (WC LOCAL_INV);
// of a type 1 window it fails with LOC_QP_OP_ERR and the QP goes to ERR
// (rxe_do_local_ops).
func TestMWLocalInv(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, _ := mwSide(t, e)
	m2, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	wantWC(t, bind(e, e.b, m2, mr, 0x100000, 64, memreg.RemoteWrite, 1), transport.WCSuccess, transport.WCBindMW)
	e.post(e.b, &transport.SendWR{WRID: 6, Opcode: transport.WRLocalInv, Flags: transport.SendSignaled, InvRKey: m2.RKey()})
	e.run(0)
	wantWC(t, e.b.scq.take(), transport.WCSuccess, transport.WCLocalInv)
	if m2.Bound() {
		t.Fatal("LOCAL_INV left the window bound")
	}
	wantWC(t, write(e, 0x100000, m2.RKey(), 8), transport.WCRemAccessErr, 0)

	e = newEPair(t, eopts{})
	mr, _ = mwSide(t, e)
	m1, err := e.b.pd.AllocMW(memreg.MWType1)
	must(t, err)
	wantWC(t, bind(e, e.b, m1, mr, 0x100000, 64, memreg.RemoteWrite, 1), transport.WCSuccess, transport.WCBindMW)
	e.post(e.b, &transport.SendWR{WRID: 6, Opcode: transport.WRLocalInv, InvRKey: m1.RKey()})
	e.run(0)
	wantWC(t, e.b.scq.take(), transport.WCLocQPOpErr, 0)
	if e.b.q.State() != transport.StateErr {
		t.Fatalf("B %v after a failed LOCAL_INV", e.b.q.State())
	}
}

// TestMWBindErrors: a bind rxe rejects completes with MW_BIND_ERR (even
// unsignalled), moves the QP to ERR and flushes what follows; the window is
// unchanged.
func TestMWBindErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		typ    memreg.MWType
		access memreg.Access // of the MR
		addr   uint64
		length uint64
		want   error // from memreg, documents which rule
	}{
		{"MR without MW_BIND", memreg.MWType2, memreg.LocalWrite, 0x100000, 64, memreg.ErrNoBindAccess},
		{"range outside MR", memreg.MWType2, memreg.LocalWrite | memreg.MWBind, 0x100000 + 8190, 4, memreg.ErrRange},
		{"type 2 zero length", memreg.MWType2, memreg.LocalWrite | memreg.MWBind, 0x100000, 0, memreg.ErrZeroLength},
		{"write on MR without LOCAL_WRITE", memreg.MWType1, memreg.MWBind, 0x100000, 64, memreg.ErrBadAccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, eopts{})
			mr, err := e.b.pd.RegisterIOVA(make([]byte, 8192), 0x100000, c.access)
			must(t, err)
			mw, err := e.b.pd.AllocMW(c.typ)
			must(t, err)
			k := mw.RKey()
			bi := transport.BindInfo{MWRKey: k, RKey: 2, MRLKey: mr.LKey(), Addr: c.addr, Length: c.length, Access: memreg.RemoteWrite}
			if err := e.b.mrs.BindMW(bi, e.b.pd, nil); !errors.Is(err, c.want) {
				t.Fatalf("memreg says %v, want %v", err, c.want)
			}
			e.post(e.b, &transport.SendWR{WRID: 8, Opcode: transport.WRBindMW, BindMW: bi})
			e.post(e.b, &transport.SendWR{WRID: 9, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{e.b.sge(0, 8)}})
			e.run(0)
			w := e.b.scq.take()
			if len(w) != 2 || w[0].WRID != 8 || w[0].Status != transport.WCMWBindErr || w[0].Opcode != transport.WCBindMW ||
				w[1].Status != transport.WCWRFlushErr {
				t.Fatalf("completions %v", w)
			}
			if e.b.q.State() != transport.StateErr || mw.RKey() != k || mw.Bound() {
				t.Fatalf("B %v, window %#x bound %v", e.b.q.State(), mw.RKey(), mw.Bound())
			}
		})
	}
}

// TestMWBindOtherPDQP: a type 2 bind on a QP of another PD is rejected
// (C10-72).
func TestMWBindOtherPDQP(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, _ := mwSide(t, e)
	other := e.b.mrs.AllocPD()
	mw, err := other.AllocMW(memreg.MWType2)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, 64, memreg.RemoteWrite, 1), transport.WCMWBindErr, 0)
}

// TestMWBindNotFenced: rxe runs a BIND_MW as soon as the requester reaches
// it, without waiting for earlier WQEs to be acknowledged (only LOCAL_INV is
// fenced); its completion still comes in posting order.
func TestMWBindNotFenced(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, _ := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	must(t, e.a.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.a.sge(0, 64)}}))
	e.post(e.b, &transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []transport.SGE{e.b.sge(0, 8)}})
	e.post(e.b, &transport.SendWR{WRID: 2, Opcode: transport.WRBindMW, Flags: transport.SendSignaled,
		BindMW: transport.BindInfo{MWRKey: mw.RKey(), RKey: 5, MRLKey: mr.LKey(), Addr: 0x100000, Length: 64, Access: memreg.RemoteRead}})
	if !mw.Bound() {
		t.Fatal("the bind waited for the SEND before it to be acknowledged")
	}
	if w := e.b.scq.take(); len(w) != 0 {
		t.Fatalf("completions before the SEND's ACK: %v", w)
	}
	e.run(0)
	if w := e.b.scq.take(); len(w) != 2 || w[0].WRID != 1 || w[1].WRID != 2 || w[1].Opcode != transport.WCBindMW {
		t.Fatalf("completions %v, want SEND then BIND_MW", w)
	}
}

// TestMWType1Rebind: rebinding a type 1 window moves it (the old range is
// gone, the new one works, the key byte changes), and a bind of length 0
// unbinds it, which lets its MR be deregistered.
func TestMWType1Rebind(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, buf := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType1)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, 64, memreg.RemoteWrite, 1), transport.WCSuccess, transport.WCBindMW)
	wantWC(t, bind(e, e.b, mw, mr, 0x101000, 64, memreg.RemoteWrite, 2), transport.WCSuccess, transport.WCBindMW)
	if err := mr.Deregister(); !errors.Is(err, memreg.ErrMRBound) {
		t.Fatalf("Deregister under a bound window: %v", err)
	}
	wantWC(t, write(e, 0x101000, mw.RKey(), 64), transport.WCSuccess, transport.WCRDMAWrite)
	if buf[0x1000] != 0x5A || buf[0] != 0xEE {
		t.Fatal("WRITE after the rebind")
	}
	e2 := newEPair(t, eopts{})
	mr2, _ := mwSide(t, e2)
	mw2, err := e2.b.pd.AllocMW(memreg.MWType1)
	must(t, err)
	wantWC(t, bind(e2, e2.b, mw2, mr2, 0x101000, 64, memreg.RemoteWrite, 1), transport.WCSuccess, transport.WCBindMW)
	wantWC(t, write(e2, 0x100000, mw2.RKey(), 8), transport.WCRemAccessErr, 0)
	wantWC(t, bind(e, e.b, mw, mr, 0, 0, 0, 3), transport.WCSuccess, transport.WCBindMW)
	if mw.Bound() {
		t.Fatal("a bind of length 0 left the window bound")
	}
	must(t, mr.Deregister())
}

// TestMWZeroBased: a zero-based type 2 window is addressed from 0; offset
// 0 is the window's first byte in the MR.
func TestMWZeroBased(t *testing.T) {
	e := newEPair(t, eopts{})
	mr, buf := mwSide(t, e)
	mw, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100200, 32, memreg.RemoteWrite|memreg.ZeroBased, 1), transport.WCSuccess, transport.WCBindMW)
	wantWC(t, write(e, 16, mw.RKey(), 16), transport.WCSuccess, transport.WCRDMAWrite)
	if buf[0x20f] != 0xEE || buf[0x210] != 0x5A || buf[0x21f] != 0x5A || buf[0x220] != 0xEE {
		t.Fatal("zero-based WRITE placed elsewhere")
	}
	wantWC(t, write(e, 17, mw.RKey(), 16), transport.WCRemAccessErr, 0)
}

// TestMWSendWithInvAfterPacedRead: a READ through a window whose responses
// are still paced out (more than ResponseBudget packets) when a
// SEND_WITH_INV of the same key arrives is answered whole first, as rxe
// answers a READ before it takes the next request: the READ completes with
// the window's data and the window is invalidated after it. Before, the
// invalidation overtook the queued responses, the next one met a dead key,
// B NAKed it and went to ERR (the nvmeof host's queue flush under
// duplication and reordering: a retried READ replayed behind the
// SEND_WITH_INV that ended the command).
func TestMWSendWithInvAfterPacedRead(t *testing.T) {
	const n = (transport.ResponseBudget + 8) * 1024
	e := newEPair(t, eopts{})
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i*13 + 5)
	}
	mr, err := e.b.pd.RegisterIOVA(buf, 0x100000, memreg.LocalWrite|memreg.MWBind)
	must(t, err)
	mw, err := e.b.pd.AllocMW(memreg.MWType2)
	must(t, err)
	wantWC(t, bind(e, e.b, mw, mr, 0x100000, n, memreg.RemoteRead, 9), transport.WCSuccess, transport.WCBindMW)
	rk := mw.RKey()
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, n)}, RemoteAddr: 0x100000, RKey: rk})
	e.post(e.a, &transport.SendWR{WRID: 4, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(n, 16)}, InvRKey: rk})
	// Both requests reach B in one go, before B's next engine call.
	for _, want := range []wire.Opcode{wire.RCRDMAReadRequest, wire.RCSendOnlyWithInvalidate} {
		f, ok := e.a.out.pop()
		if !ok {
			t.Fatalf("A sent no %v", want)
		}
		must(t, wire.Parse(append([]byte(nil), f...), &e.pkt))
		if e.pkt.Opcode() != want {
			t.Fatalf("A sent %v, want %v", e.pkt.Opcode(), want)
		}
		e.b.q.Receive(&e.pkt, e.now)
	}
	e.run(10)
	if e.b.q.State() == transport.StateErr || e.a.q.State() == transport.StateErr {
		t.Fatalf("states A %v B %v", e.a.q.State(), e.b.q.State())
	}
	wcs := e.a.scq.take()
	if len(wcs) != 2 || wcs[0].Status != transport.WCSuccess || wcs[0].Opcode != transport.WCRDMARead ||
		wcs[1].Status != transport.WCSuccess || wcs[1].Opcode != transport.WCSend {
		t.Fatalf("A's completions %v", wcs)
	}
	if !bytes.Equal(e.a.buf[:n], buf) {
		t.Fatal("READ data differs")
	}
	r := e.b.rcq.take()
	if len(r) != 1 || r[0].Status != transport.WCSuccess || r[0].Flags&transport.WCWithInv == 0 || r[0].InvRKey != rk {
		t.Fatalf("B's receive completion %v", r)
	}
	if mw.Bound() {
		t.Fatal("window still bound after SEND_WITH_INV")
	}
}
