package pingpong

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// FormatGID renders a GID the way ibv_rc_pingpong prints it, with glibc's
// inet_ntop(AF_INET6) (resolv/inet_ntop.c, inet_ntop6): 16-bit words in
// lowercase hex, the first longest run of two or more zero words shown as
// "::", and the last 32 bits as dotted IPv4 when the first five words are
// zero and the sixth is 0xffff (v4-mapped, "::ffff:198.18.0.11") or the first
// six are zero ("::1.2.3.4"). Go's netip differs on the second form.
func FormatGID(gid [16]byte) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(gid[2*i])<<8 | uint16(gid[2*i+1])
	}
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	b := make([]byte, 0, 46)
	for i := 0; i < 8; i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && words[5] == 0xffff)) {
			b = fmt.Appendf(b, "%d.%d.%d.%d", gid[12], gid[13], gid[14], gid[15])
			return string(b)
		}
		b = strconv.AppendUint(b, uint64(words[i]), 16)
	}
	if bestBase != -1 && bestBase+bestLen == 8 {
		b = append(b, ':')
	}
	return string(b)
}

// FormatLocal is ibv_rc_pingpong's first line, including its newline:
//
//	"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
func FormatLocal(d Dest) string {
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// FormatRemote is the line printed once the peer's record is known:
//
//	"  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
func FormatRemote(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		d.LID, d.QPN, d.PSN, FormatGID(d.GID))
}

// FormatStats renders the two result lines of ibv_rc_pingpong:
//
//	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000., bytes * 8. / usec);
//	printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1000000., usec / iters);
//
// with the tool's types: usec is a C float holding the elapsed microseconds
// of the gettimeofday pair, bytes = size * iters * 2 (each side sends and
// receives), and usec / iters is a float division. elapsed is truncated to
// whole microseconds, as timeval arithmetic does. A zero elapsed time prints
// what C prints for a division by zero (inf or nan), never panics.
func FormatStats(size, iters uint32, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	perIter := usec / float32(iters) // iters == 0 gives inf or nan, as in C
	secs := float64(usec) / 1000000.
	mbit := float64(bytes) * 8. / float64(usec)
	return cfloat("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, secs, mbit) +
		cfloat("%d iters in %.2f seconds = %.2f usec/iter\n", int64(iters), secs, float64(perIter))
}

// cfloat is fmt.Sprintf for one integer and two %.2f values, spelling the
// non-finite values as glibc does ("inf", "-inf", "-nan", "nan") instead of
// Go's "+Inf"/"NaN".
func cfloat(format string, n int64, a, b float64) string {
	sa, sb := cfix(a), cfix(b)
	if sa == "" && sb == "" {
		return fmt.Sprintf(format, n, a, b)
	}
	f := []byte(format)
	out := make([]byte, 0, len(format)+32)
	arg := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			out = append(out, f[i])
			continue
		}
		switch {
		case i+1 < len(f) && f[i+1] == 'd':
			out = strconv.AppendInt(out, n, 10)
			i++
		case i+3 < len(f) && string(f[i+1:i+4]) == ".2f":
			v, s := a, sa
			if arg == 1 {
				v, s = b, sb
			}
			arg++
			if s != "" {
				out = append(out, s...)
			} else {
				out = strconv.AppendFloat(out, v, 'f', 2, 64)
			}
			i += 3
		default:
			out = append(out, f[i])
		}
	}
	return string(out)
}

func cfix(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-nan" // x86 glibc prints the default NaN (sign bit set) as -nan
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return ""
}
