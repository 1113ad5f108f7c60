package perftest

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ResultLine is RESULT_LINE: 87 dashes and a newline.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// WaitingBanner is what the server prints before accepting.
const WaitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// Table headers (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT), each with the
// RESULT_EXT newline.
const (
	BWHeaderMB = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	BWHeaderGb = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	LatHeader  = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
)

// BWHeader returns the BW table header for --report_gbits or MB/s.
func BWHeader(gbits bool) string {
	if gbits {
		return BWHeaderGb
	}
	return BWHeaderMB
}

// AtomicType is -A.
type AtomicType int

// Atomic types (enum order and names of atomicTypesStr).
const (
	CmpAndSwap  AtomicType = iota // CMP_AND_SWAP
	FetchAndAdd                   // FETCH_AND_ADD
)

// TestInfo is what ctx_print_test_info shows.
type TestInfo struct {
	Test       Test
	Server     bool
	AtomicType AtomicType
	Device     string // "rxe0"
	NumQPs     int
	Transport  string // transport_str: "IB" for rxe and mlx5
	PCIeRelax  bool   // "PCIe relax order" (the BW tools turn it on where supported)
	TxDepth    int    // printed on the client
	RxDepth    int    // printed on a send test's server
	CQMod      int    // printed for BW tests
	MTU        MTU
	LinkType   string // "Ethernet"
	GIDIndex   int    // printed when not -1
	InlineSize int    // "Max inline data" (send, write)
	OutReads   int    // "Outstand reads" (read, atomic)
	Duplex     bool   // -b: "Bidirectional" in the title, both depths on both sides
	Connection string // -c: "RC" (also when empty) or "UC"
	UseSRQ     bool   // --use-srq: "Using SRQ : ON"
	PostList   int    // -l: "Post List" in the title and its line when > 1
	RDMACM     bool   // -R: "rdma_cm QPs : ON", the exchange over rdma_cm
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

var verbTitle = [...]string{Send: "Send", Write: "RDMA_Write", Read: "RDMA_Read", Atomic: "Atomic"}

// FormatTestInfo renders the block perftest 4.5-0.17 prints after Hello,
// between two ResultLines, in its order (non-duplex, RC, no rdma_cm).
// testTitle is the test's name as perftest's print_report_bw header and
// write_test_info_to_file spell it, its words joined by sep: "RDMA_Write
// Bidirectional BW Test", "Atomic FETCH_AND_ADD Latency Test", ...
func testTitle(ti TestInfo, sep string) string {
	verb := ti.Test.Verb()
	w := []string{verbTitle[verb]}
	if verb == Atomic {
		w = append(w, ti.AtomicType.String())
	}
	if ti.Test.BW() {
		if ti.Duplex {
			w = append(w, "Bidirectional")
		}
		if ti.PostList > 1 {
			w = append(w, "Post", "List")
		}
		w = append(w, "BW")
	} else {
		w = append(w, "Latency")
	}
	return strings.Join(append(w, "Test"), sep)
}

// connection is the "Connection type" value.
func (ti TestInfo) connection() string {
	if ti.Connection == "" {
		return "RC"
	}
	return ti.Connection
}

func FormatTestInfo(ti TestInfo) string {
	var b strings.Builder
	verb := ti.Test.Verb()
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(testTitle(ti, " ") + "\n")
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", ti.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", ti.NumQPs, ti.Transport)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", ti.connection(), onOff(ti.UseSRQ))
	fmt.Fprintf(&b, " PCIe relax order: %s\n", onOff(ti.PCIeRelax))
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", "OFF")
	if !ti.Server || ti.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", ti.TxDepth)
	}
	if ti.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", ti.PostList)
	}
	if verb == Send && (ti.Server || ti.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", ti.RxDepth)
	}
	if ti.Test.BW() {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", ti.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", ti.MTU.Bytes())
	fmt.Fprintf(&b, " Link type       : %s\n", ti.LinkType)
	if ti.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", ti.GIDIndex)
	}
	if verb != Read && verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", ti.InlineSize)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", ti.OutReads)
	}
	if !ti.RDMACM {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
		b.WriteString(" Data ex. method : Ethernet\n")
		b.WriteString(ResultLine)
		return b.String()
	}
	b.WriteString(" rdma_cm QPs\t : ON\n")
	b.WriteString(" Data ex. method : rdma_cm")
	if ti.Server {
		b.WriteString("\n" + ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n" + ResultLine)
	return b.String()
}

// altHex is C's "%#0<width>x": zero-padded to width including the "0x"
// prefix, and no prefix at all for 0 (the '#' flag adds none to zero).
func altHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

// FormatAddress renders ctx_print_pingpong_data for side "local" or
// "remote": BASIC_ADDR_FMT, READ_FMT for RDMA READ, RDMA_FMT for READ and
// WRITE (the C switch falls through), and the GID line in decimal.
func FormatAddress(side string, k KeyMsg, verb Verb, withGID bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, altHex(uint64(k.LID), 4), altHex(uint64(k.QPN), 6), altHex(uint64(k.PSN), 6))
	if verb == Read {
		b.WriteString(" OUT " + altHex(uint64(k.OutReads), 4))
	}
	if verb == Read || verb == Write {
		b.WriteString(" RKey " + altHex(uint64(k.RKey), 8) + " VAddr " + altHex(k.VAddr, 16))
	}
	b.WriteByte('\n')
	if withGID {
		b.WriteString(" GID: ")
		for i, g := range k.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", g)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// cf is C's "%-<width>.<prec>f" (and "%.<prec>f" for width 0), with glibc's
// spelling of infinities and NaNs.
func cf(v float64, width, prec int) string {
	var s string
	switch {
	case math.IsNaN(v):
		s = "-nan"
		if !math.Signbit(v) {
			s = "nan"
		}
	case math.IsInf(v, 1):
		s = "inf"
	case math.IsInf(v, -1):
		s = "-inf"
	default:
		s = strconv.FormatFloat(v, 'f', prec, 64)
	}
	if len(s) < width {
		s += strings.Repeat(" ", width-len(s))
	}
	return s
}

// cu is C's "%-<width>lu".
func cu(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) < width {
		s += strings.Repeat(" ", width-len(s))
	}
	return s
}

// FormatBWReport renders print_full_bw_report's line for one report,
// without the per-port columns: REPORT_FMT, or REPORT_FMT_EXT (six
// decimals) when reporting Gb/s and the average is below 0.1, then the
// REPORT_EXT newline.
func FormatBWReport(r BWReport, gbits bool) string {
	if gbits && r.BWAvg < 0.1 {
		return " " + cu(r.Size, 7) + "    " + strconv.FormatUint(r.Iters, 10) + "           " +
			cf(r.BWPeak, 7, 6) + "            " + cf(r.BWAvg, 7, 6) + "            " + cf(r.MsgRateAvg, 7, 6) + "\n"
	}
	return " " + cu(r.Size, 7) + "    " + cu(r.Iters, 10) + "       " +
		cf(r.BWPeak, 7, 2) + "            " + cf(r.BWAvg, 7, 2) + "\t\t   " + cf(r.MsgRateAvg, 7, 6) + "\n"
}

// FormatBWSum is print_full_bw_report(my, rem) of a bidirectional test:
// the peaks, averages and message rates of both directions added, the size
// and iterations our own, and the six-decimal format chosen on our own
// average (inc_accuracy is computed before the sum).
func FormatBWSum(my, rem BWReport, gbits bool) string {
	sum := SumBW(my, rem)
	if gbits && my.BWAvg < 0.1 {
		return " " + cu(sum.Size, 7) + "    " + strconv.FormatUint(sum.Iters, 10) + "           " +
			cf(sum.BWPeak, 7, 6) + "            " + cf(sum.BWAvg, 7, 6) + "            " + cf(sum.MsgRateAvg, 7, 6) + "\n"
	}
	return " " + cu(sum.Size, 7) + "    " + cu(sum.Iters, 10) + "       " +
		cf(sum.BWPeak, 7, 2) + "            " + cf(sum.BWAvg, 7, 2) + "\t\t   " + cf(sum.MsgRateAvg, 7, 6) + "\n"
}

// SumBW is the report print_full_bw_report prints for my and rem: every
// rate added, size and iterations from my.
func SumBW(my, rem BWReport) BWReport {
	s := my
	s.BWPeak += rem.BWPeak
	s.BWAvg += rem.BWAvg
	s.MsgRateAvg += rem.MsgRateAvg
	s.BWAvgP1 += rem.BWAvgP1
	s.MsgRateAvgP1 += rem.MsgRateAvgP1
	s.BWAvgP2 += rem.BWAvgP2
	s.MsgRateAvgP2 += rem.MsgRateAvgP2
	return s
}

// FormatReportBoth is what --report-both adds after a bidirectional
// test's sum line: our own line and the peer's, each under its own title
// and header.
func FormatReportBoth(my, rem BWReport, gbits bool) string {
	var b strings.Builder
	b.WriteString(ResultLine + "\n Local results: \n" + ResultLine + BWHeader(gbits))
	b.WriteString(FormatBWReport(my, gbits))
	b.WriteString(ResultLine + "\n Remote results: \n" + ResultLine + BWHeader(gbits))
	b.WriteString(FormatBWReport(rem, gbits))
	return b.String()
}

// ClientClosed is what a write/read/atomic_bw server of --run_infinitely
// prints when the client ends the run (HEAD's write_bw.c; 6.06's client
// never ends it).
const ClientClosed = " Client closed connection\n"

// Format factors of print_report_bw: MB/sec is MiB (0x100000), Gb/sec is
// 10^9 bits (125000000 bytes).
const (
	formatMB = 0x100000
	formatGb = 125000000
)

// NewBWReportFactor is NewBWReport for --run_infinitely with -b, where
// print_report_bw counts every message factor times (run_inf_bi_factor: 2
// for the RDMA tests, both directions being alike).
func NewBWReportFactor(size, iters uint64, total time.Duration, factor int, gbits bool) BWReport {
	r := NewBWReport(size*uint64(factor), iters, total, 0, gbits)
	r.Size = size
	r.MsgRateAvg *= float64(factor)
	return r
}

// NewBWReport computes what print_report_bw would from the run's numbers:
// iters messages of size bytes in total, the fastest message in best (0 for
// no peak, as with --run_infinitely or on a send server), in MB/s
// (MiB) or Gb/s.
func NewBWReport(size, iters uint64, total, best time.Duration, gbits bool) BWReport {
	ff := float64(formatMB)
	if gbits {
		ff = formatGb
	}
	secs := total.Seconds()
	r := BWReport{Size: size, Iters: iters}
	r.BWAvg = float64(size) * float64(iters) / (secs * ff)
	r.MsgRateAvg = float64(iters) / (secs * 1e6)
	if best > 0 {
		r.BWPeak = float64(size) / (best.Seconds() * ff)
	}
	return r
}

// LatReport is one line of the latency table, in microseconds.
type LatReport struct {
	Size, Iters                   uint64
	Min, Max, Typical, Avg, Stdev float64
	Percentile99, Percentile999   float64
}

// FormatLatReport renders REPORT_FMT_LAT and its newline.
func FormatLatReport(r LatReport) string {
	return " " + cu(r.Size, 7) + " " + strconv.FormatUint(r.Iters, 10) + "          " +
		cf(r.Min, 7, 2) + "        " + cf(r.Max, 7, 2) + "      " + cf(r.Typical, 7, 2) + "  \t       " +
		cf(r.Avg, 7, 2) + "     \t" + cf(r.Stdev, 7, 2) + "\t\t" + cf(r.Percentile99, 7, 2) + " \t\t" +
		cf(r.Percentile999, 7, 2) + "\n"
}

// FormatLatSamples is what -U (report-unsorted) and -H (report-histogram)
// add before a latency line, as print_report_lat prints them: with -U
// every sample in the order measured, with -H the samples sorted without
// the two largest (LAT_MEASURE_TAIL), each list under "#, usec" and as
// "%d, %g"; then, when either was asked, a ResultLine and the table header
// again. samples are those NewLatReport takes.
func FormatLatSamples(samples []float64, unsorted, histogram bool) string {
	if !unsorted && !histogram {
		return ""
	}
	var b strings.Builder
	list := func(d []float64) {
		b.WriteString("#, usec\n")
		for i, v := range d {
			b.WriteString(strconv.Itoa(i+1) + ", " + cg(v) + "\n")
		}
	}
	if unsorted {
		list(samples)
	}
	if histogram {
		d := append([]float64(nil), samples...)
		sort.Float64s(d)
		list(d[:max(len(d)-2, 0)])
	}
	b.WriteString(ResultLine + LatHeader)
	return b.String()
}

// cg is C's "%g": six significant digits, the exponent form below 1e-4
// and from 1e6, trailing zeros dropped.
func cg(v float64) string {
	switch {
	case math.IsNaN(v):
		return cf(v, 0, 0)
	case math.IsInf(v, 0):
		return cf(v, 0, 0)
	}
	return fmt.Sprintf("%.6g", v)
}

// NewLatReport is print_report_lat on samples already in microseconds and
// already divided by the round-trip factor (2 for send and write ping-pong,
// 1 for read and atomic): iters-1 samples for iters iterations. Like the C
// code it sorts them, drops the two largest (LAT_MEASURE_TAIL) from the
// statistics, takes t_max as the first dropped one and the percentiles at
// ceil(n·0.99) and ceil(n·0.999) of the remaining n. Fewer than 3 samples
// give a zero report.
func NewLatReport(size, iters uint64, samples []float64) LatReport {
	r := LatReport{Size: size, Iters: iters}
	if len(samples) < 3 {
		return r
	}
	d := append([]float64(nil), samples...)
	sort.Float64s(d)
	n := len(d) - 2
	if (n-1)%2 != 0 {
		r.Typical = (d[n/2] + d[n/2-1]) / 2
	} else {
		r.Typical = d[n/2]
	}
	var sum float64
	for _, v := range d[:n] {
		sum += v
	}
	r.Avg = sum / float64(n)
	var ss float64
	for _, v := range d[:n] {
		ss += (r.Avg - v) * (r.Avg - v)
	}
	r.Stdev = math.Sqrt(ss / float64(n))
	r.Min, r.Max = d[0], d[n]
	r.Percentile99 = d[int(math.Ceil(float64(n)*0.99))]
	r.Percentile999 = d[int(math.Ceil(float64(n)*0.999))]
	return r
}
