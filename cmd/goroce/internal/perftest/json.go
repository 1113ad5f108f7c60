package perftest

import (
	"fmt"
	"strings"
)

// The --out_json report. 4.5-0.17 writes the same keys without quotes
// (not JSON); this is upstream HEAD's format (write_test_info_to_file,
// write_bw_report_to_file, write_report_lat_to_file and the REPORT_FMT_*_JSON
// formats of perftest_parameters.[ch]), which JSON parsers read. The tools
// rewrite the file (O_TRUNC) at every report they print, so it holds the
// last one.

// FormatJSONTestInfo is write_test_info_to_file for the test information
// that FormatTestInfo prints.
func FormatJSONTestInfo(ti TestInfo) string {
	var b strings.Builder
	verb := ti.Test.Verb()
	b.WriteString("\"test_info\": {\n")
	b.WriteString("\"test\": \"" + testTitle(ti, "_") + "\",\n")
	fmt.Fprintf(&b, "\"Dual_port\": \"%s\",\n\"Device\": \"%s\",\n", "OFF", ti.Device)
	fmt.Fprintf(&b, "\"Number_of_qps\": %d,\n\"Transport_type\": \"%s\",\n", ti.NumQPs, ti.Transport)
	fmt.Fprintf(&b, "\"Connection_type\": \"%s\",\n\"Using_SRQ\": \"%s\",\n", ti.connection(), onOff(ti.UseSRQ))
	fmt.Fprintf(&b, "\"PCIe_relax_order\": \"%s\",\n", onOff(ti.PCIeRelax))
	fmt.Fprintf(&b, "\"ibv_wr_API\": \"%s\",\n", "OFF")
	if !ti.Server || ti.Duplex {
		fmt.Fprintf(&b, "\"TX_depth\": %d,\n", ti.TxDepth)
	}
	if ti.PostList > 1 {
		fmt.Fprintf(&b, "\"Post_List\": %d,\n", ti.PostList)
	}
	if verb == Send && (ti.Server || ti.Duplex) {
		fmt.Fprintf(&b, "\"RX_depth\": %d,\n", ti.RxDepth)
	}
	if ti.Test.BW() {
		fmt.Fprintf(&b, "\"CQ_Moderation\": %d,\n", ti.CQMod)
	}
	fmt.Fprintf(&b, "\"Mtu\": %d,\n", ti.MTU.Bytes())
	fmt.Fprintf(&b, "\"Link_type\": \"%s\",\n", ti.LinkType)
	if ti.GIDIndex != -1 {
		fmt.Fprintf(&b, "\"GID_index\": %d,\n", ti.GIDIndex)
	}
	if verb != Read && verb != Atomic {
		fmt.Fprintf(&b, "\"Max_inline_data\": %d,\n", ti.InlineSize)
	} else {
		fmt.Fprintf(&b, "\"Outstand_reads\": %d,\n", ti.OutReads)
	}
	fmt.Fprintf(&b, "\"rdma_cm_QPs\": \"%s\",\n", onOff(ti.RDMACM))
	b.WriteString("\"Use_ROCm_memory\": \"OFF\",\n")
	b.WriteString("\"Use_MUSA_memory\": \"OFF\",\n")
	if ti.RDMACM {
		b.WriteString("\"Data_ex_method\": \"rdma_cm\"")
	} else {
		b.WriteString("\"Data_ex_method\": \"Ethernet\"")
	}
	b.WriteString("\n},\n")
	return b.String()
}

// FormatJSONBW is the whole file print_full_bw_report writes for the
// report it prints: r with the rates already summed for a bidirectional
// line, incAccuracy as the printed line chose it (Gb/s below 0.1 of our own
// average).
func FormatJSONBW(ti TestInfo, r BWReport, incAccuracy bool) string {
	prec := 2
	if incAccuracy {
		prec = 6
	}
	return "{\n" + FormatJSONTestInfo(ti) + "\"results\": {\n" +
		fmt.Sprintf("\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %s,\n\"BW_average\": %s,\n\"MsgRate\": %s",
			r.Size, r.Iters, cf(r.BWPeak, 0, prec), cf(r.BWAvg, 0, prec), cf(r.MsgRateAvg, 0, 6)) +
		"\n}\n}\n"
}

// FormatJSONLat is the file print_report_lat writes with the line of r.
func FormatJSONLat(ti TestInfo, r LatReport) string {
	f := func(v float64) string { return cf(v, 0, 2) }
	return "{\n" + FormatJSONTestInfo(ti) + "\"results\": {\n" +
		fmt.Sprintf("\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_min\": %s,\n\"t_max\": %s,\n\"t_typical\": %s,\n\"t_avg\": %s,\n"+
			"\"t_stdev\": %s,\n\"percentile_99\": %s,\n\"percentile_99.9\": %s",
			r.Size, r.Iters, f(r.Min), f(r.Max), f(r.Typical), f(r.Avg), f(r.Stdev), f(r.Percentile99), f(r.Percentile999)) +
		"\n}\n}\n"
}
