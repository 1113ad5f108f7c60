package dump

import (
	"sort"
	"time"

	"github.com/goroce/goroce/wire"
)

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
