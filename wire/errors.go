package wire

import "errors"

// Parse and Build errors. They are plain sentinels so that the error path
// does not allocate; test them with errors.Is.
var (
	ErrTruncated     = errors.New("wire: frame shorter than its headers or length fields")
	ErrNotIP         = errors.New("wire: EtherType is not IPv4 or IPv6")
	ErrBadIPHeader   = errors.New("wire: bad IP header (version, IHL, fragment)")
	ErrBadIPLength   = errors.New("wire: IP length too small for UDP")
	ErrBadUDPLength  = errors.New("wire: UDP length does not match the IP length")
	ErrNotRoCE       = errors.New("wire: not UDP to port 4791")
	ErrBadTVer       = errors.New("wire: BTH TVer is not 0")
	ErrUnknownOpcode = errors.New("wire: unknown or unsupported opcode")
	ErrBadPad        = errors.New("wire: pad count larger than the payload, or pad on a FIRST/MIDDLE packet")
	ErrBadPayload    = errors.New("wire: payload on an opcode that carries none")
	ErrBadICRC       = errors.New("wire: ICRC mismatch")

	ErrBufferTooSmall  = errors.New("wire: buffer too small for the frame")
	ErrMixedIPVersions = errors.New("wire: source and destination IP are not both IPv4 or both IPv6")
	ErrBadPayloadLen   = errors.New("wire: payload length negative, too large, not a multiple of 4 on FIRST/MIDDLE, or non-zero for an opcode without payload")
)
