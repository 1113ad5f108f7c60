package pingpong

import (
	"errors"
	"fmt"
)

// MsgSize is the size of one address record on the wire:
// sizeof "0000:000000:000000:00000000000000000000000000000000" in rc_pingpong.c.
const MsgSize = 52

// DefaultPort is ibv_rc_pingpong's default TCP port (-p).
const DefaultPort = 18515

// Done is the client's final message: "done" and its NUL, sizeof "done" bytes.
var Done = [5]byte{'d', 'o', 'n', 'e', 0}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("pingpong: malformed address record")

// Dest is struct pingpong_dest: what one side tells the other about its QP.
// The LID is 0 on RoCE. QPN and PSN are 24-bit values.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

const hexDigits = "0123456789abcdef"

// putHex writes v as exactly n lowercase hex digits (the caller masks v to
// fit, so this is C's %0Nx for every value the record can carry).
func putHex(b []byte, v uint64, n int) {
	for i := n - 1; i >= 0; i-- {
		b[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// Encode renders d as the 52-byte record "%04x:%06x:%06x:%s\0". QPN and PSN
// are masked to their 24 bits: the C buffer has room for 6 digits only.
func Encode(d Dest) [MsgSize]byte {
	var m [MsgSize]byte
	putHex(m[0:4], uint64(d.LID), 4)
	m[4] = ':'
	putHex(m[5:11], uint64(d.QPN&0xffffff), 6)
	m[11] = ':'
	putHex(m[12:18], uint64(d.PSN&0xffffff), 6)
	m[18] = ':'
	for i, c := range d.GID {
		m[19+2*i] = hexDigits[c>>4]
		m[20+2*i] = hexDigits[c&0xf]
	}
	m[51] = 0
	return m
}

// Decode parses a record as the real tool does with
// sscanf(msg, "%x:%x:%x:%s") followed by wire_gid_to_gid: three hex fields
// separated by ':' (any width, so records from tools that pad differently
// still decode), then 32 hex digits of GID. The record ends at the first NUL
// or at the end of b. Anything else is an error wrapping ErrMalformed; Decode
// never panics.
func Decode(b []byte) (Dest, error) {
	var d Dest
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	s := b
	var fields [3]uint64
	for i := range fields {
		j := 0
		for j < len(s) && s[j] != ':' {
			j++
		}
		if j == len(s) {
			return Dest{}, fmt.Errorf("%w: %d of 4 fields in %q", ErrMalformed, i+1, b)
		}
		v, ok := parseHex(s[:j])
		if !ok {
			return Dest{}, fmt.Errorf("%w: field %d %q is not hex", ErrMalformed, i+1, s[:j])
		}
		fields[i] = v
		s = s[j+1:]
	}
	if fields[0] > 0xffff || fields[1] > 0xffffff || fields[2] > 0xffffff {
		return Dest{}, fmt.Errorf("%w: LID %#x, QPN %#x or PSN %#x out of range", ErrMalformed, fields[0], fields[1], fields[2])
	}
	if len(s) != 32 {
		return Dest{}, fmt.Errorf("%w: GID has %d hex digits, want 32", ErrMalformed, len(s))
	}
	for i := range d.GID {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return Dest{}, fmt.Errorf("%w: GID %q is not hex", ErrMalformed, s)
		}
		d.GID[i] = hi<<4 | lo
	}
	d.LID = uint16(fields[0])
	d.QPN = uint32(fields[1])
	d.PSN = uint32(fields[2])
	return d, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseHex parses 1 to 16 hex digits.
func parseHex(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		x, ok := unhex(c)
		if !ok {
			return 0, false
		}
		v = v<<4 | uint64(x)
	}
	return v, true
}
