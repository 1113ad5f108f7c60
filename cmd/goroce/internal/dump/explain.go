package dump

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/wire"
)

// --explain: the anomalies the requester model (analysis.go) found, one
// line each in capture order with the packet numbers they rest on, and a
// verdict per flow.

// anomaly is one line of --explain as the requester model finds it: the
// line as the JSON schema has it (dumpjson.Anomaly), and what the model
// knows to render its text.
type anomaly struct {
	dumpjson.Anomaly

	idx         int // event index it is anchored on (len(evs): the end of the capture)
	text        string
	count       int
	orig        int // packet number: the first transmission, or the first ATOMIC ACK
	cause       int // packet number of the cause (NAK) or the packet before the wait
	waited      time.Duration
	asked       time.Duration
	rnrCode     uint8
	drew        int // event index of the request that drew a NAK (-1: not captured)
	nak         wire.NAKCode
	msg         int // event index of the message's RETH packet (-1: unknown)
	dup         *dupGroup
	atomicTwice []string
	ackedPast   bool
	filled      bool
	oos         bool
	corrupt     int // packet number of a bad-ICRC copy of the filled PSN
}

// newAnomaly is an anomaly of kind over the PSNs first to last, anchored on
// event idx, resting on packets (frame numbers).
func newAnomaly(kind string, idx int, first, last uint32, packets ...int) *anomaly {
	return &anomaly{Anomaly: dumpjson.Anomaly{Kind: kind, PSN: first, PSNLast: last, Packets: packets}, idx: idx}
}

// Verdict is one flow's paragraph of --explain (dumpjson.Verdict).
type Verdict = dumpjson.Verdict

func psnRange(a, b uint32) string {
	if a == b {
		return "PSN " + strconv.FormatUint(uint64(a), 10)
	}
	return "PSN " + strconv.FormatUint(uint64(a), 10) + ".." + strconv.FormatUint(uint64(b), 10)
}

func pktList(nos []int) string {
	if len(nos) == 1 {
		return "#" + itoa(nos[0])
	}
	contiguous := true
	for i := 1; i < len(nos); i++ {
		if nos[i] != nos[i-1]+1 {
			contiguous = false
			break
		}
	}
	if contiguous {
		return "#" + itoa(nos[0]) + "-#" + itoa(nos[len(nos)-1])
	}
	if len(nos) > 8 {
		return "#" + itoa(nos[0]) + " … #" + itoa(nos[len(nos)-1])
	}
	var b strings.Builder
	for i, n := range nos {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("#" + itoa(n))
	}
	return b.String()
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + " s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) + " ms"
	}
	return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + " µs"
}

// reqText describes the request packet at event i: opcode, PSN and its
// RETH or AtomicETH (taken from msg, the message's first packet, if given).
func (tr *trace) reqText(i, msg int) string {
	e := &tr.evs[i]
	s := e.op.String() + " #" + itoa(e.no) + " psn " + itoa(int(e.psn))
	m := e
	if msg >= 0 && !e.hasRETH && !e.atomic {
		m = &tr.evs[msg]
	}
	switch {
	case m.hasRETH:
		s += " (rkey " + hex32(m.rkey) + " va " + string(appendHex(nil, m.va)) + " len " + itoa(int(m.dmaLen))
		if m != e {
			s += ", from #" + itoa(m.no)
		}
		s += ")"
	case m.atomic:
		s += " (rkey " + hex32(m.rkey) + " va " + string(appendHex(nil, m.va))
		if m.va%8 != 0 {
			s += ", not 8-byte aligned"
		}
		s += ")"
	}
	return s
}

// nakCause is the probable cause of a NAK code, from IBTA 9.7.5.2.
func nakCause(c wire.NAKCode, req *ev) string {
	switch c {
	case wire.NAKRemoteAccessError:
		return "the R_Key is not valid for the responder's QP, the access falls outside the region, or the region lacks the permission; the requester's QP goes to the error state"
	case wire.NAKInvalidRequest:
		if req != nil && req.atomic && req.va%8 != 0 {
			return "the atomic's address is not 8-byte aligned; the requester's QP goes to the error state"
		}
		return "the responder rejected the request as malformed or unsupported (an opcode it does not accept, a length that disagrees with the packets, a misaligned atomic, a READ larger than it allows, or a message larger than the receive buffer); the requester's QP goes to the error state"
	case wire.NAKRemoteOperationalError:
		return "the responder could not carry out a valid request (a local error on its side); the requester's QP goes to the error state"
	case wire.NAKInvalidRDRequest:
		return "an RD request on an RC QP; the requester's QP goes to the error state"
	}
	return "a reserved NAK code"
}

// render builds the text of a.
func (tr *trace) render(a *anomaly) string {
	switch a.Kind {
	case KindICRC, KindPathDuplicate:
		return a.text
	case KindRetransmission:
		what := "retransmission of " + psnRange(a.PSN, a.PSNLast) + " (" + plural(a.count, "packet", "packets")
		if a.orig > 0 && a.orig != a.cause {
			what += ", first sent #" + itoa(a.orig)
		}
		what += ")"
		switch a.Cause {
		case CauseSeqNAK:
			s := what + " after sequence NAK #" + itoa(a.cause)
			switch {
			case a.filled && a.corrupt > 0:
				s += ": PSN " + itoa(int(a.PSN)) + " arrived with a bad ICRC (#" + itoa(a.corrupt) + ") and was dropped"
			case a.filled:
				s += ": PSN " + itoa(int(a.PSN)) + " never reached the capture point (lost before it)"
			case a.oos:
				s += ": PSN " + itoa(int(a.PSN)) + " passed the capture point behind a lost PSN (the responder discarded it as out of sequence)"
			default:
				s += ": PSN " + itoa(int(a.PSN)) + " passed the capture point, so it was lost after it"
			}
			return s
		case CauseRNRNAK:
			return what + " after RNR NAK #" + itoa(a.cause) + ": waited " + dur(a.waited) + " (the NAK asked for timer " +
				itoa(int(a.rnrCode)) + " = " + dur(a.asked) + ")"
		case CauseImplicitNAK:
			return what + " after ACK #" + itoa(a.cause) + " passed the READ/atomic at PSN " + itoa(int(a.PSN)) +
				" before its responses came: an implicit NAK, the requester retries it"
		case CauseReadRespGap:
			return what + " after READ responses went missing (#" + itoa(a.cause) + " skipped PSNs): the requester went back to the READ"
		}
		s := what + " after a timeout (no NAK before it)"
		switch {
		case a.cause > 0 && a.filled:
			s += ": the requester waited " + dur(a.waited) + " after #" + itoa(a.cause) + ", the last packet of the connection; PSN " +
				itoa(int(a.PSN)) + " never reached the capture point"
		case a.cause > 0:
			s += ": the requester waited " + dur(a.waited) + " after #" + itoa(a.cause) + ", its previous transmission"
		}
		return s
	case KindReordered:
		s := psnRange(a.PSN, a.PSNLast) + " arrived late"
		if a.drew >= 0 {
			s += ", after #" + itoa(tr.evs[a.drew].no) + " (psn " + itoa(int(tr.evs[a.drew].psn)) + ")"
		}
		return s + ", with no NAK or timeout in between: reordered on the path"
	case KindDuplicate:
		return tr.renderDup(a)
	case KindGap:
		s := psnRange(a.PSN, a.PSNLast) + " never seen (gap revealed by #" + itoa(a.Packets[0]) + ")"
		if a.ackedPast {
			return s + ": the responder acknowledged past it, so the packets reached it: the capture missed them"
		}
		return s + ": lost before the capture point and never resent"
	case KindSeqNAK:
		s := "sequence NAK: the responder expected PSN " + itoa(int(a.PSN))
		if a.drew >= 0 {
			s += " but received " + tr.evs[a.drew].op.String() + " #" + itoa(tr.evs[a.drew].no) + " psn " + itoa(int(tr.evs[a.drew].psn))
		}
		return s
	case KindNAK:
		s := "NAK " + a.nak.String() + " for "
		var req *ev
		if a.drew >= 0 {
			s += tr.reqText(a.drew, a.msg)
			req = &tr.evs[a.drew]
		} else {
			s += "PSN " + itoa(int(a.PSN)) + " (request not captured)"
		}
		return s + ": " + nakCause(a.nak, req)
	case KindRNRNAK:
		s := "RNR NAK for "
		if a.drew >= 0 {
			s += tr.reqText(a.drew, -1)
		} else {
			s += "PSN " + itoa(int(a.PSN))
		}
		return s + ": the responder had no receive posted; it asks the requester to wait timer " + itoa(int(a.rnrCode)) +
			" = " + dur(a.asked)
	case KindReadRespGap:
		return "READ responses skip " + psnRange(a.PSN, a.PSNLast) + " (next seen #" + itoa(a.Packets[0]) + "): lost before the capture point"
	case KindUnacked:
		s := "the flow ended with " + plural(a.count, "operation", "operations") + " unacknowledged (" + psnRange(a.PSN, a.PSNLast) +
			"; last request #" + itoa(a.Packets[0])
		if len(a.Packets) > 1 {
			s += ", last packet #" + itoa(a.Packets[1])
		}
		return s + ")"
	}
	return a.Kind
}

// renderDup describes a duplicate-request group and the responder's
// answers, by class.
func (tr *trace) renderDup(a *anomaly) string {
	g := a.dup
	one := len(g.items) == 1
	it, them := "it", "them"
	if one {
		them = it
	}
	s := "duplicate request"
	if !one {
		s += "s"
	}
	s += " " + psnRange(a.PSN, a.PSNLast) + " ("
	if !one {
		s += itoa(len(g.items)) + " packets, "
	}
	s += pktList(a.Packets) + "): the responder had already answered " + them
	if a.cause > 0 {
		s += " (#" + itoa(a.cause) + ")"
	}
	var acks, reads, atomics []int
	waiting := 0
	seen := map[int]bool{}
	for _, x := range g.items {
		switch {
		case x.answer == 0:
			waiting++
		case seen[x.answer]:
		case x.class == classRead:
			reads = append(reads, x.answer)
		case x.class == classAtomic:
			atomics = append(atomics, x.answer)
		default:
			acks = append(acks, x.answer)
		}
		if x.answer != 0 {
			seen[x.answer] = true
		}
	}
	var parts []string
	if len(acks) > 0 {
		p := "re-ACKed " + them + " ("
		if len(acks) > 1 {
			p += itoa(len(acks)) + " ACKs, "
		}
		parts = append(parts, p+pktList(acks)+")")
	}
	if len(reads) > 0 {
		parts = append(parts, "replayed "+plural(len(reads), "READ", "READs")+" ("+pktList(reads)+")")
	}
	if len(atomics) > 0 {
		if len(a.atomicTwice) > 0 {
			parts = append(parts, "answered "+plural(len(atomics), "atomic", "atomics")+" with a different original value ("+
				strings.Join(a.atomicTwice, "; ")+"): executed twice?")
		} else {
			parts = append(parts, "answered "+plural(len(atomics), "atomic", "atomics")+" from its history, with the same original value ("+pktList(atomics)+")")
		}
	}
	if len(parts) > 0 {
		s += "; it " + strings.Join(parts, ", ")
	}
	if waiting > 0 {
		s += "; " + itoa(waiting) + " not answered in the capture"
	}
	return s
}

// dupAnswers are the answer packet numbers of a duplicate group.
func dupAnswers(g *dupGroup) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range g.items {
		if x.answer != 0 && !seen[x.answer] {
			seen[x.answer] = true
			out = append(out, x.answer)
		}
	}
	return out
}

// verdict is the paragraph for one request flow.
func (tr *trace) verdict() Verdict {
	k := tr.c.req
	v := Verdict{Src: k.src.String(), Dst: k.dst.String(), DQPN: k.dqpn, Operations: len(tr.ops)}
	if tr.c.hasResp {
		v.RespDQPN = ptr(tr.c.resp.dqpn)
	}
	var byClass [numClasses]int
	for i := range tr.ops {
		o := &tr.ops[i]
		byClass[o.class]++
		switch {
		case o.doneIdx >= 0:
			v.Completed++
		case o.failIdx >= 0:
			v.Failed++
		default:
			v.Unanswered++
		}
	}
	for _, a := range tr.anoms {
		if a.Kind != KindSeqNAK { // counted with the retransmission it caused
			v.Anomalies++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s > %s dqpn %#x", v.Src, v.Dst, v.DQPN)
	if v.RespDQPN != nil {
		fmt.Fprintf(&b, " (responses to qpn %#x)", *v.RespDQPN)
	}
	fmt.Fprintf(&b, ": %s, %s", plural(tr.reqPkts, "request packet", "request packets"), plural(len(tr.ops), "operation", "operations"))
	var parts []string
	for c := opClass(0); c < numClasses; c++ {
		if byClass[c] > 0 {
			parts = append(parts, itoa(byClass[c])+" "+c.String())
		}
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, ", ") + ")")
	}
	if span := tr.lastT.Sub(tr.firstT); span > 0 {
		b.WriteString(" in " + dur(span))
	}
	fmt.Fprintf(&b, "; %d completed, %d failed, %d without an answer.", v.Completed, v.Failed, v.Unanswered)
	eps := tr.episodes[0] + tr.episodes[1] + tr.episodes[2] + tr.episodes[3]
	if eps > 0 {
		fmt.Fprintf(&b, " %s (%s):", plural(eps, "retransmission episode", "retransmission episodes"), plural(tr.retxPkts, "packet", "packets"))
		var c []string
		if n := tr.episodes[0]; n > 0 {
			c = append(c, itoa(n)+" after a sequence NAK")
		}
		if n := tr.episodes[1]; n > 0 {
			c = append(c, itoa(n)+" after an RNR NAK")
		}
		if n := tr.episodes[2]; n > 0 {
			c = append(c, itoa(n)+" after missing READ/atomic responses")
		}
		if n := tr.episodes[3]; n > 0 {
			c = append(c, itoa(n)+" after a timeout (longest wait "+dur(tr.maxWait)+")")
		}
		b.WriteString(" " + strings.Join(c, ", ") + ".")
	}
	var extra []string
	if tr.seqNAKs > 0 {
		extra = append(extra, plural(tr.seqNAKs, "sequence NAK", "sequence NAKs"))
	}
	if tr.rnrNAKs > 0 {
		extra = append(extra, plural(tr.rnrNAKs, "RNR NAK", "RNR NAKs"))
	}
	if tr.otherNAKs > 0 {
		extra = append(extra, plural(tr.otherNAKs, "error NAK", "error NAKs"))
	}
	if tr.dupReqs > 0 {
		extra = append(extra, plural(tr.dupReqs, "duplicate request", "duplicate requests"))
	}
	if tr.pathDups > 0 {
		extra = append(extra, plural(tr.pathDups, "packet duplicated by the path", "packets duplicated by the path"))
	}
	if tr.reorders > 0 {
		extra = append(extra, plural(tr.reorders, "reordered packet", "reordered packets"))
	}
	if tr.badICRC > 0 {
		extra = append(extra, plural(tr.badICRC, "ICRC failure", "ICRC failures"))
	}
	gaps := 0
	for _, a := range tr.anoms {
		if a.Kind == KindGap {
			gaps++
		}
	}
	if gaps > 0 {
		extra = append(extra, plural(gaps, "gap never filled", "gaps never filled"))
	}
	if len(extra) > 0 {
		b.WriteString(" " + strings.Join(extra, ", ") + ".")
	}
	// Probable cause.
	var cause []string
	switch {
	case !tr.c.hasResp:
		cause = append(cause, "no responses were captured for this flow: only one direction was captured, or the responder never answered")
	case v.Anomalies == 0:
		cause = append(cause, "clean: no loss, no retransmission, every operation answered")
	}
	if tr.episodes[0]+tr.episodes[2]+gaps > 0 {
		cause = append(cause, "packet loss on the path (the sequence NAKs and gaps show where)")
	}
	if tr.episodes[3] > 0 && tr.timeoutDups > 0 {
		cause = append(cause, "lost or late acknowledgements: the requester timed out and resent requests the responder had already answered")
	} else if tr.episodes[3] > 0 {
		cause = append(cause, "loss the responder could not NAK (a lost last packet or a lost response), recovered by the requester's timer")
	}
	if tr.rnrNAKs > 0 {
		cause = append(cause, "the receiver did not post receives fast enough (RNR)")
	}
	if tr.otherNAKs > 0 {
		cause = append(cause, "the responder rejected a request (see the NAK line); the QP is in error after it")
	}
	if tr.badICRC > 0 {
		cause = append(cause, "corruption on the path (ICRC failures)")
	}
	if tr.pathDups+tr.reorders > 0 {
		cause = append(cause, "a path that duplicates or reorders packets")
	}
	if v.Unanswered > 0 && tr.c.hasResp {
		cause = append(cause, "operations were still outstanding when the capture ended (it stopped early, or the peer went silent)")
	}
	if len(cause) > 0 {
		b.WriteString(" Probable cause: " + strings.Join(cause, "; ") + ".")
	}
	v.Text = b.String()
	return v
}

// explainResult is what --explain reports.
type explainResult struct {
	anomalies []dumpjson.Anomaly
	verdicts  []Verdict
}

func (d *Dumper) explain(traces []*trace) explainResult {
	type item struct {
		tr *trace
		a  *anomaly
	}
	var items []item
	for _, tr := range traces {
		for _, a := range tr.anoms {
			items = append(items, item{tr, a})
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].a.idx < items[j].a.idx })
	var first time.Time
	if len(d.evs) > 0 {
		first = d.stats.first
	}
	var r explainResult
	for _, it := range items {
		a := it.a
		k := it.tr.c.req
		a.Src, a.Dst, a.DQPN = k.src.String(), k.dst.String(), k.dqpn
		var t time.Time
		if a.idx < len(d.evs) {
			t = d.evs[a.idx].t
			a.Packet = d.evs[a.idx].no
		} else {
			t = it.tr.lastT
		}
		if !t.IsZero() {
			a.Time = t.In(d.opts.Location).Format(time.RFC3339Nano)
			a.Offset = strconv.FormatFloat(t.Sub(first).Seconds(), 'f', 6, 64)
		}
		a.Text = it.tr.render(a)
		if a.dup != nil {
			a.Packets = append(a.Packets, dupAnswers(a.dup)...)
		}
		r.anomalies = append(r.anomalies, a.Anomaly)
	}
	for _, tr := range traces {
		r.verdicts = append(r.verdicts, tr.verdict())
	}
	return r
}

func writeExplainText(b *strings.Builder, anoms []dumpjson.Anomaly, verdicts []Verdict) {
	flows := map[string]bool{}
	for _, a := range anoms {
		flows[a.Src+a.Dst+itoa(int(a.DQPN))] = true
	}
	fmt.Fprintf(b, "explain: %s (in capture order; #N is the packet number, t the seconds since the first packet):\n",
		plural(len(anoms), "anomaly", "anomalies"))
	for _, a := range anoms {
		b.WriteString("  ")
		if a.Packet > 0 {
			fmt.Fprintf(b, "%-7s", "#"+itoa(a.Packet))
		} else {
			fmt.Fprintf(b, "%-7s", "end")
		}
		if a.Offset != "" {
			b.WriteString("t=" + a.Offset + " ")
		}
		if len(flows) > 1 {
			fmt.Fprintf(b, "[%s>%s %#x] ", a.Src, a.Dst, a.DQPN)
		}
		b.WriteString(a.Text)
		b.WriteByte('\n')
	}
	if len(verdicts) > 0 {
		b.WriteString("verdict:\n")
	}
	for _, v := range verdicts {
		b.WriteString(wrap(v.Text, 100, "  ", "    "))
	}
}

// wrap breaks s into lines of at most width bytes.
func wrap(s string, width int, first, rest string) string {
	var b strings.Builder
	line := first
	for _, w := range strings.Fields(s) {
		if len(line)+1+len(w) > width && strings.TrimSpace(line) != "" {
			b.WriteString(line + "\n")
			line = rest
		}
		if strings.TrimSpace(line) != "" {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}
