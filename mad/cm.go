package mad

import "encoding/binary"

// This file is the CM messages of IBTA Vol. 1 chapter 12 (Tables 106-120)
// in the layout Linux declares (include/rdma/ibta_vol1_c12.h). Offsets are
// relative to the CM payload, which starts at MAD byte 24.

// Private data and information sizes of the CM messages (enum
// ib_cm_data_size).
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REJARILen             = 72
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	SIDRREPInfoLen        = 72
)

// Path is one path of a REQ: the primary at payload offset 52, the
// alternate at 96 (all zero when there is none).
//
//	+0   LocalLID u16 (RoCE: 0xFFFF, the permissive LID, when routed)
//	+2   RemoteLID u16
//	+4   LocalGID (16 bytes; RoCEv2 IPv4: ::ffff:a.b.c.d)
//	+20  RemoteGID (16 bytes)
//	+36  FlowLabel [31:12] of the u32, PacketRate [5:0] of byte +39
//	+40  TrafficClass
//	+41  HopLimit
//	+42  SL [7:4], SubnetLocal [3]
//	+43  LocalAckTimeout [7:3]
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, IBTA rate code
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalAckTimeout uint8 // 5 bits: 4.096 µs × 2^t, see Timeout
}

const pathLen = 44

func (p *Path) check(c *checker) {
	c.bits("FlowLabel", uint64(p.FlowLabel), 20)
	c.bits("PacketRate", uint64(p.PacketRate), 6)
	c.bits("SL", uint64(p.SL), 4)
	c.bits("LocalAckTimeout", uint64(p.LocalAckTimeout), 5)
}

func (p *Path) put(b []byte) {
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], p.FlowLabel<<12|uint32(p.PacketRate&0x3F))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | flag(p.SubnetLocal, 0x08)
	b[43] = p.LocalAckTimeout << 3
}

func (p *Path) get(b []byte) {
	p.LocalLID = binary.BigEndian.Uint16(b[0:])
	p.RemoteLID = binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	w := binary.BigEndian.Uint32(b[36:])
	p.FlowLabel = w >> 12
	p.PacketRate = uint8(w & 0x3F)
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = bit(b[42], 0x08)
	p.LocalAckTimeout = b[43] >> 3
}

// REQ is the connection request (Table 106), sent by the active side.
//
//	0    LocalCommID
//	5-7  VendorID (ECE; newer kernels)
//	8    ServiceID u64
//	16   LocalCAGUID u64
//	28   LocalQKey
//	32   LocalQPN u24, 35 ResponderResources
//	36   LocalEECN u24, 39 InitiatorDepth
//	40   RemoteEECN u24, 43 RemoteCMResponseTimeout [7:3], TransportType [2:1], EndToEndFlowControl [0]
//	44   StartingPSN u24, 47 LocalCMResponseTimeout [7:3], RetryCount [2:0]
//	48   PKey u16
//	50   PathMTU [7:4], RDCExists [3], RNRRetryCount [2:0]
//	51   MaxCMRetries [7:4], SRQ [3], ExtendedTransportType [2:0]
//	52   Primary path (44 bytes)
//	96   Alternate path (44 bytes); SAPSupported is bit [2] of byte 139
//	140  PrivateData (92 bytes; rdma_cm: a CMAHeader, then the user's data)
type REQ struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32        // 24 bits
	RemoteCMResponseTimeout uint8         // 5 bits
	TransportType           TransportType // 2 bits
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, IBTA MTU code: 1=256 ... 5=4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits, 1 = XRC when TransportType is TransportExtended
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             [REQPrivateDataLen]byte
}

// AttrID implements Message.
func (*REQ) AttrID() uint16 { return AttrREQ }

// Name implements Message.
func (*REQ) Name() string { return "REQ" }

// CMAHeader decodes the rdma_cm header at the start of the private data.
func (m *REQ) CMAHeader() (CMAHeader, error) { return ParseCMAHeader(m.PrivateData[:]) }

func (m *REQ) check() error {
	var c checker
	c.bits("VendorID", uint64(m.VendorID), 24)
	c.bits("LocalQPN", uint64(m.LocalQPN), 24)
	c.bits("LocalEECN", uint64(m.LocalEECN), 24)
	c.bits("RemoteEECN", uint64(m.RemoteEECN), 24)
	c.bits("RemoteCMResponseTimeout", uint64(m.RemoteCMResponseTimeout), 5)
	c.bits("TransportType", uint64(m.TransportType), 2)
	c.bits("StartingPSN", uint64(m.StartingPSN), 24)
	c.bits("LocalCMResponseTimeout", uint64(m.LocalCMResponseTimeout), 5)
	c.bits("RetryCount", uint64(m.RetryCount), 3)
	c.bits("PathMTU", uint64(m.PathMTU), 4)
	c.bits("RNRRetryCount", uint64(m.RNRRetryCount), 3)
	c.bits("MaxCMRetries", uint64(m.MaxCMRetries), 4)
	c.bits("ExtendedTransportType", uint64(m.ExtendedTransportType), 3)
	m.Primary.check(&c)
	m.Alternate.check(&c)
	return c.err
}

func (m *REQ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	put24(b[5:], m.VendorID)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	binary.BigEndian.PutUint64(b[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | uint8(m.TransportType)<<1 | flag(m.EndToEndFlowControl, 0x01)
	put24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount
	binary.BigEndian.PutUint16(b[48:], m.PKey)
	b[50] = m.PathMTU<<4 | flag(m.RDCExists, 0x08) | m.RNRRetryCount
	b[51] = m.MaxCMRetries<<4 | flag(m.SRQ, 0x08) | m.ExtendedTransportType
	m.Primary.put(b[52:])
	m.Alternate.put(b[96:])
	b[139] |= flag(m.SAPSupported, 0x04)
	copy(b[140:], m.PrivateData[:])
}

func (m *REQ) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.VendorID = get24(b[5:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	m.LocalCAGUID = binary.BigEndian.Uint64(b[16:])
	m.LocalQKey = binary.BigEndian.Uint32(b[28:])
	m.LocalQPN = get24(b[32:])
	m.ResponderResources = b[35]
	m.LocalEECN = get24(b[36:])
	m.InitiatorDepth = b[39]
	m.RemoteEECN = get24(b[40:])
	m.RemoteCMResponseTimeout = b[43] >> 3
	m.TransportType = TransportType(b[43] >> 1 & 0x03)
	m.EndToEndFlowControl = bit(b[43], 0x01)
	m.StartingPSN = get24(b[44:])
	m.LocalCMResponseTimeout = b[47] >> 3
	m.RetryCount = b[47] & 0x07
	m.PKey = binary.BigEndian.Uint16(b[48:])
	m.PathMTU = b[50] >> 4
	m.RDCExists = bit(b[50], 0x08)
	m.RNRRetryCount = b[50] & 0x07
	m.MaxCMRetries = b[51] >> 4
	m.SRQ = bit(b[51], 0x08)
	m.ExtendedTransportType = b[51] & 0x07
	m.Primary.get(b[52:])
	m.Alternate.get(b[96:])
	m.SAPSupported = bit(b[139], 0x04)
	copy(m.PrivateData[:], b[140:])
}

// MRA is the message receipt acknowledgement (Table 107): "your message
// arrived, the answer will take up to ServiceTimeout".
//
//	0   LocalCommID
//	4   RemoteCommID
//	8   MsgMRAed [7:6]
//	9   ServiceTimeout [7:3]
//	10  PrivateData (222 bytes)
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MsgMRAed       MsgType // 2 bits
	ServiceTimeout uint8   // 5 bits
	PrivateData    [MRAPrivateDataLen]byte
}

// AttrID implements Message.
func (*MRA) AttrID() uint16 { return AttrMRA }

// Name implements Message.
func (*MRA) Name() string { return "MRA" }

func (m *MRA) check() error {
	var c checker
	c.bits("MsgMRAed", uint64(m.MsgMRAed), 2)
	c.bits("ServiceTimeout", uint64(m.ServiceTimeout), 5)
	return c.err
}

func (m *MRA) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = uint8(m.MsgMRAed) << 6
	b[9] = m.ServiceTimeout << 3
	copy(b[10:], m.PrivateData[:])
}

func (m *MRA) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.MsgMRAed = MsgType(b[8] >> 6)
	m.ServiceTimeout = b[9] >> 3
	copy(m.PrivateData[:], b[10:])
}

// REJ is the reject (Table 108).
//
//	0   LocalCommID (0 when rejecting a REQ the sender has no state for)
//	4   RemoteCommID
//	8   MsgRejected [7:6]
//	9   RejInfoLen [7:1]: the bytes of ARI that mean something
//	10  Reason u16
//	12  ARI, additional rejection information (72 bytes)
//	84  PrivateData (148 bytes)
type REJ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	MsgRejected  MsgType // 2 bits
	RejInfoLen   uint8   // 7 bits, at most REJARILen
	Reason       RejectReason
	ARI          [REJARILen]byte
	PrivateData  [REJPrivateDataLen]byte
}

// AttrID implements Message.
func (*REJ) AttrID() uint16 { return AttrREJ }

// Name implements Message.
func (*REJ) Name() string { return "REJ" }

// Info returns the meaningful part of ARI: its first RejInfoLen bytes.
func (m *REJ) Info() []byte { return m.ARI[:min(int(m.RejInfoLen), REJARILen)] }

func (m *REJ) check() error {
	var c checker
	c.bits("MsgRejected", uint64(m.MsgRejected), 2)
	c.max("RejInfoLen", int(m.RejInfoLen), REJARILen)
	return c.err
}

func (m *REJ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = uint8(m.MsgRejected) << 6
	b[9] = m.RejInfoLen << 1
	binary.BigEndian.PutUint16(b[10:], uint16(m.Reason))
	copy(b[12:], m.ARI[:])
	copy(b[84:], m.PrivateData[:])
}

func (m *REJ) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.MsgRejected = MsgType(b[8] >> 6)
	m.RejInfoLen = b[9] >> 1
	m.Reason = RejectReason(binary.BigEndian.Uint16(b[10:]))
	copy(m.ARI[:], b[12:84])
	copy(m.PrivateData[:], b[84:])
}

// REP is the reply to a REQ (Table 110), sent by the passive side.
//
//	0   LocalCommID
//	4   RemoteCommID
//	8   LocalQKey
//	12  LocalQPN u24, 15 VendorID [23:16]
//	16  LocalEECN u24, 19 VendorID [15:8]
//	20  StartingPSN u24, 23 VendorID [7:0]
//	24  ResponderResources
//	25  InitiatorDepth
//	26  TargetAckDelay [7:3], FailoverAccepted [2:1], EndToEndFlowControl [0]
//	27  RNRRetryCount [7:5], SRQ [4]
//	28  LocalCAGUID u64
//	36  PrivateData (196 bytes)
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits
	StartingPSN         uint32 // 24 bits
	VendorID            uint32 // 24 bits (ECE)
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetAckDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits: 0 accepted, 1 not supported, 2 rejected
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

// AttrID implements Message.
func (*REP) AttrID() uint16 { return AttrREP }

// Name implements Message.
func (*REP) Name() string { return "REP" }

func (m *REP) check() error {
	var c checker
	c.bits("LocalQPN", uint64(m.LocalQPN), 24)
	c.bits("LocalEECN", uint64(m.LocalEECN), 24)
	c.bits("StartingPSN", uint64(m.StartingPSN), 24)
	c.bits("VendorID", uint64(m.VendorID), 24)
	c.bits("TargetAckDelay", uint64(m.TargetAckDelay), 5)
	c.bits("FailoverAccepted", uint64(m.FailoverAccepted), 2)
	c.bits("RNRRetryCount", uint64(m.RNRRetryCount), 3)
	return c.err
}

func (m *REP) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	b[15] = byte(m.VendorID >> 16)
	put24(b[16:], m.LocalEECN)
	b[19] = byte(m.VendorID >> 8)
	put24(b[20:], m.StartingPSN)
	b[23] = byte(m.VendorID)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetAckDelay<<3 | m.FailoverAccepted<<1 | flag(m.EndToEndFlowControl, 0x01)
	b[27] = m.RNRRetryCount<<5 | flag(m.SRQ, 0x10)
	binary.BigEndian.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.PrivateData[:])
}

func (m *REP) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.LocalQKey = binary.BigEndian.Uint32(b[8:])
	m.LocalQPN = get24(b[12:])
	m.LocalEECN = get24(b[16:])
	m.StartingPSN = get24(b[20:])
	m.VendorID = uint32(b[15])<<16 | uint32(b[19])<<8 | uint32(b[23])
	m.ResponderResources = b[24]
	m.InitiatorDepth = b[25]
	m.TargetAckDelay = b[26] >> 3
	m.FailoverAccepted = b[26] >> 1 & 0x03
	m.EndToEndFlowControl = bit(b[26], 0x01)
	m.RNRRetryCount = b[27] >> 5
	m.SRQ = bit(b[27], 0x10)
	m.LocalCAGUID = binary.BigEndian.Uint64(b[28:])
	copy(m.PrivateData[:], b[36:])
}

// RTU is ready-to-use (Table 111), the active side's answer to a REP.
//
//	0  LocalCommID
//	4  RemoteCommID
//	8  PrivateData (224 bytes)
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID implements Message.
func (*RTU) AttrID() uint16 { return AttrRTU }

// Name implements Message.
func (*RTU) Name() string { return "RTU" }

func (m *RTU) check() error { return nil }

func (m *RTU) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *RTU) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	copy(m.PrivateData[:], b[8:])
}

// DREQ is the disconnect request (Table 112).
//
//	0   LocalCommID
//	4   RemoteCommID
//	8   RemoteQPN u24 (the receiver's QPN, or EECN)
//	12  PrivateData (220 bytes)
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits
	PrivateData  [DREQPrivateDataLen]byte
}

// AttrID implements Message.
func (*DREQ) AttrID() uint16 { return AttrDREQ }

// Name implements Message.
func (*DREQ) Name() string { return "DREQ" }

func (m *DREQ) check() error {
	var c checker
	c.bits("RemoteQPN", uint64(m.RemoteQPN), 24)
	return c.err
}

func (m *DREQ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	put24(b[8:], m.RemoteQPN)
	copy(b[12:], m.PrivateData[:])
}

func (m *DREQ) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.RemoteQPN = get24(b[8:])
	copy(m.PrivateData[:], b[12:])
}

// DREP is the disconnect reply (Table 113).
//
//	0  LocalCommID
//	4  RemoteCommID
//	8  PrivateData (224 bytes)
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// AttrID implements Message.
func (*DREP) AttrID() uint16 { return AttrDREP }

// Name implements Message.
func (*DREP) Name() string { return "DREP" }

func (m *DREP) check() error { return nil }

func (m *DREP) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *DREP) get(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	copy(m.PrivateData[:], b[8:])
}

// SIDRREQ is the service ID resolution request (Table 119): which UD QP
// serves ServiceID. rdma_cm's UDP port space puts a CMAHeader at the start
// of the private data, as in a REQ.
//
//	0   RequestID
//	4   PKey u16
//	8   ServiceID u64
//	16  PrivateData (216 bytes)
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateDataLen]byte
}

// AttrID implements Message.
func (*SIDRREQ) AttrID() uint16 { return AttrSIDRREQ }

// Name implements Message.
func (*SIDRREQ) Name() string { return "SIDR_REQ" }

// CMAHeader decodes the rdma_cm header at the start of the private data.
func (m *SIDRREQ) CMAHeader() (CMAHeader, error) { return ParseCMAHeader(m.PrivateData[:]) }

func (m *SIDRREQ) check() error { return nil }

func (m *SIDRREQ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	copy(b[16:], m.PrivateData[:])
}

func (m *SIDRREQ) get(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.PKey = binary.BigEndian.Uint16(b[4:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	copy(m.PrivateData[:], b[16:])
}

// SIDRREP is the service ID resolution reply (Table 120).
//
//	0   RequestID (the SIDR_REQ's)
//	4   Status
//	5   AddInfoLen: the bytes of Info that mean something
//	6   VendorID [23:8] (ECE), u16
//	8   QPN u24, 11 VendorID [7:0]
//	12  ServiceID u64
//	20  QKey
//	24  Info (72 bytes; the ClassPortInfo when Status is SIDRRedirect)
//	96  PrivateData (136 bytes)
type SIDRREP struct {
	RequestID   uint32
	Status      SIDRStatus
	AddInfoLen  uint8
	VendorID    uint32 // 24 bits
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        [SIDRREPInfoLen]byte
	PrivateData [SIDRREPPrivateDataLen]byte
}

// AttrID implements Message.
func (*SIDRREP) AttrID() uint16 { return AttrSIDRREP }

// Name implements Message.
func (*SIDRREP) Name() string { return "SIDR_REP" }

func (m *SIDRREP) check() error {
	var c checker
	c.max("AddInfoLen", int(m.AddInfoLen), SIDRREPInfoLen)
	c.bits("VendorID", uint64(m.VendorID), 24)
	c.bits("QPN", uint64(m.QPN), 24)
	return c.err
}

func (m *SIDRREP) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	b[4] = uint8(m.Status)
	b[5] = m.AddInfoLen
	binary.BigEndian.PutUint16(b[6:], uint16(m.VendorID>>8))
	put24(b[8:], m.QPN)
	b[11] = byte(m.VendorID)
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	binary.BigEndian.PutUint32(b[20:], m.QKey)
	copy(b[24:], m.Info[:])
	copy(b[96:], m.PrivateData[:])
}

func (m *SIDRREP) get(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.Status = SIDRStatus(b[4])
	m.AddInfoLen = b[5]
	m.VendorID = uint32(binary.BigEndian.Uint16(b[6:]))<<8 | uint32(b[11])
	m.QPN = get24(b[8:])
	m.ServiceID = binary.BigEndian.Uint64(b[12:])
	m.QKey = binary.BigEndian.Uint32(b[20:])
	copy(m.Info[:], b[24:96])
	copy(m.PrivateData[:], b[96:])
}
