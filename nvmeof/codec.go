package nvmeof

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of the NVMe-oF RDMA wire structures (include/linux/nvme.h,
// include/linux/nvme-rdma.h).
const (
	SQESize            = 64   // struct nvme_command
	CQESize            = 16   // struct nvme_completion
	ConnectDataSize    = 1024 // struct nvmf_connect_data
	IdentifySize       = 4096 // identify data structures
	DiscoveryHdrSize   = 1024 // struct nvmf_disc_rsp_page_hdr
	DiscoveryEntrySize = 1024 // struct nvmf_disc_rsp_page_entry
	CMReqSize          = 32   // struct nvme_rdma_cm_req
	CMRepSize          = 32   // struct nvme_rdma_cm_rep
	CMRejSize          = 4    // struct nvme_rdma_cm_rej
	// DefaultPort is the NVMe-oF RDMA port (NVME_RDMA_IP_PORT).
	DefaultPort = 4420
	// DiscoveryNQN is the well-known NQN of discovery controllers.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
	// AdminQueueDepth is NVME_AQ_DEPTH, the admin queue size the Linux host asks for.
	AdminQueueDepth = 32
)

// Opcodes (include/linux/nvme.h).
const (
	OpFabrics = 0x7f // nvme_fabrics_command

	// Admin.
	AdminGetLogPage  = 0x02
	AdminIdentify    = 0x06
	AdminAbort       = 0x08
	AdminSetFeatures = 0x09
	AdminGetFeatures = 0x0a
	AdminAsyncEvent  = 0x0c
	AdminKeepAlive   = 0x18

	// I/O (NVM command set).
	IOFlush       = 0x00
	IOWrite       = 0x01
	IORead        = 0x02
	IOWriteZeroes = 0x08
	IODSM         = 0x09
)

// Fabrics command types (cdw0 byte 4 of an OpFabrics command).
const (
	FabricsPropertySet = 0x00
	FabricsConnect     = 0x01
	FabricsPropertyGet = 0x04
)

// Controller property offsets (NVME_REG_*).
const (
	RegCAP  = 0x00
	RegVS   = 0x08
	RegCC   = 0x14
	RegCSTS = 0x1c
)

// Identify CNS values.
const (
	CNSNamespace      = 0x00
	CNSController     = 0x01
	CNSActiveNSList   = 0x02
	CNSNSDescList     = 0x03
	CNSCSController   = 0x06
	CNSCSNamespace    = 0x05
	CNSIndepNamespace = 0x08
)

// Feature identifiers.
const (
	FeatNumQueues   = 0x07
	FeatAsyncEvent  = 0x0b
	FeatKeepAlive   = 0x0f
	FeatHostID      = 0x81
	FeatArbitration = 0x01
	FeatPowerMgmt   = 0x02
	FeatTempThresh  = 0x04
	FeatErrRecovery = 0x05
	FeatVolatileWC  = 0x06
	FeatIRQCoalesce = 0x08
	FeatWriteAtom   = 0x0a
)

// Log page identifiers.
const (
	LogError     = 0x01
	LogSMART     = 0x02
	LogFWSlot    = 0x03
	LogChangedNS = 0x04
	LogEffects   = 0x05
	LogDiscovery = 0x70
)

// NVMe status codes (status field without the phase bit; include/linux/nvme.h).
const (
	StatusSuccess          = 0x0
	StatusInvalidOpcode    = 0x1
	StatusInvalidField     = 0x2
	StatusDataXferError    = 0x4
	StatusInternal         = 0x6
	StatusAbortReq         = 0x7
	StatusInvalidNS        = 0xb
	StatusCmdSeqError      = 0xc
	StatusSGLInvalidData   = 0xf
	StatusSGLInvalidType   = 0x11
	StatusSGLInvalidOffset = 0x16
	StatusLBARange         = 0x80
	StatusCapExceeded      = 0x81
	StatusAsyncLimit       = 0x105
	StatusConnectFormat    = 0x180
	StatusConnectCtrlBusy  = 0x181
	StatusConnectInvParam  = 0x182
	StatusConnectInvHost   = 0x184
	StatusKATOInvalid      = 0x1a // NVME_SC_KA_TIMEOUT_INVALID
	StatusMore             = 0x2000
	StatusDNR              = 0x4000
)

// NVMe-oF RDMA CM reject statuses (enum nvme_rdma_cm_status).
const (
	CMInvalidLen     = 0x01
	CMInvalidRecfmt  = 0x02
	CMInvalidQID     = 0x03
	CMInvalidHSQSize = 0x04
	CMInvalidHRQSize = 0x05
	CMNoResources    = 0x06
	CMInvalidIRD     = 0x07
	CMInvalidORD     = 0x08
)

// SGL descriptor types: (descriptor type << 4) | subtype.
const (
	SGLDataBlock       = 0x00                                 // NVME_SGL_FMT_DATA_DESC
	SGLKeyedDataBlock  = 0x04                                 // NVME_KEY_SGL_FMT_DATA_DESC
	SGLSubAddress      = 0x00                                 // NVME_SGL_FMT_ADDRESS
	SGLSubOffset       = 0x01                                 // NVME_SGL_FMT_OFFSET
	SGLSubInvalidate   = 0x0f                                 // NVME_SGL_FMT_INVALIDATE (keyed, address + invalidate)
	SGLTypeInline      = SGLDataBlock<<4 | SGLSubOffset       // 0x01: in-capsule data
	SGLTypeKeyed       = SGLKeyedDataBlock<<4 | SGLSubAddress // 0x40
	SGLTypeKeyedInval  = SGLKeyedDataBlock<<4 | SGLSubInvalidate
	cmdFlagsSGLMetabuf = 0x40 // NVME_CMD_SGL_METABUF: PSDT 01
	cmdFlagsPSDTMask   = 0xc0 // NVME_CMD_SGL_ALL
)

// ErrMalformed is wrapped by every decoding error of this file.
var ErrMalformed = errors.New("nvmeof: malformed structure")

var le = binary.LittleEndian

// Command is one 64-byte submission queue entry (struct nvme_command).
type Command [SQESize]byte

// Opcode is the command's opcode (cdw0 byte 0).
func (c *Command) Opcode() uint8 { return c[0] }

// Flags is cdw0 byte 1 (fused bits and PSDT).
func (c *Command) Flags() uint8 { return c[1] }

// CID is the command identifier.
func (c *Command) CID() uint16 { return le.Uint16(c[2:]) }

// NSID is the namespace identifier.
func (c *Command) NSID() uint32 { return le.Uint32(c[4:]) }

// FCType is a fabrics command's type (byte 4, which is NSID's first byte in
// other commands).
func (c *Command) FCType() uint8 { return c[4] }

// CDW returns command dword i (10..15).
func (c *Command) CDW(i int) uint32 { return le.Uint32(c[i*4:]) }

// SetCDW sets command dword i (10..15).
func (c *Command) SetCDW(i int, v uint32) { le.PutUint32(c[i*4:], v) }

// SGL is the data pointer decoded as an SGL descriptor.
func (c *Command) SGL() SGL { return DecodeSGL(c[24:40]) }

// SetSGL encodes s into the data pointer.
func (c *Command) SetSGL(s SGL) { s.Encode(c[24:40]) }

// SetHeader sets opcode, flags (PSDT "SGL") and CID and NSID.
func (c *Command) SetHeader(op uint8, cid uint16, nsid uint32) {
	c[0] = op
	c[1] = cmdFlagsSGLMetabuf
	le.PutUint16(c[2:], cid)
	le.PutUint32(c[4:], nsid)
}

// SLBA and NLB are a Read/Write/Write Zeroes command's starting LBA and
// block count (NLB is stored 0-based on the wire; NLB returns the count).
func (c *Command) SLBA() uint64 { return le.Uint64(c[40:]) }

// NLB is the number of logical blocks (cdw12 bits 15:0, plus one).
func (c *Command) NLB() uint32 { return uint32(le.Uint16(c[48:])) + 1 }

// SetRW sets SLBA and the block count (≥ 1).
func (c *Command) SetRW(slba uint64, nlb uint32) {
	le.PutUint64(c[40:], slba)
	le.PutUint16(c[48:], uint16(nlb-1))
}

// SGL is one SGL descriptor (struct nvme_sgl_desc / nvme_keyed_sgl_desc).
type SGL struct {
	Addr   uint64
	Length uint32 // 24 bits in a keyed descriptor
	Key    uint32 // keyed only
	Type   uint8  // descriptor type << 4 | subtype
}

// Keyed reports whether the descriptor is a keyed data block.
func (s SGL) Keyed() bool { return s.Type>>4 == SGLKeyedDataBlock }

// DecodeSGL decodes 16 bytes.
func DecodeSGL(b []byte) SGL {
	s := SGL{Addr: le.Uint64(b), Type: b[15]}
	if s.Keyed() {
		s.Length = uint32(b[8]) | uint32(b[9])<<8 | uint32(b[10])<<16
		s.Key = le.Uint32(b[11:])
	} else {
		s.Length = le.Uint32(b[8:])
	}
	return s
}

// Encode writes the descriptor into 16 bytes.
func (s SGL) Encode(b []byte) {
	clear(b[:16])
	le.PutUint64(b, s.Addr)
	if s.Keyed() {
		b[8], b[9], b[10] = byte(s.Length), byte(s.Length>>8), byte(s.Length>>16)
		le.PutUint32(b[11:], s.Key)
	} else {
		le.PutUint32(b[8:], s.Length)
	}
	b[15] = s.Type
}

// Completion is one 16-byte completion queue entry (struct nvme_completion).
// Status is the status field shifted right by one (the phase bit, unused on
// fabrics, dropped): StatusDNR | StatusMore | SCT<<8 | SC.
type Completion struct {
	Result uint64
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status uint16
}

// Encode writes c into b (≥ 16 bytes).
func (c Completion) Encode(b []byte) {
	le.PutUint64(b, c.Result)
	le.PutUint16(b[8:], c.SQHead)
	le.PutUint16(b[10:], c.SQID)
	le.PutUint16(b[12:], c.CID)
	le.PutUint16(b[14:], c.Status<<1)
}

// DecodeCompletion decodes a received CQE.
func DecodeCompletion(b []byte) (Completion, error) {
	if len(b) != CQESize {
		return Completion{}, fmt.Errorf("%w: completion of %d bytes", ErrMalformed, len(b))
	}
	return Completion{Result: le.Uint64(b), SQHead: le.Uint16(b[8:]), SQID: le.Uint16(b[10:]),
		CID: le.Uint16(b[12:]), Status: le.Uint16(b[14:]) >> 1}, nil
}

// ParseCapsule splits a received command capsule into its SQE and in-capsule
// data. A capsule shorter than an SQE is malformed.
func ParseCapsule(b []byte) (*Command, []byte, error) {
	if len(b) < SQESize {
		return nil, nil, fmt.Errorf("%w: capsule of %d bytes", ErrMalformed, len(b))
	}
	return (*Command)(b[:SQESize]), b[SQESize:], nil
}

// CMRequest is the REQ's private data (struct nvme_rdma_cm_req).
type CMRequest struct {
	RecFmt, QID, HRQSize, HSQSize uint16
}

// Encode returns the 32-byte private data.
func (r CMRequest) Encode() []byte {
	b := make([]byte, CMReqSize)
	le.PutUint16(b, r.RecFmt)
	le.PutUint16(b[2:], r.QID)
	le.PutUint16(b[4:], r.HRQSize)
	le.PutUint16(b[6:], r.HSQSize)
	return b
}

// DecodeCMRequest decodes the REQ's private data (cm delivers the whole
// 56-byte area; bytes missing at the end are taken as zero). Nothing at all
// is an error (nvmet-rdma's private_data_len == 0 check: CMInvalidLen).
func DecodeCMRequest(b []byte) (CMRequest, error) {
	if len(b) == 0 {
		return CMRequest{}, fmt.Errorf("%w: empty CM private data", ErrMalformed)
	}
	var p [8]byte
	copy(p[:], b)
	return CMRequest{le.Uint16(p[:]), le.Uint16(p[2:]), le.Uint16(p[4:]), le.Uint16(p[6:])}, nil
}

// CMReply is the REP's private data (struct nvme_rdma_cm_rep).
type CMReply struct{ RecFmt, CRQSize uint16 }

// Encode returns the 32-byte private data.
func (r CMReply) Encode() []byte {
	b := make([]byte, CMRepSize)
	le.PutUint16(b, r.RecFmt)
	le.PutUint16(b[2:], r.CRQSize)
	return b
}

// DecodeCMReply decodes a REP's private data (missing bytes are zero).
func DecodeCMReply(b []byte) CMReply {
	var p [4]byte
	copy(p[:], b)
	return CMReply{le.Uint16(p[:]), le.Uint16(p[2:])}
}

// EncodeCMReject returns a REJ's private data (struct nvme_rdma_cm_rej).
func EncodeCMReject(sts uint16) []byte {
	b := make([]byte, CMRejSize)
	le.PutUint16(b[2:], sts)
	return b
}

// DecodeCMReject returns the sts of a REJ's private data.
func DecodeCMReject(b []byte) uint16 {
	var p [4]byte
	copy(p[:], b)
	return le.Uint16(p[2:])
}

// ConnectData is the Connect command's data (struct nvmf_connect_data).
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// Encode returns the 1024-byte data.
func (d ConnectData) Encode() []byte {
	b := make([]byte, ConnectDataSize)
	copy(b, d.HostID[:])
	le.PutUint16(b[16:], d.CNTLID)
	copy(b[256:511], d.SubNQN)
	copy(b[512:767], d.HostNQN)
	return b
}

// DecodeConnectData decodes the Connect data.
func DecodeConnectData(b []byte) (ConnectData, error) {
	if len(b) < ConnectDataSize {
		return ConnectData{}, fmt.Errorf("%w: connect data of %d bytes", ErrMalformed, len(b))
	}
	var d ConnectData
	copy(d.HostID[:], b)
	d.CNTLID = le.Uint16(b[16:])
	d.SubNQN = cstr(b[256:512])
	d.HostNQN = cstr(b[512:768])
	return d, nil
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Connect command fields.
func connectFields(c *Command) (recfmt, qid, sqsize uint16, cattr uint8, kato uint32) {
	return le.Uint16(c[40:]), le.Uint16(c[42:]), le.Uint16(c[44:]), c[46], le.Uint32(c[48:])
}

func setConnect(c *Command, cid, qid, sqsize uint16, kato uint32) {
	*c = Command{}
	c[0] = OpFabrics
	c[1] = cmdFlagsSGLMetabuf
	le.PutUint16(c[2:], cid)
	c[4] = FabricsConnect
	le.PutUint16(c[42:], qid)
	le.PutUint16(c[44:], sqsize)
	le.PutUint32(c[48:], kato)
}

// Property Get/Set fields: attrib (bit 0: 8 bytes), offset, value.
func propFields(c *Command) (attrib uint8, offset uint32, value uint64) {
	return c[40], le.Uint32(c[44:]), le.Uint64(c[48:])
}

func setProp(c *Command, fctype uint8, cid uint16, size8 bool, offset uint32, value uint64) {
	*c = Command{}
	c[0] = OpFabrics
	c[1] = cmdFlagsSGLMetabuf
	le.PutUint16(c[2:], cid)
	c[4] = fctype
	if size8 {
		c[40] = 1
	}
	le.PutUint32(c[44:], offset)
	le.PutUint64(c[48:], value)
}

// DiscoveryEntry is one discovery log page entry
// (struct nvmf_disc_rsp_page_entry), RDMA transport.
type DiscoveryEntry struct {
	TrType  uint8 // 1: RDMA
	AdrFam  uint8 // 1: IPv4, 2: IPv6
	SubType uint8 // 1: discovery subsystem, 2: NVMe subsystem
	TReq    uint8
	PortID  uint16
	CNTLID  uint16
	ASQSZ   uint16
	TrSvcID string // the port, as text
	TrAddr  string // the address, as text
	SubNQN  string
}

func (e DiscoveryEntry) encode(b []byte) {
	b[0], b[1], b[2], b[3] = e.TrType, e.AdrFam, e.SubType, e.TReq
	le.PutUint16(b[4:], e.PortID)
	le.PutUint16(b[6:], e.CNTLID)
	le.PutUint16(b[8:], e.ASQSZ)
	copy(b[32:64], e.TrSvcID)
	copy(b[256:512], e.SubNQN)
	copy(b[512:768], e.TrAddr)
	// RDMA transport specific address subtype: connected QP, no provider
	// type, rdma_cm.
	b[768], b[769], b[770] = 1, 1, 1
}

func decodeDiscoveryEntry(b []byte) DiscoveryEntry {
	return DiscoveryEntry{TrType: b[0], AdrFam: b[1], SubType: b[2], TReq: b[3],
		PortID: le.Uint16(b[4:]), CNTLID: le.Uint16(b[6:]), ASQSZ: le.Uint16(b[8:]),
		TrSvcID: trimSpace(cstr(b[32:64])), SubNQN: cstr(b[256:512]), TrAddr: trimSpace(cstr(b[512:768]))}
}

func trimSpace(s string) string {
	for len(s) > 0 && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// DecodeDiscoveryLog decodes a discovery log page: its generation counter
// and the entries present in b.
func DecodeDiscoveryLog(b []byte) (genctr uint64, numrec uint64, entries []DiscoveryEntry, err error) {
	if len(b) < DiscoveryHdrSize {
		return 0, 0, nil, fmt.Errorf("%w: discovery log of %d bytes", ErrMalformed, len(b))
	}
	genctr, numrec = le.Uint64(b), le.Uint64(b[8:])
	for i := uint64(0); i < numrec; i++ {
		off := DiscoveryHdrSize + int(i)*DiscoveryEntrySize
		if off+DiscoveryEntrySize > len(b) {
			break
		}
		entries = append(entries, decodeDiscoveryEntry(b[off:]))
	}
	return genctr, numrec, entries, nil
}
