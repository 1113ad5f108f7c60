package dump

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/wire"
)

// --graph DIR: one SVG per RC request flow, in the spirit of tcptrace's
// time–sequence graphs. The upper panel plots PSN (relative to the flow's
// first request PSN) against time: every request packet as a vertical tick
// over the PSNs it uses, the highest acknowledged PSN as a step line with a
// dot per ACK, READ responses, and the anomalies of analysis.go in their
// own colours and shapes. The lower panel is goodput: payload newly
// acknowledged (SEND, WRITE) or received in READ responses, per time bin.
//
// The SVG is written by hand: it is a few element types with fixed
// attributes, which encoding/xml's escaping covers; no drawing library
// needed. Every mark is an element with a class naming its kind (req,
// retx, timeout, reorder, dup, ack, readresp, seqnak, rnr, nak, icrc), and
// the anomalies carry a <title> (a tooltip in browsers) with the packet
// number. The styles are in an internal <style> element; there is no script
// and nothing external.

var markClass = [numMarks]string{"req", "retx", "timeout", "reorder", "dup", "ack", "readresp", "seqnak", "rnr", "nak", "icrc"}

var markLegend = [numMarks]string{
	"request packet", "retransmitted request", "timeout (resend with no NAK)", "reordered (arrived late)",
	"duplicated by the path", "ACK", "READ response", "PSN sequence NAK", "RNR NAK", "error NAK", "ICRC failure",
}

const graphStyle = `
text { font-family: sans-serif; font-size: 12px; fill: #222; }
.title { font-size: 14px; font-weight: bold; }
.axis { stroke: #222; stroke-width: 1; fill: none; }
.grid { stroke: #ddd; stroke-width: 1; }
.req { stroke: #1f4e9c; stroke-width: 1.5; }
.retx { stroke: #d62728; stroke-width: 2.5; }
.timeout { fill: none; stroke: #ff7f0e; stroke-width: 2; }
.reorder { stroke: #17becf; stroke-width: 2.5; }
.dup { stroke: #8c564b; stroke-width: 2.5; }
.ackline { stroke: #2ca02c; stroke-width: 1.5; fill: none; }
.ack { fill: #2ca02c; }
.readresp { fill: #9467bd; }
.seqnak { fill: #ff7f0e; }
.rnr { fill: #e377c2; }
.nak { fill: #000; }
.icrc { stroke: #bcbd22; stroke-width: 2.5; }
.goodput { stroke: #1f4e9c; stroke-width: 1.5; fill: #1f4e9c; fill-opacity: 0.15; }
`

// Layout (pixels).
const (
	gW        = 1060
	gH        = 720
	gLeft     = 80
	gRight    = 290 // legend column
	gTop      = 40
	gSeqH     = 420
	gGoodTop  = gTop + gSeqH + 70
	gGoodH    = 130
	gPlotW    = gW - gLeft - gRight
	goodBins  = 50
	maxTitles = 2000 // tooltips on plain request/ACK marks up to this many packets
)

// timeUnit picks the time axis unit for a span.
func timeUnit(span time.Duration) (time.Duration, string) {
	switch {
	case span < 2*time.Millisecond:
		return time.Microsecond, "µs"
	case span < 2*time.Second:
		return time.Millisecond, "ms"
	}
	return time.Second, "s"
}

// niceStep returns a round tick step (1, 2, 5 × 10^k) for about n ticks
// over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// graphName is the file name for a flow: SRC_to_DST_qpDQPN.svg, with the
// colons of IPv6 addresses replaced.
func graphName(k flowKey) string {
	clean := func(s string) string { return strings.NewReplacer(":", "-", "%", "-").Replace(s) }
	return fmt.Sprintf("%s_to_%s_qp%#x.svg", clean(k.src.String()), clean(k.dst.String()), k.dqpn)
}

func (d *Dumper) writeGraphs(traces []*trace) ([]string, error) {
	if err := os.MkdirAll(d.opts.GraphDir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, tr := range traces {
		if tr.reqPkts+tr.respPkts+tr.badICRC < 2 {
			continue
		}
		path := filepath.Join(d.opts.GraphDir, graphName(tr.c.req))
		if err := os.WriteFile(path, tr.svg(), 0o644); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// svg draws the trace.
func (tr *trace) svg() []byte {
	var b bytes.Buffer
	k := tr.c.req
	t0, t1 := tr.firstT, tr.lastT
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Microsecond
	}
	unit, uname := timeUnit(span)
	tmax := float64(span) / float64(unit)
	x := func(t time.Time) float64 { return gLeft + float64(t.Sub(t0))/float64(span)*gPlotW }

	// PSN range, relative to the first request PSN.
	var base wire.PSN
	for _, m := range tr.marks {
		if m.kind == markReq || m.kind == markRetx || m.kind == markReorder {
			base = m.psn
			break
		}
	}
	// The range covers the marks of packets whose ICRC was good: a
	// corrupted PSN is drawn at the edge of the plot.
	lo, hi := int32(0), int32(1)
	for _, m := range tr.marks {
		if m.kind == markICRC {
			continue
		}
		r := m.psn.Diff(base)
		lo = min(lo, r)
		hi = max(hi, r+int32(max(m.span, 1)))
	}
	y := func(r float64) float64 { return gTop + gSeqH - (r-float64(lo))/float64(hi-lo)*gSeqH }

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", gW, gH, gW, gH)
	fmt.Fprintf(&b, "<style>%s</style>\n", graphStyle)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>`+"\n", gW, gH)
	title := fmt.Sprintf("%s > %s dest QP %#x", k.src, k.dst, k.dqpn)
	if tr.c.hasResp {
		title += fmt.Sprintf(" (responses to QP %#x)", tr.c.resp.dqpn)
	}
	fmt.Fprintf(&b, `<text class="title" x="%d" y="22">%s: time–sequence</text>`+"\n", gLeft, esc(title))

	// Axes and grid.
	axis := func(top, h int, ylabel string, ymin, ymax float64, yfmt func(float64) string) {
		fmt.Fprintf(&b, `<g class="axes">`+"\n")
		step := niceStep(tmax, 8)
		for v := 0.0; v <= tmax+step/1e6; v += step {
			px := gLeft + v/tmax*gPlotW
			fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", px, top, px, top+h)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, top+h+16, fmtNum(v))
		}
		ys := niceStep(ymax-ymin, 6)
		for v := math.Ceil(ymin/ys) * ys; v <= ymax+ys/1e6; v += ys {
			py := float64(top+h) - (v-ymin)/(ymax-ymin)*float64(h)
			fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", gLeft, py, gLeft+gPlotW, py)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", gLeft-6, py+4, yfmt(v))
		}
		fmt.Fprintf(&b, `<rect class="axis" x="%d" y="%d" width="%d" height="%d"/>`+"\n", gLeft, top, gPlotW, h)
		fmt.Fprintf(&b, `<text class="xlabel" x="%d" y="%d" text-anchor="middle">time since the flow's first packet (%s)</text>`+"\n",
			gLeft+gPlotW/2, top+h+34, uname)
		fmt.Fprintf(&b, `<text class="ylabel" transform="translate(%d,%d) rotate(-90)" text-anchor="middle">%s</text>`+"\n",
			18, top+h/2, esc(ylabel))
		b.WriteString("</g>\n")
	}
	axis(gTop, gSeqH, fmt.Sprintf("PSN − %d (the first request PSN)", base), float64(lo), float64(hi), fmtNum)

	// Counts per kind for the legend, and whether plain marks get titles.
	var counts [numMarks]int
	for _, m := range tr.marks {
		counts[m.kind]++
	}
	titles := len(tr.marks) <= maxTitles

	// The ACK step line.
	var pts []string
	var acked int32
	have := false
	for _, m := range tr.marks {
		if m.kind != markAck && !(m.kind == markReadResp && tr.evs[m.idx].hasAETH) {
			continue
		}
		r := m.psn.Diff(base) + 1 // an ACK at P covers P: draw at its top
		px := x(tr.evs[m.idx].t)
		if have && r > acked {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, y(float64(acked))))
		}
		if !have || r > acked {
			acked, have = r, true
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, y(float64(acked))))
	}
	if len(pts) > 0 {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", float64(gLeft+gPlotW), y(float64(acked))))
		fmt.Fprintf(&b, `<polyline class="ackline" points="%s"/>`+"\n", strings.Join(pts, " "))
	}

	b.WriteString(`<g class="marks">` + "\n")
	for _, m := range tr.marks {
		e := &tr.evs[m.idx]
		px := x(e.t)
		r := float64(m.psn.Diff(base))
		if m.kind == markICRC {
			r = min(max(r, float64(lo)), float64(hi)-1)
		}
		cls := markClass[m.kind]
		tip := ""
		if titles || (m.kind != markReq && m.kind != markAck && m.kind != markReadResp) {
			what := e.op.String()
			if m.kind == markTimeout {
				what = "timeout before " + what
			}
			tip = fmt.Sprintf("<title>#%d %s psn %d t=%s %s</title>", e.no, what, e.psn, fmtNum(math.Round(float64(e.t.Sub(t0))/float64(unit)*1000)/1000), uname)
		}
		elem := func(format string, a ...any) {
			s := fmt.Sprintf(format, a...)
			if tip == "" {
				b.WriteString(s + "/>\n")
			} else {
				b.WriteString(s + ">" + tip + "</" + s[1:strings.IndexByte(s, ' ')] + ">\n")
			}
		}
		switch m.kind {
		case markReq, markRetx, markReorder, markDup:
			y1, y2 := y(r), y(r+float64(max(m.span, 1)))
			if y1-y2 < 3 {
				y2 = y1 - 3
			}
			elem(`<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"`, cls, px, y1, px, y2)
		case markICRC:
			yy := y(r + 0.5)
			elem(`<path class="%s" d="M%.1f %.1fl8 8m0 -8l-8 8"`, cls, px-4, yy-4)
		case markTimeout:
			elem(`<circle class="%s" cx="%.1f" cy="%.1f" r="7"`, cls, px, y(r+0.5))
		case markAck:
			elem(`<circle class="%s" cx="%.1f" cy="%.1f" r="2"`, cls, px, y(r+1))
		case markReadResp:
			elem(`<circle class="%s" cx="%.1f" cy="%.1f" r="2.5"`, cls, px, y(r+0.5))
		case markSeqNAK:
			yy := y(r)
			elem(`<path class="%s" d="M%.1f %.1fl6 10h-12z"`, cls, px, yy)
		case markRNR:
			yy := y(r)
			elem(`<rect class="%s" x="%.1f" y="%.1f" width="9" height="9"`, cls, px-4.5, yy-4.5)
		case markNAK:
			yy := y(r)
			elem(`<path class="%s" d="M%.1f %.1fl6 6l-6 6l-6 -6z"`, cls, px, yy-6)
		}
	}
	b.WriteString("</g>\n")

	// Legend.
	lx := gLeft + gPlotW + 20
	fmt.Fprintf(&b, `<g class="legend">`+"\n")
	for i := markKind(0); i < numMarks; i++ {
		ly := gTop + 10 + int(i)*22
		cls := markClass[i]
		switch i {
		case markReq, markRetx, markReorder, markDup:
			fmt.Fprintf(&b, `<line class="%s" x1="%d" y1="%d" x2="%d" y2="%d"/>`, cls, lx+5, ly+6, lx+5, ly-6)
		case markICRC:
			fmt.Fprintf(&b, `<path class="%s" d="M%d %dl8 8m0 -8l-8 8"/>`, cls, lx+1, ly-4)
		case markTimeout:
			fmt.Fprintf(&b, `<circle class="%s" cx="%d" cy="%d" r="6"/>`, cls, lx+5, ly)
		case markAck:
			fmt.Fprintf(&b, `<line class="ackline" x1="%d" y1="%d" x2="%d" y2="%d"/><circle class="%s" cx="%d" cy="%d" r="2"/>`,
				lx-2, ly, lx+12, ly, cls, lx+5, ly)
		case markReadResp:
			fmt.Fprintf(&b, `<circle class="%s" cx="%d" cy="%d" r="2.5"/>`, cls, lx+5, ly)
		case markSeqNAK:
			fmt.Fprintf(&b, `<path class="%s" d="M%d %dl6 10h-12z"/>`, cls, lx+5, ly-5)
		case markRNR:
			fmt.Fprintf(&b, `<rect class="%s" x="%d" y="%d" width="9" height="9"/>`, cls, lx+1, ly-4)
		case markNAK:
			fmt.Fprintf(&b, `<path class="%s" d="M%d %dl6 6l-6 6l-6 -6z"/>`, cls, lx+5, ly-6)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s (%d)</text>`+"\n", lx+20, ly+4, esc(markLegend[i]), counts[i])
	}
	b.WriteString("</g>\n")

	// Goodput panel.
	binDur := span / goodBins
	if binDur <= 0 {
		binDur = 1
	}
	var bins [goodBins]float64
	for _, g := range tr.good {
		i := int(tr.evs[g.idx].t.Sub(t0) / binDur)
		bins[min(max(i, 0), goodBins-1)] += float64(g.bytes)
	}
	peak := 0.0
	for i := range bins {
		bins[i] = bins[i] * 8 / binDur.Seconds() // bit/s
		peak = max(peak, bins[i])
	}
	scale, sname := 1e6, "Mbit/s"
	switch {
	case peak >= 2e9:
		scale, sname = 1e9, "Gbit/s"
	case peak < 2e6:
		scale, sname = 1e3, "kbit/s"
	}
	top := peak / scale
	if top <= 0 {
		top = 1
	}
	fmt.Fprintf(&b, `<text class="title" x="%d" y="%d">goodput: payload acknowledged or read, %s per %s bin (total %s in %s)</text>`+"\n",
		gLeft, gGoodTop-10, sname, esc(dur(binDur)), esc(byteCount(tr.goodBytes)), esc(dur(span)))
	axis(gGoodTop, gGoodH, sname, 0, top, fmtNum)
	gp := []string{fmt.Sprintf("%d,%d", gLeft, gGoodTop+gGoodH)}
	for i, v := range bins {
		x0 := gLeft + float64(i)/goodBins*gPlotW
		x1 := gLeft + float64(i+1)/goodBins*gPlotW
		py := float64(gGoodTop+gGoodH) - v/scale/top*gGoodH
		gp = append(gp, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x0, py, x1, py))
	}
	gp = append(gp, fmt.Sprintf("%d,%d", gLeft+gPlotW, gGoodTop+gGoodH))
	fmt.Fprintf(&b, `<polygon class="goodput" points="%s"/>`+"\n", strings.Join(gp, " "))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func byteCount(n int64) string {
	switch {
	case n >= 10<<20:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 10<<10:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
