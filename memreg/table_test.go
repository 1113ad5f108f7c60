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

const testSeed = 42

func TestAccessString(t *testing.T) {
	for _, c := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LOCAL_WRITE"},
		{LocalWrite | RemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased,
			"LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|MW_BIND|ZERO_BASED"},
		{RemoteRead | 0x400, "REMOTE_READ|0x400"},
		{0x80, "0x80"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(c.a), got, c.want)
		}
	}
}

func TestKeyFormat(t *testing.T) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	buf := make([]byte, 64)
	for i, acc := range []Access{0, LocalWrite, RemoteRead, LocalWrite | RemoteWrite, LocalWrite | RemoteAtomic, MWBind} {
		mr, err := pd.Register(buf, acc)
		if err != nil {
			t.Fatalf("seed %d: Register(%v): %v", testSeed, acc, err)
		}
		if idx := mr.LKey() >> 8; idx != uint32(i+1) {
			t.Errorf("seed %d: MR %d has index %d, want %d (indices start at 1)", testSeed, i, idx, i+1)
		}
		wantR := uint32(0)
		if acc&RemoteAny != 0 {
			wantR = mr.LKey()
		}
		if mr.RKey() != wantR {
			t.Errorf("seed %d: %v: rkey %#x, want %#x", testSeed, acc, mr.RKey(), wantR)
		}
		if mr.IOVA() != uint64(uintptr(unsafe.Pointer(&buf[0]))) || mr.Len() != 64 || mr.Access() != acc || mr.PD() != pd || !mr.Valid() || &mr.Bytes()[0] != &buf[0] {
			t.Errorf("seed %d: attributes wrong: %+v", testSeed, mr)
		}
	}
	// Empty buffer: IOVA 0, still a key.
	mr, err := pd.Register(nil, RemoteRead)
	if err != nil || mr.IOVA() != 0 || mr.Len() != 0 || mr.RKey() == 0 {
		t.Fatalf("empty Register: %+v, %v", mr, err)
	}
}

func TestKeysDeterministic(t *testing.T) {
	keys := func(seed int64) []uint32 {
		tb := NewTable(seed)
		pd := tb.AllocPD()
		var out []uint32
		for range 16 {
			mr, err := pd.Register(make([]byte, 8), RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, mr.LKey())
		}
		return out
	}
	a, b := keys(7), keys(7)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("seed 7 gave different keys: %x vs %x", a, b)
	}
	c := keys(8)
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatalf("seeds 7 and 8 gave the same key bytes %x", a)
	}
	// Seed 0 draws from crypto/rand: just check it works.
	if len(keys(0)) != 16 {
		t.Fatal("seed 0")
	}
}

func TestIndexReuseChangesKey(t *testing.T) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	buf := make([]byte, 16)
	a, _ := pd.Register(buf, RemoteRead)
	b, _ := pd.Register(buf, RemoteRead)
	c, _ := pd.Register(buf, RemoteRead)
	old := b.RKey()
	// Deregister and re-register the middle index many times: it is
	// always the lowest free index, and the key byte never repeats back to back.
	for i := range 300 {
		if err := b.Deregister(); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.Remote(old, pd, RemoteRead, b.IOVA(), 1); !errors.Is(err, ErrInvalid) {
			t.Fatalf("iter %d: stale key after dereg: %v, want ErrInvalid", i, err)
		}
		nb, err := pd.Register(buf, RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if nb.LKey()>>8 != old>>8 {
			t.Fatalf("iter %d: reuse gave index %d, want %d", i, nb.LKey()>>8, old>>8)
		}
		if nb.LKey() == old {
			t.Fatalf("seed %d iter %d: reused index kept key byte %#x", testSeed, i, old&0xff)
		}
		if _, err := tb.Remote(old, pd, RemoteRead, b.IOVA(), 1); !errors.Is(err, ErrKeyMismatch) {
			t.Fatalf("iter %d: stale key after reuse: %v, want ErrKeyMismatch", i, err)
		}
		b, old = nb, nb.RKey()
	}
	// Next fresh index is after c.
	d, _ := pd.Register(buf, RemoteRead)
	if d.LKey()>>8 != 4 || a.LKey()>>8 != 1 || c.LKey()>>8 != 3 {
		t.Fatalf("indices a=%d c=%d d=%d", a.LKey()>>8, c.LKey()>>8, d.LKey()>>8)
	}
	// Lowest free index first.
	_ = a.Deregister()
	_ = c.Deregister()
	e, _ := pd.Register(buf, RemoteRead)
	f, _ := pd.Register(buf, RemoteRead)
	if e.LKey()>>8 != 1 || f.LKey()>>8 != 3 {
		t.Fatalf("reuse order: e=%d f=%d, want 1 and 3", e.LKey()>>8, f.LKey()>>8)
	}
}

func TestRegisterErrors(t *testing.T) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	buf := make([]byte, 8)
	for _, c := range []struct {
		name string
		acc  Access
		iova uint64
		want error
	}{
		{"remote write without local write", RemoteWrite, 0, ErrBadAccess},
		{"remote atomic without local write", RemoteAtomic | RemoteRead, 0, ErrBadAccess},
		{"unknown bit", LocalWrite | 0x40, 0, ErrBadAccess},
		{"iova overflow", RemoteRead, math.MaxUint64 - 3, ErrBadIOVA},
		{"remote read alone ok", RemoteRead, 0, nil},
		{"iova ending at 2^64", RemoteRead, math.MaxUint64 - 7, ErrBadIOVA},
		{"iova just below top ok", RemoteRead, math.MaxUint64 - 8, nil},
	} {
		_, err := pd.RegisterIOVA(buf, c.iova, c.acc)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

func TestPDLifecycle(t *testing.T) {
	tb := NewTable(testSeed)
	pd1, pd2 := tb.AllocPD(), tb.AllocPD()
	if pd1.Handle() != 1 || pd2.Handle() != 2 {
		t.Fatalf("handles %d %d", pd1.Handle(), pd2.Handle())
	}
	mr, _ := pd1.Register(make([]byte, 8), 0)
	if err := pd1.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Fatalf("Dealloc with MR: %v, want ErrPDBusy", err)
	}
	if err := mr.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Deregister(); !errors.Is(err, ErrDeregistered) {
		t.Fatalf("double Deregister: %v", err)
	}
	if mr.Valid() {
		t.Fatal("deregistered MR still Valid")
	}
	if err := pd1.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := pd1.Dealloc(); !errors.Is(err, ErrPDDead) {
		t.Fatalf("double Dealloc: %v", err)
	}
	if _, err := pd1.Register(make([]byte, 8), 0); !errors.Is(err, ErrPDDead) {
		t.Fatalf("Register on dead PD: %v", err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// fixture is a table with one MR of 4096 bytes at IOVA base in pd, plus
// another PD and an MR without remote access.
type fixture struct {
	t        *Table
	pd, pd2  *PD
	mr, lmr  *MR
	base     uint64
	rk       uint32
	deadKey  uint32
	invalKey uint32
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: NewTable(testSeed), base: 0x10000}
	f.pd, f.pd2 = f.t.AllocPD(), f.t.AllocPD()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	var err error
	f.mr, err = f.pd.RegisterIOVA(buf, f.base, LocalWrite|RemoteRead|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	f.rk = f.mr.RKey()
	f.lmr, _ = f.pd.RegisterIOVA(make([]byte, 64), 0x1000, 0)
	dead, _ := f.pd.RegisterIOVA(make([]byte, 64), 0x2000, LocalWrite|RemoteWrite)
	inval, _ := f.pd.RegisterIOVA(make([]byte, 64), 0x3000, LocalWrite|RemoteWrite)
	f.deadKey = dead.RKey()
	_ = dead.Deregister() // after inval, so its index is not reused
	f.invalKey = inval.RKey()
	if err := f.t.Invalidate(f.invalKey, f.pd); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRemoteChecks(t *testing.T) {
	f := newFixture(t)
	rk := f.rk
	end := f.base + 4096
	for _, c := range []struct {
		name   string
		rkey   uint32
		pd     *PD
		need   Access
		va     uint64
		length uint32
		want   error
		first  byte // expected first byte on success
	}{
		{"ok whole", rk, f.pd, RemoteRead, f.base, 4096, nil, 0},
		{"ok middle", rk, f.pd, RemoteWrite, f.base + 100, 10, nil, 100},
		{"ok last byte", rk, f.pd, RemoteRead, end - 1, 1, nil, 255},
		{"ok two bits", rk, f.pd, RemoteRead | RemoteWrite, f.base, 8, nil, 0},
		{"zero length inside", rk, f.pd, RemoteRead, f.base + 5, 0, nil, 0},
		{"zero length at end", rk, f.pd, RemoteRead, end, 0, nil, 0},
		{"zero length checks key", rk ^ 1, f.pd, RemoteRead, f.base, 0, ErrKeyMismatch, 0},
		{"zero length past end", rk, f.pd, RemoteRead, end + 1, 0, ErrRange, 0},
		{"index 0", 0x000000ab, f.pd, RemoteRead, f.base, 1, ErrNoKey, 0},
		{"rkey 0", 0, f.pd, RemoteRead, f.base, 1, ErrNoKey, 0},
		{"unused index", 50<<8 | rk&0xff, f.pd, RemoteRead, f.base, 1, ErrNoKey, 0},
		{"index beyond directory", 0xffffff00, f.pd, RemoteRead, f.base, 1, ErrNoKey, 0},
		{"wrong key byte", rk ^ 0x80, f.pd, RemoteRead, f.base, 1, ErrKeyMismatch, 0},
		{"wrong pd", rk, f.pd2, RemoteRead, f.base, 1, ErrPDMismatch, 0},
		{"nil pd", rk, nil, RemoteRead, f.base, 1, ErrPDMismatch, 0},
		{"missing atomic bit", rk, f.pd, RemoteAtomic, f.base, 8, ErrAccess, 0},
		{"missing one of two bits", rk, f.pd, RemoteRead | RemoteAtomic, f.base, 8, ErrAccess, 0},
		{"no remote access (lkey)", f.lmr.LKey(), f.pd, RemoteRead, 0x1000, 1, ErrAccess, 0},
		{"invalidated", f.invalKey, f.pd, RemoteWrite, 0x3000, 1, ErrInvalid, 0},
		{"deregistered", f.deadKey, f.pd, RemoteWrite, 0x2000, 1, ErrInvalid, 0},
		{"below start", rk, f.pd, RemoteRead, f.base - 1, 1, ErrRange, 0},
		{"far below start", rk, f.pd, RemoteRead, 0, 1, ErrRange, 0},
		{"straddles start", rk, f.pd, RemoteRead, f.base - 1, 2, ErrRange, 0},
		{"one past end", rk, f.pd, RemoteRead, end - 1, 2, ErrRange, 0},
		{"starts at end", rk, f.pd, RemoteRead, end, 1, ErrRange, 0},
		{"too long", rk, f.pd, RemoteRead, f.base, 4097, ErrRange, 0},
		{"va+len overflows", rk, f.pd, RemoteRead, math.MaxUint64 - 2, 8, ErrRange, 0},
		{"max length", rk, f.pd, RemoteRead, f.base, math.MaxUint32, ErrRange, 0},
	} {
		b, err := f.t.Remote(c.rkey, c.pd, c.need, c.va, c.length)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
			continue
		}
		if err != nil {
			if b != nil {
				t.Errorf("%s: non-nil slice with error", c.name)
			}
			continue
		}
		if len(b) != int(c.length) || cap(b) != int(c.length) {
			t.Errorf("%s: len %d cap %d, want %d", c.name, len(b), cap(b), c.length)
		}
		if len(b) > 0 && b[0] != c.first {
			t.Errorf("%s: first byte %d, want %d", c.name, b[0], c.first)
		}
	}
	// The returned slice aliases the MR.
	b, _ := f.t.Remote(rk, f.pd, RemoteWrite, f.base+7, 1)
	b[0] = 0xEE
	if f.mr.Bytes()[7] != 0xEE {
		t.Fatal("Remote slice does not alias registered memory")
	}
}

func TestRemoteOverflowIOVA(t *testing.T) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	top := uint64(math.MaxUint64 - 16) // the MR ends at 2^64-1, the last representable end
	mr, err := pd.RegisterIOVA(make([]byte, 16), top, RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := tb.Remote(mr.RKey(), pd, RemoteRead, top+8, 8); err != nil || len(b) != 8 {
		t.Fatalf("last 8 bytes at the top of the IOVA space: %v", err)
	}
	if _, err := tb.Remote(mr.RKey(), pd, RemoteRead, top+8, 9); !errors.Is(err, ErrRange) {
		t.Fatalf("wrapping access: %v", err)
	}
}

func TestLocalChecks(t *testing.T) {
	f := newFixture(t)
	lk := f.mr.LKey()
	for _, c := range []struct {
		name      string
		lkey      uint32
		pd        *PD
		needWrite bool
		addr      uint64
		length    uint32
		want      error
	}{
		{"read ok", lk, f.pd, false, f.base, 4096, nil},
		{"write ok", lk, f.pd, true, f.base + 8, 8, nil},
		{"read-only MR read ok", f.lmr.LKey(), f.pd, false, 0x1000, 64, nil},
		{"read-only MR write", f.lmr.LKey(), f.pd, true, 0x1000, 1, ErrAccess},
		{"zero length", lk, f.pd, true, f.base + 4096, 0, nil},
		{"no key", 0, f.pd, false, f.base, 1, ErrNoKey},
		{"wrong key byte", lk ^ 1, f.pd, false, f.base, 1, ErrKeyMismatch},
		{"wrong pd", lk, f.pd2, false, f.base, 1, ErrPDMismatch},
		{"invalidated", f.invalKey, f.pd, false, 0x3000, 1, ErrInvalid},
		{"deregistered", f.deadKey, f.pd, false, 0x2000, 1, ErrInvalid},
		{"below", lk, f.pd, false, f.base - 8, 8, ErrRange},
		{"above", lk, f.pd, false, f.base + 4090, 8, ErrRange},
		{"overflow", lk, f.pd, false, math.MaxUint64, 2, ErrRange},
	} {
		b, err := f.t.Local(c.lkey, c.pd, c.needWrite, c.addr, c.length)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
			continue
		}
		if err == nil && len(b) != int(c.length) {
			t.Errorf("%s: len %d", c.name, len(b))
		}
	}
}

func TestInvalidate(t *testing.T) {
	tb := NewTable(testSeed)
	pd, pd2 := tb.AllocPD(), tb.AllocPD()
	mr, _ := pd.Register(make([]byte, 32), LocalWrite|RemoteWrite)
	lmr, _ := pd.Register(make([]byte, 32), LocalWrite)
	if err := tb.Invalidate(mr.RKey()^1, pd); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("wrong key: %v", err)
	}
	if err := tb.Invalidate(0x7700, pd); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no key: %v", err)
	}
	if err := tb.Invalidate(mr.RKey(), pd2); !errors.Is(err, ErrPDMismatch) {
		t.Fatalf("wrong pd: %v", err)
	}
	if !mr.Valid() {
		t.Fatal("failed Invalidate changed state")
	}
	if err := tb.Invalidate(mr.RKey(), pd); err != nil {
		t.Fatal(err)
	}
	if mr.Valid() {
		t.Fatal("still valid")
	}
	if err := tb.Invalidate(mr.RKey(), nil); err != nil {
		t.Fatalf("second Invalidate (nil pd): %v", err)
	}
	if _, err := tb.Remote(mr.RKey(), pd, RemoteWrite, mr.IOVA(), 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Remote after invalidate: %v", err)
	}
	// A local-only MR is invalidated by its lkey (rxe: key vs lkey when rkey is 0).
	if err := tb.Invalidate(lmr.LKey(), pd); err != nil {
		t.Fatal(err)
	}
	// Still registered: PD busy, Deregister works, then Invalidate fails.
	if err := pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Fatal(err)
	}
	_ = mr.Deregister()
	if err := tb.Invalidate(mr.RKey(), pd); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Invalidate after dereg: %v", err)
	}
}

func TestTableFull(t *testing.T) {
	if testing.Short() {
		t.Skip("registers MaxMRs regions")
	}
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	buf := make([]byte, 8)
	var mid *MR
	for i := range MaxMRs {
		mr, err := pd.Register(buf, 0)
		if err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
		if i == 1000 {
			mid = mr
		}
	}
	if _, err := pd.Register(buf, 0); !errors.Is(err, ErrTableFull) {
		t.Fatalf("register past MaxMRs: %v", err)
	}
	_ = mid.Deregister()
	mr, err := pd.Register(buf, 0)
	if err != nil || mr.LKey()>>8 != mid.LKey()>>8 {
		t.Fatalf("reuse in full table: %v", err)
	}
}

// TestConcurrentRegisterLookup runs registration/deregistration/invalidation
// goroutines against lookup goroutines (meaningful under -race). Each MR's
// buffer is filled with a tag before registration and the tag is also in
// the IOVA; any successful lookup must return memory with that tag, proving
// a lookup never sees a half-built MR or another MR's memory.
//
// The interleaving is forced without timing, so that it holds with -cpu 1
// too: all goroutines start together from a barrier, and at the end of each
// phase a writer publishes one of its live MRs in latest[w] and waits until
// every reader has done at least minLookups lookups after that, each reader
// looking up every latest slot in turn. So the readers look up the table
// while it is half-way through the writers' work, and every reader hits each
// writer's latest MR at least once per phase.
func TestConcurrentRegisterLookup(t *testing.T) {
	seed := rand.Int64()
	t.Logf("seed %d", seed)
	tb := NewTable(seed)
	pd := tb.AllocPD()
	const writers, readers, rounds, phases = 2, 2, 2000, 40
	// minLookups reader iterations after a writer read a reader's count
	// include writers+1 that started after the latest[w] store (the one in
	// progress may have started before), so at least one of them looks up
	// latest[w].
	const minLookups = 2*writers + 2
	var keys [64]atomic.Uint64        // tag<<32 | rkey of recently published MRs (some stale)
	var latest [writers]atomic.Uint64 // tag<<32 | rkey of an MR its writer keeps while it waits
	var done [readers]atomic.Int64    // lookup iterations of each reader
	var hits, misses atomic.Int64
	var failed atomic.Bool
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			var live []*MR
			defer func() {
				for _, mr := range live {
					_ = mr.Deregister()
				}
			}()
			<-start
			for i := range rounds {
				tag := byte(w*100 + i%100 + 1)
				buf := make([]byte, 64)
				for j := range buf {
					buf[j] = tag
				}
				mr, err := pd.RegisterIOVA(buf, uint64(tag)<<32, LocalWrite|RemoteWrite|RemoteRead)
				if err != nil {
					t.Errorf("seed %d: register: %v", seed, err)
					failed.Store(true)
					return
				}
				key := uint64(tag)<<32 | uint64(mr.RKey())
				keys[r.IntN(len(keys))].Store(key)
				live = append(live, mr)
				if (i+1)%(rounds/phases) == 0 {
					// mr stays registered until this writer goes on.
					latest[w].Store(key)
					for rd := range readers {
						for base := done[rd].Load(); done[rd].Load() < base+minLookups; {
							if failed.Load() {
								return
							}
							runtime.Gosched()
						}
					}
				}
				if len(live) > 8 {
					k := r.IntN(len(live) - 1) // never the newest, which may be latest[w]
					if r.IntN(4) == 0 {
						_ = tb.Invalidate(live[k].RKey(), pd)
					}
					if err := live[k].Deregister(); err != nil {
						t.Errorf("seed %d: deregister: %v", seed, err)
					}
					live = append(live[:k], live[k+1:]...)
				}
			}
		})
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	for rd := range readers {
		rwg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(seed), uint64(100+rd)))
			lookup := func(e uint64) bool {
				if e == 0 {
					return true
				}
				k, tag := uint32(e), e>>32
				b, err := tb.Remote(k, pd, RemoteRead, tag<<32, 64)
				if err != nil {
					// Stale keys fail only with the errors a stale key can give
					// (ErrRange: the key byte of a twice-reused index came
					// back, 1 in 255, and names an MR with another IOVA).
					if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrKeyMismatch) && !errors.Is(err, ErrRange) {
						t.Errorf("seed %d: key %#x: unexpected %v", seed, k, err)
						return false
					}
					misses.Add(1)
					return true
				}
				for _, v := range b {
					if uint64(v) != tag {
						t.Errorf("seed %d: key %#x tag %d returned byte %d", seed, k, tag, v)
						return false
					}
				}
				hits.Add(1)
				return true
			}
			<-start
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !lookup(latest[i%writers].Load()) || !lookup(keys[r.IntN(len(keys))].Load()) {
					failed.Store(true)
					return
				}
				done[rd].Add(1)
				// Readers never block; yielding lets a waiting writer run
				// without waiting for preemption.
				runtime.Gosched()
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	rwg.Wait()
	t.Logf("hits %d misses %d", hits.Load(), misses.Load())
	if failed.Load() {
		return
	}
	if min := int64(readers * writers * phases); hits.Load() < min {
		t.Errorf("seed %d: %d successful lookups, want at least %d (one per reader, writer and phase)", seed, hits.Load(), min)
	}
	if tb.nMRs != 0 || pd.nMRs != 0 {
		t.Fatalf("leak: table %d pd %d", tb.nMRs, pd.nMRs)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

var sinkB []byte

func BenchmarkRemote(b *testing.B) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	var mrs []*MR
	for range 1000 {
		mr, _ := pd.Register(make([]byte, 4096), LocalWrite|RemoteWrite|RemoteRead)
		mrs = append(mrs, mr)
	}
	mr := mrs[777]
	k, va := mr.RKey(), mr.IOVA()+1024
	b.ReportAllocs()
	for b.Loop() {
		s, err := tb.Remote(k, pd, RemoteWrite, va, 1024)
		if err != nil {
			b.Fatal(err)
		}
		sinkB = s
	}
}

func BenchmarkRemoteError(b *testing.B) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	mr, _ := pd.Register(make([]byte, 4096), LocalWrite|RemoteWrite)
	k := mr.RKey()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.Remote(k, pd, RemoteRead, mr.IOVA(), 8); err != ErrAccess {
			b.Fatal(err)
		}
	}
}

func BenchmarkRemoteParallel(b *testing.B) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	mr, _ := pd.Register(make([]byte, 4096), LocalWrite|RemoteWrite)
	k, va := mr.RKey(), mr.IOVA()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tb.Remote(k, pd, RemoteWrite, va, 64); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRegisterDeregister(b *testing.B) {
	tb := NewTable(testSeed)
	pd := tb.AllocPD()
	for range 1000 {
		_, _ = pd.Register(make([]byte, 64), RemoteRead)
	}
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		mr, err := pd.Register(buf, LocalWrite|RemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		_ = mr.Deregister()
	}
}

func TestRemoteNoAllocs(t *testing.T) {
	f := newFixture(t)
	n := testing.AllocsPerRun(100, func() {
		_, _ = f.t.Remote(f.rk, f.pd, RemoteRead, f.base, 64)
		_, _ = f.t.Remote(f.rk^1, f.pd, RemoteRead, f.base, 64)
		_, _ = f.t.Local(f.rk, f.pd, true, f.base, 64)
		_, _ = f.t.Local(f.invalKey, f.pd, true, 0x3000, 64)
	})
	if n != 0 {
		t.Fatalf("lookups allocate: %v allocs/run", n)
	}
}
