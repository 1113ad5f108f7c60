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

const (
	WRRDMAWrite        WROpcode = 0
	WRRDMAWriteWithImm WROpcode = 1
	WRSend             WROpcode = 2
	WRSendWithImm      WROpcode = 3
	WRRDMARead         WROpcode = 4
	WRAtomicCmpAndSwp  WROpcode = 5
	WRAtomicFetchAdd   WROpcode = 6
	WRLocalInv         WROpcode = 7
	WRSendWithInv      WROpcode = 9
)

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRSendWithInv: "SEND_WITH_INV",
}

func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }
func (o WROpcode) isReadOrAtomic() bool {
	return o == WRRDMARead || o.isAtomic()
}

// SendFlags are libibverbs' enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// SGE is one scatter/gather element (struct ibv_sge): Addr is in the memory
// region's IOVA space, LKey names the region.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// MaxSGE is the largest scatter/gather list a work request may carry.
const MaxSGE = 16

// SendWR is a send work request (struct ibv_send_wr, RC subset).
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Imm is the immediate data (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM) as the
	// 32-bit value that goes on the wire (big-endian there).
	Imm uint32
	// InvRKey is the rkey to invalidate (SEND_WITH_INV, LOCAL_INV).
	InvRKey uint32
	// RemoteAddr/RKey: RDMA and atomic target.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the add value (FETCH_ADD) or the compare value (CMP_SWAP);
	// Swap is the swap value (CMP_SWAP).
	CompareAdd uint64
	Swap       uint64
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WCStatus is a completion status (enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRDReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
	"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR",
	"RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
	"INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR", "TM_ERR",
	"TM_RNDV_INCOMPLETE",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is a completion opcode (enum ibv_wc_opcode).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags are completion flags (enum ibv_wc_flags) plus goroce's Solicited.
type WCFlags uint32

const (
	WCWithImm WCFlags = 2
	WCWithInv WCFlags = 8
	// WCSolicited marks a receive completion of a message that had the SE
	// bit set (drives solicited-only CQ notification).
	WCSolicited WCFlags = 1 << 16
)

// WC is a work completion (struct ibv_wc, RC subset).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32 // valid with WCWithImm
	InvRKey uint32 // valid with WCWithInv
	QPNum   uint32
	Flags   WCFlags
}

func (wc WC) String() string {
	return fmt.Sprintf("wr_id=%d status=%v opcode=%v len=%d qp=%#x flags=%#x imm=%#x", wc.WRID, wc.Status,
		wc.Opcode, wc.ByteLen, wc.QPNum, uint32(wc.Flags), wc.Imm)
}

// State is a QP state (enum ibv_qp_state).
type State uint8

const (
	StateReset State = 0
	StateInit  State = 1
	StateRTR   State = 2
	StateRTS   State = 3
	StateSQD   State = 4
	StateSQE   State = 5
	StateErr   State = 6
)

func (s State) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateSQD:
		return "SQD"
	case StateSQE:
		return "SQE"
	case StateErr:
		return "ERR"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

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

// AV is an address vector with a GRH (RoCEv2 always uses one), plus the
// resolved L2 addresses.
type AV struct {
	DGID         netip.Addr // peer IP (IPv4 or IPv6); an IPv4-mapped GID is unmapped
	SGID         netip.Addr // our IP
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

// Attr are the QP attributes (struct ibv_qp_attr, RC subset).
type Attr struct {
	State           State
	CurState        State
	AccessFlags     memreg.Access // REMOTE_WRITE/READ/ATOMIC allowed on this QP
	PKeyIndex       uint16
	Port            uint8
	AV              AV
	PathMTU         MTU
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout (0 = infinite)
	RetryCnt        uint8 // 0..7
	RNRRetry        uint8 // 0..7, 7 = infinite
	RQPSN           wire.PSN
	SQPSN           wire.PSN
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
	MinRNRTimer     uint8 // 0..31 (RNR timer code)
	DestQPN         uint32
}

// Caps are the queue sizes fixed at creation (struct ibv_qp_cap).
type Caps struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
}
