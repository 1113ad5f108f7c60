package qp

import (
	"context"
	"net/netip"
	"unsafe"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// The request and completion types of the verbs API. They are defined here,
// with their documentation, and the engine (transport, memreg) has a form of
// each with the same layout: a post hands the engine the caller's request
// itself (a pointer conversion, no copy), and a completion is a plain
// struct conversion. types_test.go checks that the two forms stay identical
// field by field.

// SGE is one scatter/gather element (struct ibv_sge): Length bytes at Addr
// in the memory region named by LKey. MR.SGE builds one for a range of an
// MR.
type SGE struct {
	Addr   uint64 // in the MR's IOVA space: MR.IOVA() + offset
	Length uint32 // bytes
	LKey   uint32 // the MR's local key (MR.LKey)
}

// SendWR is a send work request (struct ibv_send_wr). Which fields matter
// depends on Opcode; the others are ignored.
type SendWR struct {
	WRID   uint64    // returned in the completion (WC.WRID)
	Opcode WROpcode  // WRSend, WRRDMAWrite, WRRDMARead, WRAtomicFetchAdd, …
	Flags  SendFlags // SendSignaled (a completion even without SQSigAll), SendSolicited, SendFence, SendInline
	// SGL are the local buffers, at most MaxSGE (and the QP's MaxSendSGE):
	// the data of a SEND or WRITE, where a READ's or an atomic's result
	// goes. With SendInline the data is copied at post time.
	SGL []SGE
	// Imm is the immediate data of WRSendWithImm and WRRDMAWriteWithImm, as
	// the 32-bit value that goes on the wire (big-endian there).
	Imm uint32
	// InvRKey is the rkey to invalidate: at the peer (WRSendWithInv) or
	// locally (WRLocalInv).
	InvRKey uint32
	// RemoteAddr and RKey name the target of an RDMA, atomic or FLUSH
	// operation in the peer's MR or memory window.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the add value (WRAtomicFetchAdd) or the compare value
	// (WRAtomicCmpAndSwp); Swap is the swap value (WRAtomicCmpAndSwp).
	CompareAdd uint64
	Swap       uint64
	// UD only (ibv_send_wr.wr.ud): the destination's address handle
	// (PD.CreateAH), QP number and Q_Key (with the high bit set: the
	// QP's own Q_Key).
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// BindMW is the window, MR range and rights of a WRBindMW (mw.go).
	BindMW BindInfo
	// FLUSH (ibv_wr_flush, flush.go): FlushLen is the range's length at
	// RemoteAddr, FlushType the placement type (FlushTypeGlobal and/or
	// FlushTypePersistent), FlushLevel the selectivity (FlushLevelRange,
	// FlushLevelMR).
	FlushLen   uint32
	FlushType  uint8
	FlushLevel uint8
	// AtomicData is the 8 bytes a WRAtomicWrite stores at RemoteAddr
	// (ibv_wr_atomic_write), sent and stored as they are.
	AtomicData [8]byte
}

// RecvWR is a receive work request (struct ibv_recv_wr): the buffers an
// incoming SEND (or the immediate of a WRITE) is scattered into.
type RecvWR struct {
	WRID uint64 // returned in the completion (WC.WRID)
	SGL  []SGE  // at most MaxSGE (and the QP's or SRQ's MaxRecvSGE)
}

// WC is a work completion (struct ibv_wc). Status is WCSuccess or an error
// (WC.Err); an error completion defines only WRID, Status and QPNum, as
// in libibverbs.
type WC struct {
	WRID    uint64   // the work request's WRID
	Status  WCStatus // WCSuccess or why the request failed
	Opcode  WCOpcode // WCSend, WCRDMAWrite, …; receives: WCRecv, WCRecvRDMAWithImm
	ByteLen uint32   // receives: the bytes placed (UD: with the 40-byte GRH)
	Imm     uint32   // the immediate data, with WCWithImm in Flags
	InvRKey uint32   // the rkey the peer invalidated, with WCWithInv
	QPNum   uint32   // the local QP's number
	Flags   WCFlags  // WCWithImm, WCWithInv, WCGRH, WCSolicited, WCWithSMAC
	SrcQP   uint32   // UD receives: the sender's QP number
	SMAC    [6]byte  // UD receives with WCWithSMAC: the frame's Ethernet source (net.HardwareAddr(wc.SMAC[:]))
}

// String formats the completion for logs: wr_id, status, opcode, length,
// QP, flags and immediate.
func (wc WC) String() string { return transport.WC(wc).String() }

// Err returns nil for a successful completion and a *CompletionError
// otherwise, which unwraps to the Status: errors.Is(wc.Err(),
// WCRemAccessErr) asks for one status.
func (wc *WC) Err() error { return (*transport.WC)(wc).Err() }

// MR is a registered memory region (struct ibv_mr), from PD.RegMR. Its
// attributes never change; Deregister ends it.
type MR memreg.MR

func (mr *MR) m() *memreg.MR { return (*memreg.MR)(mr) }

// IOVA returns the address of the MR's first byte in its I/O virtual
// address space: what SGE.Addr and a peer's RemoteAddr are counted in.
func (mr *MR) IOVA() uint64 { return mr.m().IOVA() }

// Len returns the MR's length in bytes.
func (mr *MR) Len() int { return mr.m().Len() }

// LKey returns the local key, for SGE.LKey.
func (mr *MR) LKey() uint32 { return mr.m().LKey() }

// RKey returns the remote key a peer names the MR with: equal to LKey when
// a remote access right was granted, else 0 (as rxe).
func (mr *MR) RKey() uint32 { return mr.m().RKey() }

// Access returns the access flags granted at registration.
func (mr *MR) Access() Access { return mr.m().Access() }

// Bytes returns the registered memory itself (not a copy).
func (mr *MR) Bytes() []byte { return mr.m().Bytes() }

// Valid reports whether the MR is registered and not invalidated.
func (mr *MR) Valid() bool { return mr.m().Valid() }

// Deregister ends the registration (ibv_dereg_mr). A later use of its keys
// fails (a local or remote access error); a second call fails. While
// memory windows are bound to the MR it fails and the MR stays registered.
func (mr *MR) Deregister() error { return mr.m().Deregister() }

// Writes returns how many RDMA WRITE messages the peer placed into the MR
// (writewait.go); once it returns n, the data of those n is visible.
func (mr *MR) Writes() uint64 { return mr.m().Writes() }

// WaitWrite waits until Writes() > after and returns the new count
// (writewait.go). It fails with the context's error, or when the MR is
// deregistered or invalidated or its device closed.
func (mr *MR) WaitWrite(ctx context.Context, after uint64) (uint64, error) {
	return mr.m().WaitWrite(ctx, after)
}

// SGE returns the scatter/gather element for the n bytes at offset off of
// the MR: {IOVA()+off, n, LKey()}. It never panics and never fails itself:
// for a range that is not inside the MR (off or n negative, off+n past
// Len(), n ≥ 4 GiB) it returns an element one byte past the MR's end,
// which the device refuses as any out-of-range ibv_sge — the work request
// completes with WCLocProtErr — so a bad range surfaces where libibverbs
// programs look for it, in the completion.
func (mr *MR) SGE(off, n int) SGE {
	m := mr.m()
	if off < 0 || n < 0 || off > m.Len() || n > m.Len()-off || uint64(n) > 1<<32-1 {
		return SGE{Addr: m.IOVA() + uint64(m.Len()), Length: 1, LKey: m.LKey()}
	}
	return SGE{Addr: m.IOVA() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

// Attr are a QP's attributes (struct ibv_qp_attr), set by QP.Modify (only
// the fields its AttrMask selects) and returned by QP.Query.
type Attr struct {
	State       State  // the state to move to (AttrState)
	CurState    State  // the state the caller believes the QP is in (AttrCurState)
	AccessFlags Access // the remote operations the QP accepts: RemoteWrite, RemoteRead, RemoteAtomic
	PKeyIndex   uint16 // always 0 (one P_Key, 0xFFFF)
	Port        uint8  // always 1
	// AV is the path to the peer (AttrAV): QP.Modify fills in the source
	// GID and both MACs.
	AV      AV
	PathMTU MTU // MTU256 … MTU4096, at most Device.ActiveMTU
	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout (0:
	// infinite); RetryCnt (0..7) the transport retries and RNRRetry the
	// RNR retries (0..7, 7: infinite).
	Timeout  uint8
	RetryCnt uint8
	RNRRetry uint8
	// RQPSN is the first PSN expected from the peer, SQPSN the first one
	// sent.
	RQPSN wire.PSN
	SQPSN wire.PSN
	// MaxRdAtomic is how many READs and atomics this QP has outstanding
	// as requester, MaxDestRdAtomic how many it accepts as responder
	// (at most MaxRdAtomic the constant).
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8  // the RNR NAK timer code (0..31) the responder sends
	DestQPN         uint32 // the peer's QP number
	QKey            uint32 // UD: the Q_Key datagrams to this QP must carry
}

// AV is an address vector (struct ibv_ah_attr with its GRH: RoCEv2 always
// has one), plus the resolved Ethernet addresses.
type AV struct {
	DGID         netip.Addr // the peer's IP (IPv4-mapped or IPv6)
	SGID         netip.Addr // ours: QP.Modify takes it from the GID table at SGIDIndex
	SGIDIndex    uint8      // Device.IPv4GIDIndex for IPv4; index 0 (link-local) is refused
	HopLimit     uint8      // IPv4 TTL / IPv6 hop limit (Config.RouteHopLimit replaces it)
	TrafficClass uint8      // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
	FlowLabel    uint32     // IPv6 flow label
	SL           uint8      // the service level (ibv_ah_attr.sl): kept, nothing sent depends on it
	// DMAC is the peer's MAC (QP.Modify resolves it from DGID unless it is
	// set) and SMAC the device's.
	DMAC, SMAC [6]byte
	// HasVLAN sends the QP's frames with one 802.1Q tag of VLAN ID VLAN.
	HasVLAN bool
	VLAN    uint16
}

// Caps are a QP's queue sizes, fixed at creation (struct ibv_qp_cap):
// outstanding work requests per queue and scatter/gather elements per
// request (at most MaxSGE).
type Caps struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
}

// The engine's forms. SendWR and RecvWR differ from theirs only in SGL's
// element type, SGE and transport.SGE being the same struct; WC and
// transport.WC are identical (a struct conversion, checked by the
// compiler).

// engine returns the request as the engine's type (the same memory).
func (wr *SendWR) engine() *transport.SendWR { return (*transport.SendWR)(unsafe.Pointer(wr)) }

// sendWRs returns wrs as the engine's type (the same memory).
func sendWRs(wrs []SendWR) []transport.SendWR {
	if len(wrs) == 0 {
		return nil
	}
	return unsafe.Slice((*transport.SendWR)(unsafe.Pointer(&wrs[0])), len(wrs))
}

// engine returns the request as the engine's type (the same memory).
func (wr *RecvWR) engine() *transport.RecvWR { return (*transport.RecvWR)(unsafe.Pointer(wr)) }

// engine returns the attributes as the engine's type (the same memory).
func (a *Attr) engine() *transport.Attr { return (*transport.Attr)(unsafe.Pointer(a)) }

// attrOf returns the engine's attributes as an Attr (a copy).
func attrOf(a transport.Attr) Attr { return *(*Attr)(unsafe.Pointer(&a)) }

// Compile-time checks of what the conversions rely on beyond the layout
// test: SGE converts to transport.SGE (identical fields), WC to
// transport.WC, and the request types have the engine's sizes.
var (
	_ = transport.SGE(SGE{})
	_ = transport.WC(WC{})
	_ = transport.AV(AV{})
	_ = transport.Caps(Caps{})
	_ [unsafe.Sizeof(Attr{}) - unsafe.Sizeof(transport.Attr{})]struct{}
	_ [unsafe.Sizeof(transport.Attr{}) - unsafe.Sizeof(Attr{})]struct{}
	_ [unsafe.Sizeof(SendWR{}) - unsafe.Sizeof(transport.SendWR{})]struct{}
	_ [unsafe.Sizeof(transport.SendWR{}) - unsafe.Sizeof(SendWR{})]struct{}
	_ [unsafe.Sizeof(RecvWR{}) - unsafe.Sizeof(transport.RecvWR{})]struct{}
	_ [unsafe.Sizeof(transport.RecvWR{}) - unsafe.Sizeof(RecvWR{})]struct{}
)
