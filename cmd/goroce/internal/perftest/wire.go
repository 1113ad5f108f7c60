package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

const (
	// Version is what we advertise: perftest 4.5-0.17 (configure.ac
	// VERSION "6.06"), the release whose exchange we emulate. It is below
	// 6.28, so a HEAD peer skips negotiate_params, and above 5.70, so a HEAD
	// peer accepts us (check_version_compatibility).
	Version = "6.06"
	// VersionSize is sizeof(user_param->version): the version blob size.
	VersionSize = 16
	// KeyMsgSize is KEY_MSG_SIZE_GID: a key message with a GID and its NUL.
	KeyMsgSize = 108
	// DefaultPort is perftest's default TCP port (-p).
	DefaultPort = 18515
	// DefaultCycleBuffer is sysconf(_SC_PAGESIZE) on the usual hosts.
	DefaultCycleBuffer = 4096
	// DefaultCacheLine is the usual cache line size perftest reads from sysfs.
	DefaultCacheLine = 64
)

// Done is what 6.06's ctx_close_connection writes after the last handshake.
var Done = [5]byte{'d', 'o', 'n', 'e', 0}

// ErrMalformed is wrapped by every error about bytes the peer sent.
var ErrMalformed = errors.New("perftest: malformed message")

// EncodeVersion is strncpy(version, v, 16): v truncated or NUL-padded to 16
// bytes.
func EncodeVersion(v string) [VersionSize]byte {
	var b [VersionSize]byte
	copy(b[:], v)
	return b
}

// DecodeVersion returns the string up to the first NUL (or all 16 bytes).
func DecodeVersion(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Atof is C's atof on a version string: the longest decimal prefix
// ([+-]digits[.digits][e[+-]digits] after leading spaces), 0 if none.
func Atof(s string) float64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')) {
		i++
	}
	start := i
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0
	}
	end := i
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > j {
			end = k
		}
	}
	v, err := strconv.ParseFloat(s[start:end], 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0
	}
	return v
}

// atLeast is "atof(version) >= min" in double precision (check_sys_data,
// check_version_compatibility, negotiate_params).
func atLeast(version string, min float64) bool { return Atof(version) >= min }

// atLeastFloat is the same comparison after storing atof's result in a C
// float, as check_mtu (float rem_vers) and xchg_bw_reports (float
// remote_version) do: "5.31" as a float is below the double 5.31.
func atLeastFloat(version string, min float64) bool { return float64(float32(Atof(version))) >= min }

// KeyMsg is the part of struct pingpong_dest that ctx_hand_shake sends.
type KeyMsg struct {
	LID      uint16 // 0 on RoCE
	OutReads uint16 // own max outstanding RDMA READ/atomic (the peer's max_rd_atomic)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // the remote target address in our buffer
	GID      [16]byte
	SRQN     uint32 // 0 for RC
}

// CMKeyMsgSize is sizeof(struct pingpong_dest) on a 64-bit host: what
// rdma_write_keys sends and rdma_read_keys reads over the rdma_cm control
// QP (-R), instead of the text key message.
const CMKeyMsgSize = 56

// EncodeCMKeyMsg is rdma_write_keys (HAVE_ENDIAN): struct pingpong_dest
// with every field big-endian: lid, out_reads, qpn, psn, rkey (4 bytes
// each at 0..19), 4 bytes of padding, vaddr at 24, the GID at 32, srqn at
// 48 and gid_index at 52. The padding, which the C tool leaves as stack
// garbage, is zero here.
func EncodeCMKeyMsg(k KeyMsg, gidIndex int32) [CMKeyMsgSize]byte {
	var m [CMKeyMsgSize]byte
	binary.BigEndian.PutUint32(m[0:], uint32(k.LID))
	binary.BigEndian.PutUint32(m[4:], uint32(k.OutReads))
	binary.BigEndian.PutUint32(m[8:], k.QPN)
	binary.BigEndian.PutUint32(m[12:], k.PSN)
	binary.BigEndian.PutUint32(m[16:], k.RKey)
	binary.BigEndian.PutUint64(m[24:], k.VAddr)
	copy(m[32:48], k.GID[:])
	binary.BigEndian.PutUint32(m[48:], k.SRQN)
	binary.BigEndian.PutUint32(m[52:], uint32(gidIndex))
	return m
}

// DecodeCMKeyMsg is rdma_read_keys: the fields it converts (lid,
// out_reads, qpn, psn, rkey, vaddr and the GID; it leaves srqn alone), from
// at least CMKeyMsgSize bytes. Values wider than their field are errors.
func DecodeCMKeyMsg(b []byte) (KeyMsg, error) {
	if len(b) < CMKeyMsgSize {
		return KeyMsg{}, fmt.Errorf("%w: rdma_cm key message of %d bytes", ErrMalformed, len(b))
	}
	lid, out := binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
	k := KeyMsg{QPN: binary.BigEndian.Uint32(b[8:]), PSN: binary.BigEndian.Uint32(b[12:]),
		RKey: binary.BigEndian.Uint32(b[16:]), VAddr: binary.BigEndian.Uint64(b[24:])}
	if lid > 0xffff || out > 0xffff || k.QPN > 0xffffff || k.PSN > 0xffffff {
		return KeyMsg{}, fmt.Errorf("%w: rdma_cm key message field out of range (lid %#x, out_reads %#x, qpn %#x, psn %#x)",
			ErrMalformed, lid, out, k.QPN, k.PSN)
	}
	k.LID, k.OutReads = uint16(lid), uint16(out)
	copy(k.GID[:], b[32:48])
	return k, nil
}

const hexDigits = "0123456789abcdef"

func putHex(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

// EncodeKeyMsg renders k with KEY_PRINT_FMT_GID. QPN and PSN are masked to
// their 24 bits so that the message is always 108 bytes.
func EncodeKeyMsg(k KeyMsg) [KeyMsgSize]byte {
	var m [KeyMsgSize]byte
	b := m[:0]
	field := func(v uint64, n int) {
		l := len(b)
		b = b[:l+n+1]
		putHex(b[l:l+n], v)
		b[l+n] = ':'
	}
	field(uint64(k.LID), 4)
	field(uint64(k.OutReads), 4)
	field(uint64(k.QPN&0xffffff), 6)
	field(uint64(k.PSN&0xffffff), 6)
	field(uint64(k.RKey), 8)
	field(k.VAddr, 16)
	for _, g := range k.GID {
		field(uint64(g), 2)
	}
	field(uint64(k.SRQN), 8)
	// b now holds 107 characters; m[107] stays NUL.
	return m
}

// DecodeKeyMsg parses a key message as ethernet_read_keys does: 23 hex
// fields each ended by ':', up to the first NUL. Field widths are not
// checked (strtol reads any), values are range-checked. It never panics.
func DecodeKeyMsg(b []byte) (KeyMsg, error) {
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	var f [23]uint64
	s := b
	for i := range f {
		j := 0
		for j < len(s) && s[j] != ':' {
			j++
		}
		// Every field, srqn included, ends with ':' (the C parser finds
		// each end with strpbrk and would crash without it).
		if j == len(s) {
			return KeyMsg{}, fmt.Errorf("%w: key message has %d of 23 fields: %q", ErrMalformed, i, b)
		}
		v, ok := parseHex(s[:j])
		if !ok {
			return KeyMsg{}, fmt.Errorf("%w: key field %d %q is not hex", ErrMalformed, i, s[:j])
		}
		f[i] = v
		s = s[j+1:]
	}
	if len(s) != 0 {
		return KeyMsg{}, fmt.Errorf("%w: %q after the key message", ErrMalformed, s)
	}
	limits := [6]uint64{0xffff, 0xffff, 0xffffff, 0xffffff, 0xffffffff, math.MaxUint64}
	for i, l := range limits {
		if f[i] > l {
			return KeyMsg{}, fmt.Errorf("%w: key field %d = %#x out of range", ErrMalformed, i, f[i])
		}
	}
	k := KeyMsg{
		LID: uint16(f[0]), OutReads: uint16(f[1]), QPN: uint32(f[2]), PSN: uint32(f[3]),
		RKey: uint32(f[4]), VAddr: f[5],
	}
	for i := range k.GID {
		if f[6+i] > 0xff {
			return KeyMsg{}, fmt.Errorf("%w: GID byte %d = %#x", ErrMalformed, i, f[6+i])
		}
		k.GID[i] = byte(f[6+i])
	}
	if f[22] > 0xffffffff {
		return KeyMsg{}, fmt.Errorf("%w: SRQN %#x out of range", ErrMalformed, f[22])
	}
	k.SRQN = uint32(f[22])
	return k, nil
}

func parseHex(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// BWReport is struct bw_report_data as xchg_bw_reports sends it.
type BWReport struct {
	Size         uint64
	Iters        uint64
	BWPeak       float64
	BWAvg        float64
	MsgRateAvg   float64
	BWAvgP1      float64 // the per-port fields travel only with --report-per-port
	MsgRateAvgP1 float64
	BWAvgP2      float64
	MsgRateAvgP2 float64
}

// reportBlobs returns the blobs xchg_bw_reports exchanges, in order, each
// one ctx_xchg_data: size, iters, bw_peak, bw_avg, msgRate_avg and with
// perPort bw_avg_p1, msgRate_avg_p1, bw_avg_p2, msgRate_avg_p2. iters is 8
// bytes when wideIters (peer >= 5.33) and 4 otherwise (hton_int of a value
// the C code keeps in a u64; only the low 32 bits travel).
func (r BWReport) blobs(wideIters, perPort bool) [][]byte {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f64 := func(v float64) []byte { return u64(math.Float64bits(v)) }
	out := [][]byte{u64(r.Size)}
	if wideIters {
		out = append(out, u64(r.Iters))
	} else {
		out = append(out, binary.BigEndian.AppendUint32(nil, uint32(r.Iters)))
	}
	out = append(out, f64(r.BWPeak), f64(r.BWAvg), f64(r.MsgRateAvg))
	if perPort {
		out = append(out, f64(r.BWAvgP1), f64(r.MsgRateAvgP1), f64(r.BWAvgP2), f64(r.MsgRateAvgP2))
	}
	return out
}

// setBlob stores blob i (as numbered by blobs) into r.
func (r *BWReport) setBlob(i int, b []byte) {
	var v uint64
	if len(b) == 4 {
		v = uint64(binary.BigEndian.Uint32(b))
	} else {
		v = binary.BigEndian.Uint64(b)
	}
	f := math.Float64frombits(v)
	switch i {
	case 0:
		r.Size = v
	case 1:
		r.Iters = v
	case 2:
		r.BWPeak = f
	case 3:
		r.BWAvg = f
	case 4:
		r.MsgRateAvg = f
	case 5:
		r.BWAvgP1 = f
	case 6:
		r.MsgRateAvgP1 = f
	case 7:
		r.BWAvgP2 = f
	case 8:
		r.MsgRateAvgP2 = f
	}
}

// MTU is enum ibv_mtu: 1 = 256 bytes … 5 = 4096 bytes.
type MTU int

// MTU values.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of the five IB MTUs (valid_mtu_size).
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes is MTU_SIZE(m): 256 << (m-1), 0 for an invalid value.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << int(m)
}

// MTUFromBytes maps 256…4096 to the enum, 0 for anything else.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// encodeMTU is check_mtu's sprintf(cur, "%d", curr_mtu) in char cur[sizeof(int)],
// of which size bytes (2 or 4) are sent. We send zeros where C sends
// whatever was in the stack buffer.
func encodeMTU(m MTU, size int) []byte {
	b := make([]byte, size)
	copy(b[:size-1], strconv.Itoa(int(m)))
	return b
}

// decodeMTU is strtol(rem, NULL, 10) on the peer's bytes.
func decodeMTU(b []byte) MTU {
	v, i, neg := 0, 0, false
	for i < len(b) && (b[i] == ' ' || (b[i] >= '\t' && b[i] <= '\r')) {
		i++
	}
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && v < 1<<20; i++ {
		v = v*10 + int(b[i]-'0')
	}
	if neg {
		v = -v
	}
	return MTU(v)
}

// BuffSize is BUFF_SIZE(size, cycle_buffer): the per-QP half of the data
// buffer, max(size, cycleBuffer).
func BuffSize(size uint64, cycleBuffer int32) uint64 {
	return max(size, uint64(max(cycleBuffer, 0)))
}

// TargetVAddr is the vaddr set_up_connection advertises for QP qp when all
// QPs share one buffer starting at base (no --mr_per_qp): the second half of
// the buffer, base + (numQPs + qp) * BuffSize. The buffer must be
// 2 * numQPs * BuffSize bytes, registered with the access the verb needs.
func TargetVAddr(base uint64, numQPs, qp int, size uint64, cycleBuffer int32) uint64 {
	return base + uint64(numQPs+qp)*BuffSize(size, cycleBuffer)
}
