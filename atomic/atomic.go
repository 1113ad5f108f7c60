// Package atomic executes the RDMA atomics (FETCH_ADD, CMP_SWAP) that a
// responder receives, and keeps the per-QP record that answers duplicate
// atomic requests without executing them twice.
//
// # Execution model
//
// An atomic targets 8 bytes of registered memory, already checked by
// memreg.Table.Remote(rkey, pd, memreg.RemoteAtomic, va, 8). The remote VA
// must be 8-byte aligned (rxe_resp.c check_rkey/atomic: vaddr & 7 → NAK
// 0x61, "invalid request"); [ErrMisaligned] and [ErrShort] are that NAK.
// The operand lives in memory in host byte order, as rxe does
// `*(u64 *)vaddr`: little-endian on amd64/arm64. The wire carries the
// operands and the original value big-endian; converting is the
// transport's job, this package takes and returns plain uint64 values.
//
// An aligned VA does not imply an aligned Go pointer: with
// memreg.PD.RegisterIOVA the IOVA and the Go address can differ by any
// amount. The [Executor] picks the path from the Go pointer, so every atomic
// on one address always takes the same path:
//
//   - pointer 8-aligned: sync/atomic on *uint64 (a single LOCK XADD /
//     LOCK CMPXCHG on amd64), atomic with respect to any other Go atomic on
//     that word;
//   - pointer not 8-aligned: one of 64 striped mutexes chosen by the
//     address, then a plain read-modify-write in host order. Such atomics are
//     atomic with respect to each other (the same address always hashes to
//     the same stripe; the stripes are package-global, so this holds across
//     Executors and devices) but not with respect to an overlapping 8-byte
//     word at another address — which an aligned VA in one MR can never
//     produce, since all its atomic targets are 8 bytes apart.
//
// As on real HCAs, atomics are not atomic with respect to the application's
// plain loads and stores, nor to RDMA WRITEs into the same bytes (IBTA
// o10-45: atomicity is only guaranteed between atomics of one HCA).
//
// # Duplicates
//
// A requester retries an atomic whose ATOMIC_ACKNOWLEDGE was lost with the
// same PSN. The responder must then answer with the saved original value and
// not execute it again (IBTA 9.7.5.1.4 / rxe_resp.c duplicate_request →
// find_resource). [History] is that record: a ring of the last
// max_dest_rd_atomic executed atomics of one QP.
package atomic

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/wire"
)

// Errors; both mean NAK 0x61 (invalid request) → REM_INV_REQ_ERR.
var (
	ErrMisaligned = errors.New("atomic: remote address is not 8-byte aligned")
	ErrShort      = errors.New("atomic: target memory shorter than 8 bytes")
)

const nStripes = 64

// stripe is a mutex padded to its own cache line.
type stripe struct {
	sync.Mutex
	_ [64 - unsafe.Sizeof(sync.Mutex{})]byte
}

// stripes serialize atomics on unaligned Go addresses. Package-global so
// that the guarantee holds across Executors sharing memory.
var stripes [nStripes]stripe

// Executor runs RDMA atomics on registered memory, atomically with respect to
// every other atomic run by any Executor. It is safe for concurrent use and
// does not allocate.
type Executor struct {
	unaligned atomic.Uint64 // atomics that took the striped-mutex path
}

// NewExecutor returns an Executor.
func NewExecutor() *Executor { return &Executor{} }

// Unaligned returns how many atomics took the striped-mutex path because
// their Go pointer was not 8-aligned.
func (e *Executor) Unaligned() uint64 { return e.unaligned.Load() }

// target validates the request and returns the word's pointer.
func target(mem []byte, va uint64) (unsafe.Pointer, error) {
	if va&7 != 0 {
		return nil, ErrMisaligned
	}
	if len(mem) < 8 {
		return nil, ErrShort
	}
	return unsafe.Pointer(unsafe.SliceData(mem)), nil
}

func lockFor(p unsafe.Pointer) *stripe {
	a := uintptr(p)
	return &stripes[(a^a>>6^a>>12)%nStripes]
}

// FetchAdd adds add to the 8 bytes at mem[0:8] (host order, modulo 2^64) and
// returns the original value. va is the remote address from the AtomicETH,
// checked for alignment.
func (e *Executor) FetchAdd(mem []byte, va uint64, add uint64) (orig uint64, err error) {
	p, err := target(mem, va)
	if err != nil {
		return 0, err
	}
	if uintptr(p)&7 == 0 {
		return atomic.AddUint64((*uint64)(p), add) - add, nil
	}
	e.unaligned.Add(1)
	l := lockFor(p)
	l.Lock()
	orig = binary.NativeEndian.Uint64(mem)
	binary.NativeEndian.PutUint64(mem, orig+add)
	l.Unlock()
	return orig, nil
}

// Store writes the 8 bytes v to mem[0:8] in one atomic store, as an IBTA
// 1.5 ATOMIC WRITE does (rxe_mr_do_atomic_write: smp_store_release of the
// payload's bytes): the bytes land as they came, and no other atomic sees
// half of them. va is the remote address, checked for alignment.
func (e *Executor) Store(mem []byte, va uint64, v [8]byte) error {
	p, err := target(mem, va)
	if err != nil {
		return err
	}
	if uintptr(p)&7 == 0 {
		atomic.StoreUint64((*uint64)(p), binary.NativeEndian.Uint64(v[:]))
		return nil
	}
	e.unaligned.Add(1)
	l := lockFor(p)
	l.Lock()
	copy(mem, v[:])
	l.Unlock()
	return nil
}

// CompareSwap writes swap to mem[0:8] if it holds compare, and returns the
// original value either way (IBTA CmpSwap; the requester learns success by
// comparing the returned value with compare).
func (e *Executor) CompareSwap(mem []byte, va uint64, compare, swap uint64) (orig uint64, err error) {
	p, err := target(mem, va)
	if err != nil {
		return 0, err
	}
	if uintptr(p)&7 == 0 {
		w := (*uint64)(p)
		for {
			if atomic.CompareAndSwapUint64(w, compare, swap) {
				return compare, nil
			}
			// Failed: report the value that made it fail. If the word
			// changed back to compare in between, retry so the result is
			// a single linearizable step.
			if old := atomic.LoadUint64(w); old != compare {
				return old, nil
			}
		}
	}
	e.unaligned.Add(1)
	l := lockFor(p)
	l.Lock()
	orig = binary.NativeEndian.Uint64(mem)
	if orig == compare {
		binary.NativeEndian.PutUint64(mem, swap)
	}
	l.Unlock()
	return orig, nil
}

// Rec is one executed atomic, as saved for duplicate detection.
type Rec struct {
	PSN  wire.PSN
	VA   uint64
	RKey uint32
	Orig uint64 // the value returned in the ATOMIC_ACKNOWLEDGE
}

// History remembers the results of the last N executed atomics of one QP (N =
// max_dest_rd_atomic) so a duplicate request (same PSN, retried after a lost
// ATOMIC ACK) is answered from the saved original value and never executed
// twice. It is a ring: recording the N+1st atomic forgets the oldest, which
// matches rxe's responder resource ring (a duplicate older than that is
// silently dropped). A History belongs to one QP's responder and is not safe
// for concurrent use. It does not allocate after NewHistory.
//
// A responder executes requests in PSN order, so records normally arrive
// with increasing PSNs. History then keeps each record's PSN extended to 64
// bits (the 24-bit PSN plus the wraps seen so far) and Lookup binary-searches
// it: O(log N), 7 steps for rxe's 128. If records ever arrive out of order
// (Record with a PSN not after the newest), Lookup scans linearly, newest
// first, until that record has left the ring.
type History struct {
	recs []Rec
	ext  []uint64 // ext[i]: recs[i].PSN extended to 64 bits; increasing in logical order when ordered
	next int      // slot of the next Record
	n    int      // valid records, ≤ len(recs)
	// unordered counts the Records left before an out-of-order pair has
	// left the ring; 0 means the ring is in PSN order.
	unordered int
}

// NewHistory returns a History of n records. n ≤ 0 (max_dest_rd_atomic 0:
// the QP accepts no atomics) gives a History that records nothing.
func NewHistory(n int) *History {
	if n < 0 {
		n = 0
	}
	return &History{recs: make([]Rec, n), ext: make([]uint64, n)}
}

// Len returns how many records are held.
func (h *History) Len() int { return h.n }

// Record saves an executed atomic, evicting the oldest if full.
func (h *History) Record(psn wire.PSN, va uint64, rkey uint32, orig uint64) {
	if len(h.recs) == 0 {
		return
	}
	var ext uint64
	if h.n > 0 {
		last := h.slot(h.n - 1)
		d := psn.Diff(h.recs[last].PSN)
		ext = h.ext[last] + uint64(d) // may step back when d ≤ 0; only used when ordered
		switch {
		case d <= 0:
			// The previous record and this one are out of order until
			// the previous one leaves the ring, len-1 Records from now.
			h.unordered = len(h.recs) - 1
		case h.unordered > 0:
			h.unordered--
		}
	} else {
		ext = 1 << 32 // any base; keeps ext far from 0 so it never underflows in Lookup
		h.unordered = 0
	}
	h.recs[h.next] = Rec{PSN: psn, VA: va, RKey: rkey, Orig: orig}
	h.ext[h.next] = ext
	h.next++
	if h.next == len(h.recs) {
		h.next = 0
	}
	if h.n < len(h.recs) {
		h.n++
	}
}

// Lookup returns the most recent record with this PSN. The caller should also
// compare VA and RKey with the duplicate request: a mismatch means the
// "duplicate" is not the same operation (IBTA: treat as invalid request).
// Only PSNs within 2^23 before the newest record can match (the PSN
// comparison window, PROTOCOL.md §3.1).
func (h *History) Lookup(psn wire.PSN) (Rec, bool) {
	if h.n == 0 {
		return Rec{}, false
	}
	newest := h.slot(h.n - 1)
	back := h.recs[newest].PSN.Diff(psn)
	if back < 0 {
		return Rec{}, false
	}
	if h.unordered > 0 {
		i := newest
		for k := 0; k < h.n; k++ {
			if h.recs[i].PSN == psn {
				return h.recs[i], true
			}
			if i--; i < 0 {
				i = len(h.recs) - 1
			}
		}
		return Rec{}, false
	}
	want := h.ext[newest] - uint64(back)
	lo, hi := 0, h.n-1
	for lo <= hi {
		mid := int(uint(lo+hi) >> 1)
		i := h.slot(mid)
		switch e := h.ext[i]; {
		case e == want:
			return h.recs[i], true
		case e < want:
			lo = mid + 1
		default:
			hi = mid - 1
		}
	}
	return Rec{}, false
}

// slot returns the ring index of logical index j (0 = oldest, n-1 = newest).
func (h *History) slot(j int) int {
	i := h.next - h.n + j
	if i < 0 {
		i += len(h.recs)
	}
	return i
}

// Reset forgets every record (QP reset or re-connection).
func (h *History) Reset() {
	clear(h.recs)
	clear(h.ext)
	h.next, h.n, h.unordered = 0, 0, 0
}
