package dump

import (
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"time"

	"github.com/goroce/goroce/wire"
)

// Capture-wide analyses (--latency, --explain, --graph).
//
// Unlike the running counters of flows.go, these need the whole capture:
// the Dumper keeps a compact record (ev) of every RoCEv2 packet whose BTH
// was decoded, bad-ICRC ones included, and analyses them in Finish.
//
// # Connections
//
// The analyses follow one requester: the requests of a flow (source,
// destination, dest QPN; see flows.go) and the responses that answer them,
// which travel in the opposite direction to the requester's QPN. The BTH
// of a request does not carry the requester's QPN, so the response flow is
// found by pairing: among the flows from the request flow's destination to
// its source that carry responses, the one whose response PSNs fall on
// the most request PSNs of the flow (ties: the one seen first). An RC
// connection that is used in both directions is two such pairings.
//
// # The requester model (trace)
//
// Requests and their responses are replayed in capture order. Every
// request packet is one of:
//
//   - new: its PSN is the expected one (E) or after it; a PSN after E opens
//     a gap [E, PSN) (packets lost before the capture point, or never sent);
//   - a fill: before E, inside an open gap: a packet that was lost before
//     the capture point and resent, or overtaken on the path (reordered);
//   - a retransmission: before E, a PSN the capture has already seen.
//
// A run of retransmitted or filled PSNs going forward (a go-back-N; PSNs it
// skips were lost again before the capture point and are remembered as
// holes) is one episode. A resend whose first packet arrived with a bad
// ICRC starts there. Its cause is what the capture shows before it, if that
// came within 8 shortest round trips (at least 2 ms) — a requester reacts
// to a NAK at once, and a resend much later is its timer's:
//
//   - a PSN sequence NAK for the episode's first PSN;
//   - an RNR NAK for it (the wait is compared with the timer it asked for);
//   - an RC_ACKNOWLEDGE at or past a READ or atomic whose responses had
//     not come (an implicit NAK), or a gap in the READ responses;
//   - nothing: a timeout, the wait measured from the PSN's previous
//     transmission (or, for a fill, from the connection's last packet).
//
// A fill that comes within 4 requests of the packet that revealed its gap,
// with no response in between, was reordered by the path; a byte-identical
// copy of the previous transmission, with no response in between and
// within 500 µs, was duplicated by it. Neither is a retransmission.
//
// A retransmitted PSN that the responder had already answered (an ACK at
// or after it, its READ responses or its ATOMIC ACK were captured before
// the retransmission) is a duplicate request; the answers that cover it
// afterwards say how the responder treated it (one line per episode).
//
// Operations (messages) end at a LAST or ONLY request packet; a READ
// request or an atomic is one operation. Completion evidence is the first
// response after the operation's last packet that covers it: for SEND and
// WRITE an ACK (RC_ACKNOWLEDGE, or the AETH of a READ response or ATOMIC
// ACK, all of which acknowledge every earlier PSN) whose PSN is at or after
// the operation's last PSN; for READ the READ RESPONSE LAST or ONLY with
// the operation's last PSN; for an atomic its ATOMIC ACKNOWLEDGE. As a
// requester does, the model takes ACKs in PSN order and READ responses and
// ATOMIC ACKs only for the oldest operation still waiting: a response for a
// later one (after a lost one) is no evidence. NAKs are not completion
// evidence; an operation that a NAK other than a sequence error answered
// has failed.
//
// PSNs are compared within ±2^23 (wire.PSN); a capture holding more than
// 2^24 PSNs of one flow reuses the model's per-PSN state.

// ev is one RoCEv2 packet kept for the capture-wide analyses.
type ev struct {
	no      int // frame number in the capture, 1-based, as Wireshark counts
	t       time.Time
	key     flowKey
	op      wire.Opcode
	psn     wire.PSN
	payload int
	bad     bool // ICRC mismatch
	hasAETH bool
	syn     wire.Syndrome
	hasRETH bool
	va      uint64
	rkey    uint32
	dmaLen  uint32
	atomic  bool // AtomicETH: va, rkey, swapAdd, compare
	swapAdd uint64
	compare uint64
	hasOrig bool
	orig    uint64
	icrc    uint32 // as captured
	want    uint32 // computed (bad ICRC only)
	sum     uint64 // hash of the IP packet, to tell path duplicates from retransmissions
}

var evSeed = maphash.MakeSeed()

// record keeps x for the capture-wide analyses.
func (d *Dumper) record(x *decoded, no int) {
	bth, ext := x.headers()
	if bth == nil || !x.ip.IsValid() {
		return
	}
	if x.kind == kindMalformed && !x.trunc {
		return
	}
	e := ev{no: no, t: x.rec.Time, key: flowKey{x.ip, x.ipDst, bth.DestQP()}, op: bth.Opcode(), psn: bth.PSN()}
	if x.kind != kindMalformed {
		e.payload = len(x.p.Payload)
		e.icrc = x.p.ICRC
		e.sum = maphash.Bytes(evSeed, x.p.L3)
	}
	if x.kind == kindBadICRC {
		e.bad = true
		e.want = wire.ICRC(x.p.L3[:len(x.p.L3)-wire.ICRCLen])
	}
	if h := ext.AETH; h != nil {
		e.hasAETH, e.syn = true, h.Syndrome()
	}
	if h := ext.RETH; h != nil {
		e.hasRETH, e.va, e.rkey, e.dmaLen = true, h.VA(), h.RKey(), h.DMALen()
	}
	if h := ext.AtomicETH; h != nil {
		e.atomic, e.va, e.rkey, e.swapAdd, e.compare = true, h.VA(), h.RKey(), h.SwapAdd(), h.Compare()
	}
	if h := ext.AtomicAckETH; h != nil {
		e.hasOrig, e.orig = true, h.OrigValue()
	}
	if len(d.evs) == maxEvents {
		d.Warn("the analyses keep the first " + itoa(maxEvents) + " RoCEv2 packets only (use -c)")
	}
	if len(d.evs) >= maxEvents {
		return
	}
	d.evs = append(d.evs, e)
}

// maxEvents bounds the analyses' memory (about 150 bytes a packet) on an
// endless live capture.
const maxEvents = 20_000_000

// conn is one request flow with the flow carrying its responses.
type conn struct {
	req     flowKey
	resp    flowKey
	hasResp bool
	reqs    []int // indices into the events
	resps   []int
}

// pairFlows returns the request flows (RC requests) in order of first
// appearance, each with its response flow.
func pairFlows(evs []ev) []*conn {
	reqIdx := map[flowKey][]int{}
	respIdx := map[flowKey][]int{}
	var order []flowKey
	for i := range evs {
		e := &evs[i]
		info := e.op.Info()
		switch {
		case info.Request && e.op.Transport() == wire.TransportRC:
			if reqIdx[e.key] == nil {
				order = append(order, e.key)
			}
			reqIdx[e.key] = append(reqIdx[e.key], i)
		case info.Response:
			respIdx[e.key] = append(respIdx[e.key], i)
		}
	}
	// Candidate response flows by (src, dst) in order of first appearance.
	type pair struct{ src, dst string }
	var respOrder []flowKey
	seen := map[flowKey]bool{}
	for i := range evs {
		k := evs[i].key
		if _, ok := respIdx[k]; ok && !seen[k] {
			seen[k] = true
			respOrder = append(respOrder, k)
		}
	}
	var out []*conn
	for _, k := range order {
		c := &conn{req: k, reqs: reqIdx[k]}
		var cands []flowKey
		for _, r := range respOrder {
			if r.src == k.dst && r.dst == k.src {
				cands = append(cands, r)
			}
		}
		switch len(cands) {
		case 0:
		case 1:
			c.resp, c.hasResp = cands[0], true
		default:
			psns := map[wire.PSN]bool{}
			for _, i := range c.reqs {
				psns[evs[i].psn] = true
			}
			best := -1
			for _, r := range cands {
				n := 0
				for _, i := range respIdx[r] {
					if psns[evs[i].psn] {
						n++
					}
				}
				if n > best {
					best, c.resp, c.hasResp = n, r, true
				}
			}
		}
		if c.hasResp {
			c.resps = respIdx[c.resp]
		}
		out = append(out, c)
	}
	return out
}

// opClass is an operation class for --latency.
type opClass uint8

const (
	classSend opClass = iota
	classWrite
	classRead
	classAtomic
	numClasses
)

var classNames = [numClasses]string{"SEND", "WRITE", "READ", "ATOMIC"}

func (c opClass) String() string { return classNames[c] }

func classOf(op wire.Opcode) opClass {
	switch {
	case op.IsRead():
		return classRead
	case op.IsAtomic():
		return classAtomic
	case op.IsWrite():
		return classWrite
	}
	return classSend
}

// operation is one message of a request flow.
type operation struct {
	class       opClass
	first       wire.PSN // PSN of its first packet (as far as the capture shows)
	end         wire.PSN // PSN of its last packet; for READ the last response PSN
	lastIdx     int      // event of the first transmission of its last request packet
	doneIdx     int      // completion evidence, -1 if none
	failIdx     int      // a NAK (not a sequence error) that answered it, -1 if none
	retx        bool     // some packet of it was retransmitted
	respNext    wire.PSN // READ: next expected response PSN
	respSeen    bool     // READ: a response was taken
	gapFlag     bool     // READ: a gap in its responses was reported and not yet closed
	answeredIdx int      // READ, atomic: the first response the responder sent for it, -1 if none
	origIdx     int      // atomic: the first ATOMIC ACK, -1 if none
}

// psnState is what the trace knows about one request PSN.
type psnState struct {
	firstIdx int  // first transmission
	lastIdx  int  // latest transmission
	oos      bool // a lost PSN came before its latest transmission: the responder discarded it as out of sequence
	msgIdx   int  // the packet of its message that carries the RETH (or the first seen)
	op       int  // index into trace.ops, -1 while its message has not ended
	payload  int
}

// Anomaly kinds and causes (Anomaly.Kind, Anomaly.Cause).
const (
	KindRetransmission = "retransmission"
	KindReordered      = "reordered"
	KindPathDuplicate  = "path_duplicate"
	KindDuplicate      = "duplicate_request"
	KindGap            = "gap"
	KindSeqNAK         = "sequence_nak"
	KindNAK            = "nak"
	KindRNRNAK         = "rnr_nak"
	KindICRC           = "icrc_failure"
	KindUnacked        = "unacknowledged"
	KindReadRespGap    = "read_response_gap"

	CauseSeqNAK      = "sequence_nak"
	CauseRNRNAK      = "rnr_nak"
	CauseTimeout     = "timeout"
	CauseReadRespGap = "read_response_gap"
	// CauseImplicitNAK: an ACK passed a READ or atomic whose responses had
	// not come, which tells the requester they were lost (IBTA 9.7.5.1.2).
	CauseImplicitNAK = "implicit_nak"
)

// episode is a run of retransmitted or filled request PSNs.
type episode struct {
	a    *anomaly
	next wire.PSN // PSN that continues it
}

// gapRange is a run of PSNs never seen, [from, to).
type gapRange struct {
	from, to wire.PSN
	idx      int  // the packet that revealed it
	resend   bool // PSNs seen before whose resend never reached the capture point
	a        *anomaly
}

// trace is the requester model of one connection.
type trace struct {
	evs  []ev
	c    *conn
	mtu  int
	psns map[wire.PSN]*psnState
	ops  []operation
	// Outstanding operations in PSN order (indices into ops); completed
	// ones are dropped from the front lazily.
	pending []int

	started bool
	next    wire.PSN // E
	msgIdx  int      // the current message's RETH packet
	curMsg  []wire.PSN

	acked    wire.PSN // highest PSN covered by an ACK
	ackedIdx int      // the ACK that covered it
	hasAcked bool

	gaps []*gapRange
	ep   *episode

	lastSeqNAK, lastRNR, lastReadGap int              // event indices, -1: none pending
	lastImplicit                     int              // an ACK past an unanswered READ/atomic
	badReq                           int              // the last request with a bad ICRC, -1: none
	badAt                            map[wire.PSN]int // request PSN → its latest bad-ICRC capture
	timeoutDups                      int              // duplicate requests in timeout episodes
	implicitPSN, implicitEnd         wire.PSN
	minRTT                           time.Duration // shortest request → completion evidence so far
	lastPkt                          int           // last packet of the connection (either direction)
	lastReq                          int

	anoms  []*anomaly
	dups   []*dupGroup // duplicate groups waiting for the responder's answer
	curDup *dupGroup

	// Counters for the verdict.
	reqPkts, respPkts, retxPkts, badICRC  int
	episodes                              [4]int // by cause: seq NAK, RNR, READ gap, timeout
	seqNAKs, rnrNAKs, otherNAKs, reorders int
	pathDups, dupReqs                     int
	maxWait                               time.Duration
	goodBytes                             int64
	firstT, lastT                         time.Time

	// For the graph (graph.go).
	marks []mark
	good  []goodSample
}

// mark is one thing the graph draws: a packet (or an inferred event) at
// its time and PSN.
type mark struct {
	idx  int
	kind markKind
	psn  wire.PSN
	span uint32 // PSNs covered (READ requests)
}

type markKind uint8

const (
	markReq markKind = iota
	markRetx
	markTimeout
	markReorder
	markDup
	markAck
	markReadResp
	markSeqNAK
	markRNR
	markNAK
	markICRC
	numMarks
)

// goodSample is payload newly delivered (acknowledged, or received in a
// READ response) by the packet at idx.
type goodSample struct {
	idx   int
	bytes int64
}

func (tr *trace) mark(idx int, k markKind, psn wire.PSN, span uint32) {
	tr.marks = append(tr.marks, mark{idx, k, psn, span})
}

func newTrace(evs []ev, c *conn, mtu int) *trace {
	return &trace{evs: evs, c: c, mtu: mtu, psns: map[wire.PSN]*psnState{},
		lastSeqNAK: -1, lastRNR: -1, lastReadGap: -1, lastImplicit: -1, badReq: -1, lastPkt: -1, lastReq: -1}
}

// run replays the connection's packets in capture order.
func (tr *trace) run() {
	i, j := 0, 0
	for i < len(tr.c.reqs) || j < len(tr.c.resps) {
		if j == len(tr.c.resps) || (i < len(tr.c.reqs) && tr.c.reqs[i] < tr.c.resps[j]) {
			tr.request(tr.c.reqs[i])
			i++
		} else {
			tr.response(tr.c.resps[j])
			j++
		}
	}
	tr.finish()
}

func (tr *trace) note(idx int) {
	e := &tr.evs[idx]
	if tr.firstT.IsZero() {
		tr.firstT = e.t
	}
	tr.lastT = e.t
}

func (tr *trace) add(a *anomaly) *anomaly {
	tr.anoms = append(tr.anoms, a)
	return a
}

// readSpan returns the PSNs a READ request of length n consumes.
// A READ longer than maxReadSpan PSNs (256 MiB at MTU 4096) is modelled as
// that long: the model keeps state per PSN, and a capture must not make it
// allocate without bound.
func (tr *trace) readSpan(n uint32) uint32 {
	mtu := tr.mtu
	if mtu <= 0 {
		mtu = 1024
	}
	return uint32(min(max(1, ceilDiv(int(n), mtu)), maxReadSpan))
}

const maxReadSpan = 1 << 16

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

// lastReqBefore returns the index of the request of this flow captured
// just before idx (-1 if none).
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

func (tr *trace) evByNo(no int) *ev {
	k := sort.Search(len(tr.evs), func(i int) bool { return tr.evs[i].no >= no })
	if k < len(tr.evs) && tr.evs[k].no == no {
		return &tr.evs[k]
	}
	return nil
}

// finish adds what the end of the capture shows: gaps never filled and
// operations never acknowledged.
func (tr *trace) finish() {
	for _, g := range tr.gaps {
		if g.resend {
			continue
		}
		e := &tr.evs[g.idx]
		a := tr.add(newAnomaly(KindGap, g.idx, uint32(g.from), uint32(g.to.Sub(1)), e.no))
		a.ackedPast = tr.hasAcked && tr.acked.Diff(g.to.Sub(1)) >= 0
	}
	var open []*operation
	for _, n := range tr.pending {
		if o := &tr.ops[n]; o.doneIdx < 0 && o.failIdx < 0 {
			open = append(open, o)
		}
	}
	if len(open) > 0 && tr.lastReq >= 0 {
		a := newAnomaly(KindUnacked, len(tr.evs), uint32(open[0].first), uint32(open[len(open)-1].end))
		a.count = len(open)
		a.Packets = []int{tr.evs[tr.lastReq].no}
		if tr.lastPkt >= 0 && tr.lastPkt != tr.lastReq {
			a.Packets = append(a.Packets, tr.evs[tr.lastPkt].no)
		}
		tr.add(a)
	}
}

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	b := []byte("0x")
	started := false
	for s := 28; s >= 0; s -= 4 {
		d := (v >> uint(s)) & 0xF
		if d != 0 || started || s == 0 {
			b = append(b, digits[d])
			started = true
		}
	}
	return string(b)
}

// analyze runs the capture-wide analyses the options ask for and adds
// their results to s. The error is from writing the graphs.
func (d *Dumper) analyze(s *Summary) error {
	if !d.opts.Latency && !d.opts.Explain && d.opts.GraphDir == "" {
		return nil
	}
	mtu, _ := d.flows.mtu()
	var traces []*trace
	for _, c := range pairFlows(d.evs) {
		tr := newTrace(d.evs, c, mtu)
		tr.run()
		traces = append(traces, tr)
	}
	if d.opts.Latency {
		s.Latency = []LatencyStats{}
		for _, tr := range traces {
			s.Latency = append(s.Latency, latencyOf(tr)...)
		}
	}
	if d.opts.Explain {
		r := d.explain(traces)
		s.Anomalies, s.Verdicts = r.anomalies, r.verdicts
	}
	if d.opts.GraphDir != "" {
		files, err := d.writeGraphs(traces)
		s.Graphs = files
		return err
	}
	return nil
}

func (d *Dumper) writeAnalysesText(s *Summary) {
	var b strings.Builder
	if d.opts.Latency {
		b.WriteByte('\n')
		writeLatencyText(&b, s.Latency)
	}
	if d.opts.Explain {
		b.WriteByte('\n')
		writeExplainText(&b, s.Anomalies, s.Verdicts)
	}
	if len(s.Graphs) > 0 {
		b.WriteString("\ngraphs:\n")
		for _, g := range s.Graphs {
			b.WriteString("  " + g + "\n")
		}
	}
	d.write([]byte(b.String()))
}
