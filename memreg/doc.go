// Package memreg holds protection domains (PDs) and memory regions (MRs) of
// one goroce device, and answers the key checks the RC transport makes on
// every RDMA access.
//
// # Model
//
// A [Table] is one device's MR index space, like rxe's mr_pool. An MR is a
// byte slice owned by the application plus the verbs attributes given at
// registration: a PD, access flags and an IOVA (the address the peer names
// in RETH/AtomicETH; by default the Go address of the first byte, as
// ibv_reg_mr uses the virtual address). Registration hands out keys in
// rxe's format (PROTOCOL.md §5, rxe_mr.c rxe_mr_init):
//
//	lkey = index<<8 | key byte      index in [1, MaxMRs], key byte random
//	rkey = lkey                     if any of REMOTE_READ/WRITE/ATOMIC is granted
//	rkey = 0                        otherwise
//
// The lowest free index is reused after deregistration, and the key byte of a
// reused index is always different from the previous one at that index, so a
// stale key fails with [ErrKeyMismatch] until the byte wraps around (the same
// 1-in-255 protection rxe gives).
//
// # Memory windows
//
// A [MW] (mw.go, rxe_mw.c) is a range of an MR registered with MWBind that
// a peer reaches by the window's own rkey, with the window's rights. Window
// indices follow the MR indices ([MinMWIndex]..[MaxMWIndex], as rxe), so
// [Table.Remote], [Table.RemoteQP] and [Table.Invalidate] tell a window key
// from an MR key by its index. [Table.BindMW] applies rxe's bind rules; an
// MR with windows bound to it can be neither deregistered nor invalidated.
//
// # Data path
//
// [Table.Remote] (rxe lookup_mr + mr_check_range, for RETH and AtomicETH) and
// [Table.Local] (SGE lkeys) are lock-free and allocation-free: the index
// space is a directory of fixed 256-slot chunks published through an
// atomic.Pointer, each slot an atomic.Pointer[MR], and an MR's state is an
// atomic. Registration, deregistration and invalidation take the table's
// mutex, may allocate, and publish with atomic stores, so a lookup sees
// either the old or the new MR, never a half-built one. Errors are
// package-level sentinels (use errors.Is); returning them does not allocate.
// Every lookup failure maps to NAK 0x62 (remote access error) on the
// responder and to LOC_PROT_ERR locally; which NAK to send is the transport's
// decision.
//
// # Who touches registered memory
//
// Registered memory stays owned by the application, exactly as with verbs.
// The application may read and write it at any time, but with RDMA
// semantics: there is no ordering between the application's accesses and
// remote WRITEs/atomics that land in it, unless the application has seen a
// completion that covers them (a RECV/WRITE_WITH_IMM completion, or an
// out-of-band message sent after one). The device loop writes into the
// slices returned by Remote/Local only while executing a request. After
// Deregister returns, lookups fail, but a request that already obtained a
// slice may still finish writing into it (the memory is Go-managed, so this
// is never unsafe, only unordered); applications quiesce the QP first, as
// with verbs.
package memreg
