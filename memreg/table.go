package memreg

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MaxMRs is the largest MR index, as rxe's RXE_MAX_MR_INDEX (rxe_param.h:
// indices 1..0x40000; above that rxe numbers memory windows).
const MaxMRs = 0x40000

// Lookup errors. Each is a sentinel: compare with errors.Is. Returning one
// does not allocate. All of them are "R_Key violation" (NAK 0x62) for a
// remote access and LOC_PROT_ERR for a local SGE.
var (
	ErrNoKey       = errors.New("memreg: no MR at key index")
	ErrKeyMismatch = errors.New("memreg: key does not match the MR at its index")
	ErrPDMismatch  = errors.New("memreg: MR belongs to another PD")
	ErrAccess      = errors.New("memreg: MR lacks the required access")
	ErrInvalid     = errors.New("memreg: MR is invalidated or deregistered")
	ErrRange       = errors.New("memreg: access outside the MR")
)

// Registration and resource errors (slow path).
var (
	// ErrBadAccess: REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE, or an
	// unsupported flag. ibv_reg_mr fails with EINVAL (kernel ib_check_mr_access).
	ErrBadAccess = errors.New("memreg: invalid access flags (REMOTE_WRITE/REMOTE_ATOMIC require LOCAL_WRITE)")
	// ErrNotPersistent: FLUSH_PERSISTENT asked of memory that is not
	// persistent memory (rxe_set_page refuses it for a page that is not
	// pmem); goroce registers ordinary memory only.
	ErrNotPersistent = errors.New("memreg: FLUSH_PERSISTENT needs persistent memory, and goroce registers none")
	// ErrBadIOVA: iova+len(buf) does not fit in 64 bits, i.e. the end
	// address is not representable (EINVAL).
	ErrBadIOVA = errors.New("memreg: iova + length overflows")
	// ErrTableFull: all MaxMRs indices are in use (ENOMEM).
	ErrTableFull = errors.New("memreg: no free MR index")
	// ErrPDBusy: Dealloc of a PD that still has MRs (EBUSY).
	ErrPDBusy = errors.New("memreg: PD still has registered MRs")
	// ErrPDDead: the PD was deallocated.
	ErrPDDead = errors.New("memreg: PD is deallocated")
	// ErrDeregistered: Deregister of an MR already deregistered.
	ErrDeregistered = errors.New("memreg: MR already deregistered")
)

// MR states, like rxe's enum rxe_mr_state.
const (
	stateValid        uint32 = iota // RXE_MR_STATE_VALID
	stateInvalid                    // RXE_MR_STATE_FREE after an invalidate
	stateDeregistered               // gone; only a tombstone stays in the slot
)

const (
	chunkShift = 8
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// chunk is 256 consecutive MR slots. Chunks never move once published, so a
// lookup needs only the directory load plus one slot load.
type chunk [chunkSize]atomic.Pointer[MR]

// Table is one device's PDs and MR index space. All methods are safe for
// concurrent use; Remote and Local are lock-free and allocation-free.
type Table struct {
	dir atomic.Pointer[[]*chunk] // copy-on-grow directory of chunks

	mu      sync.Mutex // serializes every change below and every slot store
	rng     *rand.Rand // key bytes; under mu
	nextPD  uint32
	lowFree uint32 // no free index below this one
	nMRs    int
	mw      mwSpace // memory windows (mw.go); changes under mu

	hooks    WaitHooks             // the device's part in WaitWrite (writewait.go)
	closeErr atomic.Pointer[error] // set by Close
}

// NewTable returns an empty table. seed drives the random key bytes, so a
// fixed seed gives the same keys for the same sequence of registrations;
// seed 0 takes a seed from crypto/rand.
func NewTable(seed int64) *Table {
	s := uint64(seed)
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:]) // never fails (Go 1.24+ crypto/rand)
		s = binary.LittleEndian.Uint64(b[:])
	}
	t := &Table{rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15)), lowFree: 1}
	d := make([]*chunk, 0)
	t.dir.Store(&d)
	return t
}

// PD is a protection domain. An MR is reachable through Remote/Local only
// for the PD it was registered in, which must be the QP's PD.
type PD struct {
	t      *Table
	handle uint32
	nMRs   int  // under t.mu
	nMWs   int  // memory windows; under t.mu
	dead   bool // under t.mu
}

// AllocPD allocates a protection domain. Handles start at 1 and are not reused.
func (t *Table) AllocPD() *PD {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextPD++
	return &PD{t: t, handle: t.nextPD}
}

// Handle returns the PD's number (for logs and debugging).
func (pd *PD) Handle() uint32 { return pd.handle }

// Dealloc frees the PD. It fails with ErrPDBusy while MRs or memory windows
// remain in it (ibv_dealloc_pd returns EBUSY), and with ErrPDDead when
// called twice.
func (pd *PD) Dealloc() error {
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd.dead {
		return ErrPDDead
	}
	if pd.nMRs > 0 || pd.nMWs > 0 {
		return ErrPDBusy
	}
	pd.dead = true
	return nil
}

// MR is the engine's form of qp.MR (documented there): a registered memory
// region. Its attributes never change after registration; only its state
// does (valid → invalidated → deregistered).
type MR struct {
	buf    []byte
	iova   uint64
	lkey   uint32
	rkey   uint32
	access Access
	pd     *PD
	state  atomic.Uint32
	numMW  atomic.Int32 // memory windows bound to it (rxe num_mw); changes under t.mu
	ww     writeWait    // WRITEs placed into it and their waiters (writewait.go)
}

// LKey returns the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key: equal to LKey when any remote access bit was
// granted, else 0 (rxe_mr.c).
func (mr *MR) RKey() uint32 { return mr.rkey }

// IOVA returns the address of the first byte in the MR's I/O virtual address
// space, the address a peer puts in RETH/AtomicETH.
func (mr *MR) IOVA() uint64 { return mr.iova }

// Len returns the length in bytes.
func (mr *MR) Len() int { return len(mr.buf) }

// Access returns the access flags granted at registration.
func (mr *MR) Access() Access { return mr.access }

// PD returns the MR's protection domain (nil for a tombstone).
func (mr *MR) PD() *PD { return mr.pd }

// Bytes returns the registered memory itself (not a copy).
func (mr *MR) Bytes() []byte { return mr.buf }

// Valid reports whether the MR is registered and not invalidated.
func (mr *MR) Valid() bool { return mr.state.Load() == stateValid }

// Register registers buf like ibv_reg_mr: the IOVA is the Go address of
// buf[0] (0 for an empty buf). ZeroBased is recorded but, as in rxe's
// ibv_reg_mr path, does not change the IOVA; use RegisterIOVA(buf, 0, ...)
// for a zero-based region.
func (pd *PD) Register(buf []byte, access Access) (*MR, error) {
	var iova uint64
	if len(buf) > 0 {
		iova = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	return pd.RegisterIOVA(buf, iova, access)
}

// RegisterIOVA registers buf with the given IOVA, like ibv_reg_mr_iova: a
// peer's virtual address va names buf[va-iova].
//
// REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (kernel
// ib_check_mr_access: the HCA writes the memory on the peer's behalf); a
// violation, or a flag outside Access's constants, fails with ErrBadAccess.
func (pd *PD) RegisterIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if access&FlushPersistent != 0 {
		return nil, ErrNotPersistent
	}
	if access&^supported != 0 {
		return nil, ErrBadAccess
	}
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, ErrBadAccess
	}
	if len(buf) > 0 && iova+uint64(len(buf)) <= iova {
		return nil, ErrBadIOVA
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd.dead {
		return nil, ErrPDDead
	}
	idx, slot, prev := t.freeSlot()
	if slot == nil {
		return nil, ErrTableFull
	}
	// A fresh random key byte, different from the last one at this index so
	// a stale key never matches the very next registration.
	kb := uint32(t.rng.Uint32N(256))
	if prev != nil && kb == prev.lkey&0xff {
		kb = (kb + 1 + uint32(t.rng.Uint32N(255))) & 0xff
	}
	mr := &MR{buf: buf, iova: iova, access: access, pd: pd}
	mr.lkey = idx<<8 | kb
	if access&(RemoteAny|FlushGlobal) != 0 {
		mr.rkey = mr.lkey
	}
	mr.state.Store(stateValid)
	slot.Store(mr) // publish: lookups see a fully built MR
	pd.nMRs++
	t.nMRs++
	t.lowFree = idx + 1
	return mr, nil
}

// freeSlot finds the lowest free index (nil slot or tombstone), growing the
// directory when needed. It returns the previous occupant (a tombstone or
// nil). Called with t.mu held.
func (t *Table) freeSlot() (uint32, *atomic.Pointer[MR], *MR) {
	if t.nMRs >= MaxMRs {
		return 0, nil, nil
	}
	dir := *t.dir.Load()
	for idx := t.lowFree; idx <= MaxMRs; idx++ {
		ci := int(idx >> chunkShift)
		if ci >= len(dir) {
			// Grow by one chunk; the first free index is its first slot
			// (or idx itself, which is always ≥ the chunk's start).
			nd := make([]*chunk, ci+1)
			copy(nd, dir)
			for i := len(dir); i <= ci; i++ {
				nd[i] = new(chunk)
			}
			t.dir.Store(&nd)
			dir = nd
		}
		s := &dir[ci][idx&chunkMask]
		old := s.Load()
		if old == nil || old.state.Load() == stateDeregistered {
			return idx, s, old
		}
	}
	return 0, nil, nil
}

// Deregister removes the MR (ibv_dereg_mr). Lookups with its keys fail
// with ErrInvalid until the index is reused, then with ErrKeyMismatch.
// Calling it twice returns ErrDeregistered. While memory windows are bound
// to the MR it fails with ErrMRBound and the MR stays registered
// (rxe_dereg_mr: EINVAL, IBA 10.6.7.2.6).
func (mr *MR) Deregister() error {
	pd := mr.pd
	if pd == nil {
		return ErrDeregistered // tombstone
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if mr.state.Load() == stateDeregistered {
		return ErrDeregistered
	}
	if mr.numMW.Load() > 0 {
		return ErrMRBound
	}
	mr.state.Store(stateDeregistered)
	idx := mr.lkey >> 8
	// The slot gets a tombstone that keeps only the key, so the slot no
	// longer pins the application's buffer.
	tomb := &MR{lkey: mr.lkey, rkey: mr.rkey}
	tomb.state.Store(stateDeregistered)
	(*t.dir.Load())[idx>>chunkShift][idx&chunkMask].Store(tomb)
	pd.nMRs--
	t.nMRs--
	if idx < t.lowFree {
		t.lowFree = idx
	}
	t.failWaiters(mr, ErrDeregistered)
	return nil
}

// Invalidate moves the MR named by key to the invalid state (rxe
// rxe_invalidate_mr: state FREE), for SEND_WITH_INVALIDATE and
// LOCAL_INV. Later Remote/Local lookups fail with ErrInvalid; the MR stays
// registered until Deregister. As in rxe the key must equal the rkey when
// the MR has remote access, else the lkey. pd, when not nil, must be the MR's
// PD (the receiving QP's PD). Invalidating an already invalid MR succeeds.
//
// An MR that memory windows are bound to is not invalidated (ErrMRBound,
// rxe_invalidate_mr). A key with a window index invalidates the window
// (rxe_invalidate_mw; see invalidateMW in mw.go).
//
// Deviation from rxe: rxe only invalidates fast-registration MRs
// (IB_MR_TYPE_MEM_REG) and rejects user MRs; goroce has only user MRs and
// allows it for all of them.
func (t *Table) Invalidate(key uint32, pd *PD) error {
	if IsMWKey(key) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.invalidateMW(key, pd)
	}
	mr := t.slot(key >> 8)
	if mr == nil {
		return ErrNoKey
	}
	if mr.lkey != key {
		return ErrKeyMismatch
	}
	if mr.state.Load() == stateDeregistered {
		return ErrInvalid
	}
	if pd != nil && mr.pd != pd {
		return ErrPDMismatch
	}
	if mr.numMW.Load() > 0 {
		return ErrMRBound
	}
	// A CAS, not a store: never resurrect a concurrently deregistered MR.
	for {
		s := mr.state.Load()
		if s == stateDeregistered {
			return ErrInvalid
		}
		if s == stateInvalid {
			return nil
		}
		if mr.state.CompareAndSwap(s, stateInvalid) {
			t.failWaiters(mr, ErrInvalid)
			return nil
		}
	}
}

// slot returns the MR (or tombstone) at idx, or nil. Lock-free.
func (t *Table) slot(idx uint32) *MR {
	dir := *t.dir.Load()
	ci := idx >> chunkShift
	if idx == 0 || ci >= uint32(len(dir)) {
		return nil
	}
	return dir[ci][idx&chunkMask].Load()
}

// Remote checks a peer's access and returns the memory [va, va+length) in
// the MR's IOVA space. It is rxe's lookup_mr + mr_check_range (PROTOCOL.md
// §5), run for every RETH (READ/WRITE) and AtomicETH:
//
//   - an MR exists at rkey>>8 (ErrNoKey);
//   - the full key matches (ErrKeyMismatch);
//   - the MR is valid (ErrInvalid);
//   - MR PD == QP PD (ErrPDMismatch);
//   - the MR grants every bit of need, e.g. RemoteWrite (ErrAccess; an MR
//     without remote bits has rkey 0 and fails here when named by its lkey);
//   - mr.iova ≤ va and va+length ≤ mr.iova+mr.len, overflow-safe (ErrRange).
//
// A key with a memory window index is looked up as a window (RemoteQP with
// no QP: type 1 windows answer, type 2 windows, which belong to a QP, fail
// with ErrWrongQP); the transport calls RemoteQP.
//
// length 0 still runs every check except that va may equal the MR's end,
// and returns an empty slice. rxe skips the R_Key check entirely for
// zero-length READ/WRITE (PROTOCOL.md §3.3); that choice belongs to the
// transport, which should then not call Remote.
//
// Remote is lock-free and does not allocate.
func (t *Table) Remote(rkey uint32, pd *PD, need Access, va uint64, length uint32) ([]byte, error) {
	if IsMWKey(rkey) {
		return t.remoteMW(rkey, pd, nil, need, va, length) // no QP: type 2 windows fail
	}
	mr := t.slot(rkey >> 8)
	if mr == nil {
		return nil, ErrNoKey
	}
	if mr.lkey != rkey {
		return nil, ErrKeyMismatch
	}
	if mr.state.Load() != stateValid {
		return nil, ErrInvalid
	}
	if mr.pd != pd {
		return nil, ErrPDMismatch
	}
	if mr.access&need != need || mr.rkey == 0 {
		return nil, ErrAccess
	}
	return mr.sub(va, length)
}

// Local checks a local SGE (lkey, addr, length) of a work request and returns
// its memory. needWrite is set when the device writes into it: RECV buffers
// and the local buffers of READ and atomic results; it requires LocalWrite.
// Local read access is always granted. The checks and errors are Remote's,
// with the lkey (rxe lookup_mr with RXE_LOOKUP_LOCAL). Lock-free, no
// allocation.
func (t *Table) Local(lkey uint32, pd *PD, needWrite bool, addr uint64, length uint32) ([]byte, error) {
	mr := t.slot(lkey >> 8)
	if mr == nil {
		return nil, ErrNoKey
	}
	if mr.lkey != lkey {
		return nil, ErrKeyMismatch
	}
	if mr.state.Load() != stateValid {
		return nil, ErrInvalid
	}
	if mr.pd != pd {
		return nil, ErrPDMismatch
	}
	if needWrite && mr.access&LocalWrite == 0 {
		return nil, ErrAccess
	}
	return mr.sub(addr, length)
}

// sub returns buf[va-iova : va-iova+length] with its capacity capped, so a
// caller can never append past the checked range.
func (mr *MR) sub(va uint64, length uint32) ([]byte, error) {
	if va < mr.iova {
		return nil, ErrRange
	}
	off := va - mr.iova
	n := uint64(len(mr.buf))
	if off > n || uint64(length) > n-off {
		return nil, ErrRange
	}
	end := off + uint64(length)
	return mr.buf[off:end:end], nil
}
