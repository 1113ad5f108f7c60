package dump

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// runBytes dumps a capture held in memory with opts (UTC, MTU inferred
// like DumpFile does).
func runBytes(t testing.TB, capture []byte, opts Options) (string, Summary) {
	t.Helper()
	f := t.TempDir() + "/c.pcap"
	if err := writeFile(f, capture); err != nil {
		t.Fatal(err)
	}
	opts.Location = time.UTC
	var out bytes.Buffer
	s, err := DumpFile(f, &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), s
}

func ns(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// The latencies of a capture built at exact times (mixedCapture).
func TestLatencyExact(t *testing.T) {
	s := mixedCapture(t)
	out, sum := runBytes(t, s.pcap(), Options{Latency: true})
	type want struct {
		class                     string
		count, retx, naked, unans int
		min, p50, p90, p99, max   int64 // µs
	}
	wants := []want{
		{"SEND", 3, 1, 0, 1, 10, 27, 810, 810, 810},
		{"WRITE", 1, 0, 1, 0, 28, 28, 28, 28, 28},
		{"READ", 1, 0, 0, 0, 20, 20, 20, 20, 20},
		{"ATOMIC", 1, 0, 0, 0, 30, 30, 30, 30, 30},
	}
	if len(sum.Latency) != len(wants) {
		t.Fatalf("latency rows %+v\n%s", sum.Latency, out)
	}
	for i, w := range wants {
		r := sum.Latency[i]
		us := int64(time.Microsecond)
		if r.Src != "198.18.0.1" || r.Dst != "198.18.0.2" || r.DQPN != 0x11 || r.Class != w.class || r.Count != w.count ||
			r.Retransmitted != w.retx || r.NAKed != w.naked || r.Unanswered != w.unans ||
			ns(r.MinNs) != w.min*us || ns(r.P50Ns) != w.p50*us || ns(r.P90Ns) != w.p90*us || ns(r.P99Ns) != w.p99*us || ns(r.MaxNs) != w.max*us {
			t.Errorf("row %d: %+v min %d p50 %d p90 %d p99 %d max %d, want %+v", i, r, ns(r.MinNs), ns(r.P50Ns), ns(r.P90Ns), ns(r.P99Ns), ns(r.MaxNs), w)
		}
	}
	for _, line := range []string{
		"  flow                               class   count  retx   nak  unans       min       p50       p90       p99       max",
		"  198.18.0.1 > 198.18.0.2 dqpn 0x11  SEND        3     1     0      1      10.0      27.0     810.0     810.0     810.0",
		"  198.18.0.1 > 198.18.0.2 dqpn 0x11  WRITE       1     0     1      0      28.0      28.0      28.0      28.0      28.0",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("text output lacks\n%q\n%s", line, out)
		}
	}
	// No packet lines: --latency implies -q.
	if strings.Contains(out, "icrc=ok") {
		t.Errorf("packet lines printed with Latency:\n%s", out)
	}

	// JSON: the summary object carries the same rows.
	jout, _ := runBytes(t, s.pcap(), Options{Latency: true, JSON: true})
	var js Summary
	lines := strings.Split(strings.TrimSpace(jout), "\n")
	if len(lines) != 1 {
		t.Fatalf("JSON with Latency: %d lines, want only the summary", len(lines))
	}
	if err := json.Unmarshal([]byte(lines[0]), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Latency) != 4 || ns(js.Latency[0].P50Ns) != 27000 || js.Latency[3].Class != "ATOMIC" {
		t.Fatalf("JSON latency %+v", js.Latency)
	}
	if !strings.Contains(lines[0], `"p50_ns":27000`) || !strings.Contains(lines[0], `"unanswered":1`) {
		t.Fatalf("JSON field names: %s", lines[0])
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for _, c := range []struct{ p, want int }{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {1, 1}} {
		if got := percentile(s, c.p); got != time.Duration(c.want) {
			t.Errorf("p%d of 1..100 = %d, want %d", c.p, got, c.want)
		}
	}
	if got := percentile(s[:1], 99); got != 1 {
		t.Errorf("p99 of one sample = %d", got)
	}
}

// The real rxe captures: every operation of every flow has completion
// evidence, counts match what the tools ran, and the times are plausible.
func TestLatencyRXE(t *testing.T) {
	for _, c := range []struct {
		file  string
		class string
		ops   int // per request flow
		flows int
	}{
		{"rc_pingpong_small.pcap", "SEND", 50, 2},
		{"rc_pingpong.pcap", "SEND", 50, 2},
		{"send_bw_small.pcap", "SEND", 100, 1},
		{"write_lat.pcap", "WRITE", 100, 2},
		{"write_bw_gbits_small.pcap", "WRITE", 200, 1},
		{"write_bw_4k.pcap", "WRITE", 20, 1},
		{"read_bw_small.pcap", "READ", 100, 1},
		{"read_bw_4k.pcap", "READ", 20, 1},
		{"atomic_fadd.pcap", "ATOMIC", 100, 1},
		{"atomic_cas.pcap", "ATOMIC", 100, 1},
	} {
		t.Run(c.file, func(t *testing.T) {
			_, s := dumpFileUTC(t, rxeDir+c.file, Options{Latency: true})
			if len(s.Latency) != c.flows {
				t.Fatalf("%d rows, want %d: %+v", len(s.Latency), c.flows, s.Latency)
			}
			for _, r := range s.Latency {
				if r.Class != c.class || r.Count != c.ops || r.NAKed != 0 || r.Unanswered != 0 {
					t.Errorf("row %+v, want %d %s operations all answered", r, c.ops, c.class)
				}
				mn, p50, p90, p99, mx := ns(r.MinNs), ns(r.P50Ns), ns(r.P90Ns), ns(r.P99Ns), ns(r.MaxNs)
				if !(0 < mn && mn <= p50 && p50 <= p90 && p90 <= p99 && p99 <= mx && mx < int64(time.Second)) {
					t.Errorf("row %+v: times not ordered or implausible: %d %d %d %d %d", r, mn, p50, p90, p99, mx)
				}
			}
		})
	}
	// rping: SEND both ways, and WRITE and READ from the server.
	_, s := dumpFileUTC(t, rxeDir+"rping.pcap", Options{Latency: true})
	got := map[string]int{}
	for _, r := range s.Latency {
		got[r.Src+" "+r.Class] += r.Count
	}
	if got["198.18.0.12 SEND"] != 10 || got["198.18.0.11 SEND"] != 10 || got["198.18.0.11 WRITE"] != 5 || got["198.18.0.11 READ"] != 5 {
		t.Fatalf("rping latency rows %v", got)
	}
}
