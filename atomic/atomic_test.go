package atomic

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/wire"
)

// aligned returns an 8-byte slice whose Go address is 8-aligned.
func aligned() []byte {
	w := make([]uint64, 2)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 16)[:8]
}

// unaligned returns an 8-byte slice whose Go address is off (1..7) bytes past
// an 8-aligned address, as RegisterIOVA can produce for an aligned VA.
func unaligned(off int) []byte {
	w := make([]uint64, 3)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 24)
	return b[off : off+8 : off+8]
}

func TestSemantics(t *testing.T) {
	for _, name := range []string{"aligned", "unaligned"} {
		t.Run(name, func(t *testing.T) {
			mem := aligned()
			if name == "unaligned" {
				mem = unaligned(3)
			}
			if got := uintptr(unsafe.Pointer(&mem[0]))&7 != 0; got != (name == "unaligned") {
				t.Fatalf("fixture alignment wrong: %p", &mem[0])
			}
			e := NewExecutor()
			binary.NativeEndian.PutUint64(mem, 40)
			if orig, err := e.FetchAdd(mem, 0x1000, 2); err != nil || orig != 40 {
				t.Fatalf("FetchAdd: %d, %v", orig, err)
			}
			if v := binary.NativeEndian.Uint64(mem); v != 42 {
				t.Fatalf("after FetchAdd: %d", v)
			}
			// Wraps modulo 2^64.
			binary.NativeEndian.PutUint64(mem, math.MaxUint64)
			if orig, _ := e.FetchAdd(mem, 0, 3); orig != math.MaxUint64 || binary.NativeEndian.Uint64(mem) != 2 {
				t.Fatalf("wrap: orig %d now %d", orig, binary.NativeEndian.Uint64(mem))
			}
			// CAS hit.
			if orig, err := e.CompareSwap(mem, 8, 2, 0xdeadbeefcafe); err != nil || orig != 2 {
				t.Fatalf("CAS hit: %d, %v", orig, err)
			}
			if v := binary.NativeEndian.Uint64(mem); v != 0xdeadbeefcafe {
				t.Fatalf("after CAS hit: %#x", v)
			}
			// CAS miss: memory unchanged, original returned.
			if orig, err := e.CompareSwap(mem, 8, 1, 7); err != nil || orig != 0xdeadbeefcafe {
				t.Fatalf("CAS miss: %#x, %v", orig, err)
			}
			if v := binary.NativeEndian.Uint64(mem); v != 0xdeadbeefcafe {
				t.Fatalf("after CAS miss: %#x", v)
			}
			// Host order: on little-endian hosts byte 0 is the low byte,
			// as rxe's *(u64 *)vaddr.
			binary.NativeEndian.PutUint64(mem, 0)
			_, _ = e.FetchAdd(mem, 0, 0x0102)
			want := []byte{0, 0, 0, 0, 0, 0, 0x01, 0x02}
			if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 { // little-endian
				want = []byte{0x02, 0x01, 0, 0, 0, 0, 0, 0}
			}
			if string(mem) != string(want) {
				t.Fatalf("memory bytes %x, want %x", mem, want)
			}
			wantUnaligned := uint64(0)
			if name == "unaligned" {
				wantUnaligned = 5
			}
			if e.Unaligned() != wantUnaligned {
				t.Fatalf("Unaligned() = %d, want %d", e.Unaligned(), wantUnaligned)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	e := NewExecutor()
	mem := aligned()
	binary.NativeEndian.PutUint64(mem, 5)
	for va := uint64(1); va < 8; va++ {
		if _, err := e.FetchAdd(mem, 0x1000+va, 1); !errors.Is(err, ErrMisaligned) {
			t.Fatalf("FetchAdd va+%d: %v", va, err)
		}
		if _, err := e.CompareSwap(mem, 0x1000+va, 5, 6); !errors.Is(err, ErrMisaligned) {
			t.Fatalf("CompareSwap va+%d: %v", va, err)
		}
	}
	for n := range 8 {
		if _, err := e.FetchAdd(mem[:n], 0x1000, 1); !errors.Is(err, ErrShort) {
			t.Fatalf("FetchAdd len %d: %v", n, err)
		}
		if _, err := e.CompareSwap(mem[:n], 0x1000, 5, 6); !errors.Is(err, ErrShort) {
			t.Fatalf("CompareSwap len %d: %v", n, err)
		}
	}
	if _, err := e.FetchAdd(nil, 0, 1); !errors.Is(err, ErrShort) {
		t.Fatalf("nil: %v", err)
	}
	if v := binary.NativeEndian.Uint64(mem); v != 5 {
		t.Fatalf("failed atomics changed memory: %d", v)
	}
	// Longer memory is fine: only the first 8 bytes are touched.
	long := make([]uint64, 2)
	lb := unsafe.Slice((*byte)(unsafe.Pointer(&long[0])), 16)
	if _, err := e.FetchAdd(lb, 0, 1); err != nil || long[0] != 1 || long[1] != 0 {
		t.Fatalf("long slice: %v %v", err, long)
	}
}

// TestHammerFetchAdd: many goroutines add to one counter; the sum and the
// set of returned originals must be exact (each original seen once).
func TestHammerFetchAdd(t *testing.T) {
	for _, off := range []int{0, 1, 4, 7} {
		mem := unaligned(off)
		if off == 0 {
			mem = aligned()
		}
		e := NewExecutor()
		const G, N = 8, 2000
		origs := make([][]uint64, G)
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				for range N {
					o, err := e.FetchAdd(mem, 0, 1)
					if err != nil {
						t.Error(err)
						return
					}
					origs[g] = append(origs[g], o)
				}
			})
		}
		wg.Wait()
		if v := binary.NativeEndian.Uint64(mem); v != G*N {
			t.Fatalf("off %d: counter %d, want %d", off, v, G*N)
		}
		seen := make([]bool, G*N)
		for _, os := range origs {
			for _, o := range os {
				if o >= G*N || seen[o] {
					t.Fatalf("off %d: original %d returned twice or out of range", off, o)
				}
				seen[o] = true
			}
		}
	}
}

// TestCASCounter: a counter incremented only by CAS loops (read, then CAS
// old→old+1 until the returned original equals old) ends exactly at the
// number of increments, on both paths. It also mixes with FetchAdd on the
// same address, which must take the same path.
func TestCASCounter(t *testing.T) {
	for _, off := range []int{0, 5} {
		mem := unaligned(off)
		if off == 0 {
			mem = aligned()
		}
		e := NewExecutor()
		const G, N = 6, 1000
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				for range N {
					if g%3 == 0 {
						_, _ = e.FetchAdd(mem, 0, 1)
						continue
					}
					old, _ := e.FetchAdd(mem, 0, 0) // atomic read
					for {
						o, err := e.CompareSwap(mem, 0, old, old+1)
						if err != nil {
							t.Error(err)
							return
						}
						if o == old {
							break
						}
						old = o
					}
				}
			})
		}
		wg.Wait()
		if v := binary.NativeEndian.Uint64(mem); v != G*N {
			t.Fatalf("off %d: counter %d, want %d", off, v, G*N)
		}
	}
}

func TestHistory(t *testing.T) {
	h := NewHistory(3)
	if _, ok := h.Lookup(0); ok {
		t.Fatal("empty history found PSN 0")
	}
	for i := range 5 {
		h.Record(wire.PSN(100+i), uint64(0x1000+8*i), 0xab00, uint64(i*10))
	}
	if h.Len() != 3 {
		t.Fatalf("Len %d", h.Len())
	}
	for i := range 5 {
		r, ok := h.Lookup(wire.PSN(100 + i))
		if i < 2 {
			if ok {
				t.Fatalf("PSN %d should have been evicted, got %+v", 100+i, r)
			}
			continue
		}
		want := Rec{PSN: wire.PSN(100 + i), VA: uint64(0x1000 + 8*i), RKey: 0xab00, Orig: uint64(i * 10)}
		if !ok || r != want {
			t.Fatalf("PSN %d: %+v %v, want %+v", 100+i, r, ok, want)
		}
	}
	// Same PSN recorded again (after 2^24 wrap): the newest wins.
	h.Record(104, 0x9000, 0xcd00, 999)
	if r, _ := h.Lookup(104); r.Orig != 999 || r.VA != 0x9000 {
		t.Fatalf("newest record not preferred: %+v", r)
	}
	h.Reset()
	if _, ok := h.Lookup(104); ok || h.Len() != 0 {
		t.Fatal("Reset kept records")
	}
	// PSN wrap: records near 2^24 and 0 coexist.
	h.Record(wire.PSNMask, 0, 1, 1)
	h.Record(0, 0, 1, 2)
	if r, ok := h.Lookup(wire.PSNMask); !ok || r.Orig != 1 {
		t.Fatal("PSN 0xFFFFFF lost")
	}
	if r, ok := h.Lookup(0); !ok || r.Orig != 2 {
		t.Fatal("PSN 0 lost")
	}
	// max_dest_rd_atomic 0: nothing recorded, no panic.
	for _, n := range []int{0, -1} {
		z := NewHistory(n)
		z.Record(1, 2, 3, 4)
		if _, ok := z.Lookup(1); ok || z.Len() != 0 {
			t.Fatalf("NewHistory(%d) recorded", n)
		}
		z.Reset()
	}
	// One slot.
	one := NewHistory(1)
	one.Record(1, 0, 0, 11)
	one.Record(2, 0, 0, 22)
	if _, ok := one.Lookup(1); ok {
		t.Fatal("size-1 ring kept two")
	}
	if r, ok := one.Lookup(2); !ok || r.Orig != 22 {
		t.Fatal("size-1 ring lost newest")
	}
}

// TestDuplicateNotReexecuted shows the intended responder flow: execute and
// record, then answer a duplicate from the record without touching memory.
func TestDuplicateNotReexecuted(t *testing.T) {
	e, h, mem := NewExecutor(), NewHistory(4), aligned()
	respond := func(psn wire.PSN, add uint64) uint64 {
		if r, ok := h.Lookup(psn); ok && r.VA == 0x2000 && r.RKey == 0x100 {
			return r.Orig
		}
		o, err := e.FetchAdd(mem, 0x2000, add)
		if err != nil {
			t.Fatal(err)
		}
		h.Record(psn, 0x2000, 0x100, o)
		return o
	}
	if o := respond(7, 5); o != 0 {
		t.Fatal(o)
	}
	if o := respond(7, 5); o != 0 { // duplicate: same answer
		t.Fatal(o)
	}
	if o := respond(8, 5); o != 5 {
		t.Fatal(o)
	}
	if v := binary.NativeEndian.Uint64(mem); v != 10 {
		t.Fatalf("counter %d: duplicate executed twice", v)
	}
}

func TestNoAllocs(t *testing.T) {
	e, h := NewExecutor(), NewHistory(16)
	a, u := aligned(), unaligned(1)
	n := testing.AllocsPerRun(100, func() {
		_, _ = e.FetchAdd(a, 0, 1)
		_, _ = e.CompareSwap(a, 0, 1, 2)
		_, _ = e.FetchAdd(u, 0, 1)
		_, _ = e.CompareSwap(u, 0, 1, 2)
		_, _ = e.FetchAdd(a, 1, 1)
		h.Record(1, 2, 3, 4)
		_, _ = h.Lookup(1)
	})
	if n != 0 {
		t.Fatalf("%v allocs/run", n)
	}
}

func BenchmarkFetchAdd(b *testing.B) {
	e, mem := NewExecutor(), aligned()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.FetchAdd(mem, 0x1000, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFetchAddUnaligned(b *testing.B) {
	e, mem := NewExecutor(), unaligned(3)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.FetchAdd(mem, 0x1000, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompareSwap(b *testing.B) {
	e, mem := NewExecutor(), aligned()
	b.ReportAllocs()
	var v uint64
	for b.Loop() {
		o, err := e.CompareSwap(mem, 0x1000, v, v+1)
		if err != nil || o != v {
			b.Fatal(o, err)
		}
		v++
	}
}

func BenchmarkHistoryLookup(b *testing.B) {
	h := NewHistory(128) // rxe max_qp_rd_atom
	for i := range 128 {
		h.Record(wire.PSN(i), 0, 0, uint64(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := h.Lookup(0); !ok { // oldest: worst case
			b.Fatal()
		}
	}
}

// TestHistoryModel compares History with a naive model (newest record with
// the PSN among the last N, only PSNs not after the newest) over random
// record sequences: in order with gaps, across the 2^24 wrap, with
// occasional out-of-order records that switch Lookup to its scan path and
// back.
func TestHistoryModel(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for _, n := range []int{1, 2, 3, 16, 128} {
		h := NewHistory(n)
		var model []Rec
		psn := wire.PSN(wire.PSNMask - 500) // wraps early
		for i := range 3000 {
			switch {
			case r.IntN(50) == 0:
				psn = psn.Sub(uint32(r.IntN(300))) // out of order (or a repeat)
			default:
				psn = psn.Add(1 + uint32(r.IntN(200)))
			}
			rec := Rec{PSN: psn, VA: uint64(i) * 8, RKey: uint32(n), Orig: uint64(i)}
			h.Record(rec.PSN, rec.VA, rec.RKey, rec.Orig)
			model = append(model, rec)
			if len(model) > n {
				model = model[1:]
			}
			// Probe recorded PSNs, their neighbours and random ones.
			for range 4 {
				var q wire.PSN
				switch r.IntN(3) {
				case 0:
					q = model[r.IntN(len(model))].PSN
				case 1:
					q = model[r.IntN(len(model))].PSN.Add(1)
				default:
					q = psn.Sub(uint32(r.IntN(30000)))
				}
				got, ok := h.Lookup(q)
				var want Rec
				wok := false
				if model[len(model)-1].PSN.Diff(q) >= 0 {
					for j := len(model) - 1; j >= 0; j-- {
						if model[j].PSN == q {
							want, wok = model[j], true
							break
						}
					}
				}
				if ok != wok || got != want {
					t.Fatalf("seed %d n %d step %d: Lookup(%#x) = %+v,%v; model %+v,%v", seed, n, i, q, got, ok, want, wok)
				}
			}
		}
	}
}

// TestHistoryLongSpan: in-order records spanning more than 2^24 PSNs; a
// PSN that aliases a record older than the comparison window must not
// match it.
func TestHistoryLongSpan(t *testing.T) {
	h := NewHistory(8)
	p := wire.PSN(10)
	for range 5 {
		h.Record(p, 0, 0, uint64(p))
		p = p.Add(1 << 22) // 4 records = 2^24 = one full PSN cycle
	}
	// Records: 10, 10+2^22, 10+2^23, 10+3·2^22, 10 (after one cycle, newest).
	if r, ok := h.Lookup(10); !ok || r.Orig != 10 {
		t.Fatalf("newest: %+v %v", r, ok)
	}
	// 10+2^22 is 3·2^22 behind the newest: outside the ±2^23 window, a
	// "future" PSN: no match although a record carries that PSN.
	if r, ok := h.Lookup(wire.PSN(10).Add(1 << 22)); ok {
		t.Fatalf("matched a record outside the PSN window: %+v", r)
	}
	// 10+3·2^22 is 2^22 behind the newest: found.
	if r, ok := h.Lookup(wire.PSN(10).Add(3 << 22)); !ok || r.PSN != wire.PSN(10).Add(3<<22) {
		t.Fatalf("record 2^22 behind: %+v %v", r, ok)
	}
}
