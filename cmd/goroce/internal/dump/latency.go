package dump

import (
	"fmt"
	"github.com/goroce/goroce/internal/dumpjson"
	"slices"
	"strconv"
	"strings"
	"time"
)

// --latency: per request flow and operation class, the time from an
// operation's last request packet (its first transmission in the capture)
// to its completion evidence (analysis.go), as the capture point saw it.
// Captured near the requester this is the round trip plus the responder's
// time; near the responder it is mostly the responder's time.
//
// Percentiles are nearest-rank: the p-th percentile of n sorted samples is
// sample ceil(p/100·n) (1-based), so every reported value is one that was
// measured.

// LatencyStats is one row of --latency (dumpjson.LatencyStats).
type LatencyStats = dumpjson.LatencyStats

// percentile returns the nearest-rank p-th percentile of sorted samples.
func percentile(sorted []time.Duration, p int) time.Duration {
	k := (p*len(sorted) + 99) / 100
	return sorted[max(k, 1)-1]
}

func latencyOf(tr *trace) []LatencyStats {
	var samples [numClasses][]time.Duration
	var rows [numClasses]LatencyStats
	var used [numClasses]bool
	for i := range tr.ops {
		o := &tr.ops[i]
		r := &rows[o.class]
		used[o.class] = true
		switch {
		case o.doneIdx >= 0:
			samples[o.class] = append(samples[o.class], tr.evs[o.doneIdx].t.Sub(tr.evs[o.lastIdx].t))
			r.Count++
			if o.retx {
				r.Retransmitted++
			}
		case o.failIdx >= 0:
			r.NAKed++
		default:
			r.Unanswered++
		}
	}
	var out []LatencyStats
	k := tr.c.req
	for c := opClass(0); c < numClasses; c++ {
		if !used[c] {
			continue
		}
		r := rows[c]
		r.Src, r.Dst, r.DQPN, r.Class = k.src.String(), k.dst.String(), k.dqpn, c.String()
		if s := samples[c]; len(s) > 0 {
			slices.Sort(s)
			r.MinNs, r.MaxNs = ptr(int64(s[0])), ptr(int64(s[len(s)-1]))
			r.P50Ns, r.P90Ns, r.P99Ns = ptr(int64(percentile(s, 50))), ptr(int64(percentile(s, 90))), ptr(int64(percentile(s, 99)))
		}
		out = append(out, r)
	}
	return out
}

func usText(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(float64(*p)/1e3, 'f', 1, 64)
}

func writeLatencyText(b *strings.Builder, rows []LatencyStats) {
	b.WriteString("latency (last request packet → completion evidence, µs; retx: samples with a resent packet):\n")
	if len(rows) == 0 {
		b.WriteString("  no RC operations\n")
		return
	}
	flow := func(r *LatencyStats) string { return fmt.Sprintf("%s > %s dqpn %#x", r.Src, r.Dst, r.DQPN) }
	w := len("flow")
	for i := range rows {
		w = max(w, len(flow(&rows[i])))
	}
	fmt.Fprintf(b, "  %-*s  %-6s %6s %5s %5s %6s %9s %9s %9s %9s %9s\n", w, "flow", "class", "count", "retx", "nak", "unans",
		"min", "p50", "p90", "p99", "max")
	for i := range rows {
		r := &rows[i]
		fmt.Fprintf(b, "  %-*s  %-6s %6d %5d %5d %6d %9s %9s %9s %9s %9s\n", w, flow(r), r.Class, r.Count, r.Retransmitted, r.NAKed,
			r.Unanswered, usText(r.MinNs), usText(r.P50Ns), usText(r.P90Ns), usText(r.P99Ns), usText(r.MaxNs))
	}
}
