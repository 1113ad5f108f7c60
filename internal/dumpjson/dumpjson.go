// Package dumpjson is the schema of `goroce dump --json`: one Packet
// object per line for every RoCEv2 packet, then one Summary object, marked
// "summary": true. Package cmd/goroce/internal/dump writes these records;
// the interop harness reads them back to judge its captures, so both sides
// share one definition.
package dumpjson

import (
	"fmt"
	"strconv"
	"strings"
)

// Hex64 is a 64-bit value written in JSON as a "0x..." string, so that
// consumers that read numbers as doubles do not round it.
type Hex64 uint64

// MarshalJSON implements json.Marshaler.
func (h Hex64) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, "0x"+strconv.FormatUint(uint64(h), 16)), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *Hex64) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("hex64: %s: %w", b, err)
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return fmt.Errorf("hex64: %w", err)
	}
	*h = Hex64(v)
	return nil
}

// RETH is the RDMA extended transport header.
// FETH is the FLUSH Extended Transport Header (RC FLUSH, IBTA 1.5):
// placement type (1 global visibility, 2 persistence; a bit set) and
// selectivity level (0 the RETH's range, 1 the whole region).
type FETH struct {
	PlacementType uint8  `json:"placement_type"`
	Placement     string `json:"placement"`
	Selectivity   uint8  `json:"selectivity"`
	Level         string `json:"level"`
}

type RETH struct {
	VA     Hex64  `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"len"`
}

// AETH is the ACK extended transport header: the syndrome decoded.
type AETH struct {
	Syndrome uint8  `json:"syndrome"`
	Kind     string `json:"kind"` // ACK, RNR_NAK, NAK, RESERVED
	Text     string `json:"text"` // as in the text output
	MSN      uint32 `json:"msn"`
	Credits  *int   `json:"credits,omitempty"`
	RNRTimer *uint8 `json:"rnr_timer,omitempty"`
	RNRUsec  *int64 `json:"rnr_timer_us,omitempty"`
	NAK      string `json:"nak,omitempty"`
}

// AtomicETH is the atomic extended transport header.
type AtomicETH struct {
	VA      Hex64  `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd Hex64  `json:"swap_add"`
	Compare Hex64  `json:"compare"`
}

// AtomicAckETH is the atomic acknowledge extended transport header.
type AtomicAckETH struct {
	Orig Hex64 `json:"orig"`
}

// ImmDt is the immediate data extended transport header.
type ImmDt struct {
	Imm uint32 `json:"imm"`
}

// IETH is the invalidate extended transport header.
type IETH struct {
	RKey uint32 `json:"rkey"`
}

// DETH is the datagram extended transport header.
type DETH struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"srcqp"`
}

// Packet is one packet. Fields that could not be decoded (malformed
// packets) are absent.
type Packet struct {
	Time         string        `json:"time,omitempty"`
	Src          string        `json:"src,omitempty"`
	Dst          string        `json:"dst,omitempty"`
	Sport        *uint16       `json:"sport,omitempty"`
	VLAN         *uint16       `json:"vlan,omitempty"`
	Opcode       string        `json:"opcode,omitempty"`
	OpcodeNum    *uint8        `json:"opcode_num,omitempty"`
	DQPN         *uint32       `json:"dqpn,omitempty"`
	PSN          *uint32       `json:"psn,omitempty"`
	AckReq       *bool         `json:"ackreq,omitempty"`
	SE           *bool         `json:"se,omitempty"`
	FECN         *bool         `json:"fecn,omitempty"`
	BECN         *bool         `json:"becn,omitempty"`
	PKey         *uint16       `json:"pkey,omitempty"`
	PayloadLen   *int          `json:"payload_len,omitempty"`
	Pad          *int          `json:"pad,omitempty"`
	ICRCOK       *bool         `json:"icrc_ok,omitempty"`
	ICRC         *uint32       `json:"icrc,omitempty"`
	FETH         *FETH         `json:"feth,omitempty"`
	RETH         *RETH         `json:"reth,omitempty"`
	AETH         *AETH         `json:"aeth,omitempty"`
	AtomicETH    *AtomicETH    `json:"atomiceth,omitempty"`
	AtomicAckETH *AtomicAckETH `json:"atomicacketh,omitempty"`
	ImmDt        *ImmDt        `json:"immdt,omitempty"`
	IETH         *IETH         `json:"ieth,omitempty"`
	DETH         *DETH         `json:"deth,omitempty"`
	CNP          *struct{}     `json:"cnp,omitempty"`
	// CM is the Communication Manager message of a MAD on QP1 (a UD SEND
	// to destination QP 1).
	CM        *CM    `json:"cm,omitempty"`
	Malformed bool   `json:"malformed,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
	CapLen    int    `json:"caplen"`
	OrigLen   int    `json:"len"`
}

// CM is one decoded CM MAD (package mad). Msg is the message: REQ, REP,
// RTU, REJ, MRA, DREQ, DREP, SIDR_REQ, SIDR_REP, or "MAD" for a MAD on QP1
// that is not one of them (Error says why). Fields a message does not carry
// are absent.
type CM struct {
	Msg          string `json:"msg"`
	TID          Hex64  `json:"tid"`
	LocalCommID  uint32 `json:"local_comm_id"`
	RemoteCommID uint32 `json:"remote_comm_id"`
	// SIDR_REQ and SIDR_REP: the request ID (the comm IDs are 0).
	RequestID *uint32 `json:"request_id,omitempty"`
	ServiceID *Hex64  `json:"service_id,omitempty"`
	// PortSpace and Port: the service ID decoded as rdma_cm's (TCP, UDP,
	// IB, IPoIB), when it is one.
	PortSpace string  `json:"port_space,omitempty"`
	Port      *uint16 `json:"port,omitempty"`
	// QPN is the sender's QPN (REQ, REP), the receiver's (DREQ) or the
	// resolved one (SIDR_REP).
	QPN         *uint32 `json:"qpn,omitempty"`
	StartingPSN *uint32 `json:"starting_psn,omitempty"`
	RespRes     *uint8  `json:"resp_res,omitempty"`
	InitDepth   *uint8  `json:"init_depth,omitempty"`
	// REJ: the reason's text as the kernel prints it, and its code.
	Reason     string  `json:"reason,omitempty"`
	ReasonCode *uint16 `json:"reason_code,omitempty"`
	// REJ and MRA: the message rejected or acknowledged (REQ, REP, other).
	Of string `json:"of,omitempty"`
	// MRA: the service timeout code and its duration in microseconds.
	ServiceTimeout   *uint8 `json:"service_timeout,omitempty"`
	ServiceTimeoutUs *int64 `json:"service_timeout_us,omitempty"`
	// SIDR_REP
	Status string  `json:"status,omitempty"`
	QKey   *uint32 `json:"qkey,omitempty"`
	// REQ and SIDR_REQ from rdma_cm: the IP endpoints of its header,
	// "198.18.0.12:50000" (the destination port is the service ID's).
	CMASrc string `json:"cma_src,omitempty"`
	CMADst string `json:"cma_dst,omitempty"`
	// Header fields of a MAD that is not a CM message, and why.
	MgmtClass *uint8  `json:"mgmt_class,omitempty"`
	AttrID    *uint16 `json:"attr_id,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Connection is one connection the capture's CM MADs set up or tore down,
// keyed by the active side's REQ: the messages of both sides in capture
// order. A service ID resolution (SIDR_REQ, SIDR_REP: rdma_cm's UDP port
// space) is one too: ActiveCommID is its request ID, PassiveQPN the UD QP
// the SIDR_REP names, and State resolving, resolved or rejected (Reason is
// the SIDR status).
type Connection struct {
	Active       string  `json:"active"`  // the REQ's sender (IP; with the rdma_cm header's port when known)
	Passive      string  `json:"passive"` // its receiver (likewise, with the service port)
	ServiceID    Hex64   `json:"service_id"`
	PortSpace    string  `json:"port_space,omitempty"`
	Port         *uint16 `json:"port,omitempty"`
	ActiveCommID uint32  `json:"active_comm_id"`
	// PassiveCommID is 0 until the passive side answers.
	PassiveCommID uint32 `json:"passive_comm_id"`
	ActiveQPN     uint32 `json:"active_qpn"`
	// ActivePSN is the REQ's starting PSN: what the passive side sends
	// from. PassivePSN is the REP's: what the active side sends from.
	ActivePSN  uint32  `json:"active_psn"`
	PassiveQPN *uint32 `json:"passive_qpn,omitempty"`
	PassivePSN *uint32 `json:"passive_psn,omitempty"`
	// Messages are the CM messages in capture order, each with its
	// direction: "REQ>", "REP<", "RTU>", "DREQ<", ... (">" from the active
	// side, "<" from the passive one).
	Messages []string `json:"messages"`
	// State after the last message: requested, replied, established,
	// rejected, disconnecting, closed (SIDR: resolving, resolved, rejected).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"` // of a REJ
	// Packets are the frame numbers of the messages (1-based).
	Packets []int `json:"packets"`
}

// Summary is what `goroce dump` prints at the end. In JSON mode it is the
// last object, with "summary": true.
type Summary struct {
	Summary      bool           `json:"summary"`
	Packets      int            `json:"packets"`   // records read
	RoCE         int            `json:"roce"`      // UDP to 4791, including malformed and bad-ICRC packets
	NonRoCE      int            `json:"non_roce"`  // skipped
	Malformed    int            `json:"malformed"` // includes Truncated
	Truncated    int            `json:"truncated"`
	ICRCFailures int            `json:"icrc_failures"`
	Bytes        int64          `json:"bytes"` // on the wire, all records
	First        string         `json:"first,omitempty"`
	Last         string         `json:"last,omitempty"`
	Seconds      float64        `json:"seconds"`
	Opcodes      map[string]int `json:"opcodes"`
	MTU          int            `json:"mtu"`
	MTUSource    string         `json:"mtu_source"` // flag, inferred or unknown
	Flows        []FlowSummary  `json:"flows"`
	// Connections are the connections of the capture's CM MADs, in the
	// order of their first message.
	Connections []Connection `json:"connections,omitempty"`
	Warnings    []string     `json:"warnings,omitempty"`
	// With --latency: one row per request flow and operation class.
	Latency []LatencyStats `json:"latency,omitempty"`
	// With --explain: the anomalies in capture order, and a verdict per
	// request flow.
	Anomalies []Anomaly `json:"anomalies,omitempty"`
	Verdicts  []Verdict `json:"verdicts,omitempty"`
	// With --graph: the files written.
	Graphs []string `json:"graphs,omitempty"`
}

// FlowSummary is one flow: the packets from one address to one
// destination QP (cmd/goroce/internal/dump/flows.go).
type FlowSummary struct {
	Src       string         `json:"src"`
	Dst       string         `json:"dst"`
	DQPN      uint32         `json:"dqpn"`
	Packets   int            `json:"packets"`
	Requests  *RequestStats  `json:"requests,omitempty"`
	Responses *ResponseStats `json:"responses,omitempty"`
}

// RequestStats are a flow's requests. PSN analysis (Gaps and after) covers
// RC and UC requests only.
type RequestStats struct {
	Packets       int    `json:"packets"`
	FirstPSN      uint32 `json:"first_psn"`
	LastPSN       uint32 `json:"last_psn"`
	Reads         int    `json:"reads"`
	Gaps          int    `json:"gaps"`
	MissingPSNs   int    `json:"missing_psns"`
	Retransmitted int    `json:"retransmitted"`
	Late          int    `json:"late"`
}

// ResponseStats are a flow's responses.
type ResponseStats struct {
	Packets  int            `json:"packets"`
	FirstPSN uint32         `json:"first_psn"`
	LastPSN  uint32         `json:"last_psn"`
	ACKs     int            `json:"acks"`
	NAKs     map[string]int `json:"naks"`
	RNRNAKs  int            `json:"rnr_naks"`
	RNRTimer *uint8         `json:"rnr_timer,omitempty"` // code of the last RNR NAK
}

// LatencyStats is one row of --latency: one request flow (Src, Dst, DQPN)
// and one operation class. Times are in nanoseconds; they are absent when
// Count is 0.
type LatencyStats struct {
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	DQPN  uint32 `json:"dqpn"`
	Class string `json:"class"` // SEND (with imm/inv), WRITE (with imm), READ, ATOMIC (fetch-add, compare-swap)
	// Count is the operations with completion evidence: the samples.
	Count int `json:"count"`
	// Retransmitted counts the samples some packet of which was resent:
	// their time includes the recovery.
	Retransmitted int `json:"retransmitted"`
	// NAKed counts operations answered by a NAK other than a sequence
	// error (failed; not samples).
	NAKed int `json:"naked"`
	// Unanswered counts operations without completion evidence in the
	// capture (not samples).
	Unanswered int    `json:"unanswered"`
	MinNs      *int64 `json:"min_ns,omitempty"`
	P50Ns      *int64 `json:"p50_ns,omitempty"`
	P90Ns      *int64 `json:"p90_ns,omitempty"`
	P99Ns      *int64 `json:"p99_ns,omitempty"`
	MaxNs      *int64 `json:"max_ns,omitempty"`
}

// Verdict is the paragraph --explain prints per request flow.
type Verdict struct {
	Src        string  `json:"src"`
	Dst        string  `json:"dst"`
	DQPN       uint32  `json:"dqpn"`
	RespDQPN   *uint32 `json:"resp_dqpn,omitempty"` // the requester's QPN, where its responses go
	Operations int     `json:"operations"`
	Completed  int     `json:"completed"`
	Failed     int     `json:"failed"`     // answered by a NAK other than a sequence error
	Unanswered int     `json:"unanswered"` // no completion evidence in the capture
	Anomalies  int     `json:"anomalies"`
	Text       string  `json:"text"`
}

// Anomaly is one line of --explain. Packets are frame numbers in the
// capture (1-based, as Wireshark numbers them): the packets the line rests
// on, cause first (the NAK, or the request that drew a NAK), then the
// packets of the anomaly itself, then the answer (for duplicate requests).
type Anomaly struct {
	Time     string `json:"time,omitempty"`  // of the packet it is anchored on (RFC 3339)
	Offset   string `json:"offset"`          // seconds since the first packet of the capture, e.g. "0.001234"
	Src      string `json:"src"`             // the requester's flow: source,
	Dst      string `json:"dst"`             // destination,
	DQPN     uint32 `json:"dqpn"`            // and the responder's QPN
	Kind     string `json:"kind"`            // Kind* constants
	Cause    string `json:"cause,omitempty"` // retransmissions: Cause* constants
	Packets  []int  `json:"packets"`
	PSN      uint32 `json:"psn"`                 // first PSN concerned
	PSNLast  uint32 `json:"psn_last"`            // last PSN concerned
	WaitedUs *int64 `json:"waited_us,omitempty"` // timeout and RNR retransmissions: how long the requester waited
	Text     string `json:"text"`                // the line printed, without the packet, time and flow prefix
	// Packet is the frame number the line is anchored on (0: the end of the capture).
	Packet int `json:"packet"`
}
