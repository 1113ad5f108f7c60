package dump

import (
	"fmt"
	"sort"
	"time"

	"github.com/goroce/goroce/wire"
)

// response replays the response packet at idx: ACKs, NAKs, READ responses
// and atomic ACKs give the operations their completion evidence, the
// duplicates their answers and the retransmissions their causes.
func (tr *trace) response(idx int) {
	e := &tr.evs[idx]
	tr.note(idx)
	if e.bad {
		tr.badICRC++
		tr.mark(idx, markICRC, e.psn, 1)
		a := newAnomaly(KindICRC, idx, uint32(e.psn), uint32(e.psn), e.no)
		a.text = "ICRC failure on " + e.op.String() + " psn " + itoa(int(e.psn)) + " (got " + hex32(e.icrc) + ", want " +
			hex32(e.want) + "): corrupted on the path; the requester drops it"
		tr.add(a)
		return
	}
	tr.respPkts++
	tr.lastPkt = idx
	q := e.psn
	if e.hasAETH {
		switch e.syn.Kind() {
		case wire.SynACK:
			if e.op.IsReadResponse() {
				tr.mark(idx, markReadResp, q, 1)
			} else {
				tr.mark(idx, markAck, q, 1)
			}
			if !tr.hasAcked || q.After(tr.acked) {
				tr.goodput(idx, q)
				tr.acked, tr.ackedIdx, tr.hasAcked = q, idx, true
			}
		case wire.SynRNRNAK:
			tr.rnrNAKs++
			tr.mark(idx, markRNR, q, 1)
			tr.lastRNR = idx
			a := tr.add(newAnomaly(KindRNRNAK, idx, uint32(q), uint32(q), e.no))
			a.rnrCode = e.syn.RNRTimer()
			a.asked = wire.RNRTimerDuration(a.rnrCode)
			a.drew = tr.drew(q, idx)
			if a.drew >= 0 {
				a.Packets = append([]int{tr.evs[a.drew].no}, a.Packets...)
			}
			return
		case wire.SynNAK:
			if e.syn.NAK() == wire.NAKPSNSequenceError {
				tr.seqNAKs++
				tr.mark(idx, markSeqNAK, q, 1)
				tr.lastSeqNAK = idx
				a := tr.add(newAnomaly(KindSeqNAK, idx, uint32(q), uint32(q), e.no))
				// The request that drew it: the latest one after the
				// expected PSN, the first the responder saw out of order.
				// (Else the latest one after it, up to 64 requests back.)
				a.drew = -1
				for k, n := sort.SearchInts(tr.c.reqs, idx)-1, 0; k >= 0 && n < 64; k, n = k-1, n+1 {
					r := &tr.evs[tr.c.reqs[k]]
					if !r.bad && r.psn.After(q) {
						a.drew = tr.c.reqs[k]
						continue
					}
					if !r.bad && a.drew >= 0 {
						break
					}
				}
				if a.drew >= 0 {
					a.Packets = append([]int{tr.evs[a.drew].no}, a.Packets...)
				}
				return
			}
			tr.otherNAKs++
			tr.mark(idx, markNAK, q, 1)
			a := tr.add(newAnomaly(KindNAK, idx, uint32(q), uint32(q), e.no))
			a.nak = e.syn.NAK()
			a.drew = tr.drew(q, idx)
			if st := tr.psns[q]; st != nil {
				a.msg = st.msgIdx
				if st.op >= 0 && tr.ops[st.op].failIdx < 0 {
					tr.ops[st.op].failIdx = idx
				}
			} else {
				a.msg = -1
			}
			if a.drew >= 0 {
				a.Packets = append([]int{tr.evs[a.drew].no}, a.Packets...)
			}
			return
		default:
			tr.otherNAKs++
			return
		}
	}
	tr.complete(idx)
	// Operation-specific evidence, taken as the requester takes it: a READ
	// response or ATOMIC ACK only for the operation at the head (responses
	// come in PSN order; a requester drops those for a later operation).
	h := tr.head()
	switch {
	case e.op.IsReadResponse():
		if !e.hasAETH {
			tr.mark(idx, markReadResp, q, 1)
		}
		if o := tr.opAt(q, classRead); o != nil && o.answeredIdx < 0 {
			o.answeredIdx = idx
		}
		if h == nil || h.class != classRead || q.Before(h.first) || q.After(h.end) {
			break
		}
		next := h.first
		if h.respSeen {
			next = h.respNext
		}
		switch {
		case q.After(next) && !h.gapFlag:
			h.gapFlag = true
			tr.lastReadGap = idx
			tr.add(newAnomaly(KindReadRespGap, idx, uint32(next), uint32(q.Sub(1)), e.no))
		case q == next:
			tr.goodBytes += int64(e.payload)
			tr.good = append(tr.good, goodSample{idx, int64(e.payload)})
			h.respNext, h.respSeen = q.Add(1), true
			h.gapFlag = false
			if pos := e.op.Info().Pos; (pos == wire.PosLast || pos == wire.PosOnly) && q == h.end {
				tr.done(h, idx)
			}
		}
	case e.op == wire.RCAtomicAcknowledge:
		if o := tr.opAt(q, classAtomic); o != nil && o.origIdx < 0 {
			o.origIdx, o.answeredIdx = idx, idx
		}
		if h != nil && h.class == classAtomic && h.first == q {
			tr.done(h, idx)
		}
	}
	tr.resolveDups(idx)
}

// done records the completion evidence of o.
func (tr *trace) done(o *operation, idx int) {
	o.doneIdx = idx
	if d := tr.evs[idx].t.Sub(tr.evs[o.lastIdx].t); d > 0 && (tr.minRTT == 0 || d < tr.minRTT) {
		tr.minRTT = d
	}
}

// prompt reports whether the response at cause can have triggered a
// resend at idx: a requester reacts to a NAK at once, so the resend
// follows within a round trip or so; one that comes much later was its
// timer. The window is 8 shortest round trips, at least 2 ms.
func (tr *trace) prompt(cause, idx int) bool {
	return cause >= 0 && cause < idx && tr.evs[idx].t.Sub(tr.evs[cause].t) <= max(2*time.Millisecond, 8*tr.minRTT)
}

// head returns the oldest operation still waiting for its completion
// evidence, or nil.
func (tr *trace) head() *operation {
	for _, n := range tr.pending {
		if o := &tr.ops[n]; o.doneIdx < 0 && o.failIdx < 0 {
			return o
		}
	}
	return nil
}

// opAt returns the operation of class c that PSN q belongs to, or nil.
func (tr *trace) opAt(q wire.PSN, c opClass) *operation {
	st := tr.psns[q]
	if st == nil || st.op < 0 || tr.ops[st.op].class != c {
		return nil
	}
	return &tr.ops[st.op]
}

// goodput counts the payload newly acknowledged by an ACK up to q.
func (tr *trace) goodput(idx int, q wire.PSN) {
	from := q
	if tr.hasAcked {
		from = tr.acked.Add(1)
	} else if tr.started {
		// The first ACK: count from the first request PSN.
		from = q
		for k := 0; k < 1<<16; k++ {
			if _, ok := tr.psns[from.Sub(1)]; !ok {
				break
			}
			from = from.Sub(1)
		}
	}
	n := q.Diff(from) + 1
	if n <= 0 || n > 1<<20 {
		return
	}
	var b int64
	for k := int32(0); k < n; k++ {
		if st := tr.psns[from.Add(uint32(k))]; st != nil {
			if st.op >= 0 && tr.ops[st.op].class == classRead {
				continue
			}
			b += int64(st.payload)
		}
	}
	tr.goodBytes += b
	if b > 0 {
		tr.good = append(tr.good, goodSample{idx, b})
	}
}

// drew returns the latest transmission of the request at PSN q captured
// before idx (-1 if none).
func (tr *trace) drew(q wire.PSN, idx int) int {
	if st := tr.psns[q]; st != nil && st.lastIdx < idx {
		return st.lastIdx
	}
	for k := sort.SearchInts(tr.c.reqs, idx) - 1; k >= 0; k-- {
		if r := &tr.evs[tr.c.reqs[k]]; !r.bad && r.psn == q {
			return tr.c.reqs[k]
		}
	}
	return -1
}

// complete applies the ACK at idx, if it is one, in PSN order: it
// completes the SEND and WRITE operations it covers up to the first READ or
// atomic still unanswered. An RC_ACKNOWLEDGE at or past that READ or atomic
// tells the requester its responses were lost (an implicit NAK).
func (tr *trace) complete(idx int) {
	e := &tr.evs[idx]
	ack := e.hasAETH && e.syn.Kind() == wire.SynACK
	keep := tr.pending[:0]
	blocked := false
	for _, n := range tr.pending {
		o := &tr.ops[n]
		if o.doneIdx >= 0 || o.failIdx >= 0 {
			continue
		}
		if !blocked && ack && o.lastIdx < idx {
			switch o.class {
			case classSend, classWrite:
				if e.psn.Diff(o.end) >= 0 {
					tr.done(o, idx)
					continue
				}
			default:
				if e.op == wire.RCAcknowledge && e.psn.Diff(o.first) >= 0 {
					tr.lastImplicit, tr.implicitPSN, tr.implicitEnd = idx, o.first, o.end
				}
			}
		}
		blocked = true
		keep = append(keep, n)
	}
	tr.pending = keep
}

// resolveDups gives the waiting duplicate requests the responder's answer
// at idx, where it covers them.
func (tr *trace) resolveDups(idx int) {
	e := &tr.evs[idx]
	keep := tr.dups[:0]
	for _, g := range tr.dups {
		waiting := false
		for k := range g.items {
			it := &g.items[k]
			if it.answer != 0 || it.idx > idx {
				waiting = waiting || it.answer == 0
				continue
			}
			covers := false
			switch it.class {
			case classRead:
				covers = e.op.IsReadResponse() && e.psn.Diff(it.psn) >= 0
			case classAtomic:
				covers = e.op == wire.RCAtomicAcknowledge && e.psn == it.psn
			default:
				covers = e.hasAETH && e.syn.Kind() == wire.SynACK && e.psn.Diff(it.psn) >= 0
			}
			if !covers {
				waiting = true
				continue
			}
			it.answer = e.no
			if it.class == classAtomic && it.origNo > 0 {
				if first := tr.evByNo(it.origNo); first != nil && first.orig != e.orig {
					g.a.atomicTwice = append(g.a.atomicTwice, fmt.Sprintf("#%d orig %#x where #%d had %#x", e.no, e.orig, it.origNo, first.orig))
				}
			}
		}
		if waiting || g == tr.curDup {
			keep = append(keep, g)
		}
	}
	// Groups still waiting behind 64 newer ones are given up on (reported
	// as not answered), so that a long capture stays linear.
	if len(keep) > 64 {
		keep = append(keep[:0], keep[len(keep)-64:]...)
	}
	tr.dups = keep
}
