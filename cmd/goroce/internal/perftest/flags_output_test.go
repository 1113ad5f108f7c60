package perftest

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	for test, want := range map[Test]struct {
		size, iters uint64
		tx          int
	}{
		WriteBW: {65536, 5000, 128}, ReadBW: {65536, 1000, 128}, SendBW: {65536, 1000, 128}, AtomicBW: {8, 1000, 128},
		WriteLat: {2, 1000, 1}, ReadLat: {2, 1000, 1}, SendLat: {2, 1000, 1}, AtomicLat: {8, 1000, 1},
	} {
		f := Defaults(test)
		if f.Size != want.size || f.Iters != want.iters || f.TxDepth != want.tx || f.Port != 18515 || f.GIDIndex != -1 || f.AtomicType != FetchAndAdd {
			t.Errorf("%v defaults %+v", test, f)
		}
	}
}

func TestParseFlags(t *testing.T) {
	// The command lines of the captures (testdata/rxe/*.log).
	f, err := ParseFlags(WriteBW, strings.Fields("-F -d rxe0 -x 1 -n 200 -s 64 --report_gbits 198.18.0.11"))
	if err != nil {
		t.Fatal(err)
	}
	if !f.CPUFreqWarn || f.IBDev != "rxe0" || f.GIDIndex != 1 || f.Iters != 200 || f.Size != 64 || !f.ReportGbits || f.Host != "198.18.0.11" || f.TxDepth != 128 {
		t.Errorf("write_bw flags %+v", f)
	}
	f, err = ParseFlags(AtomicBW, strings.Fields("-F -d rxe0 -x 1 -n 100 -A CMP_AND_SWAP 198.18.0.11"))
	if err != nil || f.AtomicType != CmpAndSwap || f.TxDepth != 100 || f.Size != 8 {
		t.Errorf("atomic_bw flags %+v, %v", f, err)
	}
	f, err = ParseFlags(SendBW, strings.Fields("-F -d rxe0 -x 1 -n 100 -s 64"))
	if err != nil || f.RxDepth != 100 || f.Host != "" {
		t.Errorf("send_bw flags %+v, %v", f, err)
	}
	// getopt_long conventions.
	f, err = ParseFlags(WriteLat, strings.Fields("host -x1 -s0x10 --iters=50 -aFe -q 2 -t 4 -m 4096 -I 64 -u 20 -U --outs 16 --dont_xchg --report-per-port -p 9000 -i 2 -Q 8 -D 0 -H --connection=RC"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Host != "host" || f.GIDIndex != 1 || f.Size != 16 || f.Iters != 50 || !f.AllSizes || !f.CPUFreqWarn || !f.Events ||
		f.NumQPs != 2 || f.TxDepth != 4 || f.MTU != 4096 || f.InlineSize != 64 || f.QPTimeout != 20 || !f.Unsorted ||
		f.OutReads != 16 || !f.DontXchg || !f.PerPort || f.Port != 9000 || f.IBPort != 2 || f.CQMod != 8 || !f.Histogram {
		t.Errorf("flags %+v", f)
	}
	for _, a := range []string{"-R", "--rdma_cm", "--rdma"} {
		if f, err := ParseFlags(ReadLat, []string{a}); err != nil || !f.RDMACM {
			t.Errorf("%q: RDMACM %v, %v", a, f.RDMACM, err)
		}
	}
	for _, c := range []struct {
		test Test
		args string
		want error
	}{
		{WriteLat, "-b", ErrUsage},
		{WriteBW, "-H", ErrUsage},
		{SendBW, "-U", ErrUsage},
		{SendBW, "-b --run_infinitely", ErrUsage},
		{WriteLat, "--run_infinitely", ErrUsage},
		{WriteBW, "--run_infinitely -e", ErrUsage},
		{WriteBW, "-l 3", ErrUsage},          // 5000 iterations are not a multiple of 3
		{WriteBW, "-l 4 -Q 3", ErrUsage},     // the list must be a multiple of cq_mod
		{WriteLat, "-l 2", ErrUsage},         // BW tests only
		{WriteBW, "-l 256 -n 512", ErrUsage}, // longer than the TX depth
		{WriteBW, "-T 256", ErrUsage},
		{WriteBW, "--tclass=-1", ErrUsage},
		{WriteBW, "-w -1", ErrUsage},
		{WriteBW, "-y -2", ErrUsage},
		{SendBW, "-c UD", ErrUnsupported},
		{AtomicBW, "-A FOO", ErrUsage},
		{AtomicLat, "-s 16", ErrUsage},
		{WriteBW, "-m 1000", ErrUsage},
		{WriteBW, "-n 2", ErrUsage},
		{WriteBW, "-s 0", ErrUsage},
		{WriteBW, "-s -1", ErrUsage},
		{WriteBW, "-q 0", ErrUsage},
		{WriteBW, "-p 65536", ErrUsage},
		{WriteBW, "-a -D 5", ErrUsage},
		{WriteBW, "-Z", ErrUsage},
		{WriteBW, "--nope", ErrUsage},
		{WriteBW, "--report", ErrUsage}, // ambiguous prefix
		{WriteBW, "a b", ErrUsage},
		{WriteBW, "-s", ErrUsage},
		{WriteBW, "-n x", ErrUsage},
	} {
		if _, err := ParseFlags(c.test, strings.Fields(c.args)); !errors.Is(err, c.want) {
			t.Errorf("%v %q: %v, want %v", c.test, c.args, err, c.want)
		}
	}
}

func TestParseTest(t *testing.T) {
	for _, test := range allTests {
		for _, n := range []string{test.String(), "ib_" + test.String()} {
			if got, ok := ParseTest(n); !ok || got != test {
				t.Errorf("ParseTest(%q) = %v, %v", n, got, ok)
			}
		}
	}
	if _, ok := ParseTest("write"); ok {
		t.Error("ParseTest accepted write")
	}
}

func TestFormatAddressZeroes(t *testing.T) {
	// C's %#0Nx prints no 0x for zero, and 0x plus N-2 digits otherwise.
	got := FormatAddress("remote", KeyMsg{QPN: 0x123456, OutReads: 1, RKey: 1, VAddr: 0}, Read, false)
	want := " remote address: LID 0000 QPN 0x123456 PSN 000000 OUT 0x01 RKey 0x000001 VAddr 0000000000000000\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := FormatAddress("local", KeyMsg{QPN: 1}, Send, false); got != " local address: LID 0000 QPN 0x0001 PSN 000000\n" {
		t.Fatalf("send: %q", got)
	}
}

func TestNewBWReport(t *testing.T) {
	// write_bw_gbits_small.log: 64 bytes, 200 iterations.
	r := NewBWReport(64, 200, 51894*time.Microsecond, 215578*time.Nanosecond, true)
	want := " 64         200           0.002375            0.001973            0.003854\n"
	if got := FormatBWReport(r, true); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	// MB/sec is MiB/s.
	r = NewBWReport(1<<20, 10, time.Second, 0, false)
	if r.BWAvg != 10 || r.BWPeak != 0 || r.MsgRateAvg != 10e-6 {
		t.Fatalf("MiB report %+v", r)
	}
	want = " 1048576    10               0.00               10.00  \t\t   0.000010\n"
	if got := FormatBWReport(r, false); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	// Non-finite values print as glibc does.
	if got := FormatBWReport(BWReport{BWPeak: math.Inf(1), BWAvg: math.NaN()}, false); !strings.Contains(got, "inf    ") || !strings.Contains(got, "nan") {
		t.Fatalf("non-finite: %q", got)
	}
}

func TestNewLatReport(t *testing.T) {
	// 9 samples (10 iterations): sorted 1..9, the two largest (8, 9) leave
	// the statistics, t_max is the first of them.
	s := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5}
	r := NewLatReport(2, 10, s)
	want := LatReport{Size: 2, Iters: 10, Min: 1, Max: 8, Typical: 4, Avg: 4, Stdev: 2, Percentile99: 8, Percentile999: 8}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	// An even count (n-1 odd) averages the two middle values.
	r = NewLatReport(2, 9, []float64{1, 2, 3, 4, 10, 20})
	if r.Typical != 2.5 || r.Max != 10 || r.Avg != 2.5 {
		t.Fatalf("even: %+v", r)
	}
	if r := NewLatReport(2, 3, []float64{1, 2}); r != (LatReport{Size: 2, Iters: 3}) {
		t.Fatalf("too few: %+v", r)
	}
	if s[0] != 9 {
		t.Fatal("NewLatReport sorted the caller's slice")
	}
	line := FormatLatReport(LatReport{Size: 2, Iters: 100, Min: 211.2, Max: 3150.89, Typical: 387.25, Avg: 683.15, Stdev: 586.26, Percentile99: 3150.89, Percentile999: 3150.89})
	if line != " 2       100          211.20         3150.89      387.25   \t       683.15      \t586.26 \t\t3150.89 \t\t3150.89\n" {
		t.Fatalf("lat line %q", line)
	}
}

func TestMTU(t *testing.T) {
	for m, b := range map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != b || (b != 0 && MTUFromBytes(b) != m) {
			t.Errorf("MTU %d: %d bytes", m, m.Bytes())
		}
	}
	for in, want := range map[string]MTU{"3\x00": 3, "5\x00\x00\x00": 5, "\x00\x00": 0, " 4": 4, "x": 0, "-1": -1} {
		if got := decodeMTU([]byte(in)); got != want {
			t.Errorf("decodeMTU(%q) = %d", in, got)
		}
	}
	if got := string(encodeMTU(MTU1024, 4)); got != "3\x00\x00\x00" {
		t.Errorf("encodeMTU 4 = %q", got)
	}
}

func TestAtof(t *testing.T) {
	for in, want := range map[string]float64{"6.06": 6.06, "6.29": 6.29, "5.1": 5.1, " 5.33abc": 5.33, "": 0, "x": 0, "6": 6, ".5": 0.5, "1e1": 10, "1e": 1, "-2.5": -2.5} {
		if got := Atof(in); got != want {
			t.Errorf("Atof(%q) = %v, want %v", in, got, want)
		}
	}
	if atLeastFloat("5.31", 5.31) || !atLeast("5.31", 5.31) {
		t.Error("float vs double comparison of 5.31")
	}
	if DecodeVersion([]byte("6.06\x00garbage")) != "6.06" || DecodeVersion([]byte("0123456789abcdef")) != "0123456789abcdef" {
		t.Error("DecodeVersion")
	}
}

func TestParseNewFlags(t *testing.T) {
	f, err := ParseFlags(WriteBW, strings.Fields("-b --report-both --run_infinitely -D 2 -l 4 -T 0x68 --tclass 8 --out_json --out_json_file=/tmp/x.json -w 1.5 -y 0.25 host"))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Bidir || !f.ReportBoth || !f.RunInf || f.ReportPeriod() != 2 || f.PostList != 4 || f.CQMod != 4 || f.CQModSet ||
		f.TrafficClass() != 0x68 || !f.OutJSON || f.OutJSONFile != "/tmp/x.json" || !f.LimitBWSet || f.LimitBW != 1.5 ||
		!f.LimitMsgSet || f.LimitMsg != 0.25 || f.PostListNote() == "" {
		t.Errorf("flags %+v", f)
	}
	f, err = ParseFlags(SendBW, strings.Fields("--tclass=96 -l 8 -Q 2 -n 64"))
	if err != nil || f.TrafficClass() != 96 || f.CQMod != 2 || f.PostListNote() != "" || f.OutJSONFile != DefaultJSONFile || f.ReportPeriod() != DefaultReportPeriod {
		t.Errorf("flags %+v, %v", f, err)
	}
}

func TestFormatNewOutput(t *testing.T) {
	ti := TestInfo{Test: SendBW, Server: true, Device: "rxe0", NumQPs: 1, Transport: "IB", PCIeRelax: true, TxDepth: 128,
		RxDepth: 512, CQMod: 100, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1, Duplex: true, PostList: 2}
	info := FormatTestInfo(ti)
	for _, want := range []string{"                    Send Bidirectional Post List BW Test\n",
		" ibv_wr* API     : OFF\n TX depth        : 128\n Post List       : 2\n RX depth        : 512\n CQ Moderation   : 100\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("test information lacks %q:\n%s", want, info)
		}
	}
	my := BWReport{Size: 65536, Iters: 1000, BWPeak: 10, BWAvg: 9, MsgRateAvg: 0.5}
	rem := BWReport{Size: 65536, Iters: 1000, BWPeak: 1, BWAvg: 2, MsgRateAvg: 0.25}
	if got, want := FormatBWSum(my, rem, false), FormatBWReport(BWReport{Size: 65536, Iters: 1000, BWPeak: 11, BWAvg: 11, MsgRateAvg: 0.75}, false); got != want {
		t.Errorf("sum %q, want %q", got, want)
	}
	// inc_accuracy follows our own average, not the sum.
	if got := FormatBWSum(BWReport{Size: 2, Iters: 5, BWAvg: 0.05}, BWReport{BWAvg: 0.2}, true); !strings.Contains(got, "0.250000") {
		t.Errorf("six decimals expected: %q", got)
	}
	samples := []float64{3, 1.5, 2, 1234567, 0.00001}
	got := FormatLatSamples(samples, true, true)
	want := "#, usec\n1, 3\n2, 1.5\n3, 2\n4, 1.23457e+06\n5, 1e-05\n#, usec\n1, 1e-05\n2, 1.5\n3, 2\n" + ResultLine + LatHeader
	if got != want {
		t.Errorf("raw latency output %q, want %q", got, want)
	}
	if FormatLatSamples(samples, false, false) != "" {
		t.Error("output without -U/-H")
	}
	js := FormatJSONBW(ti, SumBW(my, rem), false)
	if !strings.HasPrefix(js, "{\n\"test_info\": {\n\"test\": \"Send_Bidirectional_Post_List_BW_Test\",\n") ||
		!strings.HasSuffix(js, "\"results\": {\n\"MsgSize\": 65536,\n\"n_iterations\": 1000,\n\"BW_peak\": 11.00,\n\"BW_average\": 11.00,\n\"MsgRate\": 0.750000\n}\n}\n") {
		t.Errorf("JSON %s", js)
	}
	var v map[string]map[string]any
	if err := json.Unmarshal([]byte(js), &v); err != nil || v["test_info"]["RX_depth"] != 512.0 || v["test_info"]["Post_List"] != 2.0 {
		t.Errorf("JSON %v, %v", v, err)
	}
	lj := FormatJSONLat(TestInfo{Test: ReadLat, MTU: MTU1024, GIDIndex: 1}, LatReport{Size: 2, Iters: 10, Percentile999: 3.256})
	if err := json.Unmarshal([]byte(lj), &v); err != nil || v["results"]["percentile_99.9"] != 3.26 || v["test_info"]["test"] != "RDMA_Read_Latency_Test" {
		t.Errorf("latency JSON %v, %v\n%s", v, err, lj)
	}
	r := NewBWReportFactor(1024, 1000, time.Second, 2, false)
	if r.Size != 1024 || r.MsgRateAvg != 0.002 || math.Abs(r.BWAvg-2048000.0/(1<<20)) > 1e-9 {
		t.Errorf("infinite duplex report %+v", r)
	}
}
