//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// unit formats one value of a metric.
type unit func(float64) string

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtGbit(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.0f Mbit/s", v*1e3)
	}
	return fmt.Sprintf("%.2f Gbit/s", v)
}

func fmtMicros(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f ms", v/1000)
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f µs", v)
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

func fmtBytes(v float64) string {
	switch {
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}

// fmtStat is "median (min–max)", or the median alone for one repetition
// or no spread.
func fmtStat(s stat, u unit) string {
	med := u(s.med)
	if s.n < 2 {
		return med
	}
	lo, hi := u(s.min), u(s.max)
	if lo == hi {
		return med + fmt.Sprintf(" (n=%d)", s.n)
	}
	// Drop a shared unit suffix from the range: "5.1 (4.9–5.3) Gbit/s".
	if i := strings.LastIndexByte(med, ' '); i > 0 {
		suf := med[i:]
		if strings.HasSuffix(lo, suf) && strings.HasSuffix(hi, suf) {
			return fmt.Sprintf("%s (%s–%s)%s", med[:i], strings.TrimSuffix(lo, suf), strings.TrimSuffix(hi, suf), suf)
		}
	}
	return fmt.Sprintf("%s (%s–%s)", med, lo, hi)
}

// cell formats k for a table: the summary, the error, or "–".
func (r *results) cell(k key, u unit) string {
	s, err := r.get(k)
	switch {
	case err == nil:
		return fmtStat(s, u)
	case errors.Is(err, errNotMeasured):
		return "–"
	}
	return "error: " + shortErr(err)
}

func (r *results) ratioCell(a, b key) string {
	v, ok := r.ratio(a, b)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// shortErr keeps table cells readable: the first line, at most 80 bytes,
// without the pipe characters of markdown.
func shortErr(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// runInfo is the report's header.
type runInfo struct {
	command        string
	start          time.Time
	elapsed        time.Duration
	load0, load1   string
	machine        machineState
	cell           time.Duration
	reps           int
	iperf3         string // path, or "" when not installed
	qpsN, qpsDepth int
	mqQPs          int
	qpsCQMod       int
	idle           time.Duration
	latPeer        string
	bwPeer         string
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// writeReport prints the whole markdown document.
func writeReport(w io.Writer, r *results, in runInfo) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# goroce bench\n\n")
	p("```\n%s\n```\n\n", in.command)
	p("- %s UTC, %v; every cell ≤ %v and bounded in count, %d repetition(s): values are median (min–max), ratios are of medians\n",
		in.start.UTC().Format("2006-01-02 15:04"), in.elapsed.Round(time.Second), in.cell, in.reps)
	m := in.machine
	p("- Linux %s, %s, %d CPUs, GOMAXPROCS %d, %s\n", m.kernel, m.cpuModel, m.cpus, m.maxprocs, m.goVersion)
	p("- load average before %s, after %s\n", in.load0, in.load1)
	ip := "not installed"
	if in.iperf3 != "" {
		ip = in.iperf3
	}
	p("- iperf3: %s\n", ip)
	switch in.latPeer {
	case "process":
		p("- round trips: the far end (write_lat's server, the TCP echo) in a process of its own\n")
	case "goroutine":
		p("- round trips: both ends in this process (-lat-peer goroutine)\n")
	}
	switch in.bwPeer {
	case "process":
		p("- bw: the responder (device B) in a process of its own, as ib_write_bw's server; CPU over both processes; the sender waits with -bw-wait %s\n", bwWait)
	case "goroutine":
		p("- bw: both ends in this process (-bw-peer goroutine); the sender waits with -bw-wait %s\n", bwWait)
	}
	p("\n")

	for _, s := range r.sections {
		writeSection(w, r, s)
	}
	writeQPs(w, r, in)
	writeMQ(w, r, in)
	writeIdle(w, r, in)
	writeRsock(w, r)
	writeNVMe(w, r)
	writeHeldAck(w, r)
	writeSyscalls(w, r)
	writeTargets(w, r)
}

type rowSpec struct {
	what              string
	raw, tcp, goroce  string // metric names ("" for none)
	rawU, tcpU, groU  unit
	vsRaw, vsTCP      bool
	skipWithoutGoroce bool
}

func writeSection(w io.Writer, r *results, s section) {
	b, mtu := s.backend, s.mtu
	rows := []rowSpec{}
	for _, op := range []string{"WRITE", "READ"} {
		rows = append(rows, rowSpec{what: fmt.Sprintf("64 B %s, msg/s · raw: one-way 64 B WRITE frames/s", op),
			raw: mRawSmallFPS, goroce: fmt.Sprintf("%s%s.%d.mps", bwPrefix, op, sizeSmall), rawU: fmtRate, groU: fmtRate, vsRaw: true})
		for _, size := range []int{sizeMid, sizeLarge} {
			rows = append(rows, rowSpec{what: fmt.Sprintf("%s %s goodput · raw: path-MTU frames' payload", sizeName(size), op),
				raw: mRawFullGbps, tcp: mTCPGbps, goroce: fmt.Sprintf("%s%s.%d.gbps", bwPrefix, op, size),
				rawU: fmtGbit, tcpU: fmtGbit, groU: fmtGbit, vsRaw: true, vsTCP: true})
		}
	}
	rows = append(rows,
		rowSpec{what: "TCP: iperf3, one stream", tcp: mIperfGbps, tcpU: fmtGbit},
		rowSpec{what: "busy CPU-s per GB, whole machine (goroce: 64 KiB WRITE)", raw: mRawCPUGB, tcp: mTCPCPUGB,
			goroce: bwPrefix + "WRITE.65536.cpugb", rawU: fmtNum, tcpU: fmtNum, groU: fmtNum, vsRaw: true, vsTCP: true},
		rowSpec{what: "process CPU-s per GB (goroce: 64 KiB WRITE)", raw: mRawProcGB, tcp: mTCPProcGB,
			goroce: bwPrefix + "WRITE.65536.procgb", rawU: fmtNum, tcpU: fmtNum, groU: fmtNum, vsRaw: true, vsTCP: true},
		rowSpec{what: "goodput per busy CPU-s, Gbit (goroce: 64 KiB WRITE)", raw: mRawGbPerCPU, tcp: mTCPGbPerCPU,
			goroce: bwPrefix + "WRITE.65536.gbpcpu", rawU: fmtNum, tcpU: fmtNum, groU: fmtNum, vsRaw: true, vsTCP: true},
		rowSpec{what: "heap allocations per message, 64 B WRITE", goroce: bwPrefix + "WRITE.64.allocs", groU: fmtNum},
		rowSpec{what: "heap allocations per message, 64 KiB WRITE", goroce: bwPrefix + "WRITE.65536.allocs", groU: fmtNum},
	)
	for _, q := range []string{"p50", "mean", "p99"} {
		rows = append(rows, rowSpec{what: "8 B WRITE round trip, busy-poll, " + q + " · raw: busy 1-frame ping-pong; TCP: sleeping 64 B ping-pong",
			raw: latRaw + "." + q, tcp: latTCP + "." + q, goroce: latBusy + "." + q,
			rawU: fmtMicros, tcpU: fmtMicros, groU: fmtMicros, vsRaw: true, vsTCP: true, skipWithoutGoroce: true})
	}
	rows = append(rows, rowSpec{what: "8 B WRITE round trip, busy-poll, p50 · raw: busy ping-pong, 2 frames each way in one kick (write_lat's frames: a WRITE and the ACK of the peer's)",
		raw: latRaw2 + ".p50", goroce: latBusy + ".p50", rawU: fmtMicros, groU: fmtMicros, vsRaw: true, skipWithoutGoroce: true})
	for _, pl := range r.placements {
		for _, q := range []string{"p50", "mean", "p99"} {
			rows = append(rows, rowSpec{what: "8 B WRITE round trip, sleeping, " + pl.name + " (" + pl.describe() + "), " + q + " · raw: sleeping 1-frame ping-pong; TCP: sleeping 64 B ping-pong",
				raw: latRawSleep + pl.suffix() + "." + q, tcp: latTCP + pl.suffix() + "." + q, goroce: latSleep + pl.suffix() + "." + q,
				rawU: fmtMicros, tcpU: fmtMicros, groU: fmtMicros, vsRaw: true, vsTCP: true, skipWithoutGoroce: true})
		}
		rows = append(rows, rowSpec{what: "8 B WRITE round trip, sleeping, " + pl.name + ", p50 · raw: sleeping ping-pong, 2 frames each way in one batch, answered once both are in",
			raw: latRawSleep2 + pl.suffix() + ".p50", goroce: latSleep + pl.suffix() + ".p50", rawU: fmtMicros, groU: fmtMicros, vsRaw: true, skipWithoutGoroce: true})
	}

	var lines []string
	for _, rs := range rows {
		rk, tk, gk := key{b, mtu, rs.raw}, key{"tcp", mtu, rs.tcp}, key{b, mtu, rs.goroce}
		rawC, tcpC, groC := "–", "–", "–"
		if rs.raw != "" {
			rawC = r.cell(rk, rs.rawU)
		}
		if rs.tcp != "" {
			tcpC = r.cell(tk, rs.tcpU)
		}
		if rs.goroce != "" {
			groC = r.cell(gk, rs.groU)
		}
		if groC == "–" && (rs.skipWithoutGoroce || rs.goroce != "") {
			continue
		}
		if rawC == "–" && tcpC == "–" && groC == "–" {
			continue
		}
		vr, vt := "–", "–"
		if rs.vsRaw && rs.raw != "" {
			vr = r.ratioCell(gk, rk)
		}
		if rs.vsTCP && rs.tcp != "" {
			vt = r.ratioCell(gk, tk)
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s |", rs.what, rawC, tcpC, groC, vr, vt))
	}
	mode := s.mode
	if mode == "" {
		mode = "?"
	}
	if len(lines) == 0 {
		// The raw rates alone (the rawrate cell): only their comparison
		// with the reference, if it ran.
		var buf strings.Builder
		writeRawref(&buf, r, b, mtu)
		if buf.Len() > 0 {
			fmt.Fprintf(w, "## %s (%s), MTU %d, path MTU %d\n\n%s", b, mode, mtu, s.pmtu, buf.String())
		}
		return
	}
	fmt.Fprintf(w, "## %s (%s), MTU %d, path MTU %d\n\n", b, mode, mtu, s.pmtu)
	fmt.Fprintln(w, "| measure | raw backend | TCP, same veth | goroce | goroce/raw | goroce/TCP |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	if fl, err := r.get(key{b, mtu, mRawSmallLen}); err == nil {
		ff, _ := r.get(key{b, mtu, mRawFullLen})
		fmt.Fprintf(w, "Raw frames: %.0f bytes (a 64 B WRITE ONLY) and %.0f bytes (a path-MTU WRITE ONLY).\n\n", fl.med, ff.med)
	}
	writeRawref(w, r, b, mtu)
}

func writeQPs(w io.Writer, r *results, in runInfo) {
	var lines []string
	for _, s := range r.sections {
		agg := key{s.backend, s.mtu, mQPsAgg}
		if _, err := r.get(agg); errors.Is(err, errNotMeasured) {
			continue
		}
		one := key{s.backend, s.mtu, mQPsOne}
		lines = append(lines, fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s |", s.backend, s.mtu, r.cell(agg, fmtRate),
			r.cell(one, fmtRate), r.ratioCell(agg, one), r.cell(key{s.backend, s.mtu, mQPsHeap}, fmtBytes),
			r.cell(key{s.backend, s.mtu, mQPsLink}, fmtBytes)))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "## %d QPs on one device pair\n\n", in.qpsN)
	fmt.Fprintf(w, "Round-robin 64 B WRITEs, each QP at most %d outstanding, one signalled per %d; "+
		"one QP: tx-depth 128, cq-mod 100, on the same devices, whose receive rings hold the %d frames in flight "+
		"(%s). Heap per QP: runtime.MemStats.HeapAlloc after GC, "+
		"before and after creating and connecting the QPs on both devices, over 2×%d QPs. Link memory per QP: one "+
		"device's mapped rings (AF_XDP UMEM and its four rings, AF_PACKET's receive ring; the UDP backend's socket "+
		"buffers are the kernel's) over its %d QPs.\n\n", in.qpsDepth, in.qpsCQMod, in.qpsN*in.qpsDepth,
		qpsRings(in.qpsN*in.qpsDepth), in.qpsN, in.qpsN)
	fmt.Fprintln(w, "| backend | MTU | aggregate msg/s | one QP msg/s | aggregate/one | heap per QP | link memory per QP |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func writeIdle(w io.Writer, r *results, in runInfo) {
	var lines []string
	for _, s := range r.sections {
		k := key{s.backend, s.mtu, mIdleProc}
		if _, err := r.get(k); errors.Is(err, errNotMeasured) {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %s | %s |", s.backend, s.mtu, r.cell(k, fmtNum),
			r.cell(key{s.backend, s.mtu, mIdleMachine}, fmtNum)))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "## Idle devices\n\nTwo opened, connected, idle devices (sleeping mode, one RC QP pair) for %v: CPU-seconds per second.\n\n", in.idle)
	fmt.Fprintln(w, "| backend | MTU | this process (getrusage) | whole machine, everyone's |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func writeSyscalls(w io.Writer, r *results) {
	var lines []string
	for _, s := range r.sections {
		g, t := key{s.backend, s.mtu, mSysGoroce}, key{"tcp", s.mtu, mSysTCP}
		if _, err := r.get(g); errors.Is(err, errNotMeasured) {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s |", s.backend, s.mtu, r.cell(g, fmtNum), r.cell(t, fmtNum),
			r.ratioCell(g, t), orDash(r.notes[g]), orDash(r.notes[t])))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "## System calls per sleeping round trip")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "`strace -f -c -p` attached to the client process (its peer runs in another, untraced) for the timed loop only: "+
		"goroce's 8 B WRITE round trip in sleeping mode, and the Go TCP 64 B ping-pong; calls per round trip.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| backend | MTU | goroce | TCP | goroce/TCP | goroce's largest | TCP's largest |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// target is one of issue 10's goals evaluated for one backend.
type target struct {
	n        string
	what     string
	backend  string
	measured string
	goal     string
	met      string
}

func verdict(ok, known bool) string {
	switch {
	case !known:
		return "–"
	case ok:
		return "yes"
	}
	return "no"
}

func targets(r *results) []target {
	var out []target
	x := func(v float64) string { return fmt.Sprintf("%.2f×", v) }
	for _, s := range r.sections {
		if s.mtu != 1500 {
			continue
		}
		b, m := s.backend, s.mtu
		for _, pl := range r.placements {
			g, t := latSleep+pl.suffix(), latTCP+pl.suffix()
			if mean, ok1 := r.ratio(latKey(b, m, g, "mean"), latKey("tcp", m, t, "mean")); ok1 {
				p99, ok2 := r.ratio(latKey(b, m, g, "p99"), latKey("tcp", m, t, "p99"))
				meas := "mean " + x(mean)
				if ok2 {
					meas += ", p99 " + x(p99)
				}
				out = append(out, target{"1", "sleeping 8 B WRITE RTT vs Go TCP ping-pong, " + pl.name + " placement", b, meas, "mean, p99 ≤ 1.0×", verdict(mean <= 1 && p99 <= 1, ok2)})
			}
		}
		if v, ok := r.ratio(latKey(b, m, latBusy, "p50"), latKey(b, m, latRaw, "p50")); ok {
			out = append(out, target{"2", "busy-poll RTT p50 vs raw busy ping-pong", b, x(v), "≤ 1.5×", verdict(v <= 1.5, true)})
		}
		if v, ok := r.ratio(bwKey(b, m, "WRITE", 64, "mps"), key{b, m, mRawSmallFPS}); ok {
			out = append(out, target{"3", "64 B WRITE msg rate vs raw frame rate", b, x(v), "≥ 0.6×", verdict(v >= 0.6, true)})
		}
		wr, ok1 := r.ratio(bwKey(b, m, "WRITE", sizeLarge, "gbps"), key{b, m, mRawFullGbps})
		rd, ok2 := r.ratio(bwKey(b, m, "READ", sizeLarge, "gbps"), key{b, m, mRawFullGbps})
		if ok1 || ok2 {
			meas := ""
			if ok1 {
				meas = "WRITE " + x(wr)
			}
			if ok2 {
				meas = strings.TrimPrefix(meas+", READ "+x(rd), ", ")
			}
			out = append(out, target{"4", "64 KiB WRITE and READ goodput vs raw payload goodput", b, meas, "≥ 0.9×",
				verdict(wr >= 0.9 && rd >= 0.9, ok1 && ok2)})
		}
		if v, ok := r.ratio(bwKey(b, m, "WRITE", sizeLarge, "gbpcpu"), key{b, m, mRawGbPerCPU}); ok {
			out = append(out, target{"5", "goodput per busy CPU-s (sleeping) vs raw's", b, x(v), "≥ 0.8×", verdict(v >= 0.8, true)})
		}
	}
	// 6: MTU 9000.
	if s, ok := r.section("afxdp", 9000); ok && s.pmtu > 0 {
		out = append(out, target{"6", "AF_XDP path MTU at MTU 9000", "afxdp", fmt.Sprint(s.pmtu), "4096", verdict(s.pmtu >= 4096, true)})
	}
	best, bestB, found := 0.0, "", false
	for _, s := range r.sections {
		if s.mtu != 9000 {
			continue
		}
		if v, ok := r.ratio(bwKey(s.backend, 9000, "WRITE", sizeLarge, "gbps"), key{"tcp", 9000, mTCPGbps}); ok && (!found || v > best) {
			best, bestB, found = v, s.backend, true
		}
	}
	if found {
		out = append(out, target{"6", "MTU 9000, 64 KiB WRITE vs one TCP stream (best backend)", bestB, x(best), "≥ 1.0×", verdict(best >= 1, true)})
	}
	for _, s := range r.sections {
		b, m := s.backend, s.mtu
		if v, ok := r.ratio(key{b, m, mQPsAgg}, key{b, m, mQPsOne}); ok {
			out = append(out, target{"7", fmt.Sprintf("many-QP aggregate msg rate vs one QP (MTU %d)", m), b, x(v), "≥ 0.8×", verdict(v >= 0.8, true)})
		}
	}
	for _, s := range r.sections {
		b, m := s.backend, s.mtu
		if v, err := r.get(key{b, m, mIdleProc}); err == nil {
			out = append(out, target{"8", "idle pair of devices, CPU-s per s", b, fmtNum(v.med), "≈ 0 (≤ 0.01)", verdict(v.med <= 0.01, true)})
		}
	}
	for _, s := range r.sections {
		b, m := s.backend, s.mtu
		if v, ok := r.ratio(key{b, m, mSysGoroce}, key{"tcp", m, mSysTCP}); ok {
			out = append(out, target{"9", "syscalls per sleeping round trip vs Go TCP's", b, x(v), "≤ 1.0×", verdict(v <= 1, true)})
		}
	}
	return out
}

func writeTargets(w io.Writer, r *results) {
	ts := targets(r)
	slices.SortStableFunc(ts, func(a, b target) int { return strings.Compare(a.n, b.n) })
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(w, "## Targets (issue 10)")
	fmt.Fprintln(w)
	var lines []string
	for _, t := range ts {
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s |", t.n, t.what, t.backend, t.measured, t.goal, t.met))
	}
	writeTable(w, "| # | target | backend | measured | goal | met |", lines)
}

// versusRow is one row of a side-by-side table: measure m against base.
type versusRow struct {
	what, m, base string
	u             unit
}

// writeVersus writes a side-by-side table (heading, intro, the names of
// the two measures' and the ratio's columns) for every section in which rows' first measure was tried; a row
// whose measure was never tried is left out, a failed one shows its error.
func writeVersus(w io.Writer, r *results, heading, intro, cols string, rows []versusRow) {
	var lines []string
	for _, s := range r.sections {
		k := func(m string) key { return key{s.backend, s.mtu, m} }
		if _, err := r.get(k(rows[0].m)); errors.Is(err, errNotMeasured) {
			continue
		}
		for _, row := range rows {
			if _, err := r.get(k(row.m)); errors.Is(err, errNotMeasured) {
				continue
			}
			lines = append(lines, fmt.Sprintf("| %s | %d | %s | %s | %s | %s |", s.backend, s.mtu, row.what,
				r.cell(k(row.m), row.u), r.cell(k(row.base), row.u), r.ratioCell(k(row.m), k(row.base))))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "## %s\n\n%s\n\n", heading, intro)
	fmt.Fprintf(w, "| backend | MTU | measure | %s |\n", cols)
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

// writeRsock is the rsock cell's table: rsock against Go TCP, measured side
// by side on the same veth.
func writeRsock(w io.Writer, r *results) {
	rows := []versusRow{
		{"one stream, 64 KiB writes, Gbit/s", mRsockStream + ".gbps", mRsockTCP + ".gbps", fmtGbit},
		{"busy CPU-s per GB, whole machine", mRsockStream + ".cpugb", mRsockTCP + ".cpugb", fmtNum},
		{"process CPU-s per GB", mRsockStream + ".procgb", mRsockTCP + ".procgb", fmtNum},
		{"process + kernel threads' CPU-s per GB (the machine's busy time without other tenants)", mRsockStream + ".kprocgb", mRsockTCP + ".kprocgb", fmtNum},
		{"one stream, rsock with rstream's 1 MiB buffers, Gbit/s", mRsockBig + ".gbps", mRsockTCP + ".gbps", fmtGbit},
		{"busy CPU-s per GB, whole machine, 1 MiB buffers", mRsockBig + ".cpugb", mRsockTCP + ".cpugb", fmtNum},
		{"process CPU-s per GB, 1 MiB buffers", mRsockBig + ".procgb", mRsockTCP + ".procgb", fmtNum},
		{"process + kernel threads' CPU-s per GB, 1 MiB buffers", mRsockBig + ".kprocgb", mRsockTCP + ".kprocgb", fmtNum},
		{"this process's context switches per MB, stream", mRsockStream + ".cswmb", mRsockTCP + ".cswmb", fmtNum},
		{"this process's context switches per MB, stream, 1 MiB buffers", mRsockBig + ".cswmb", mRsockTCP + ".cswmb", fmtNum},
	}
	for _, pl := range r.placements {
		for _, q := range []string{"p50", "mean", "p99"} {
			rows = append(rows, versusRow{"64 B request/response, µs, " + q + ", " + pl.name + " (" + pl.describe() + ")",
				mRsockRTT + pl.suffix() + "." + q, mRsockTCPRTT + pl.suffix() + "." + q, fmtMicros})
		}
		rows = append(rows,
			versusRow{"64 B request/response, this end's CPU µs per round trip, " + pl.name, mRsockRTT + pl.suffix() + ".cpu", mRsockTCPRTT + pl.suffix() + ".cpu", fmtNum},
			versusRow{"64 B request/response, this end's context switches per round trip, " + pl.name, mRsockRTT + pl.suffix() + ".csw", mRsockTCPRTT + pl.suffix() + ".csw", fmtNum})
	}
	rows = append(rows, versusRow{"HTTP/1.1 GETs per second (one connection, 64 B body)", mRsockHTTP, mRsockTCPWeb, fmtRate},
		versusRow{"HTTP/1.1 GET, process CPU µs per request (both ends)", mRsockHTTP + ".cpu", mRsockTCPWeb + ".cpu", fmtNum},
		versusRow{"HTTP/1.1 GET, context switches per request (both ends)", mRsockHTTP + ".csw", mRsockTCPWeb + ".csw", fmtNum})
	writeVersus(w, r, "rsock against Go TCP", "rsock (package rsock: rsockets over goroce) and the kernel's TCP through Go's net package, "+
		"each measured in the same cell on the same veth. The streams and HTTP run both ends in this process (goroutines); "+
		"the round trips' echo runs in a process of its own in namespace B (-lat-peer process; with goroutine, in this "+
		"process), placed as -placements says, TCP's and rsock's alike.", "rsock | Go TCP | rsock/TCP", rows)
}

// writeRawref compares the raw cell's frame rates with the reference
// sender's at the same frame lengths (-rawref), when it ran.
func writeRawref(w io.Writer, r *results, b string, mtu int) {
	var lines []string
	for _, m := range []struct{ what, raw, ref, flen string }{
		{"64 B WRITE frames", mRawSmallFPS, mRawRefSmallFPS, mRawSmallLen},
		{"path-MTU WRITE frames", mRawFullFPS, mRawRefFullFPS, mRawFullLen},
	} {
		rk, fk := key{b, mtu, m.raw}, key{b, mtu, m.ref}
		if _, err := r.get(fk); errors.Is(err, errNotMeasured) {
			continue
		}
		fl, _ := r.get(key{b, mtu, m.flen})
		rc, fc := key{b, mtu, m.raw + ".cpu"}, key{b, mtu, m.ref + ".cpu"}
		lines = append(lines, fmt.Sprintf("| %s (%.0f bytes) | %s | %s | %s | %s | %s | %s |", m.what, fl.med,
			r.cell(rk, fmtRate), r.cell(fk, fmtRate), r.ratioCell(rk, fk),
			r.cell(rc, fmtNum), r.cell(fc, fmtNum), r.ratioCell(rc, fc)))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "The raw cell against the raw AF_XDP reference sender (-rawref: copy mode, 256 descriptors per kick, PSN and ICRC per frame), each right after the other, frames per second at the same frame length:")
	fmt.Fprintln(w)
	writeTable(w, "| frames | raw cell (nic link), frames/s | reference, frames/s | raw cell/reference | raw cell, CPU µs per frame (sender + receiver processes) | reference, CPU µs per frame (sender + receiver processes) | raw cell/reference |", lines)
}

// writeTable writes a markdown table: the header row, its separator, the
// rows, and a blank line.
func writeTable(w io.Writer, header string, rows []string) {
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, "|"+strings.Repeat("---|", strings.Count(header, "|")-1))
	for _, l := range rows {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}
