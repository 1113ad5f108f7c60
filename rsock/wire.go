package rsock

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The rsocket wire constants (librdmacm/rsocket.c, rdma-core v44.0); see
// docs/rsocket.md.
const (
	opData    = 0 // RS_OP_DATA: bytes written
	opWrite   = 2 // RS_OP_WRITE: riowrite's tag, never on the wire
	opSGL     = 4 // RS_OP_SGL: credits (+ an SGL entry when 16 bytes were written)
	opIOMap   = 6 // RS_OP_IOMAP_SGL: an iomap entry was written
	opCtrl    = 7 // RS_OP_CTRL: a control code below
	ctrlDisc  = 0 // RS_CTRL_DISCONNECT
	ctrlAlive = 1 // RS_CTRL_KEEPALIVE
	ctrlShut  = 2 // RS_CTRL_SHUTDOWN

	msgDataMask = 0x1FFFFFFF

	connDataLen = 40 // sizeof(struct rs_conn_data)
	sgeLen      = 16 // sizeof(struct rs_sge): addr u64, key u32, length u32
	iomapLen    = 24 // sizeof(struct rs_iomap): offset u64, rs_sge
	sglSize     = 2  // RS_SGL_SIZE
	ctrlSize    = 4  // RS_QP_CTRL_SIZE: control messages in flight
	sndLowat    = 2048
	maxTransfer = 65536 // RS_MAX_TRANSFER
	olapStart   = 2048  // RS_OLAP_START_SIZE
	qpMinSize   = 16
	qpMaxSize   = 0xFFFE

	flagNet   = 1 << 0 // RS_CONN_FLAG_NET: the sender is big-endian
	flagIOMap = 1 << 1 // RS_CONN_FLAG_IOMAP
)

func msg(op, data uint32) uint32 { return op<<29 | data&msgDataMask }
func msgOp(m uint32) uint32      { return m >> 29 }
func msgData(m uint32) uint32    { return m & msgDataMask }

// ErrProtocol is wrapped by the error that ends a connection whose peer broke
// the rsocket protocol (a message beyond the credits given, data beyond the
// buffer space granted, a malformed SGL or iomap update, bad connect data).
var ErrProtocol = errors.New("rsock: protocol violation by the peer")

// sge is struct rs_sge.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

func (s sge) put(b []byte, o binary.ByteOrder) {
	o.PutUint64(b[0:], s.addr)
	o.PutUint32(b[8:], s.key)
	o.PutUint32(b[12:], s.length)
}

func getSGE(b []byte, o binary.ByteOrder) sge {
	return sge{addr: o.Uint64(b[0:]), key: o.Uint32(b[8:]), length: o.Uint32(b[12:])}
}

// connData is struct rs_conn_data.
type connData struct {
	version   uint8
	flags     uint8
	credits   uint16
	iomapSize uint8 // scaled (rs_value_to_scale(n, 8))
	targetSGL sge
	dataBuf   sge
}

func (d *connData) marshal() []byte {
	b := make([]byte, connDataLen)
	b[0], b[1] = d.version, d.flags
	binary.BigEndian.PutUint16(b[2:], d.credits)
	b[7] = d.iomapSize
	d.targetSGL.put(b[8:], binary.BigEndian)
	d.dataBuf.put(b[24:], binary.BigEndian)
	return b
}

// parseConnData reads the first 40 bytes of private data; shorter data is
// zero-extended (the CM pads with zeros and carries no length).
func parseConnData(p []byte) (connData, error) {
	var b [connDataLen]byte
	copy(b[:], p)
	d := connData{version: b[0], flags: b[1], credits: binary.BigEndian.Uint16(b[2:]), iomapSize: b[7],
		targetSGL: getSGE(b[8:], binary.BigEndian), dataBuf: getSGE(b[24:], binary.BigEndian)}
	switch {
	case d.version != 1:
		return d, fmt.Errorf("%w: connect data version %d, want 1", ErrProtocol, d.version)
	case d.credits == 0:
		return d, fmt.Errorf("%w: connect data grants no credits", ErrProtocol)
	case d.targetSGL.length == 0 || d.targetSGL.length > 256:
		return d, fmt.Errorf("%w: target SGL of %d entries", ErrProtocol, d.targetSGL.length)
	case d.dataBuf.length == 0 || d.dataBuf.length > msgDataMask:
		return d, fmt.Errorf("%w: data buffer of %d bytes", ErrProtocol, d.dataBuf.length)
	}
	return d, nil
}

// valueToScale and scaleToValue are rs_value_to_scale / rs_scale_to_value
// with 8 bits: the iomap size in one byte.
func valueToScale(v int) uint8 {
	if v <= 1<<7 {
		return uint8(v)
	}
	return uint8(1<<7 | v>>8)
}

func scaleToValue(s uint8) int {
	if s <= 1<<7 {
		return int(s)
	}
	return int(s&^(1<<7)) << 8
}
