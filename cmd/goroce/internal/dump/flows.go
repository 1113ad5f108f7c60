package dump

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/wire"
)

// Flow analysis.
//
// A flow is the traffic from one IP address to another addressed to one
// destination QP: the key is (source IP, destination IP, BTH DestQP). An RC
// connection is therefore two flows, one per direction, and a flow can carry
// two independent PSN sequences: the requests of the side that sends (its
// send-queue PSNs) and its responses to the other side's requests (ACKs,
// READ responses, ATOMIC ACKs, which carry the other side's PSNs). Requests
// and responses are analysed separately; the responses to a flow's requests
// are in the flow of the opposite direction.
//
// Which packets count: RoCEv2 packets whose BTH was decoded, including
// truncated ones (a small snaplen keeps the headers) but not packets with a
// bad ICRC or other malformed ones (a receiver drops them; their PSN cannot
// be trusted). Request PSNs are analysed for RC and UC only; UD and CNP
// packets are only counted.
//
// Request PSN rules (IBTA 9.7.1; rxe_req.c, PROTOCOL §3.2), with 24-bit
// wrap-around comparisons (wire.PSN.Diff, like rxe's psn_compare):
//
//   - Every request packet consumes one PSN, except RDMA READ REQUEST, which
//     consumes N = max(1, ceil(RETH DMA length / path MTU)) PSNs: one per
//     READ RESPONSE packet. The expected PSN of the next request, E, is the
//     PSN of the highest request so far plus what it consumes.
//   - The first request of a flow sets E. After that, a request with PSN P:
//     P == E is in order; P after E is a gap of P-E PSNs (Gaps counts the
//     events, MissingPSNs the PSNs skipped); P before E is a retransmission
//     when P was already used by a request of this flow (seen, or inside
//     the PSN range of an earlier READ: go-back-N after a NAK or a timeout,
//     a READ retried from the middle, a duplicate), and "late" otherwise
//     (it fills an earlier gap, e.g. the capture point is behind the loss,
//     or it predates the capture). E only moves forward.
//   - The path MTU is --mtu if given, else the largest payload of any
//     FIRST or MIDDLE packet (those carry exactly one PMTU) in the capture;
//     for a file this is found by a first pass (InferMTU), for a live
//     capture it is the largest seen so far. While it is unknown, the request
//     after a READ is in order anywhere in [P+ceil(len/4096), P+ceil(len/256)]
//     (the largest and smallest IB MTUs). Retransmissions are remembered for
//     the last 65536 PSNs of a flow.
//
// Response rules: responses are counted with their first and last PSN, and
// by AETH syndrome (ACKNOWLEDGE, ATOMIC ACKNOWLEDGE, READ RESPONSE
// FIRST/LAST/ONLY; READ RESPONSE MIDDLE has no AETH): ACKs, NAKs by NAK code
// (PSN_SEQUENCE_ERROR, INVALID_REQUEST, REMOTE_ACCESS_ERROR,
// REMOTE_OPERATIONAL_ERROR, ...) and RNR NAKs (with the last RNR timer).

// flowKey identifies a flow.
type flowKey struct {
	src, dst netip.Addr
	dqpn     uint32
}

const seenWindow = 1 << 16 // PSNs remembered per flow for retransmission detection

// seenChunk is the number of PSNs per piece of the bitmap, which is
// allocated where requests are marked: a flow costs memory in proportion to
// the PSNs it uses, not 8 KiB from its first request (a capture of
// one-packet flows would otherwise allocate over 100 times its size).
const seenChunk = 1 << 12

// flow is the state and counters of one flow.
type flow struct {
	key     flowKey
	packets int

	// Requests.
	reqs            int
	reqFirst        wire.PSN
	reqLast         wire.PSN
	started         bool
	next            wire.PSN // expected PSN of the next request
	slack           bool     // the last advancing request was a READ of unknown PSN count
	slackMax        wire.PSN // then anything in [next, slackMax] is in order
	gaps            int
	missing         int
	retrans         int
	late            int
	seen            [seenWindow / seenChunk]*[seenChunk / 64]uint64 // bitmap over PSN & (seenWindow-1), valid for [next-seenWindow, next)
	readReqs        int
	transportPSNful bool // RC or UC requests seen

	// Responses.
	resps     int
	respFirst wire.PSN
	respLast  wire.PSN
	acks      int
	naks      map[string]int
	rnrNaks   int
	rnrTimer  uint8
}

// flowTable holds the flows in order of first appearance.
type flowTable struct {
	byKey    map[flowKey]*flow
	order    []*flow
	mtuFlag  int // --mtu
	inferred int // from a first pass
	seenMTU  int // largest FIRST/MIDDLE payload so far
}

func (t *flowTable) init(mtu int) {
	t.byKey = map[flowKey]*flow{}
	t.mtuFlag = mtu
}

func (t *flowTable) setInferred(mtu int) { t.inferred = mtu }

// mtu returns the path MTU to use and whether it is known.
func (t *flowTable) mtu() (int, string) {
	switch {
	case t.mtuFlag > 0:
		return t.mtuFlag, "flag"
	case t.inferred > 0:
		return t.inferred, "inferred"
	case t.seenMTU > 0:
		return t.seenMTU, "inferred"
	}
	return 0, "unknown"
}

// noteMTU records the payload of FIRST/MIDDLE packets.
func noteMTU(cur *int, op wire.Opcode, payload int) {
	if pos := op.Info().Pos; (pos == wire.PosFirst || pos == wire.PosMiddle) && payload > *cur {
		*cur = payload
	}
}

func (t *flowTable) add(x *decoded) {
	bth, ext := x.headers()
	if bth == nil || !x.ip.IsValid() {
		return
	}
	op := bth.Opcode()
	if x.kind == kindRoCE {
		noteMTU(&t.seenMTU, op, len(x.p.Payload))
	}
	if x.kind == kindBadICRC || (x.kind == kindMalformed && !x.trunc) {
		return
	}
	k := flowKey{x.ip, x.ipDst, bth.DestQP()}
	f := t.byKey[k]
	if f == nil {
		f = &flow{key: k}
		t.byKey[k] = f
		t.order = append(t.order, f)
	}
	f.packets++
	info := op.Info()
	psn := bth.PSN()
	switch {
	case info.Request:
		f.request(t, op, psn, ext)
	case info.Response:
		f.response(psn, ext)
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// request applies the request PSN rules above.
func (f *flow) request(t *flowTable, op wire.Opcode, p wire.PSN, ext *wire.Packet) {
	if f.reqs == 0 {
		f.reqFirst = p
	}
	f.reqs++
	f.reqLast = p
	tr := op.Transport()
	if tr != wire.TransportRC && tr != wire.TransportUC {
		return
	}
	f.transportPSNful = true
	// PSNs consumed: n, or a range [n, nmax] when the MTU is unknown.
	n, nmax := 1, 1
	if op.IsRead() {
		f.readReqs++
		length := -1
		if ext.RETH != nil {
			length = int(ext.RETH.DMALen())
		}
		mtu, src := t.mtu()
		switch {
		case length < 0: // RETH not captured
			n, nmax = 1, 1<<23 // a RETH length is at most 2^31, 256-byte packets (the smallest path MTU)
		case src == "unknown":
			n, nmax = max(1, ceilDiv(length, 4096)), max(1, ceilDiv(length, 256))
		default:
			n = max(1, ceilDiv(length, mtu))
			nmax = n
		}
	}
	if !f.started {
		f.started = true
		f.next = p
		f.advance(p, n, nmax)
		return
	}
	d := p.Diff(f.next)
	if f.slack && d > 0 && p.Diff(f.slackMax) <= 0 {
		d = 0 // within what the READ before may have consumed
	}
	switch {
	case d == 0:
		f.advance(p, n, nmax)
	case d > 0:
		f.gaps++
		f.missing += int(d)
		f.advance(p, n, nmax)
	default:
		if -int(d) <= seenWindow && f.isSeen(p) {
			f.retrans++
		} else {
			f.late++
		}
		// A retransmitted READ for more PSNs than before, or a late packet
		// that reaches past E, moves E forward.
		if end := p.Add(uint32(n)); end.After(f.next) {
			f.moveNext(end)
		}
		f.mark(p, n)
	}
}

// advance records a request at P (at or after E) consuming n..nmax PSNs.
func (f *flow) advance(p wire.PSN, n, nmax int) {
	f.moveNext(p.Add(uint32(n)))
	f.mark(p, n)
	f.slack = nmax > n
	if f.slack {
		f.slackMax = p.Add(uint32(nmax))
	}
}

// moveNext moves E forward to e, recycling the bitmap positions of the PSNs
// that leave the window.
func (f *flow) moveNext(e wire.PSN) {
	k := int(e.Diff(f.next))
	if k <= 0 {
		return
	}
	if k >= seenWindow {
		for _, c := range f.seen {
			if c != nil {
				clear(c[:])
			}
		}
	} else {
		for i := range k {
			q := f.next.Add(uint32(i)) & (seenWindow - 1)
			if c := f.seen[q/seenChunk]; c != nil {
				c[q%seenChunk/64] &^= 1 << (q % 64)
			}
		}
	}
	f.next = e
}

// mark records PSNs p..p+n-1 as seen (those inside the window).
func (f *flow) mark(p wire.PSN, n int) {
	for i := range min(n, seenWindow) {
		q := p.Add(uint32(i))
		if q.Diff(f.next) >= 0 || -int(q.Diff(f.next)) > seenWindow {
			continue
		}
		b := q & (seenWindow - 1)
		c := f.seen[b/seenChunk]
		if c == nil {
			c = new([seenChunk / 64]uint64)
			f.seen[b/seenChunk] = c
		}
		c[b%seenChunk/64] |= 1 << (b % 64)
	}
}

func (f *flow) isSeen(p wire.PSN) bool {
	b := p & (seenWindow - 1)
	c := f.seen[b/seenChunk]
	return c != nil && c[b%seenChunk/64]&(1<<(b%64)) != 0
}

// response applies the response rules above.
func (f *flow) response(p wire.PSN, ext *wire.Packet) {
	if f.resps == 0 {
		f.respFirst = p
	}
	f.resps++
	f.respLast = p
	if ext.AETH == nil {
		return
	}
	s := ext.AETH.Syndrome()
	switch s.Kind() {
	case wire.SynACK:
		f.acks++
	case wire.SynRNRNAK:
		f.rnrNaks++
		f.rnrTimer = s.RNRTimer()
	case wire.SynNAK:
		if f.naks == nil {
			f.naks = map[string]int{}
		}
		f.naks[s.NAK().String()]++
	default:
		if f.naks == nil {
			f.naks = map[string]int{}
		}
		f.naks["RESERVED_SYNDROME"]++
	}
}

// InferMTU returns the largest FIRST/MIDDLE payload among recs' RoCEv2
// packets (0 if none), the path MTU the flow analysis uses.
func InferMTU(next func() (Record, bool)) int {
	mtu := 0
	for {
		rec, ok := next()
		if !ok {
			return mtu
		}
		var x decoded
		decode(&x, rec)
		if x.kind == kindRoCE {
			noteMTU(&mtu, x.p.Opcode(), len(x.p.Payload))
		}
	}
}

// stats are the global counters.
type stats struct {
	packets, roce, nonRoCE, malformed, truncated, badICRC int
	bytes                                                 int64
	opcodes                                               [256]int
	first, last                                           time.Time
}

func (s *stats) add(x *decoded) {
	s.packets++
	s.bytes += int64(x.rec.OrigLen)
	if t := x.rec.Time; !t.IsZero() {
		if s.first.IsZero() || t.Before(s.first) {
			s.first = t
		}
		if t.After(s.last) {
			s.last = t
		}
	}
	switch x.kind {
	case kindNonRoCE:
		s.nonRoCE++
		return
	case kindBadICRC:
		s.badICRC++
	case kindMalformed:
		s.malformed++
		if x.trunc {
			s.truncated++
		}
	}
	s.roce++
	if bth, _ := x.headers(); bth != nil {
		s.opcodes[bth.Opcode()]++
	}
}
