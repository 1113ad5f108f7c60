package mad

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=RejectReason,MsgType,SIDRStatus,TransportType,PortSpace -linecomment -output=enums_string.go

// RejectReason is a REJ's reason code (IBTA Table 109, enum
// ib_cm_rej_reason). Its String is the kernel's text (ibcm_reject_msg).
type RejectReason uint16

// Reject reasons. IBTA leaves 34 unassigned.
const (
	RejNoQP                      RejectReason = 1  // no QP
	RejNoEEC                     RejectReason = 2  // no EEC
	RejNoResources               RejectReason = 3  // no resources
	RejTimeout                   RejectReason = 4  // timeout
	RejUnsupported               RejectReason = 5  // unsupported
	RejInvalidCommID             RejectReason = 6  // invalid comm ID
	RejInvalidCommInstance       RejectReason = 7  // invalid comm instance
	RejInvalidServiceID          RejectReason = 8  // invalid service ID
	RejInvalidTransportType      RejectReason = 9  // invalid transport type
	RejStaleConn                 RejectReason = 10 // stale conn
	RejRDCNotExist               RejectReason = 11 // RDC not exist
	RejInvalidGID                RejectReason = 12 // invalid GID
	RejInvalidLID                RejectReason = 13 // invalid LID
	RejInvalidSL                 RejectReason = 14 // invalid SL
	RejInvalidTrafficClass       RejectReason = 15 // invalid traffic class
	RejInvalidHopLimit           RejectReason = 16 // invalid hop limit
	RejInvalidPacketRate         RejectReason = 17 // invalid packet rate
	RejInvalidAltGID             RejectReason = 18 // invalid alt GID
	RejInvalidAltLID             RejectReason = 19 // invalid alt LID
	RejInvalidAltSL              RejectReason = 20 // invalid alt SL
	RejInvalidAltTrafficClass    RejectReason = 21 // invalid alt traffic class
	RejInvalidAltHopLimit        RejectReason = 22 // invalid alt hop limit
	RejInvalidAltPacketRate      RejectReason = 23 // invalid alt packet rate
	RejPortCMRedirect            RejectReason = 24 // port CM redirect
	RejPortRedirect              RejectReason = 25 // port redirect
	RejInvalidMTU                RejectReason = 26 // invalid MTU
	RejInsufficientRespResources RejectReason = 27 // insufficient resp resources
	RejConsumerDefined           RejectReason = 28 // consumer defined
	RejInvalidRNRRetry           RejectReason = 29 // invalid RNR retry
	RejDuplicateLocalCommID      RejectReason = 30 // duplicate local comm ID
	RejInvalidClassVersion       RejectReason = 31 // invalid class version
	RejInvalidFlowLabel          RejectReason = 32 // invalid flow label
	RejInvalidAltFlowLabel       RejectReason = 33 // invalid alt flow label
	RejVendorOptionNotSupported  RejectReason = 35 // vendor option is not supported
)

// MsgType says which message an MRA acknowledges or a REJ rejects (enum
// cm_msg_response), 2 bits on the wire.
type MsgType uint8

// Message types of MRA.MsgMRAed and REJ.MsgRejected.
const (
	MsgTypeREQ   MsgType = 0 // REQ
	MsgTypeREP   MsgType = 1 // REP
	MsgTypeOther MsgType = 2 // other
)

// SIDRStatus is a SIDR_REP's status (IBTA Table 121, enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // success
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // rejected
	SIDRNoQP               SIDRStatus = 3 // no QP
	SIDRRedirect           SIDRStatus = 4 // redirect
	SIDRUnsupportedVersion SIDRStatus = 5 // unsupported class version
)

// TransportType is a REQ's transport service type, 2 bits.
type TransportType uint8

// Transport service types (cm_req_get_qp_type).
const (
	TransportRC       TransportType = 0 // RC
	TransportUC       TransportType = 1 // UC
	TransportRD       TransportType = 2 // RD
	TransportExtended TransportType = 3 // extended
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space,
// include/rdma/rdma_cm.h): the high part of the service ID.
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002 // IPoIB
	PortSpaceTCP   PortSpace = 0x0106 // TCP
	PortSpaceUDP   PortSpace = 0x0111 // UDP
	PortSpaceIB    PortSpace = 0x013F // IB
)
