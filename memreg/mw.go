package memreg

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

// Memory windows (rxe_mw.c). A window is a range of an MR registered with
// MWBind, with its own rkey and remote access rights; the peer names it by
// that rkey exactly as it names an MR. Window indices come after the MR
// indices, as in rxe (rxe_param.h), so the index of a key says whether it
// names an MR or a window (rxe rkey_is_mw).
const (
	MinMWIndex = MaxMRs + 1 // RXE_MIN_MW_INDEX, 0x40001
	MaxMWIndex = 0x60000    // RXE_MAX_MW_INDEX
	// MaxMWs is the number of window indices.
	MaxMWs = MaxMWIndex - MinMWIndex + 1
)

// MWType is a memory window type (enum ibv_mw_type).
type MWType uint8

const (
	// MWType1 windows are bound with the bind call (ibv_bind_mw) and stay
	// valid until rebound or deallocated; they cannot be invalidated.
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	// MWType2 windows (type 2B) are bound by a BIND_MW work request on a QP
	// of their PD, are reachable only through that QP, and are invalidated
	// by LOCAL_INV or a peer's SEND_WITH_INV.
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "TYPE_1"
	case MWType2:
		return "TYPE_2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// IsMWKey reports whether key names a memory window (rxe rkey_is_mw).
func IsMWKey(key uint32) bool {
	idx := key >> 8
	return idx >= MinMWIndex && idx <= MaxMWIndex
}

// Window errors. Each is a sentinel: compare with errors.Is.
var (
	// ErrMWState: a type 1 window that is not valid (deallocated), a type 2
	// window that is already bound (o10-37.2.30), or a deallocated window
	// named by an invalidate.
	ErrMWState = errors.New("memreg: memory window is not in a state that allows this")
	// ErrMWType: the operation is not allowed on this window type, e.g.
	// invalidating a type 1 window (o10-37.2.26).
	ErrMWType = errors.New("memreg: operation not allowed on this memory window type")
	// ErrZeroBased: a zero-based type 1 window (o10-36.2.2) or a window on
	// a zero-based MR.
	ErrZeroBased = errors.New("memreg: zero-based memory window not allowed here")
	// ErrNoBindAccess: the MR was not registered with MWBind (C10-73).
	ErrNoBindAccess = errors.New("memreg: MR lacks MW_BIND access")
	// ErrZeroLength: a type 2 bind without an MR or with length 0
	// (o10-37.2.40).
	ErrZeroLength = errors.New("memreg: type 2 memory window bind needs an MR and a non-zero length")
	// ErrWrongQP: a type 2 window reached through a QP other than the one
	// that bound it (o10-37.2.43).
	ErrWrongQP = errors.New("memreg: type 2 memory window is bound to another QP")
	// ErrMRBound: Deregister or Invalidate of an MR that memory windows are
	// bound to (rxe_dereg_mr, rxe_invalidate_mr: EINVAL).
	ErrMRBound = errors.New("memreg: memory windows are bound to the MR")
	// ErrMWDead: the window was deallocated.
	ErrMWDead = errors.New("memreg: memory window is deallocated")
)

// Window states, as rxe's enum rxe_mw_state.
const (
	mwInvalid uint32 = iota // RXE_MW_STATE_INVALID: deallocated
	mwFree                  // RXE_MW_STATE_FREE: type 2, not bound
	mwValid                 // RXE_MW_STATE_VALID
)

// mwBinding is one state of a window, a copy read by MW.load.
type mwBinding struct {
	rkey   uint32
	state  uint32
	mr     *MR // nil when not bound
	addr   uint64
	length uint64
	access Access
	qp     any // type 2: the QP that bound it (compared with ==)
}

// MW is a memory window (struct rxe_mw).
//
// Its binding lives in atomic fields under a sequence lock, so that a bind
// or invalidate (under t.mu) allocates nothing and the responder's access
// checks read it without a lock. meta holds the key byte, the state, the
// rights and a generation; a bind stores meta with the generation odd,
// then the range, MR and QP, then meta with the generation even; an
// invalidate or deallocation stores meta alone. A reader copies the fields
// between two loads of the same meta with an even generation and retries
// otherwise (MW.load).
type MW struct {
	t   *Table
	pd  *PD
	typ MWType
	idx uint32 // the rkey without its key byte

	meta   atomic.Uint64 // key byte | state<<8 | access<<10 | generation<<20
	mr     atomic.Pointer[MR]
	addr   atomic.Uint64
	length atomic.Uint64
	// qp points to an immutable box holding the binding QP (noQP when
	// none); lastQP is the last box allocated, reused while the same QP
	// binds the window again, so a bind allocates only when the QP
	// changes. Under t.mu.
	qp     atomic.Pointer[any]
	lastQP *any

	next uint32 // type 1: the rkey once every posted bind executed; under t.mu
}

const (
	metaStateShift  = 8
	metaAccessShift = 10
	metaGenShift    = 20
	metaWriting     = 1 << metaGenShift // odd generation: a bind is storing
)

// noQP is the box of a binding without a QP.
var noQP = new(any)

// testHookMWStore, when set by a test before any window exists, runs in
// the middle of every bind's store.
var testHookMWStore func()

// state returns the window's state.
func (mw *MW) state() uint32 { return uint32(mw.meta.Load()>>metaStateShift) & 3 }

// read copies the window's binding into b, which must be zero (only rkey
// and state when the window is not valid), and returns the meta word it
// was read at; ok is false when a bind was storing meanwhile and b is to
// be thrown away. A caller confirms that no bind, invalidate or
// deallocation completed since with mw.meta.Load() == seq.
func (mw *MW) read(b *mwBinding) (seq uint64, ok bool) {
	m := mw.meta.Load()
	b.rkey, b.state = mw.idx|uint32(m&0xff), uint32(m>>metaStateShift)&3
	if b.state == mwValid {
		b.access = Access(m>>metaAccessShift) & 0x3ff
		b.mr, b.addr, b.length = mw.mr.Load(), mw.addr.Load(), mw.length.Load()
		b.qp = *mw.qp.Load()
	}
	return m, m&metaWriting == 0 && mw.meta.Load() == m
}

// load is read until it succeeds. Lock-free, no allocation.
func (mw *MW) load() (b mwBinding, seq uint64) {
	for i := 0; ; i++ {
		b = mwBinding{}
		if m, ok := mw.read(&b); ok {
			return b, m
		}
		backoff(i)
	}
}

// backoff is a reader's wait after its i-th try found a bind storing.
func backoff(i int) {
	if i >= 4 {
		runtime.Gosched() // the writer was preempted in the middle of a bind
	}
}

// store publishes b as the window's binding. Called with t.mu held (the
// writers' lock), so one writer at a time; only the words that change are
// stored.
func (mw *MW) store(b mwBinding) {
	m := mw.meta.Load()
	gen := m &^ (metaWriting - 1)
	nm := uint64(b.rkey&0xff) | uint64(b.state)<<metaStateShift | uint64(b.access&0x3ff)<<metaAccessShift
	if b.state != mwValid {
		mw.meta.Store(gen + 2*metaWriting | nm) // one word: no reader sees half
		return
	}
	box := noQP
	if b.qp != nil {
		if mw.lastQP == nil || *mw.lastQP != b.qp {
			mw.lastQP = new(any)
			*mw.lastQP = b.qp
		}
		box = mw.lastQP
	}
	mw.meta.Store(gen + metaWriting | m&(metaWriting-1))
	if mw.mr.Load() != b.mr {
		mw.mr.Store(b.mr)
	}
	if testHookMWStore != nil {
		testHookMWStore() // tests: a reader may run in the middle of a bind
	}
	if mw.addr.Load() != b.addr {
		mw.addr.Store(b.addr)
	}
	if mw.length.Load() != b.length {
		mw.length.Store(b.length)
	}
	if mw.qp.Load() != box {
		mw.qp.Store(box)
	}
	mw.meta.Store(gen + 2*metaWriting | nm)
}

type mwChunk [chunkSize]atomic.Pointer[MW]

// mwSpace is a table's window index space, laid out like the MR slots.
type mwSpace struct {
	dir     atomic.Pointer[[]*mwChunk]
	lowFree uint32 // offset (index − MinMWIndex) below which no slot is free
	n       int
}

// RKey returns the window's current rkey: its index and the key byte of the
// last bind that executed.
func (mw *MW) RKey() uint32 { return mw.idx | uint32(mw.meta.Load()&0xff) }

// Type returns the window type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the window's protection domain.
func (mw *MW) PD() *PD { return mw.pd }

// Bound reports whether the window is valid and covers a non-empty range,
// i.e. whether its rkey can reach memory.
func (mw *MW) Bound() bool {
	b, _ := mw.load()
	return b.state == mwValid && b.length > 0 && b.mr != nil
}

// Range returns the bound range in the MR's IOVA space and its rights
// (zeros when not bound).
func (mw *MW) Range() (addr, length uint64, access Access) {
	b, _ := mw.load()
	return b.addr, b.length, b.access
}

// AllocMW allocates a memory window in pd (ibv_alloc_mw, rxe_alloc_mw):
// its rkey is a free window index with a random key byte; a type 1 window
// starts valid with nothing bound, a type 2 window starts free.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("memreg: alloc MW: type %d: %w", typ, ErrBadAccess)
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd.dead {
		return nil, ErrPDDead
	}
	off, slot, prev := t.mw.freeSlot()
	if slot == nil {
		return nil, fmt.Errorf("memreg: alloc MW: all %d window indices in use: %w", MaxMWs, ErrTableFull)
	}
	kb := uint32(t.rng.Uint32N(256))
	if prev != nil && kb == prev.RKey()&0xff {
		kb = (kb + 1 + uint32(t.rng.Uint32N(255))) & 0xff
	}
	mw := &MW{t: t, pd: pd, typ: typ, idx: (MinMWIndex + off) << 8}
	b := mwBinding{rkey: (MinMWIndex+off)<<8 | kb, state: mwValid}
	if typ == MWType2 {
		b.state = mwFree
	}
	mw.next = b.rkey
	mw.qp.Store(noQP)
	mw.store(b)
	slot.Store(mw)
	pd.nMWs++
	t.mw.n++
	t.mw.lowFree = off + 1
	return mw, nil
}

// freeSlot returns the lowest free window slot (offset from MinMWIndex),
// growing the directory as needed, and the slot's previous occupant.
// Called with t.mu held.
func (s *mwSpace) freeSlot() (uint32, *atomic.Pointer[MW], *MW) {
	if s.n >= MaxMWs {
		return 0, nil, nil
	}
	dir := s.loadDir()
	for off := s.lowFree; off < MaxMWs; off++ {
		ci := int(off >> chunkShift)
		if ci >= len(dir) {
			nd := make([]*mwChunk, ci+1)
			copy(nd, dir)
			for i := len(dir); i <= ci; i++ {
				nd[i] = new(mwChunk)
			}
			s.dir.Store(&nd)
			dir = nd
		}
		p := &dir[ci][off&chunkMask]
		old := p.Load()
		if old == nil || old.state() == mwInvalid {
			return off, p, old
		}
	}
	return 0, nil, nil
}

func (s *mwSpace) loadDir() []*mwChunk {
	if d := s.dir.Load(); d != nil {
		return *d
	}
	return nil
}

// lookup returns the window at the index of key, or nil. Lock-free.
func (s *mwSpace) lookup(key uint32) *MW {
	if !IsMWKey(key) {
		return nil
	}
	off := key>>8 - MinMWIndex
	dir := s.loadDir()
	ci := off >> chunkShift
	if ci >= uint32(len(dir)) {
		return nil
	}
	mw := dir[ci][off&chunkMask].Load()
	if mw == nil || mw.state() == mwInvalid {
		return nil
	}
	return mw
}

// Dealloc frees the window (ibv_dealloc_mw, rxe_mw_cleanup): whatever it
// was bound to is released and its rkey reaches nothing any more. Calling it
// twice returns ErrMWDead.
func (mw *MW) Dealloc() error {
	t := mw.t
	t.mu.Lock()
	defer t.mu.Unlock()
	b, _ := mw.load()
	if b.state == mwInvalid {
		return ErrMWDead
	}
	if b.mr != nil {
		b.mr.numMW.Add(-1)
	}
	mw.store(mwBinding{rkey: b.rkey, state: mwInvalid})
	mw.pd.nMWs--
	t.mw.n--
	off := b.rkey>>8 - MinMWIndex
	if off < t.mw.lowFree {
		t.mw.lowFree = off
	}
	return nil
}

// BindKeys returns, for a type 1 bind call, the rkey the window will have
// once every bind posted so far has executed, and the rkey the next bind
// gives it (ibv_inc_rkey: the key byte plus one). Posted records that a bind
// to next was posted, as libibverbs updates ibv_mw.rkey when ibv_bind_mw
// posts; a bind that fails when it executes resets the expectation to the
// window's real key.
func (mw *MW) BindKeys() (cur, next uint32) {
	mw.t.mu.Lock()
	defer mw.t.mu.Unlock()
	cur = mw.next
	return cur, cur&^0xff | (cur+1)&0xff
}

// Posted records a posted bind to rkey (see BindKeys).
func (mw *MW) Posted(rkey uint32) {
	mw.t.mu.Lock()
	defer mw.t.mu.Unlock()
	mw.next = rkey
}

// Table returns the table the window belongs to.
func (mw *MW) Table() *Table { return mw.t }

// Bind describes a bind (the bind_mw part of rxe's send WQE: mw_rkey, rkey,
// mr_lkey, addr, length, access).
type Bind struct {
	MWRKey uint32 // the window's current rkey
	RKey   uint32 // the new rkey; only its key byte is used
	MRLKey uint32 // the MR's lkey; unused when Length is 0
	Addr   uint64 // start in the MR's IOVA space (offset into the MR when ZeroBased)
	Length uint64
	Access Access
}

// BindMW executes a bind work request on a QP of pd, identified by qp
// (compared with ==), as rxe_bind_mw does; the checks run in rxe's order
// (rxe_bind_mw, then rxe_check_bind_mw) and any failure leaves the window
// unchanged (the transport completes the WR with MW_BIND_ERR):
//
//   - a window at the index of b.MWRKey (ErrNoKey) whose rkey is b.MWRKey
//     (ErrKeyMismatch);
//   - with a non-zero length, an MR at the lkey's index (ErrNoKey) with that
//     lkey (ErrKeyMismatch);
//   - only access flags rxe supports for windows (ErrBadAccess);
//   - type 1: the window is valid (ErrMWState) and not zero-based
//     (ErrZeroBased);
//   - type 2: the window is free (ErrMWState), the QP's PD is the window's
//     (ErrPDMismatch), an MR and a non-zero length (ErrZeroLength);
//   - with an MR: the MR is not zero-based (ErrZeroBased), has MW_BIND
//     (ErrNoBindAccess), has LOCAL_WRITE if the window grants
//     REMOTE_WRITE or REMOTE_ATOMIC (ErrBadAccess), and the range lies
//     inside it (ErrRange).
//
// Two checks go beyond rxe, which skips them: the MR must be valid and in
// the window's PD (ErrInvalid, ErrPDMismatch); libibverbs' ibv_bind_mw
// makes the PD check for type 1 before posting.
//
// A type 1 bind with length 0 unbinds the window. The new rkey keeps the
// window's index and takes the key byte of b.RKey.
func (t *Table) BindMW(b Bind, pd *PD, qp any) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.bindMW(b, pd, qp)
	if mw := t.mw.lookup(b.MWRKey); mw != nil && err != nil && mw.typ == MWType1 {
		mw.next = mw.RKey()
	}
	return err
}

func (t *Table) bindMW(bd Bind, pd *PD, qp any) error {
	mw := t.mw.lookup(bd.MWRKey)
	if mw == nil {
		return ErrNoKey
	}
	cur, _ := mw.load()
	if cur.rkey != bd.MWRKey {
		return ErrKeyMismatch
	}
	var mr *MR
	if bd.Length != 0 {
		mr = t.slot(bd.MRLKey >> 8)
		if mr == nil || bd.MRLKey>>8 > MaxMRs {
			return ErrNoKey
		}
		if mr.lkey != bd.MRLKey {
			return ErrKeyMismatch
		}
		if mr.state.Load() == stateDeregistered {
			return ErrNoKey // gone from rxe's pool
		}
	}
	if bd.Access&^supported != 0 {
		return ErrBadAccess // rxe: -EOPNOTSUPP
	}
	switch mw.typ {
	case MWType1:
		if cur.state != mwValid {
			return ErrMWState
		}
		if bd.Access&ZeroBased != 0 { // o10-36.2.2
			return ErrZeroBased
		}
	case MWType2:
		if cur.state != mwFree { // o10-37.2.30
			return ErrMWState
		}
		if pd != mw.pd { // C10-72
			return ErrPDMismatch
		}
		if mr == nil || bd.Length == 0 { // o10-37.2.40
			return ErrZeroLength
		}
	}
	if mr != nil {
		if mr.access&ZeroBased != 0 {
			return ErrZeroBased
		}
		if mr.access&MWBind == 0 { // C10-73
			return ErrNoBindAccess
		}
		if bd.Access&(RemoteWrite|RemoteAtomic) != 0 && mr.access&LocalWrite == 0 { // C10-74
			return ErrBadAccess
		}
		n := uint64(len(mr.buf))
		if bd.Access&ZeroBased != 0 { // C10-75
			if bd.Length > n {
				return ErrRange
			}
		} else if bd.Addr < mr.iova || bd.Length > n || bd.Addr-mr.iova > n-bd.Length {
			return ErrRange
		}
		// goroce only (see the doc comment).
		if mr.state.Load() != stateValid {
			return ErrInvalid
		}
		if mr.pd != mw.pd {
			return ErrPDMismatch
		}
	}
	// rxe_do_bind_mw.
	nb := mwBinding{rkey: cur.rkey&^0xff | bd.RKey&0xff, state: mwValid, access: bd.Access, addr: bd.Addr, length: bd.Length}
	if cur.mr != nil {
		cur.mr.numMW.Add(-1)
	}
	if nb.length != 0 {
		nb.mr = mr
		mr.numMW.Add(1)
	}
	if mw.typ == MWType2 {
		nb.qp = qp
	}
	mw.store(nb)
	if mw.typ == MWType1 && mw.next == cur.rkey {
		mw.next = nb.rkey
	}
	return nil
}

// invalidateMW is rxe_invalidate_mw, for LOCAL_INV and SEND_WITH_INV: the
// window at the key's index with that rkey (ErrNoKey, ErrKeyMismatch), not
// deallocated (ErrMWState), of type 2 (ErrMWType), and — as goroce checks
// for MRs — in pd when pd is not nil (ErrPDMismatch). It frees the window:
// unbound, its rkey reaches nothing until the next bind. Invalidating a
// window that is already free succeeds (rxe only rejects the invalid state).
// Called with t.mu held.
func (t *Table) invalidateMW(key uint32, pd *PD) error {
	mw := t.mw.lookup(key)
	if mw == nil {
		return ErrNoKey
	}
	cur, _ := mw.load()
	if cur.rkey != key {
		return ErrKeyMismatch
	}
	if cur.state == mwInvalid {
		return ErrMWState
	}
	if mw.typ == MWType1 {
		return ErrMWType
	}
	if pd != nil && mw.pd != pd {
		return ErrPDMismatch
	}
	if cur.mr != nil {
		cur.mr.numMW.Add(-1)
	}
	mw.store(mwBinding{rkey: cur.rkey, state: mwFree})
	return nil
}

// RemoteQP is Remote for a request arriving on the QP identified by qp
// (compared with ==). A key with a window index goes to the window, as
// rxe's check_rkey does with rxe_lookup_mw: a window at the index
// (ErrNoKey) with that rkey (ErrKeyMismatch), in pd (ErrPDMismatch), for
// type 2 bound by this QP (ErrWrongQP), with a non-zero length (ErrInvalid),
// granting every bit of need (ErrAccess), valid (ErrInvalid). The access
// [va, va+length) must then lie inside the window — for a zero-based window
// va is the offset from the window's start — (ErrRange), and the memory is
// the MR's at that address.
//
// rxe checks the access against the MR's range only (mr_check_range), so
// there an access through a window may reach the rest of its MR; goroce
// keeps it inside the window, as the IBA requires (C10-78). The NAK is the
// same (remote access error) for every failure. Lock-free, no allocation.
func (t *Table) RemoteQP(rkey uint32, pd *PD, qp any, need Access, va uint64, length uint32) ([]byte, error) {
	if !IsMWKey(rkey) {
		return t.Remote(rkey, pd, need, va, length)
	}
	return t.remoteMW(rkey, pd, qp, need, va, length)
}

// KeyQP checks an R_Key like RemoteQP without a range: a FLUSH of
// selectivity "memory region" names the whole region of the key (rxe
// check_rkey skips mr_check_range for IB_FLUSH_MR).
func (t *Table) KeyQP(rkey uint32, pd *PD, qp any, need Access) error {
	if IsMWKey(rkey) {
		mw := t.mw.lookup(rkey)
		if mw == nil {
			return ErrNoKey
		}
		for {
			b, seq := mw.load()
			if err := mw.check(&b, rkey, pd, qp, need); err != nil {
				return err
			}
			if b.mr.state.Load() != stateValid {
				return ErrInvalid
			}
			if mw.meta.Load() == seq { // not rebound or invalidated meanwhile
				return nil
			}
		}
	}
	mr := t.slot(rkey >> 8)
	switch {
	case mr == nil:
		return ErrNoKey
	case mr.lkey != rkey:
		return ErrKeyMismatch
	case mr.state.Load() != stateValid:
		return ErrInvalid
	case mr.pd != pd:
		return ErrPDMismatch
	case mr.access&need != need || mr.rkey == 0:
		return ErrAccess
	}
	return nil
}

func (t *Table) remoteMW(rkey uint32, pd *PD, qp any, need Access, va uint64, length uint32) ([]byte, error) {
	mw := t.mw.lookup(rkey)
	if mw == nil {
		return nil, ErrNoKey
	}
	for i := 0; ; i++ {
		var b mwBinding
		seq, ok := mw.read(&b)
		if !ok {
			backoff(i)
			continue
		}
		if err := mw.check(&b, rkey, pd, qp, need); err != nil {
			return nil, err
		}
		n := uint64(length)
		var iova uint64
		if b.access&ZeroBased != 0 {
			if va > b.length || n > b.length-va {
				return nil, ErrRange
			}
			iova = b.addr + va
		} else {
			if va < b.addr || va-b.addr > b.length || n > b.length-(va-b.addr) {
				return nil, ErrRange
			}
			iova = va
		}
		mr := b.mr
		if mr.state.Load() != stateValid {
			return nil, ErrInvalid
		}
		buf, err := mr.sub(iova, length)
		// A check that passed holds only if no bind or invalidate completed
		// while it ran: an invalidated window must reject the request.
		if err != nil || mw.meta.Load() == seq {
			return buf, err
		}
	}
}

// check is the window part of RemoteQP's and KeyQP's checks on a binding b
// read from mw.
func (mw *MW) check(b *mwBinding, rkey uint32, pd *PD, qp any, need Access) error {
	switch {
	case b.rkey != rkey:
		return ErrKeyMismatch
	case mw.pd != pd:
		return ErrPDMismatch
	case mw.typ == MWType2 && b.qp != qp:
		return ErrWrongQP
	case b.length == 0:
		return ErrInvalid
	case b.access&need != need:
		return ErrAccess
	case b.state != mwValid || b.mr == nil:
		return ErrInvalid
	}
	return nil
}
