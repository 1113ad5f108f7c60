package rpingcmd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// InfoLen is the size of struct rping_rdma_info, the control message both
// sides SEND: be64 buf, be32 rkey, be32 size.
const InfoLen = 16

// Info is struct rping_rdma_info: where a buffer is and how to reach it.
type Info struct {
	Buf  uint64 // the buffer's address (an IOVA of the sender's MR)
	RKey uint32
	Size uint32
}

// Encode writes the 16 wire bytes of i into b (len(b) ≥ InfoLen), as
// rping_format_send.
func (i Info) Encode(b []byte) {
	binary.BigEndian.PutUint64(b[0:], i.Buf)
	binary.BigEndian.PutUint32(b[8:], i.RKey)
	binary.BigEndian.PutUint32(b[12:], i.Size)
}

// errBogus is server_recv's / client_recv's check: a control message is
// exactly 16 bytes.
var errBogus = errors.New("bogus control message")

// DecodeInfo reads a received control message of n bytes (the
// completion's byte_len), as server_recv.
func DecodeInfo(b []byte, n uint32) (Info, error) {
	if n != InfoLen || len(b) < InfoLen {
		return Info{}, fmt.Errorf("%w: %d bytes", errBogus, n)
	}
	return Info{Buf: binary.BigEndian.Uint64(b[0:]), RKey: binary.BigEndian.Uint32(b[8:]), Size: binary.BigEndian.Uint32(b[12:])}, nil
}

// Sizes of rping.c: RPING_BUFSIZE bounds -S (the check is size > 65535,
// the message says 65536), and RPING_MIN_BUFSIZE is
// sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT): INT_MAX is not a
// macro where rping.c stringifies it, so that is sizeof "INT_MAX" (8) plus
// sizeof "rdma-ping-%d: " (15) = 23, which is what the stock rping says.
const (
	BufSize    = 64 * 1024
	MinBufSize = 8 + 15
)

// FillPing writes ping number ping into buf as rping_test_client does:
// "rdma-ping-%d: " then the letters from start on ('A'..'z', wrapping to
// 'A' after 'z'), the last byte NUL. It returns the next ping's start.
func FillPing(buf []byte, ping, start int) int {
	size := len(buf)
	msg := "rdma-ping-" + strconv.Itoa(ping) + ": "
	cc := copy(buf, msg) // snprintf(start_buf, size, ...)
	if cc == size && size > 0 {
		buf[size-1] = 0
	}
	c := byte(start)
	for i := len(msg); i < size; i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	start++
	if start > 122 {
		start = 65
	}
	if size > 0 {
		buf[size-1] = 0
	}
	return start
}

// CString is buf up to its first NUL (what %s prints of it).
func CString(buf []byte) []byte {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		return buf[:i]
	}
	return buf
}
