package memreg

import "strconv"

// Access is a set of verbs access flags, with the values of enum
// ibv_access_flags (rdma-core libibverbs/verbs.h).
type Access uint32

// Access flags. LOCAL_READ is always granted and has no bit.
const (
	LocalWrite   Access = 1  // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite  Access = 2  // IBV_ACCESS_REMOTE_WRITE
	RemoteRead   Access = 4  // IBV_ACCESS_REMOTE_READ
	RemoteAtomic Access = 8  // IBV_ACCESS_REMOTE_ATOMIC
	MWBind       Access = 16 // IBV_ACCESS_MW_BIND
	ZeroBased    Access = 32 // IBV_ACCESS_ZERO_BASED
	// FlushGlobal lets a peer's RDMA FLUSH with placement type global
	// visibility target the region (IBTA 1.5; Linux rxe 6.2+).
	FlushGlobal Access = 256 // IBV_ACCESS_FLUSH_GLOBAL
	// FlushPersistent is the persistence placement type. goroce's memory
	// is never persistent memory, so Register refuses it
	// (ErrNotPersistent), as rxe refuses it on pages that are not pmem.
	FlushPersistent Access = 512 // IBV_ACCESS_FLUSH_PERSISTENT

	// RemoteAny is every remote access bit; an MR with any of them has an rkey.
	RemoteAny = RemoteWrite | RemoteRead | RemoteAtomic

	// supported is every flag Register accepts.
	supported = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased | FlushGlobal
)

var accessNames = [...]struct {
	bit  Access
	name string
}{
	{LocalWrite, "LOCAL_WRITE"},
	{RemoteWrite, "REMOTE_WRITE"},
	{RemoteRead, "REMOTE_READ"},
	{RemoteAtomic, "REMOTE_ATOMIC"},
	{MWBind, "MW_BIND"},
	{ZeroBased, "ZERO_BASED"},
	{FlushGlobal, "FLUSH_GLOBAL"},
	{FlushPersistent, "FLUSH_PERSISTENT"},
}

// String returns the flags joined by '|', e.g. "LOCAL_WRITE|REMOTE_READ";
// unknown bits are appended in hex; no flag at all is "0". Access is a bit
// set, which stringer does not format, so this one is hand-written.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b []byte
	for _, n := range accessNames {
		if a&n.bit != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n.name...)
			a &^= n.bit
		}
	}
	if a != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, uint64(a), 16)
	}
	return string(b)
}
