package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MADLen is the size of every MAD on the GSI: header and payload.
const MADLen = 256

// HeaderLen is the size of the common MAD header; the class payload follows it.
const HeaderLen = 24

// PayloadLen is the size of a CM message inside the MAD.
const PayloadLen = MADLen - HeaderLen

// BaseVersion is the MAD base version of IBTA MADs (IB_MGMT_BASE_VERSION).
const BaseVersion = 1

// ClassCM is the management class of the Communication Manager
// (IB_MGMT_CLASS_CM).
const ClassCM = 0x07

// CMClassVersion is the CM class version Linux sends and accepts
// (IB_CM_CLASS_VERSION, IBTA 1.2).
const CMClassVersion = 2

// GSIQKey is the Q_Key of QP1, the general services interface, to which CM
// MADs are sent (IB_QP1_QKEY).
const GSIQKey = 0x80010000

// GSIQPN is the QP number of the general services interface.
const GSIQPN = 1

// Methods (include/rdma/ib_mad.h). The CM uses MethodSend only.
const (
	MethodGet         = 0x01
	MethodSet         = 0x02
	MethodSend        = 0x03
	MethodTrap        = 0x05
	MethodReport      = 0x06
	MethodTrapRepress = 0x07
	MethodResp        = 0x80 // the response bit, ORed into the request's method
	MethodGetResp     = 0x81
	MethodReportResp  = 0x86
)

// CM attribute IDs: which message a CM MAD carries (include/rdma/ib_cm.h).
const (
	AttrREQ     = 0x0010
	AttrMRA     = 0x0011
	AttrREJ     = 0x0012
	AttrREP     = 0x0013
	AttrRTU     = 0x0014
	AttrDREQ    = 0x0015
	AttrDREP    = 0x0016
	AttrSIDRREQ = 0x0017
	AttrSIDRREP = 0x0018
	AttrLAP     = 0x0019
	AttrAPR     = 0x001A
)

// Errors returned by Parse and Marshal; match them with errors.Is.
var (
	// ErrShort: the buffer is shorter than MADLen.
	ErrShort = errors.New("mad: buffer shorter than 256 bytes")
	// ErrBaseVersion: the header's base version is not 1.
	ErrBaseVersion = errors.New("mad: unsupported base version")
	// ErrNotCM: the MAD is of another management class.
	ErrNotCM = errors.New("mad: not a CM MAD")
	// ErrUnknownAttr: a CM MAD whose attribute ID names no message this
	// package decodes (LAP, APR, ClassPortInfo, or an unassigned ID).
	ErrUnknownAttr = errors.New("mad: unknown CM attribute")
	// ErrInvalid: a CM message whose length field claims more bytes than
	// the format holds.
	ErrInvalid = errors.New("mad: invalid CM message")
	// ErrRange: Marshal was given a field value wider than its place.
	ErrRange = errors.New("value out of range")
	// ErrNilMessage: Marshal was given no message.
	ErrNilMessage = errors.New("mad: nil message")
)

// Header is the common MAD header (IBTA 13.4.3, struct ib_mad_hdr).
//
//	0      BaseVersion
//	1      MgmtClass
//	2      ClassVersion
//	3      Method
//	4-5    Status
//	6-7    ClassSpecific
//	8-15   TID (transaction ID)
//	16-17  AttrID
//	18-19  reserved
//	20-23  AttrMod (the CM puts the ECE attribute modifier here, normally 0)
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        uint16
	AttrMod       uint32
}

// CMHeader returns the header Linux puts on a CM message: base version 1,
// class CM version 2, method Send, the given transaction ID and the
// message's attribute ID (cm_format_mad_hdr).
func CMHeader(tid uint64, attrID uint16) Header {
	return Header{
		BaseVersion:  BaseVersion,
		MgmtClass:    ClassCM,
		ClassVersion: CMClassVersion,
		Method:       MethodSend,
		TID:          tid,
		AttrID:       attrID,
	}
}

// Marshal writes h into b[:HeaderLen]; the reserved bytes become zero.
func (h *Header) Marshal(b []byte) error {
	if len(b) < HeaderLen {
		return fmt.Errorf("mad: header needs %d bytes, have %d", HeaderLen, len(b))
	}
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TID)
	binary.BigEndian.PutUint16(b[16:], h.AttrID)
	b[18], b[19] = 0, 0
	binary.BigEndian.PutUint32(b[20:], h.AttrMod)
	return nil
}

// ParseHeader reads the header from b[:HeaderLen]. It checks only the length.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("mad: header needs %d bytes, have %d", HeaderLen, len(b))
	}
	return Header{
		BaseVersion:   b[0],
		MgmtClass:     b[1],
		ClassVersion:  b[2],
		Method:        b[3],
		Status:        binary.BigEndian.Uint16(b[4:]),
		ClassSpecific: binary.BigEndian.Uint16(b[6:]),
		TID:           binary.BigEndian.Uint64(b[8:]),
		AttrID:        binary.BigEndian.Uint16(b[16:]),
		AttrMod:       binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// Message is one CM message: *REQ, *MRA, *REJ, *REP, *RTU, *DREQ, *DREP,
// *SIDRREQ or *SIDRREP. The set is closed.
type Message interface {
	// AttrID is the attribute ID that names the message in the MAD header.
	AttrID() uint16
	// Name is the message's name as IBTA writes it: "REQ", "SIDR_REQ", ...
	Name() string
	// check reports the first field too wide for its place in the format.
	check() error
	// put writes the message into p (PayloadLen bytes, zeroed).
	put(p []byte)
	// get reads the message from p (PayloadLen bytes).
	get(p []byte)
}

// Marshal writes a CM MAD into b[:MADLen]: hdr, with its AttrID replaced by
// msg's, then msg. Bytes the format reserves are written as zero. b must be
// at least MADLen long. A field value too wide for its bits (a QPN above
// 2^24-1, a 5-bit timeout above 31, ...) is an error matching ErrRange, and
// b is left untouched.
func Marshal(hdr Header, msg Message, b []byte) error {
	if msg == nil || isNilMessage(msg) {
		return ErrNilMessage
	}
	if len(b) < MADLen {
		return fmt.Errorf("%w (have %d)", ErrShort, len(b))
	}
	if err := msg.check(); err != nil {
		return fmt.Errorf("mad: %s: %w", msg.Name(), err)
	}
	b = b[:MADLen]
	clear(b)
	hdr.AttrID = msg.AttrID()
	if err := hdr.Marshal(b); err != nil {
		return err
	}
	msg.put(b[HeaderLen:])
	return nil
}

// Append appends the MAD of hdr and msg (MADLen bytes) to b; see Marshal.
func Append(b []byte, hdr Header, msg Message) ([]byte, error) {
	n := len(b)
	b = append(b, make([]byte, MADLen)...)
	if err := Marshal(hdr, msg, b[n:]); err != nil {
		return b[:n], err
	}
	return b, nil
}

// Parse decodes the MAD in b[:MADLen] (bytes after it are ignored). It
// returns the header whenever b holds one, also with ErrBaseVersion,
// ErrNotCM, ErrUnknownAttr and ErrInvalid, so a caller can still say what
// the MAD was.
// The class version is not checked: Linux only passes version 2 to the CM,
// and a caller that answers MADs should do the same.
func Parse(b []byte) (Header, Message, error) { return parse(b, nil) }

// Decoder parses MADs like Parse without allocating: the Message it returns
// is one of its own fields, overwritten by the next call. The zero value is
// ready to use; a Decoder is not safe for concurrent use.
type Decoder struct {
	req     REQ
	mra     MRA
	rej     REJ
	rep     REP
	rtu     RTU
	dreq    DREQ
	drep    DREP
	sidrReq SIDRREQ
	sidrRep SIDRREP
}

// Parse decodes the MAD in b as the package's Parse does, into d.
func (d *Decoder) Parse(b []byte) (Header, Message, error) { return parse(b, d) }

func (d *Decoder) message(attrID uint16) Message {
	switch attrID {
	case AttrREQ:
		return &d.req
	case AttrMRA:
		return &d.mra
	case AttrREJ:
		return &d.rej
	case AttrREP:
		return &d.rep
	case AttrRTU:
		return &d.rtu
	case AttrDREQ:
		return &d.dreq
	case AttrDREP:
		return &d.drep
	case AttrSIDRREQ:
		return &d.sidrReq
	case AttrSIDRREP:
		return &d.sidrRep
	}
	return nil
}

// parse decodes into a new message, or into one of d's when d is not nil.
func parse(b []byte, d *Decoder) (Header, Message, error) {
	if len(b) < MADLen {
		if len(b) >= HeaderLen {
			h, _ := ParseHeader(b)
			return h, nil, fmt.Errorf("%w (have %d)", ErrShort, len(b))
		}
		return Header{}, nil, fmt.Errorf("%w (have %d)", ErrShort, len(b))
	}
	h, _ := ParseHeader(b)
	if h.BaseVersion != BaseVersion {
		return h, nil, fmt.Errorf("%w %d", ErrBaseVersion, h.BaseVersion)
	}
	if h.MgmtClass != ClassCM {
		return h, nil, fmt.Errorf("%w (class 0x%02x)", ErrNotCM, h.MgmtClass)
	}
	var m Message
	if d != nil {
		m = d.message(h.AttrID)
	} else {
		m = NewMessage(h.AttrID)
	}
	if m == nil {
		return h, nil, fmt.Errorf("%w 0x%04x", ErrUnknownAttr, h.AttrID)
	}
	m.get(b[HeaderLen:MADLen])
	// Bit fields cannot be out of range after decoding; the length fields
	// (REJ RejInfoLen, SIDR_REP AddInfoLen) can claim more than their array.
	if err := m.check(); err != nil {
		return h, nil, fmt.Errorf("%w: %s: %w", ErrInvalid, m.Name(), err)
	}
	return h, m, nil
}

// NewMessage returns a zero message of the type attrID names, or nil when
// this package does not decode it.
func NewMessage(attrID uint16) Message {
	switch attrID {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	}
	return nil
}

// AttrName is the name of a CM attribute ID ("REQ", "SIDR_REP", "LAP", ...),
// or its number in hex when it names none.
func AttrName(attrID uint16) string {
	switch attrID {
	case AttrLAP:
		return "LAP"
	case AttrAPR:
		return "APR"
	}
	if m := NewMessage(attrID); m != nil {
		return m.Name()
	}
	return fmt.Sprintf("0x%04x", attrID)
}

func isNilMessage(m Message) bool {
	switch m := m.(type) {
	case *REQ:
		return m == nil
	case *MRA:
		return m == nil
	case *REJ:
		return m == nil
	case *REP:
		return m == nil
	case *RTU:
		return m == nil
	case *DREQ:
		return m == nil
	case *DREP:
		return m == nil
	case *SIDRREQ:
		return m == nil
	case *SIDRREP:
		return m == nil
	}
	return false
}

// Big-endian helpers for the 24-bit fields (QPNs, PSNs, EECNs) that sit in
// the high three bytes of a 32-bit word.
func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func bit(b byte, mask byte) bool { return b&mask != 0 }

func flag(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}

// checker records the first field that does not fit its width.
type checker struct{ err error }

func (c *checker) bits(name string, v uint64, n uint) {
	if c.err == nil && v>>n != 0 {
		c.err = fmt.Errorf("%s %d does not fit in %d bits: %w", name, v, n, ErrRange)
	}
}

func (c *checker) max(name string, v, max int) {
	if c.err == nil && (v < 0 || v > max) {
		c.err = fmt.Errorf("%s %d is above %d: %w", name, v, max, ErrRange)
	}
}
