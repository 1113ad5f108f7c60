package dump

import (
	"sort"
	"time"

	"github.com/goroce/goroce/wire"
)

// request replays the request packet at idx: a new PSN (perhaps opening
// a gap), a fill of an open gap, or a retransmission (see the model in
// analysis_trace.go); bad-ICRC copies and the path's duplicates are noted
// as such.
func (tr *trace) request(idx int) {
	e := &tr.evs[idx]
	tr.note(idx)
	if e.bad {
		tr.badICRC++
		tr.badReq = idx
		if tr.badAt == nil {
			tr.badAt = map[wire.PSN]int{}
		}
		tr.badAt[e.psn] = idx
		tr.mark(idx, markICRC, e.psn, 1)
		a := newAnomaly(KindICRC, idx, uint32(e.psn), uint32(e.psn), e.no)
		a.text = "ICRC failure on " + e.op.String() + " psn " + itoa(int(e.psn)) + " (got " + hex32(e.icrc) + ", want " +
			hex32(e.want) + "): corrupted on the path; the responder drops it"
		tr.add(a)
		return
	}
	tr.reqPkts++
	prevPkt := tr.lastPkt
	tr.lastPkt, tr.lastReq = idx, idx
	p := e.psn
	span := uint32(1)
	if e.op.IsRead() {
		span = tr.readSpan(e.dmaLen)
	}
	if !tr.started {
		tr.started = true
		tr.next = p
	}
	d := p.Diff(tr.next)
	switch {
	case d >= 0:
		tr.ep = nil
		if d > 0 {
			g := &gapRange{from: tr.next, to: p, idx: idx}
			tr.gaps = append(tr.gaps, g)
		}
		tr.fresh(idx, span)
		tr.mark(idx, markReq, p, span)
	default:
		st := tr.psns[p]
		gap := tr.gapOf(p)
		gapIdx := -1
		if gap != nil {
			gapIdx = gap.idx
			tr.fill(p, span)
		}
		switch {
		case st != nil:
			prev := &tr.evs[st.lastIdx]
			if gap == nil && prev.sum == e.sum && prev.sum != 0 && st.lastIdx == tr.lastReqBefore(idx) &&
				!tr.responseBetween(st.lastIdx, idx) && e.t.Sub(prev.t) < pathDupWindow {
				tr.pathDups++
				tr.ep = nil
				tr.mark(idx, markDup, p, span)
				a := newAnomaly(KindPathDuplicate, idx, uint32(p), uint32(p), prev.no, e.no)
				a.text = e.op.String() + " psn " + itoa(int(p)) + " is a byte-identical copy of #" + itoa(prev.no) +
					": duplicated by the path, not resent by the requester"
				tr.add(a)
				tr.answeredDup(idx, st)
				return
			}
			tr.resend(idx, st.lastIdx, gapIdx, span)
			tr.mark(idx, markRetx, p, span)
			st.lastIdx = idx
			st.oos = tr.holeBefore(p)
			if st.op >= 0 {
				tr.ops[st.op].retx = true
				tr.ops[st.op].gapFlag = false
			}
			tr.answeredDup(idx, st)
			// A READ retried for more PSNs than before moves E.
			if end := p.Add(span); end.After(tr.next) {
				tr.next = end
			}
		case gap != nil:
			if tr.resend(idx, prevPkt, gapIdx, span) == KindReordered {
				tr.mark(idx, markReorder, p, span)
			} else {
				tr.mark(idx, markRetx, p, span)
			}
			tr.filled(idx, span)
		default:
			// Before the capture started: nothing to say.
			tr.ep = nil
		}
	}
}

// pathDupWindow bounds how long after a packet a byte-identical copy of it
// counts as the path's duplicate. A requester resends the same bytes too
// (goroce sends every frame with IPv4 ID 0, so its resends are
// byte-identical), but only after a NAK (a response in between) or its
// timer, which is at least milliseconds (IBTA's smallest practical local
// ACK timeout, 4.096 µs × 2^8 ≈ 1 ms, is below what rxe or goroce use).
const pathDupWindow = 500 * time.Microsecond

// responseBetween reports whether the flow's responder sent anything
// between events a and b.
func (tr *trace) responseBetween(a, b int) bool {
	k := sort.SearchInts(tr.c.resps, a)
	return k < len(tr.c.resps) && tr.c.resps[k] < b
}

// lastReqBefore returns the index of the request of this flow captured
// just before idx (-1 if none).
func (tr *trace) lastReqBefore(idx int) int {
	k := sort.SearchInts(tr.c.reqs, idx)
	for k--; k >= 0; k-- {
		if !tr.evs[tr.c.reqs[k]].bad {
			return tr.c.reqs[k]
		}
	}
	return -1
}

// fresh records a request packet at a PSN the capture has not seen.
func (tr *trace) fresh(idx int, span uint32) {
	e := &tr.evs[idx]
	p := e.psn
	pos := e.op.Info().Pos
	if e.hasRETH || pos == wire.PosFirst || pos == wire.PosOnly || e.atomic || len(tr.curMsg) == 0 {
		tr.msgIdx = idx
		tr.curMsg = tr.curMsg[:0]
	}
	oos := tr.holeBefore(p)
	for k := uint32(0); k < span; k++ {
		q := p.Add(k)
		if _, ok := tr.psns[q]; !ok {
			tr.psns[q] = &psnState{firstIdx: idx, lastIdx: idx, msgIdx: tr.msgIdx, op: -1, payload: e.payload, oos: oos}
		}
	}
	if end := p.Add(span); end.After(tr.next) {
		tr.next = end
	}
	tr.curMsg = append(tr.curMsg, p)
	if pos != wire.PosLast && pos != wire.PosOnly {
		return
	}
	first := tr.curMsg[0]
	if e.hasRETH || e.atomic || pos == wire.PosOnly {
		first = p
	}
	o := operation{class: classOf(e.op), first: first, end: p.Add(span - 1), lastIdx: idx, doneIdx: -1, failIdx: -1, origIdx: -1, answeredIdx: -1}
	if o.class == classRead {
		o.respNext = p
	}
	n := len(tr.ops)
	tr.ops = append(tr.ops, o)
	for _, q := range tr.curMsg {
		if st := tr.psns[q]; st != nil && st.op < 0 {
			st.op = n
		}
	}
	for k := uint32(1); k < span; k++ {
		if st := tr.psns[p.Add(k)]; st != nil && st.op < 0 {
			st.op = n
		}
	}
	tr.curMsg = tr.curMsg[:0]
	tr.pending = append(tr.pending, n)
}

// filled records a request packet that fills a gap: a new operation if it
// ends a message (whose earlier packets are the unassigned PSNs before it),
// else a packet of the operation that its message's later packets belong to.
func (tr *trace) filled(idx int, span uint32) {
	e := &tr.evs[idx]
	p := e.psn
	st := &psnState{firstIdx: idx, lastIdx: idx, msgIdx: idx, op: -1, payload: e.payload, oos: tr.holeBefore(p)}
	for k := uint32(0); k < span; k++ {
		if _, ok := tr.psns[p.Add(k)]; !ok {
			tr.psns[p.Add(k)] = st
		}
	}
	pos := e.op.Info().Pos
	if pos == wire.PosLast || pos == wire.PosOnly {
		first := p
		for k := 0; k < 1<<12 && !e.hasRETH && !e.atomic && pos == wire.PosLast; k++ {
			prev := tr.psns[first.Sub(1)]
			if prev == nil || prev.op >= 0 {
				break
			}
			first = first.Sub(1)
		}
		n := len(tr.ops)
		o := operation{class: classOf(e.op), first: first, end: p.Add(span - 1), lastIdx: idx, doneIdx: -1, failIdx: -1, origIdx: -1, answeredIdx: -1, retx: true}
		if o.class == classRead {
			o.respNext = p
		}
		tr.ops = append(tr.ops, o)
		for q := first; q.Diff(o.end) <= 0; q = q.Add(1) {
			if s := tr.psns[q]; s != nil && s.op < 0 {
				s.op = n
			}
		}
		// Keep pending in PSN order.
		k := sort.Search(len(tr.pending), func(i int) bool { return tr.ops[tr.pending[i]].first.After(first) })
		tr.pending = append(tr.pending, 0)
		copy(tr.pending[k+1:], tr.pending[k:])
		tr.pending[k] = n
		return
	}
	for q, k := p.Add(1), 0; k < 1<<12; q, k = q.Add(1), k+1 {
		if s := tr.psns[q]; s != nil && s.op >= 0 {
			st.op = s.op
			tr.ops[s.op].retx = true
			return
		}
	}
}

// gapOf returns the open gap that holds p, or nil.
func (tr *trace) gapOf(p wire.PSN) *gapRange {
	for _, g := range tr.gaps {
		if p.Diff(g.from) >= 0 && p.Diff(g.to) < 0 {
			return g
		}
	}
	return nil
}

// fill removes p..p+span-1 from the open gaps (interval subtraction).
func (tr *trace) fill(p wire.PSN, span uint32) {
	from, to := p, p.Add(span)
	keep := tr.gaps[:0]
	var extra []*gapRange
	for _, g := range tr.gaps {
		if to.Diff(g.from) <= 0 || from.Diff(g.to) >= 0 { // no overlap
			keep = append(keep, g)
			continue
		}
		if g.from.Before(from) { // a piece before
			if to.Before(g.to) { // and one after
				extra = append(extra, &gapRange{from: to, to: g.to, idx: g.idx, resend: g.resend})
			}
			g.to = from
			keep = append(keep, g)
			continue
		}
		if to.Before(g.to) { // only a piece after
			g.from = to
			keep = append(keep, g)
		}
	}
	tr.gaps = append(keep, extra...)
}

// holeBefore reports whether an open gap starts before p.
func (tr *trace) holeBefore(p wire.PSN) bool {
	for _, g := range tr.gaps {
		if g.from.Before(p) {
			return true
		}
	}
	return false
}

// resend handles a request packet before E: it continues the current
// episode or starts one whose cause is what the capture shows before it.
// gapIdx is the packet that revealed the gap a fill fills (-1: not a fill).
func (tr *trace) resend(idx, prevPkt, gapIdx int, span uint32) string {
	filled := gapIdx >= 0
	e := &tr.evs[idx]
	p := e.psn
	tr.retxPkts++
	if ep := tr.ep; ep != nil && p.Diff(ep.next) >= 0 {
		// The go-back-N resend goes on; PSNs it skipped were lost again
		// before the capture point.
		if p != ep.next {
			tr.gaps = append(tr.gaps, &gapRange{from: ep.next, to: p, idx: idx, resend: true})
		}
		ep.a.Packets = append(ep.a.Packets, e.no)
		ep.a.PSNLast = uint32(p.Add(span - 1))
		ep.next = p.Add(span)
		ep.a.count++
		return KindRetransmission
	}
	a := newAnomaly(KindRetransmission, idx, uint32(p), uint32(p), e.no)
	a.count = 1
	// A resend whose first packet arrived corrupted (just before, a few
	// PSNs back) started there.
	if b := tr.badReq; b >= 0 {
		k := sort.SearchInts(tr.c.reqs, idx)
		if bp := tr.evs[b].psn; k > 0 && tr.c.reqs[k-1] == b && bp.Before(p) && p.Diff(bp) < 64 {
			p = bp
			a.PSN = uint32(bp)
			a.idx = b
			a.Packets = []int{tr.evs[b].no, e.no}
			a.count++
		}
	}
	a.filled = filled
	if filled {
		a.drew = gapIdx
		if b, ok := tr.badAt[p]; ok && b < idx {
			a.corrupt = tr.evs[b].no
		}
	}
	if st := tr.psns[p]; st != nil {
		a.orig = tr.evs[st.firstIdx].no
		a.oos = st.oos && !filled
	}
	a.PSNLast = uint32(p.Add(span - 1))
	switch {
	case tr.prompt(tr.lastSeqNAK, a.idx) && tr.evs[tr.lastSeqNAK].psn == p:
		n := &tr.evs[tr.lastSeqNAK]
		a.Cause, a.cause = CauseSeqNAK, n.no
		a.Packets = append([]int{n.no}, a.Packets...)
		tr.lastSeqNAK = -1
		tr.episodes[0]++
	case tr.lastRNR >= 0 && tr.evs[tr.lastRNR].psn == p:
		n := &tr.evs[tr.lastRNR]
		a.Cause, a.cause = CauseRNRNAK, n.no
		a.Packets = append([]int{n.no}, a.Packets...)
		a.waited = e.t.Sub(n.t)
		a.WaitedUs = ptr(a.waited.Microseconds())
		a.asked = wire.RNRTimerDuration(n.syn.RNRTimer())
		a.rnrCode = n.syn.RNRTimer()
		tr.lastRNR = -1
		tr.episodes[1]++
	case tr.prompt(tr.lastImplicit, a.idx) && p.Diff(tr.implicitPSN) >= 0 && p.Diff(tr.implicitEnd) <= 1:
		// (Just past it: the responses came while the retry was queued,
		// and the requester went back to what followed.)
		n := &tr.evs[tr.lastImplicit]
		a.Cause, a.cause = CauseImplicitNAK, n.no
		a.Packets = append([]int{n.no}, a.Packets...)
		tr.lastImplicit = -1
		tr.episodes[2]++
	case tr.prompt(tr.lastReadGap, a.idx):
		n := &tr.evs[tr.lastReadGap]
		a.Cause, a.cause = CauseReadRespGap, n.no
		a.Packets = append([]int{n.no}, a.Packets...)
		tr.lastReadGap = -1
		tr.episodes[2]++
	case filled && tr.reorderedFill(gapIdx, idx):
		a.Kind = KindReordered
		tr.reorders++
		tr.retxPkts--
	default:
		a.Cause = CauseTimeout
		tr.mark(idx, markTimeout, p, 1)
		tr.lastSeqNAK = -1
		if prevPkt >= 0 {
			a.cause = tr.evs[prevPkt].no
			a.Packets = append([]int{a.cause}, a.Packets...)
			a.waited = e.t.Sub(tr.evs[prevPkt].t)
			a.WaitedUs = ptr(a.waited.Microseconds())
			tr.maxWait = max(tr.maxWait, a.waited)
		}
		tr.episodes[3]++
	}
	// Whatever was pending has been acted on, or was not the cause.
	tr.lastSeqNAK, tr.lastImplicit, tr.lastReadGap = -1, -1, -1
	if a.Cause != CauseRNRNAK && tr.lastRNR >= 0 && tr.evs[tr.lastRNR].psn != p {
		tr.lastRNR = -1
	}
	tr.add(a)
	if a.Kind == KindReordered {
		tr.ep = nil
		return a.Kind
	}
	tr.ep = &episode{a: a, next: p.Add(span)}
	return a.Kind
}

// reorderedFill reports whether a fill came so soon after the packet that
// revealed its gap (gapIdx) that the requester cannot have reacted: no
// response of the connection was captured in between and at most 4 requests
// were. Then the path reordered it.
func (tr *trace) reorderedFill(gapIdx, idx int) bool {
	k := sort.SearchInts(tr.c.resps, gapIdx)
	if k < len(tr.c.resps) && tr.c.resps[k] < idx {
		return false
	}
	return sort.SearchInts(tr.c.reqs, idx)-sort.SearchInts(tr.c.reqs, gapIdx) <= 4
}

// dupGroup is the duplicate requests of one retransmission episode (or
// one path duplicate): PSNs the responder had already answered.
type dupGroup struct {
	a     *anomaly
	ep    *episode
	items []dupItem
}

type dupItem struct {
	psn    wire.PSN
	class  opClass
	idx    int
	origNo int // atomic: the first ATOMIC ACK (packet number)
	answer int // packet number of the responder's answer, 0 while waiting
}

// answeredDup notes a retransmitted PSN that the responder had already
// answered: it will answer again, and the answer tells how.
func (tr *trace) answeredDup(idx int, st *psnState) {
	e := &tr.evs[idx]
	answered := false
	by := -1
	cls := classOf(e.op)
	if st.op >= 0 {
		o := &tr.ops[st.op]
		cls = o.class
		switch o.class {
		case classRead:
			answered, by = o.answeredIdx >= 0, o.answeredIdx
		case classAtomic:
			answered, by = o.answeredIdx >= 0, o.answeredIdx
		default:
			answered, by = tr.hasAcked && tr.acked.Diff(e.psn) >= 0, tr.ackedIdx
		}
	} else {
		answered, by = tr.hasAcked && tr.acked.Diff(e.psn) >= 0, tr.ackedIdx
	}
	if !answered {
		return
	}
	tr.dupReqs++
	if tr.ep != nil && tr.ep.a.Cause == CauseTimeout {
		tr.timeoutDups++
	}
	it := dupItem{psn: e.psn, class: cls, idx: idx}
	if cls == classAtomic && st.op >= 0 && tr.ops[st.op].origIdx >= 0 {
		it.origNo = tr.evs[tr.ops[st.op].origIdx].no
	}
	g := tr.curDup
	if g == nil || g.ep == nil || g.ep != tr.ep {
		a := tr.add(newAnomaly(KindDuplicate, idx, uint32(e.psn), uint32(e.psn)))
		if by >= 0 {
			a.cause = tr.evs[by].no
		}
		g = &dupGroup{a: a, ep: tr.ep}
		tr.curDup = g
		tr.dups = append(tr.dups, g)
	}
	g.items = append(g.items, it)
	g.a.Packets = append(g.a.Packets, e.no)
	if e.psn.After(wire.PSN(g.a.PSNLast)) {
		g.a.PSNLast = uint32(e.psn)
	}
	g.a.dup = g
}
