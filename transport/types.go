package transport

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// WROpcode is a send work request opcode; values are libibverbs'
// enum ibv_wr_opcode.
type WROpcode uint8

// The String methods of WROpcode, WCStatus, WCOpcode and State print
// libibverbs' names without the IBV_WR_/IBV_WC_/IBV_QPS_ prefix (the line
// comments), and TypeName(n) for other values.
//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=WROpcode,WCStatus,WCOpcode,State -linecomment -output=types_string.go

const (
	WRRDMAWrite        WROpcode = 0 // RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1 // RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2 // SEND
	WRSendWithImm      WROpcode = 3 // SEND_WITH_IMM
	WRRDMARead         WROpcode = 4 // RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = 5 // ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6 // ATOMIC_FETCH_AND_ADD
	WRLocalInv         WROpcode = 7 // LOCAL_INV
	WRBindMW           WROpcode = 8 // BIND_MW
	WRSendWithInv      WROpcode = 9 // SEND_WITH_INV
	// IBTA 1.5 memory placement extensions (flush.go), libibverbs'
	// IBV_WR_FLUSH and IBV_WR_ATOMIC_WRITE.
	WRFlush       WROpcode = 14 // FLUSH
	WRAtomicWrite WROpcode = 15 // ATOMIC_WRITE
)

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// isReadOrAtomic: the WQE takes a READ/atomic credit (max_rd_atomic), as
// rxe's check_init_depth for RXE_READ_OR_ATOMIC_MASK | RXE_ATOMIC_WRITE_MASK
// (a FLUSH takes none).
func (o WROpcode) isReadOrAtomic() bool {
	return o == WRRDMARead || o.isAtomic() || o == WRAtomicWrite
}

// answered: the request is answered by a response of its own (READ
// response, ATOMIC ACKNOWLEDGE, the READ RESPONSE ONLY of a FLUSH or an
// ATOMIC WRITE), never by an ACK of a later PSN alone.
func (o WROpcode) answered() bool { return o.isReadOrAtomic() || o == WRFlush }

// SendFlags are libibverbs' enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// SGE is the engine's form of qp.SGE (documented there).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// MaxSGE is the largest scatter/gather list a work request may carry.
const MaxSGE = 16

// SendWR is the engine's form of qp.SendWR (documented there). qp hands
// the engine its caller's request in place, so the two stay identical field
// for field (qp's TestEngineLayout).
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []SGE
	Imm        uint32
	InvRKey    uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	BindMW     BindInfo
	FlushLen   uint32
	FlushType  uint8
	FlushLevel uint8
	AtomicData [8]byte
}

// RecvWR is the engine's form of qp.RecvWR (documented there).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WCStatus is a completion status (enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess          WCStatus = 0  // SUCCESS
	WCLocLenErr        WCStatus = 1  // LOC_LEN_ERR
	WCLocQPOpErr       WCStatus = 2  // LOC_QP_OP_ERR
	WCLocEECOpErr      WCStatus = 3  // LOC_EEC_OP_ERR
	WCLocProtErr       WCStatus = 4  // LOC_PROT_ERR
	WCWRFlushErr       WCStatus = 5  // WR_FLUSH_ERR
	WCMWBindErr        WCStatus = 6  // MW_BIND_ERR
	WCBadRespErr       WCStatus = 7  // BAD_RESP_ERR
	WCLocAccessErr     WCStatus = 8  // LOC_ACCESS_ERR
	WCRemInvReqErr     WCStatus = 9  // REM_INV_REQ_ERR
	WCRemAccessErr     WCStatus = 10 // REM_ACCESS_ERR
	WCRemOpErr         WCStatus = 11 // REM_OP_ERR
	WCRetryExcErr      WCStatus = 12 // RETRY_EXC_ERR
	WCRNRRetryExcErr   WCStatus = 13 // RNR_RETRY_EXC_ERR
	WCLocRDDViolErr    WCStatus = 14 // LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr   WCStatus = 15 // REM_INV_RD_REQ_ERR
	WCRemAbortErr      WCStatus = 16 // REM_ABORT_ERR
	WCInvEECNErr       WCStatus = 17 // INV_EECN_ERR
	WCInvEECStateErr   WCStatus = 18 // INV_EEC_STATE_ERR
	WCFatalErr         WCStatus = 19 // FATAL_ERR
	WCRespTimeoutErr   WCStatus = 20 // RESP_TIMEOUT_ERR
	WCGeneralErr       WCStatus = 21 // GENERAL_ERR
	WCTMErr            WCStatus = 22 // TM_ERR
	WCTMRndvIncomplete WCStatus = 23 // TM_RNDV_INCOMPLETE
)

// WCOpcode is a completion opcode (enum ibv_wc_opcode).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0   // SEND
	WCRDMAWrite       WCOpcode = 1   // RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // RDMA_READ
	WCCompSwap        WCOpcode = 3   // COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // FETCH_ADD
	WCBindMW          WCOpcode = 5   // BIND_MW
	WCLocalInv        WCOpcode = 6   // LOCAL_INV
	WCFlush           WCOpcode = 8   // FLUSH
	WCAtomicWrite     WCOpcode = 9   // ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // RECV
	WCRecvRDMAWithImm WCOpcode = 129 // RECV_RDMA_WITH_IMM
)

// WCFlags are completion flags (enum ibv_wc_flags) plus goroce's Solicited.
type WCFlags uint32

const (
	// WCGRH: the receive buffer starts with the 40-byte GRH area (UD).
	WCGRH     WCFlags = 1
	WCWithImm WCFlags = 2
	WCWithInv WCFlags = 8
	// WCWithSMAC: SMAC holds the Ethernet source of a UD receive (the
	// kernel's IB_WC_WITH_SMAC; not in ibv_wc_flags). QP1 answers a MAD
	// there, as a NIC does, instead of resolving the sender's address.
	WCWithSMAC WCFlags = 1 << 8
	// WCSolicited marks a receive completion of a message that had the SE
	// bit set (drives solicited-only CQ notification).
	WCSolicited WCFlags = 1 << 16
)

// WC is the engine's form of qp.WC (documented there).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32
	InvRKey uint32
	QPNum   uint32
	Flags   WCFlags
	SrcQP   uint32
	SMAC    [6]byte
}

func (wc WC) String() string {
	return fmt.Sprintf("wr_id=%d status=%v opcode=%v len=%d qp=%#x flags=%#x imm=%#x", wc.WRID, wc.Status,
		wc.Opcode, wc.ByteLen, wc.QPNum, uint32(wc.Flags), wc.Imm)
}

// State is a QP state (enum ibv_qp_state).
type State uint8

const (
	StateReset State = 0 // RESET
	StateInit  State = 1 // INIT
	StateRTR   State = 2 // RTR
	StateRTS   State = 3 // RTS
	StateSQD   State = 4 // SQD
	StateSQE   State = 5 // SQE
	StateErr   State = 6 // ERR
)

// MTU is an IB path MTU enum value (enum ibv_mtu).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes (0 for an invalid value).
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes maps 256..4096 to the enum (0 if not a valid IB MTU).
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

func (m MTU) String() string { return fmt.Sprintf("%d", m.Bytes()) }

// AV is the engine's form of qp.AV (documented there).
type AV struct {
	DGID         netip.Addr
	SGID         netip.Addr
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	DMAC, SMAC   [6]byte
	HasVLAN      bool
	VLAN         uint16
}

// AttrMask selects the attributes a Modify call sets (enum ibv_qp_attr_mask).
type AttrMask uint32

const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// Attr is the engine's form of qp.Attr (documented there). qp hands the
// engine its caller's attributes in place, so the two stay identical field
// for field (qp's TestEngineLayout).
type Attr struct {
	State           State
	CurState        State
	AccessFlags     memreg.Access
	PKeyIndex       uint16
	Port            uint8
	AV              AV
	PathMTU         MTU
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	RQPSN           wire.PSN
	SQPSN           wire.PSN
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8
	DestQPN         uint32
	QKey            uint32
}

// Caps is the engine's form of qp.Caps (documented there).
type Caps struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
}
