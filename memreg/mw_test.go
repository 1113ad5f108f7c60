package memreg

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// mwFixture: a PD with a 4096-byte MR at 0x10000 that allows binding, a
// second PD with its own bindable MR, and MRs lacking MW_BIND, LOCAL_WRITE
// or registered ZERO_BASED.
type mwFixture struct {
	t             *Table
	pd, pd2       *PD
	mr, mr2       *MR
	noBind, noLW  *MR
	zb, invalidMR *MR
	qpA, qpB      *int // QP identities (any comparable pointer)
}

func newMWFixture(t *testing.T) *mwFixture {
	t.Helper()
	f := &mwFixture{t: NewTable(testSeed), qpA: new(int), qpB: new(int)}
	f.pd, f.pd2 = f.t.AllocPD(), f.t.AllocPD()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	reg := func(pd *PD, buf []byte, iova uint64, a Access) *MR {
		mr, err := pd.RegisterIOVA(buf, iova, a)
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	all := LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic | MWBind
	f.mr = reg(f.pd, buf, 0x10000, all)
	f.mr2 = reg(f.pd2, make([]byte, 64), 0x20000, all)
	f.noBind = reg(f.pd, make([]byte, 64), 0x30000, LocalWrite|RemoteWrite)
	f.noLW = reg(f.pd, make([]byte, 64), 0x40000, RemoteRead|MWBind)
	f.zb = reg(f.pd, make([]byte, 64), 0, all|ZeroBased)
	f.invalidMR = reg(f.pd, make([]byte, 64), 0x50000, all)
	if err := f.t.Invalidate(f.invalidMR.RKey(), f.pd); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *mwFixture) alloc(t *testing.T, pd *PD, typ MWType) *MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func TestAllocMW(t *testing.T) {
	f := newMWFixture(t)
	m1, m2 := f.alloc(t, f.pd, MWType1), f.alloc(t, f.pd, MWType2)
	for _, mw := range []*MW{m1, m2} {
		if !IsMWKey(mw.RKey()) || IsMWKey(f.mr.RKey()) {
			t.Fatalf("rkey %#x: not in the window index range", mw.RKey())
		}
		if mw.Bound() {
			t.Fatalf("%v window bound at allocation", mw.Type())
		}
	}
	if m1.RKey()>>8 != MinMWIndex || m2.RKey()>>8 != MinMWIndex+1 {
		t.Fatalf("indices %#x %#x, want %#x and the next", m1.RKey()>>8, m2.RKey()>>8, MinMWIndex)
	}
	// rxe_alloc_mw: type 1 starts VALID, type 2 FREE.
	if m1.state() != mwValid || m2.state() != mwFree {
		t.Fatal("initial states differ from rxe_alloc_mw")
	}
	if _, err := f.pd.AllocMW(3); err == nil {
		t.Fatal("type 3 allocated")
	}
	if err := f.pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Fatalf("Dealloc of a PD with windows: %v", err)
	}
	old := m1.RKey()
	if err := m1.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := m1.Dealloc(); !errors.Is(err, ErrMWDead) {
		t.Fatalf("second Dealloc: %v", err)
	}
	if _, err := f.t.Remote(old, f.pd, RemoteRead, 0x10000, 1); !errors.Is(err, ErrNoKey) {
		t.Fatalf("rkey of a deallocated window: %v", err)
	}
	m3 := f.alloc(t, f.pd, MWType1)
	if m3.RKey()>>8 != old>>8 || m3.RKey() == old {
		t.Fatalf("reused index %#x: rkey %#x, old %#x (want same index, other key byte)", m3.RKey()>>8, m3.RKey(), old)
	}
}

// TestBindMWRules mirrors rxe_bind_mw and rxe_check_bind_mw
// (drivers/infiniband/sw/rxe/rxe_mw.c) case by case, in rxe's order.
func TestBindMWRules(t *testing.T) {
	const base = 0x10000
	for _, c := range []struct {
		name  string
		typ   MWType
		setup func(f *mwFixture, mw *MW) // before the bind under test
		bind  func(f *mwFixture, mw *MW) Bind
		pd    func(f *mwFixture) *PD // the QP's PD; f.pd if nil
		want  error
	}{
		// rxe_bind_mw: rxe_pool_get_index(mw_pool, mw_rkey >> 8) fails.
		{name: "no window at index", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind { return Bind{MWRKey: mw.RKey() + 0x1000, Length: 0} }, want: ErrNoKey},
		// rxe_bind_mw: mw->rkey != mw_rkey.
		{name: "stale window rkey", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind { return Bind{MWRKey: mw.RKey() ^ 1} }, want: ErrKeyMismatch},
		// rxe_bind_mw: rxe_pool_get_index(mr_pool, mr_lkey >> 8) fails.
		{name: "no MR at lkey", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: 0x7000 << 8, Addr: base, Length: 8, Access: RemoteRead}
			}, want: ErrNoKey},
		// rxe_bind_mw: mr->lkey != mr_lkey.
		{name: "stale MR lkey", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey() ^ 1, Addr: base, Length: 8, Access: RemoteRead}
			}, want: ErrKeyMismatch},
		// rxe_bind_mw: access & ~RXE_ACCESS_SUPPORTED_MW (-EOPNOTSUPP).
		{name: "unsupported access bit", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead | 0x10000}
			}, want: ErrBadAccess},
		// rxe_check_bind_mw type 1: mw->state != RXE_MW_STATE_VALID is
		// unreachable for a live type 1 window (only dealloc leaves VALID,
		// and the lookup fails first), so it is the dealloc case.
		{name: "type 1 deallocated", typ: MWType1,
			setup: func(f *mwFixture, mw *MW) { _ = mw.Dealloc() },
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
			}, want: ErrNoKey},
		// rxe_check_bind_mw type 1: o10-36.2.2, access & IB_ZERO_BASED.
		{name: "type 1 zero based", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: 0, Length: 8, Access: RemoteRead | ZeroBased}
			}, want: ErrZeroBased},
		// rxe_check_bind_mw type 2: o10-37.2.30, state != FREE.
		{name: "type 2 already bound", typ: MWType2,
			setup: func(f *mwFixture, mw *MW) {
				if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: 1, MRLKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}, f.pd, f.qpA); err != nil {
					panic(err)
				}
			},
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), RKey: 2, MRLKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
			}, want: ErrMWState},
		// rxe_check_bind_mw type 2: C10-72, qp->pd != mw pd.
		{name: "type 2 QP of another PD", typ: MWType2, pd: func(f *mwFixture) *PD { return f.pd2 },
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
			}, want: ErrPDMismatch},
		// rxe_check_bind_mw type 2: o10-37.2.40, length == 0.
		{name: "type 2 zero length", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 0, Access: RemoteRead}
			}, want: ErrZeroLength},
		// rxe_check_bind_mw: "if (!mr) return 0" — a type 1 bind of length 0
		// unbinds without looking at the MR.
		{name: "type 1 zero length unbinds", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind { return Bind{MWRKey: mw.RKey(), MRLKey: 0xdead, Addr: 7} }, want: nil},
		// rxe_check_bind_mw: mr->access & IB_ZERO_BASED.
		{name: "zero-based MR", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.zb.LKey(), Addr: 0, Length: 8, Access: RemoteRead}
			}, want: ErrZeroBased},
		// rxe_check_bind_mw: C10-73, MR without IB_ACCESS_MW_BIND.
		{name: "MR without MW_BIND", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.noBind.LKey(), Addr: 0x30000, Length: 8, Access: RemoteWrite}
			}, want: ErrNoBindAccess},
		// rxe_check_bind_mw: C10-74, writable window on an MR without LOCAL_WRITE.
		{name: "remote write without local write", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.noLW.LKey(), Addr: 0x40000, Length: 8, Access: RemoteWrite}
			}, want: ErrBadAccess},
		{name: "remote atomic without local write", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.noLW.LKey(), Addr: 0x40000, Length: 8, Access: RemoteAtomic}
			}, want: ErrBadAccess},
		{name: "remote read without local write ok", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.noLW.LKey(), Addr: 0x40000, Length: 8, Access: RemoteRead}
			}, want: nil},
		// rxe_check_bind_mw: C10-75, VA window outside the MR.
		{name: "starts below MR", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base - 1, Length: 8, Access: RemoteRead}
			}, want: ErrRange},
		{name: "ends past MR", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base + 4089, Length: 8, Access: RemoteRead}
			}, want: ErrRange},
		{name: "whole MR ok", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 4096, Access: RemoteRead}
			}, want: nil},
		{name: "addr+length overflows", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base + 8, Length: math.MaxUint64 - 4, Access: RemoteRead}
			}, want: ErrRange},
		// rxe_check_bind_mw: C10-75, zero-based window longer than the MR.
		{name: "type 2 zero based too long", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base, Length: 4097, Access: RemoteRead | ZeroBased}
			}, want: ErrRange},
		{name: "type 2 zero based ok", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr.LKey(), Addr: base + 16, Length: 4080, Access: RemoteRead | ZeroBased}
			}, want: nil},
		// goroce beyond rxe: MR in another PD than the window.
		{name: "MR of another PD", typ: MWType1,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.mr2.LKey(), Addr: 0x20000, Length: 8, Access: RemoteRead}
			}, want: ErrPDMismatch},
		// goroce beyond rxe: an invalidated MR.
		{name: "invalidated MR", typ: MWType2,
			bind: func(f *mwFixture, mw *MW) Bind {
				return Bind{MWRKey: mw.RKey(), MRLKey: f.invalidMR.LKey(), Addr: 0x50000, Length: 8, Access: RemoteRead}
			}, want: ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newMWFixture(t)
			mw := f.alloc(t, f.pd, c.typ)
			if c.setup != nil {
				c.setup(f, mw)
			}
			before, _ := mw.load()
			pd := f.pd
			if c.pd != nil {
				pd = c.pd(f)
			}
			b := c.bind(f, mw)
			b.RKey = 0x5A
			err := f.t.BindMW(b, pd, f.qpA)
			if !errors.Is(err, c.want) {
				t.Fatalf("BindMW: %v, want %v", err, c.want)
			}
			if err != nil {
				if now, _ := mw.load(); now != before {
					t.Fatal("a failed bind changed the window")
				}
				return
			}
			if mw.RKey() != before.rkey&^0xff|0x5A {
				t.Fatalf("rkey %#x: want the index of %#x with key byte 0x5a", mw.RKey(), before.rkey)
			}
			if got := mw.Bound(); got != (b.Length != 0) {
				t.Fatalf("Bound() = %v after a bind of length %d", got, b.Length)
			}
		})
	}
}

// TestRemoteThroughMW mirrors rxe_lookup_mw's conditions (rxe_mw.c) and
// check_rkey (rxe_resp.c) for RDMA through a window, plus goroce's window
// range check.
func TestRemoteThroughMW(t *testing.T) {
	f := newMWFixture(t)
	const base = 0x10000
	m1 := f.alloc(t, f.pd, MWType1)
	if err := f.t.BindMW(Bind{MWRKey: m1.RKey(), RKey: m1.RKey() + 1, MRLKey: f.mr.LKey(), Addr: base + 256, Length: 512,
		Access: RemoteRead | RemoteWrite}, f.pd, f.qpA); err != nil {
		t.Fatal(err)
	}
	m2 := f.alloc(t, f.pd, MWType2)
	if err := f.t.BindMW(Bind{MWRKey: m2.RKey(), RKey: m2.RKey() + 1, MRLKey: f.mr.LKey(), Addr: base + 1024, Length: 64,
		Access: RemoteAtomic | RemoteRead | ZeroBased}, f.pd, f.qpA); err != nil {
		t.Fatal(err)
	}
	unbound := f.alloc(t, f.pd, MWType1)
	k1, k2 := m1.RKey(), m2.RKey()
	for _, c := range []struct {
		name   string
		rkey   uint32
		pd     *PD
		qp     any
		need   Access
		va     uint64
		length uint32
		want   error
		first  byte
	}{
		{"type 1 ok", k1, f.pd, f.qpB, RemoteWrite, base + 256, 512, nil, 0},
		{"type 1 ok middle", k1, f.pd, nil, RemoteRead, base + 300, 10, nil, 300 % 256},
		// rxe_lookup_mw: mw->rkey != rkey.
		{"wrong key byte", k1 ^ 0x80, f.pd, f.qpA, RemoteRead, base + 256, 8, ErrKeyMismatch, 0},
		{"no window at index", k1 + 0x10000, f.pd, f.qpA, RemoteRead, base + 256, 8, ErrNoKey, 0},
		// rxe_lookup_mw: rxe_mw_pd(mw) != pd.
		{"other PD", k1, f.pd2, f.qpA, RemoteRead, base + 256, 8, ErrPDMismatch, 0},
		// rxe_lookup_mw: type 2 and mw->qp != qp.
		{"type 2 other QP", k2, f.pd, f.qpB, RemoteRead, 0, 8, ErrWrongQP, 0},
		{"type 2 no QP", k2, f.pd, nil, RemoteRead, 0, 8, ErrWrongQP, 0},
		// rxe_lookup_mw: mw->length == 0.
		{"unbound type 1", unbound.RKey(), f.pd, f.qpA, RemoteRead, base, 8, ErrInvalid, 0},
		// rxe_lookup_mw: (access & mw->access) != access.
		{"missing atomic right", k1, f.pd, f.qpA, RemoteAtomic, base + 256, 8, ErrAccess, 0},
		{"missing write right", k2, f.pd, f.qpA, RemoteWrite, 0, 8, ErrAccess, 0},
		// check_rkey: zero-based offset = mw->addr.
		{"type 2 zero based ok", k2, f.pd, f.qpA, RemoteAtomic, 8, 8, nil, byte((1024 + 8) % 256)},
		{"type 2 zero based end", k2, f.pd, f.qpA, RemoteRead, 56, 8, nil, byte((1024 + 56) % 256)},
		// goroce: inside the window, not only the MR.
		{"zero based past window", k2, f.pd, f.qpA, RemoteRead, 60, 8, ErrRange, 0},
		{"below window", k1, f.pd, f.qpA, RemoteRead, base + 255, 8, ErrRange, 0},
		{"past window", k1, f.pd, f.qpA, RemoteWrite, base + 256 + 505, 8, ErrRange, 0},
		{"window end overflow", k1, f.pd, f.qpA, RemoteWrite, math.MaxUint64 - 2, 8, ErrRange, 0},
	} {
		b, err := f.t.RemoteQP(c.rkey, c.pd, c.qp, c.need, c.va, c.length)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if err == nil && (len(b) != int(c.length) || cap(b) != int(c.length) || b[0] != c.first) {
			t.Errorf("%s: len %d cap %d first %d, want %d bytes from %d", c.name, len(b), cap(b), b[0], c.length, c.first)
		}
	}
	// Remote (no QP) reaches type 1 windows.
	if _, err := f.t.Remote(k1, f.pd, RemoteRead, base+256, 1); err != nil {
		t.Fatalf("Remote through a type 1 window: %v", err)
	}
}

// TestInvalidateMW mirrors rxe_invalidate_mw / rxe_check_invalidate_mw and
// rxe_dereg_mr / rxe_invalidate_mr's num_mw checks.
func TestInvalidateMW(t *testing.T) {
	f := newMWFixture(t)
	const base = 0x10000
	m1, m2 := f.alloc(t, f.pd, MWType1), f.alloc(t, f.pd, MWType2)
	bind := func(mw *MW, key byte) error {
		return f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: uint32(key), MRLKey: f.mr.LKey(), Addr: base, Length: 16,
			Access: RemoteWrite}, f.pd, f.qpA)
	}
	if err := bind(m1, 1); err != nil {
		t.Fatal(err)
	}
	if err := bind(m2, 2); err != nil {
		t.Fatal(err)
	}
	// rxe_dereg_mr: num_mw > 0 → fails, the MR stays.
	if err := f.mr.Deregister(); !errors.Is(err, ErrMRBound) || !f.mr.Valid() {
		t.Fatalf("Deregister with bound windows: %v", err)
	}
	// rxe_invalidate_mr: num_mw > 0.
	if err := f.t.Invalidate(f.mr.RKey(), f.pd); !errors.Is(err, ErrMRBound) {
		t.Fatalf("Invalidate of an MR with bound windows: %v", err)
	}
	// rxe_invalidate_mw: rkey != mw->rkey.
	if err := f.t.Invalidate(m2.RKey()^1, f.pd); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("stale key: %v", err)
	}
	// rxe_check_invalidate_mw: o10-37.2.26, type 1.
	if err := f.t.Invalidate(m1.RKey(), f.pd); !errors.Is(err, ErrMWType) {
		t.Fatalf("type 1: %v", err)
	}
	if err := f.t.Invalidate(m2.RKey(), f.pd2); !errors.Is(err, ErrPDMismatch) {
		t.Fatalf("other PD: %v", err)
	}
	k2 := m2.RKey()
	if err := f.t.Invalidate(k2, f.pd); err != nil {
		t.Fatal(err)
	}
	if m2.Bound() {
		t.Fatal("invalidated window still bound")
	}
	if _, err := f.t.RemoteQP(k2, f.pd, f.qpA, RemoteWrite, base, 8); !errors.Is(err, ErrWrongQP) && !errors.Is(err, ErrInvalid) {
		t.Fatalf("access after invalidate: %v", err)
	}
	// Already free: succeeds (rxe rejects only the INVALID state).
	if err := f.t.Invalidate(k2, nil); err != nil {
		t.Fatalf("second invalidate: %v", err)
	}
	// A type 2 window can be bound again once free, with a new key.
	if err := bind(m2, 3); err != nil {
		t.Fatalf("rebind after invalidate: %v", err)
	}
	if m2.RKey() == k2 || m2.RKey()&0xff != 3 {
		t.Fatalf("rebound rkey %#x", m2.RKey())
	}
	// Unbinding/deallocating releases the MR.
	if err := f.t.BindMW(Bind{MWRKey: m1.RKey(), RKey: 9}, f.pd, f.qpA); err != nil {
		t.Fatal(err)
	}
	if err := m2.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := f.t.Invalidate(k2&^0xff|3, f.pd); !errors.Is(err, ErrNoKey) {
		t.Fatalf("invalidate of a deallocated window: %v", err)
	}
	if err := f.mr.Deregister(); err != nil {
		t.Fatalf("Deregister after the windows let go: %v", err)
	}
}

// TestBindKeys: the type 1 bind call's keys follow ibv_inc_rkey, and a
// failed bind resets the expectation to the real key.
func TestBindKeys(t *testing.T) {
	f := newMWFixture(t)
	mw := f.alloc(t, f.pd, MWType1)
	k0 := mw.RKey()
	cur, next := mw.BindKeys()
	if cur != k0 || next != k0&^0xff|(k0+1)&0xff {
		t.Fatalf("BindKeys %#x %#x from %#x", cur, next, k0)
	}
	if c, _ := mw.BindKeys(); c != k0 {
		t.Fatal("BindKeys changed the expectation without Posted")
	}
	mw.Posted(next)
	cur2, next2 := mw.BindKeys() // a second bind posted before the first ran
	mw.Posted(next2)
	if cur2 != next || next2>>8 != k0>>8 {
		t.Fatalf("second BindKeys %#x %#x", cur2, next2)
	}
	if err := f.t.BindMW(Bind{MWRKey: cur, RKey: next, MRLKey: f.mr.LKey(), Addr: 0x10000, Length: 8, Access: RemoteRead}, f.pd, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.t.BindMW(Bind{MWRKey: cur2, RKey: next2, MRLKey: f.noBind.LKey(), Addr: 0x30000, Length: 8, Access: RemoteRead}, f.pd, nil); !errors.Is(err, ErrNoBindAccess) {
		t.Fatal(err)
	}
	if mw.RKey() != next {
		t.Fatalf("rkey %#x after one good bind, want %#x", mw.RKey(), next)
	}
	if c, _ := mw.BindKeys(); c != next {
		t.Fatalf("after a failed bind BindKeys starts from %#x, want the real key %#x", c, next)
	}
}

func TestRemoteMWNoAllocs(t *testing.T) {
	f := newMWFixture(t)
	mw := f.alloc(t, f.pd, MWType2)
	if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: 7, MRLKey: f.mr.LKey(), Addr: 0x10000, Length: 64, Access: RemoteWrite}, f.pd, f.qpA); err != nil {
		t.Fatal(err)
	}
	k := mw.RKey()
	var qp any = f.qpA
	n := testing.AllocsPerRun(100, func() {
		_, _ = f.t.RemoteQP(k, f.pd, qp, RemoteWrite, 0x10000, 64)
		_, _ = f.t.RemoteQP(k^1, f.pd, qp, RemoteWrite, 0x10000, 64)
	})
	if n != 0 {
		t.Fatalf("window lookups allocate: %v allocs/run", n)
	}
}

// TestBindInvalidateAllocs: a type 2 window's bind and its invalidation
// allocate nothing (the binding is stored in place under the window's
// sequence lock), and the invalidated window is free under the same rkey.
func TestBindInvalidateAllocs(t *testing.T) {
	f := newMWFixture(t)
	mw := f.alloc(t, f.pd, MWType2)
	key := byte(0)
	n := testing.AllocsPerRun(100, func() {
		key++
		if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: uint32(key), MRLKey: f.mr.LKey(), Addr: 0x10000, Length: 64, Access: RemoteWrite}, f.pd, f.qpA); err != nil {
			t.Fatal(err)
		}
		k := mw.RKey()
		if err := f.t.Invalidate(k, f.pd); err != nil {
			t.Fatal(err)
		}
		if b, _ := mw.load(); b.rkey != k || b.state != mwFree || b.mr != nil || mw.Bound() {
			t.Fatalf("after invalidate: %+v", b)
		}
	})
	if n != 0 {
		t.Fatalf("bind + invalidate: %v allocs/run, want 0", n)
	}
	if err := f.mr.Deregister(); err != nil {
		t.Fatalf("Deregister after bind/invalidate cycles: %v", err)
	}
}

// TestRemoteMWModel checks RemoteQP through windows against a model on
// random binds and accesses (seed printed): an access succeeds exactly
// when it lies inside the window, and the memory returned is always
// inside the window's part of the MR — never elsewhere in the MR.
func TestRemoteMWModel(t *testing.T) {
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	f := newMWFixture(t)
	const base, size = 0x10000, 4096
	mrStart := uintptr(unsafe.Pointer(&f.mr.Bytes()[0]))
	for i := range 5000 {
		typ := MWType1
		var zb Access
		if r.IntN(2) == 0 {
			typ = MWType2
			if r.IntN(2) == 0 {
				zb = ZeroBased
			}
		}
		mw := f.alloc(t, f.pd, typ)
		wOff := uint64(r.IntN(size))
		wLen := uint64(1 + r.IntN(size-int(wOff)))
		addr := base + wOff
		if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: uint32(i), MRLKey: f.mr.LKey(), Addr: addr, Length: wLen,
			Access: RemoteWrite | zb}, f.pd, f.qpA); err != nil {
			t.Fatalf("seed %d: bind: %v", seed, err)
		}
		for range 8 {
			// Addresses around the window, in the window's address space.
			start := uint64(0)
			if zb == 0 {
				start = addr
			}
			va := start + uint64(r.IntN(int(wLen)+16)) - uint64(r.IntN(16))
			n := uint32(1 + r.IntN(64))
			if r.IntN(8) == 0 {
				va = math.MaxUint64 - uint64(r.IntN(32))
			}
			b, err := f.t.RemoteQP(mw.RKey(), f.pd, f.qpA, RemoteWrite, va, n)
			in := va >= start && va-start <= wLen && uint64(n) <= wLen-(va-start)
			if in != (err == nil) {
				t.Fatalf("seed %d: window [%#x,+%d) zb=%v access %#x+%d: err %v, inside %v", seed, start, wLen, zb != 0, va, n, err, in)
			}
			if err != nil {
				continue
			}
			off := uint64(uintptr(unsafe.Pointer(&b[0])) - mrStart)
			if off < wOff || off+uint64(len(b)) > wOff+wLen || off != wOff+(va-start) {
				t.Fatalf("seed %d: memory at MR offset %d+%d for window [%d,+%d) access %#x", seed, off, len(b), wOff, wLen, va)
			}
		}
		if err := mw.Dealloc(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBindType1Allocs: rebinding a type 1 window allocates nothing.
func TestBindType1Allocs(t *testing.T) {
	f := newMWFixture(t)
	mw := f.alloc(t, f.pd, MWType1)
	key := byte(0)
	n := testing.AllocsPerRun(100, func() {
		key++
		if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: uint32(key), MRLKey: f.mr.LKey(), Addr: 0x10000 + uint64(key), Length: 64, Access: RemoteRead}, f.pd, f.qpA); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("type 1 bind: %v allocs/run, want 0", n)
	}
}

// TestMWConcurrentBind: lock-free checks racing with binds and
// invalidations never see a torn binding (the key byte of one bind with the
// range of another) and never pass against a binding whose invalidation
// had completed before the check began, unless the window was bound with
// that key again meanwhile. Bind c gives key byte c%256 and the 16 bytes at
// offset 16·(c%256) of the MR.
func TestMWConcurrentBind(t *testing.T) {
	var reads atomic.Int64
	// In the middle of each store, let the readers run a few checks.
	testHookMWStore = func() {
		n := reads.Load()
		for j := 0; j < 1000 && reads.Load() < n+4; j++ {
			runtime.Gosched()
		}
	}
	defer func() { testHookMWStore = nil }()
	for _, typ := range []MWType{MWType1, MWType2} {
		t.Run(typ.String(), func(t *testing.T) {
			f := newMWFixture(t)
			mw := f.alloc(t, f.pd, typ)
			idx := mw.RKey() &^ 0xff
			base := &f.mr.buf[0]
			const cycles = 3000
			var started, invalidated atomic.Int64 // last cycle whose bind began / whose invalidate returned
			started.Store(-1)
			invalidated.Store(-1)
			var done atomic.Bool
			var wg sync.WaitGroup
			errs := make(chan string, 2)
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !done.Load(); i++ {
						reads.Add(1)
						c := started.Load() + int64(r) // the bind running now, or the next
						if typ == MWType2 && i%2 == 0 {
							c = invalidated.Load()
							if c < 0 {
								continue
							}
						}
						k := uint32(c) & 0xff
						off := uint64(k) * 16
						if i%3 == 0 {
							off = (off + 4096 - 16) % 4096 // the previous bind's range
						}
						s, err := f.t.RemoteQP(idx|k, f.pd, f.qpA, RemoteRead, 0x10000+off, 16)
						if err != nil {
							continue
						}
						if off != uint64(k)*16 || &s[0] != (*byte)(unsafe.Add(unsafe.Pointer(base), off)) {
							errs <- fmt.Sprintf("key byte %#x reached offset %d", k, off)
							return
						}
						if typ == MWType2 && i%2 == 0 && started.Load() < c+256 {
							errs <- fmt.Sprintf("key byte %#x passed after bind %d was invalidated", k, c)
							return
						}
					}
				}()
			}
			for c := int64(0); c < cycles; c++ {
				k := uint32(c) & 0xff
				started.Store(c)
				if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: k, MRLKey: f.mr.LKey(), Addr: 0x10000 + uint64(k)*16, Length: 16, Access: RemoteRead}, f.pd, f.qpA); err != nil {
					t.Fatalf("bind %d: %v", c, err)
				}
				if typ == MWType2 {
					if err := f.t.Invalidate(mw.RKey(), f.pd); err != nil {
						t.Fatalf("invalidate %d: %v", c, err)
					}
					invalidated.Store(c)
				}
			}
			done.Store(true)
			wg.Wait()
			select {
			case e := <-errs:
				t.Fatal(e)
			default:
			}
		})
	}
}

// BenchmarkRemoteMW is the responder's per-packet check through a bound
// type 2 window.
func BenchmarkRemoteMW(b *testing.B) {
	f := newMWFixture(&testing.T{})
	mw, _ := f.pd.AllocMW(MWType2)
	if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: 1, MRLKey: f.mr.LKey(), Addr: 0x10000, Length: 4096, Access: RemoteWrite}, f.pd, f.qpA); err != nil {
		b.Fatal(err)
	}
	k := mw.RKey()
	var qp any = f.qpA
	b.ReportAllocs()
	for b.Loop() {
		s, err := f.t.RemoteQP(k, f.pd, qp, RemoteWrite, 0x10400, 1024)
		if err != nil {
			b.Fatal(err)
		}
		sinkB = s
	}
}

// BenchmarkBindInvalidateMW is a type 2 window's bind and invalidation, as
// the NVMe host does per keyed I/O.
func BenchmarkBindInvalidateMW(b *testing.B) {
	f := newMWFixture(&testing.T{})
	mw, _ := f.pd.AllocMW(MWType2)
	key := uint32(0)
	b.ReportAllocs()
	for b.Loop() {
		key++
		if err := f.t.BindMW(Bind{MWRKey: mw.RKey(), RKey: key, MRLKey: f.mr.LKey(), Addr: 0x10000, Length: 4096, Access: RemoteWrite}, f.pd, f.qpA); err != nil {
			b.Fatal(err)
		}
		if err := f.t.Invalidate(mw.RKey(), f.pd); err != nil {
			b.Fatal(err)
		}
	}
}
