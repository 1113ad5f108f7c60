package qp

import (
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
)

// The engine's other types and constants, named here so that a program
// imports only this package (the request and completion types and MR are
// defined in types.go).
type (
	// CompletionError is WC.Err's error: Status, VendorErr (0), Opcode, WRID
	// and QPN of a failed completion. It unwraps to the Status, so
	// errors.Is(wc.Err(), WCRemAccessErr) asks for one status.
	CompletionError = transport.CompletionError
	// AttrMask selects the Attr fields a QP.Modify call sets (enum
	// ibv_qp_attr_mask): AttrState, AttrAV, AttrPathMTU, ….
	AttrMask = transport.AttrMask
	// State is a QP state (enum ibv_qp_state): StateReset … StateErr.
	State = transport.State
	// MTU is an IB path MTU (enum ibv_mtu): MTU256 … MTU4096.
	MTU = transport.MTU
	// Access is a set of memory and QP access flags (enum ibv_access_flags):
	// LocalWrite, RemoteWrite, RemoteRead, RemoteAtomic, ….
	Access = memreg.Access
	// Counters are the transport's counters (packets, retransmissions,
	// NAKs, timeouts) of one QP (QP.Counters) or device (Device.Counters);
	// Counters.Each lists them by name.
	Counters = transport.Counters
	// Counter is an index into Counters.
	Counter = transport.Counter
	// WCStatus is a completion status (enum ibv_wc_status). It is an
	// error value itself (errors.Is), like syscall.Errno.
	WCStatus = transport.WCStatus
	// WCOpcode is a completion opcode (enum ibv_wc_opcode).
	WCOpcode = transport.WCOpcode
	// WCFlags are completion flags (enum ibv_wc_flags).
	WCFlags = transport.WCFlags
	// WROpcode is a send work request opcode (enum ibv_wr_opcode).
	WROpcode = transport.WROpcode
	// SendFlags are send work request flags (enum ibv_send_flags).
	SendFlags = transport.SendFlags
)

// Send work request opcodes (SendWR.Opcode), with libibverbs' values.
const (
	WRRDMAWrite        = transport.WRRDMAWrite        // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm = transport.WRRDMAWriteWithImm // IBV_WR_RDMA_WRITE_WITH_IMM: consumes a receive at the peer
	WRSend             = transport.WRSend             // IBV_WR_SEND
	WRSendWithImm      = transport.WRSendWithImm      // IBV_WR_SEND_WITH_IMM
	WRRDMARead         = transport.WRRDMARead         // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  = transport.WRAtomicCmpAndSwp  // IBV_WR_ATOMIC_CMP_AND_SWP: 8 bytes, 8-byte aligned
	WRAtomicFetchAdd   = transport.WRAtomicFetchAdd   // IBV_WR_ATOMIC_FETCH_AND_ADD: 8 bytes, 8-byte aligned
	WRLocalInv         = transport.WRLocalInv         // IBV_WR_LOCAL_INV: invalidates SendWR.InvRKey locally
	WRBindMW           = transport.WRBindMW           // IBV_WR_BIND_MW: binds a type 2 window (SendWR.BindMW)
	WRSendWithInv      = transport.WRSendWithInv      // IBV_WR_SEND_WITH_INV: invalidates SendWR.InvRKey at the peer
)

// Send flags (SendWR.Flags), with libibverbs' values.
const (
	SendFence     = transport.SendFence     // IBV_SEND_FENCE: wait for earlier READs/atomics
	SendSignaled  = transport.SendSignaled  // IBV_SEND_SIGNALED: generate a completion
	SendSolicited = transport.SendSolicited // IBV_SEND_SOLICITED: set the SE bit
	SendInline    = transport.SendInline    // IBV_SEND_INLINE: copy the data at post time (≤ MaxInlineData)
)

// Limits of a work request.
const (
	MaxSGE        = transport.MaxSGE        // scatter/gather elements per work request
	MaxInlineData = transport.MaxInlineData // largest SendInline payload (rxe's RXE_MAX_INLINE_DATA)
	MaxRdAtomic   = transport.MaxRdAtomic   // largest MaxRdAtomic / MaxDestRdAtomic (rxe: 128)
	MaxMessageLen = transport.MaxMessageLen // largest message (2^31 bytes)
)

// Completion statuses (WC.Status), with libibverbs' values. Each is an
// error: errors.Is(wc.Err(), WCRetryExcErr).
const (
	WCSuccess          = transport.WCSuccess
	WCLocLenErr        = transport.WCLocLenErr    // a receive buffer too small, or a bad length
	WCLocQPOpErr       = transport.WCLocQPOpErr   // a local QP error (bad work request)
	WCLocEECOpErr      = transport.WCLocEECOpErr  // not used by RC
	WCLocProtErr       = transport.WCLocProtErr   // a local SGE outside its MR or without access
	WCWRFlushErr       = transport.WCWRFlushErr   // flushed: the QP went to the error state
	WCMWBindErr        = transport.WCMWBindErr    // memory window bind failed
	WCBadRespErr       = transport.WCBadRespErr   // unexpected response from the peer
	WCLocAccessErr     = transport.WCLocAccessErr // local access violation (responder side)
	WCRemInvReqErr     = transport.WCRemInvReqErr // peer NAK: invalid request
	WCRemAccessErr     = transport.WCRemAccessErr // peer NAK: remote access error (rkey, range, rights)
	WCRemOpErr         = transport.WCRemOpErr     // peer NAK: remote operational error
	WCRetryExcErr      = transport.WCRetryExcErr  // transport retries (ACK timeouts, NAK sequence) exhausted
	WCRNRRetryExcErr   = transport.WCRNRRetryExcErr
	WCLocRDDViolErr    = transport.WCLocRDDViolErr
	WCRemInvRDReqErr   = transport.WCRemInvRDReqErr
	WCRemAbortErr      = transport.WCRemAbortErr
	WCInvEECNErr       = transport.WCInvEECNErr
	WCInvEECStateErr   = transport.WCInvEECStateErr
	WCFatalErr         = transport.WCFatalErr
	WCRespTimeoutErr   = transport.WCRespTimeoutErr
	WCGeneralErr       = transport.WCGeneralErr
	WCTMErr            = transport.WCTMErr
	WCTMRndvIncomplete = transport.WCTMRndvIncomplete
)

// Completion opcodes (WC.Opcode), with libibverbs' values.
const (
	WCSend            = transport.WCSend
	WCRDMAWrite       = transport.WCRDMAWrite
	WCRDMARead        = transport.WCRDMARead
	WCCompSwap        = transport.WCCompSwap
	WCFetchAdd        = transport.WCFetchAdd
	WCBindMW          = transport.WCBindMW
	WCLocalInv        = transport.WCLocalInv
	WCRecv            = transport.WCRecv            // a SEND arrived
	WCRecvRDMAWithImm = transport.WCRecvRDMAWithImm // an RDMA WRITE with immediate arrived
)

// Completion flags (WC.Flags).
const (
	WCWithImm   = transport.WCWithImm   // WC.Imm is valid
	WCWithInv   = transport.WCWithInv   // WC.InvRKey is valid (the peer invalidated it)
	WCSolicited = transport.WCSolicited // the message had the SE bit (solicited-only notification)
	WCWithSMAC  = transport.WCWithSMAC  // WC.SMAC is the Ethernet source of a UD receive
)

// QP states (State), with libibverbs' values.
const (
	StateReset = transport.StateReset
	StateInit  = transport.StateInit
	StateRTR   = transport.StateRTR // ready to receive
	StateRTS   = transport.StateRTS // ready to send
	StateSQD   = transport.StateSQD
	StateSQE   = transport.StateSQE
	StateErr   = transport.StateErr
)

// Path MTUs (MTU), with libibverbs' values.
const (
	MTU256  = transport.MTU256
	MTU512  = transport.MTU512
	MTU1024 = transport.MTU1024
	MTU2048 = transport.MTU2048
	MTU4096 = transport.MTU4096
)

// MTUFromBytes maps 256..4096 to the MTU enum (0 if not a valid IB MTU).
func MTUFromBytes(n int) MTU { return transport.MTUFromBytes(n) }

// Attribute mask bits (AttrMask), with libibverbs' values.
const (
	AttrState            = transport.AttrState
	AttrCurState         = transport.AttrCurState
	AttrEnSQDAsyncNotify = transport.AttrEnSQDAsyncNotify
	AttrAccessFlags      = transport.AttrAccessFlags
	AttrPKeyIndex        = transport.AttrPKeyIndex
	AttrPort             = transport.AttrPort
	AttrQKey             = transport.AttrQKey
	AttrAV               = transport.AttrAV
	AttrPathMTU          = transport.AttrPathMTU
	AttrTimeout          = transport.AttrTimeout
	AttrRetryCnt         = transport.AttrRetryCnt
	AttrRNRRetry         = transport.AttrRNRRetry
	AttrRQPSN            = transport.AttrRQPSN
	AttrMaxQPRdAtomic    = transport.AttrMaxQPRdAtomic
	AttrAltPath          = transport.AttrAltPath
	AttrMinRNRTimer      = transport.AttrMinRNRTimer
	AttrSQPSN            = transport.AttrSQPSN
	AttrMaxDestRdAtomic  = transport.AttrMaxDestRdAtomic
	AttrPathMigState     = transport.AttrPathMigState
	AttrCap              = transport.AttrCap
	AttrDestQPN          = transport.AttrDestQPN
)

// Access flags (Access) for PD.RegMR and ConnectOptions.Access, with
// libibverbs' values. Local read is always granted.
const (
	LocalWrite   = memreg.LocalWrite   // IBV_ACCESS_LOCAL_WRITE: needed for any remote write and for receives
	RemoteWrite  = memreg.RemoteWrite  // IBV_ACCESS_REMOTE_WRITE
	RemoteRead   = memreg.RemoteRead   // IBV_ACCESS_REMOTE_READ
	RemoteAtomic = memreg.RemoteAtomic // IBV_ACCESS_REMOTE_ATOMIC
	MWBind       = memreg.MWBind       // IBV_ACCESS_MW_BIND
	ZeroBased    = memreg.ZeroBased    // IBV_ACCESS_ZERO_BASED: the region's IOVA starts at 0
	RemoteAny    = memreg.RemoteAny    // RemoteWrite | RemoteRead | RemoteAtomic
)

// Counter indices (Counters[CntSentPkts]); Counter.String gives the name
// rxe uses for the same counter where it has one (rxe_hw_counters.c).
const (
	CntSentPkts            = transport.CntSentPkts
	CntRcvdPkts            = transport.CntRcvdPkts
	CntDuplicateRequest    = transport.CntDuplicateRequest
	CntOutOfSeqRequest     = transport.CntOutOfSeqRequest
	CntRcvdRNRErr          = transport.CntRcvdRNRErr
	CntSendRNRErr          = transport.CntSendRNRErr
	CntRcvdSeqErr          = transport.CntRcvdSeqErr
	CntCompleterRetryErr   = transport.CntCompleterRetryErr
	CntRetryExceededErr    = transport.CntRetryExceededErr
	CntRetryRNRExceededErr = transport.CntRetryRNRExceededErr
	CntAckDeferred         = transport.CntAckDeferred
	CntLocalAckTimeoutErr  = transport.CntLocalAckTimeoutErr
	CntSendErr             = transport.CntSendErr
	CntLinkDowned          = transport.CntLinkDowned
	CntRDMASends           = transport.CntRDMASends
	CntRDMARecvs           = transport.CntRDMARecvs
	CntRetransmittedPkts   = transport.CntRetransmittedPkts
	CntRcvdUnknownPSN      = transport.CntRcvdUnknownPSN
	CntRcvdStaleResponse   = transport.CntRcvdStaleResponse
	CntRcvdBadAddr         = transport.CntRcvdBadAddr
	CntRcvdBadPKey         = transport.CntRcvdBadPKey
	CntRcvdBadOpcode       = transport.CntRcvdBadOpcode
	CntRcvdWrongState      = transport.CntRcvdWrongState
	CntSentNAKs            = transport.CntSentNAKs
	CntRcvdNAKs            = transport.CntRcvdNAKs
	CntSendErrors          = transport.CntSendErrors
	CntRxWriteRequests     = transport.CntRxWriteRequests  // rx_write_requests (mlx5)
	CntRxReadRequests      = transport.CntRxReadRequests   // rx_read_requests (mlx5)
	CntRxAtomicRequests    = transport.CntRxAtomicRequests // rx_atomic_requests (mlx5)
	CntRxSendRequests      = transport.CntRxSendRequests
	CntTxSendRequests      = transport.CntTxSendRequests
	CntTxWriteRequests     = transport.CntTxWriteRequests
	CntTxReadRequests      = transport.CntTxReadRequests
	CntTxAtomicRequests    = transport.CntTxAtomicRequests
	CntWindowFull          = transport.CntWindowFull // requester steps stopped by a full window (QP.SetWindow)
	NumCounters            = transport.NumCounters
)

// Errors of PostSend, PostRecv and Modify that programs test for.
var (
	// ErrInvalidArgument is wrapped by errors for a request the verbs
	// would refuse with EINVAL (bad state transition, bad attribute, bad
	// work request).
	ErrInvalidArgument = transport.ErrInvalidArgument
	// ErrQueueFull is wrapped by PostSend/PostRecv errors when the work
	// queue is full (ENOMEM from ibv_post_send).
	ErrQueueFull = transport.ErrQueueFull
)
