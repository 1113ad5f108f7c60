package qp_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// mwMR registers on e a 4096-byte region that only windows expose
// (LOCAL_WRITE|MW_BIND, rkey 0), filled with the canary.
func mwMR(t *testing.T, e *xend) (*qp.MR, []byte) {
	t.Helper()
	buf := bytes.Repeat([]byte{canary}, 4096)
	mr, err := e.pd.RegMR(buf, qp.LocalWrite|qp.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	if mr.RKey() != 0 {
		t.Fatalf("an MR without remote rights has rkey %#x", mr.RKey())
	}
	return mr, buf
}

// TestBindMWType1EndToEnd: B binds a type 1 window over 128 bytes of an MR
// that has no remote rights of its own; A writes and reads through it; a
// WRITE reaching one byte past it is NAKed 0x62 (remote access error): A
// completes REM_ACCESS_ERR, B's QP goes to ERR, and no byte outside the
// window ever changes.
func TestBindMWType1EndToEnd(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		a.reset()
		mr, buf := mwMR(t, b)
		mw, err := b.pd.AllocMW(qp.MWType1)
		if err != nil {
			t.Fatal(err)
		}
		k0 := mw.RKey()
		rk, err := b.qp.BindMW(mw, qp.MWBindAttr{MR: mr, Addr: mr.IOVA() + 64, Length: 128,
			Access: qp.RemoteWrite | qp.RemoteRead, WRID: 9, Flags: qp.SendSignaled})
		if err != nil {
			t.Fatal(err)
		}
		if rk != qp.IncRKey(k0) {
			t.Fatalf("BindMW returned %#x, want %#x (ibv_inc_rkey of %#x)", rk, qp.IncRKey(k0), k0)
		}
		expectWC(t, b.scq, 9, transport.WCSuccess, transport.WCBindMW)
		if mw.RKey() != rk || !mw.Bound() {
			t.Fatalf("window rkey %#x bound %v after the bind completed", mw.RKey(), mw.Bound())
		}
		data := pattern(7, 128)
		copy(a.buf, data)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 128)}, RemoteAddr: mr.IOVA() + 64, RKey: rk})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCRDMAWrite)
		checkBuf(t, "window", buf, region{off: 64, want: data})
		x.post(a, &qp.SendWR{WRID: 2, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(1024, 64)}, RemoteAddr: mr.IOVA() + 128, RKey: rk})
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMARead)
		if !bytes.Equal(a.buf[1024:1088], data[64:]) {
			t.Fatal("READ through the window returned other bytes")
		}
		// 16 bytes from 15 before its end: one byte past the window.
		x.settle()
		x.next()
		x.post(a, &qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 16)}, RemoteAddr: mr.IOVA() + 64 + 113, RKey: rk})
		expectWC(t, a.scq, 3, transport.WCRemAccessErr, 0)
		x.settle()
		nak := filter(x.next(), false)
		if len(nak) != 1 || nak[0].p.Opcode() != wire.RCAcknowledge || nak[0].p.AETH.Syndrome() != 0x62 {
			t.Fatalf("want one NAK 0x62, got %v", nak)
		}
		if st := b.qp.State(); st != qp.StateErr {
			t.Fatalf("B in %v after the out-of-window WRITE, want ERR", st)
		}
		checkBuf(t, "window after the NAK", buf, region{off: 64, want: data})
		// The MR cannot go while the window is bound (rxe_dereg_mr).
		if err := mr.Deregister(); !errors.Is(err, memreg.ErrMRBound) {
			t.Fatalf("Deregister under a bound window: %v", err)
		}
		if err := b.pd.Dealloc(); !errors.Is(err, memreg.ErrPDBusy) {
			t.Fatalf("Dealloc of a PD with a window: %v", err)
		}
		if err := mw.Dealloc(); err != nil {
			t.Fatal(err)
		}
		if err := mr.Deregister(); err != nil {
			t.Fatalf("Deregister after the window went: %v", err)
		}
	})
}

// TestBindMWCallErrors: ibv_bind_mw's own checks (libibverbs verbs.h and
// rdma-core's rxe provider), made before anything is posted.
func TestBindMWCallErrors(t *testing.T) {
	x := newX(t, xopts{})
	b := x.b
	mr, _ := mwMR(t, b)
	m1, err := b.pd.AllocMW(qp.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := b.pd.AllocMW(qp.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.pdO.RegMR(make([]byte, 64), qp.LocalWrite|qp.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	aw, err := x.a.pd.AllocMW(qp.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mw   *qp.MW
		b    qp.MWBindAttr
		want error
	}{
		{"type 2 window", m2, qp.MWBindAttr{MR: mr, Addr: mr.IOVA(), Length: 8, Access: qp.RemoteRead}, qp.ErrInvalidArgument},
		{"range without MR", m1, qp.MWBindAttr{Length: 8}, qp.ErrInvalidArgument},
		{"MR of another PD", m1, qp.MWBindAttr{MR: other, Addr: other.IOVA(), Length: 8}, qp.ErrMWBind},
		{"zero based", m1, qp.MWBindAttr{MR: mr, Length: 8, Access: qp.RemoteRead | qp.ZeroBased}, qp.ErrInvalidArgument},
		{"window of another device", aw, qp.MWBindAttr{}, qp.ErrInvalidArgument},
		{"nil window", nil, qp.MWBindAttr{}, qp.ErrInvalidArgument},
	} {
		if _, err := b.qp.BindMW(c.mw, c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	noWC(t, b.scq, "rejected bind calls")
	if m1.Bound() || m2.Bound() {
		t.Fatal("a rejected call bound a window")
	}
}

// TestBindMWType2SendWithInv: B binds a type 2 window with a WRBindMW work
// request; A writes through it, then invalidates it with SEND_WITH_INV; the
// same WRITE afterwards is NAKed and lands nowhere.
func TestBindMWType2SendWithInv(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		mr, buf := mwMR(t, b)
		mw, err := b.pd.AllocMW(qp.MWType2)
		if err != nil {
			t.Fatal(err)
		}
		rk := qp.IncRKey(mw.RKey())
		x.post(b, &qp.SendWR{WRID: 5, Opcode: qp.WRBindMW, Flags: qp.SendSignaled, BindMW: qp.BindInfo{
			MWRKey: mw.RKey(), RKey: rk, MRLKey: mr.LKey(), Addr: mr.IOVA() + 1000, Length: 100, Access: qp.RemoteWrite}})
		expectWC(t, b.scq, 5, transport.WCSuccess, transport.WCBindMW)
		data := pattern(3, 100)
		copy(a.buf, data)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 100)}, RemoteAddr: mr.IOVA() + 1000, RKey: rk})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCRDMAWrite)
		checkBuf(t, "window", buf, region{off: 1000, want: data})

		x.recv(b, 6, b.sge(0, 16))
		x.post(a, &qp.SendWR{WRID: 2, Opcode: qp.WRSendWithInv, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 16)}, InvRKey: rk})
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCSend)
		wc := expectWC(t, b.rcq, 6, transport.WCSuccess, transport.WCRecv)
		if wc.Flags&qp.WCWithInv == 0 || wc.InvRKey != rk || mw.Bound() {
			t.Fatalf("receive %v, window bound %v", wc, mw.Bound())
		}
		copy(a.buf, pattern(4, 100))
		x.post(a, &qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 100)}, RemoteAddr: mr.IOVA() + 1000, RKey: rk})
		expectWC(t, a.scq, 3, transport.WCRemAccessErr, 0)
		checkBuf(t, "invalidated window", buf, region{off: 1000, want: data})
	})
}
