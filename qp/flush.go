package qp

import (
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// IBTA 1.5's memory placement extensions on RC QPs (package transport's
// flush.go), as Linux rxe 6.2+ and rdma-core's ibv_wr_flush /
// ibv_wr_atomic_write offer them:
//
//	FLUSH:        SendWR{Opcode: WRFlush, RemoteAddr, RKey, FlushLen, FlushType, FlushLevel}
//	ATOMIC_WRITE: SendWR{Opcode: WRAtomicWrite, RemoteAddr (8-aligned), RKey, AtomicData}
//
// Both are answered by the responder after everything posted before them
// was executed there, complete with WCFlush / WCAtomicWrite, and are
// executed once even when retried. The responder's QP needs FlushGlobal
// (and the region FlushGlobal) for a FLUSH, RemoteWrite for an
// ATOMIC_WRITE. goroce's memory is never persistent: RegMR refuses
// FlushPersistent, so a FLUSH asking for persistence gets a remote access
// error, as from rxe on memory that is not pmem. The VM's Debian 6.1 rxe
// does not know either operation (docs/interop.md).

// Work request opcodes of the extensions (SendWR.Opcode), libibverbs' values.
const (
	WRFlush       = transport.WRFlush       // IBV_WR_FLUSH
	WRAtomicWrite = transport.WRAtomicWrite // IBV_WR_ATOMIC_WRITE: 8 bytes, 8-byte aligned target
)

// Completion opcodes of the extensions (WC.Opcode), libibverbs' values.
const (
	WCFlush       = transport.WCFlush       // IBV_WC_FLUSH
	WCAtomicWrite = transport.WCAtomicWrite // IBV_WC_ATOMIC_WRITE
)

// Access flags of the extensions (PD.RegMR, ConnectOptions.Access).
const (
	FlushGlobal     = memreg.FlushGlobal     // IBV_ACCESS_FLUSH_GLOBAL
	FlushPersistent = memreg.FlushPersistent // IBV_ACCESS_FLUSH_PERSISTENT: refused by RegMR (no persistent memory)
)

// FLUSH placement types (SendWR.FlushType, a bit set) and selectivity
// levels (SendWR.FlushLevel), libibverbs' IBV_FLUSH_*.
const (
	FlushTypeGlobal     = wire.FlushGlobal     // IBV_FLUSH_GLOBAL
	FlushTypePersistent = wire.FlushPersistent // IBV_FLUSH_PERSISTENT
	FlushLevelRange     = wire.FlushRange      // IBV_FLUSH_RANGE: [RemoteAddr, RemoteAddr+FlushLen)
	FlushLevelMR        = wire.FlushMR         // IBV_FLUSH_MR: the whole region of RKey
)
