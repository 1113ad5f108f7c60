package transport_test

// A deterministic two-engine harness: two transport.QPs whose Outputs are
// fixed rings of frame buffers, joined by a loop that parses every frame
// (wire.Parse, ICRC checked) and hands it to the peer's Receive, on a fake
// clock. No goroutine, no allocation per packet in the harness itself, so
// the benchmarks measure the engine's own allocations.
//
// This is the engine-level harness, below qp: transport cannot import qp,
// so the one device-level harness (package sim: sim.NewPair and
// sim.ConnectQPs, used by qp's tests) cannot serve
// here. Tests of whole devices belong there.

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

const frameCap = 9216

// ring is a transport.Output: a FIFO of preallocated frame buffers.
type ring struct {
	bufs       [][]byte
	lens       []int
	head, tail int
}

func newRing(n, size int) *ring {
	r := &ring{bufs: make([][]byte, n), lens: make([]int, n)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, size)
	}
	return r
}

func (r *ring) Frame() []byte {
	if r.tail-r.head >= len(r.bufs) {
		panic("harness ring full") // a harness sizing bug, never the engine's
	}
	return r.bufs[r.tail%len(r.bufs)]
}

func (r *ring) Send(n int) { r.lens[r.tail%len(r.bufs)] = n; r.tail++ }

func (r *ring) pop() ([]byte, bool) {
	if r.head == r.tail {
		return nil, false
	}
	i := r.head % len(r.bufs)
	r.head++
	return r.bufs[i][:r.lens[i]], true
}

// evlog collects a QP's events (transport.EventSink).
type evlog struct{ evs []transport.Event }

func (l *evlog) Event(ev transport.Event) { l.evs = append(l.evs, ev) }

// take returns the events since the last take.
func (l *evlog) take() []transport.Event {
	e := l.evs
	l.evs = nil
	return e
}

// count returns how many events of kind were recorded (and not taken).
func (l *evlog) count(kind transport.EventKind) int {
	n := 0
	for _, ev := range l.evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// cq collects completions.
type cq struct{ wcs []transport.WC }

func (c *cq) Complete(wc *transport.WC) { c.wcs = append(c.wcs, *wc) }

func (c *cq) take() []transport.WC {
	w := c.wcs
	c.wcs = c.wcs[:0:0]
	return w
}

type side struct {
	name   string
	q      *transport.QP
	events *evlog
	out    *ring
	scq    *cq
	rcq    *cq
	mrs    *memreg.Table
	pd     *memreg.PD
	buf    []byte
	mr     *memreg.MR
	ip     netip.Addr
	mac    [6]byte
	peer   *side
	sqPSN  wire.PSN
	access memreg.Access
}

// epair is two engines on a fake clock.
type epair struct {
	t    testing.TB
	now  time.Time
	a, b *side
	pkt  wire.Packet
	// hook, when set, sees every frame before delivery; returning false drops it.
	hook func(from *side, p *wire.Packet) bool
	// log, when set, records a copy of every delivered frame.
	log []logged
	rec bool
	// batch, when set, hands all the frames one side has sent to its peer
	// as one receive batch (one EndBatch after them), as a device does with
	// a batch read from its link; otherwise each frame is a batch of one.
	batch bool
}

type logged struct {
	fromA bool
	raw   []byte
	p     wire.Packet
}

type eopts struct {
	mtu         transport.MTU
	psnA, psnB  wire.PSN
	bufSize     int
	sqWR        int
	timeout     uint8
	retry, rnr  uint8
	minRNR      uint8
	accessA     memreg.Access
	accessB     memreg.Access
	maxRdAtomic uint8
	ringFrames  int
	frameSize   int            // bytes per ring buffer (frameCap if 0); must hold a frame of the path MTU
	zeroDestRd  bool           // B accepts no READ/atomic (max_dest_rd_atomic 0)
	srqB        *transport.SRQ // B takes its receives from this SRQ
	uc          bool           // both QPs are UC (uc_test.go): UC's modify attributes
	bRTR        bool           // B stays in RTR (RC): it answers requests and sends none
}

func newEPair(t testing.TB, o eopts) *epair {
	if o.mtu == 0 {
		o.mtu = transport.MTU1024
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.sqWR == 0 {
		o.sqWR = 256
	}
	if o.accessA == 0 {
		o.accessA = memreg.RemoteWrite | memreg.RemoteRead | memreg.RemoteAtomic
	}
	if o.accessB == 0 {
		o.accessB = o.accessA
	}
	if o.maxRdAtomic == 0 {
		o.maxRdAtomic = 16
	}
	if o.ringFrames == 0 {
		o.ringFrames = 2048
	}
	if o.frameSize == 0 {
		o.frameSize = frameCap
	}
	e := &epair{t: t, now: time.Unix(1_700_000_000, 0)}
	typ := transport.QPTypeRC
	if o.uc {
		typ = transport.QPTypeUC
	}
	mk := func(name string, qpn uint32, ip string, mac byte, psn wire.PSN, access memreg.Access, srq *transport.SRQ) *side {
		s := &side{name: name, out: newRing(o.ringFrames, o.frameSize), scq: &cq{}, rcq: &cq{}, events: &evlog{}, mrs: memreg.NewTable(int64(qpn)),
			ip: netip.MustParseAddr(ip), mac: [6]byte{2, 0, 0, 0, 0, mac}, sqPSN: psn, access: access}
		s.pd = s.mrs.AllocPD()
		s.buf = make([]byte, o.bufSize)
		var err error
		if s.mr, err = s.pd.Register(s.buf, memreg.LocalWrite|memreg.RemoteAny); err != nil {
			t.Fatal(err)
		}
		s.q, err = transport.New(transport.Config{QPN: qpn, PD: s.pd, MRs: s.mrs, Out: s.out, SendCQ: s.scq, RecvCQ: s.rcq, Events: s.events,
			Caps: transport.Caps{MaxSendWR: o.sqWR, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}, SRQ: srq, Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e.a = mk("A", 0x11, "198.18.0.1", 0xa, o.psnA, o.accessA, nil)
	e.b = mk("B", 0x12, "198.18.0.2", 0xb, o.psnB, o.accessB, o.srqB)
	e.a.peer, e.b.peer = e.b, e.a
	destRd := func(s *side) uint8 {
		if o.zeroDestRd && s == e.b {
			return 0
		}
		return o.maxRdAtomic
	}
	if o.uc {
		for _, s := range []*side{e.a, e.b} {
			must(t, s.q.Modify(&transport.Attr{State: transport.StateInit, Port: 1, AccessFlags: s.access},
				transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags, e.now))
			must(t, s.q.Modify(&transport.Attr{State: transport.StateRTR, PathMTU: o.mtu, DestQPN: s.peer.q.QPN(),
				RQPSN: s.peer.sqPSN, AV: transport.AV{DGID: s.peer.ip, SGID: s.ip, HopLimit: 64, DMAC: s.peer.mac, SMAC: s.mac}},
				transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN, e.now))
		}
		for _, s := range []*side{e.a, e.b} {
			must(t, s.q.Modify(&transport.Attr{State: transport.StateRTS, SQPSN: s.sqPSN},
				transport.AttrState|transport.AttrSQPSN, e.now))
		}
		return e
	}
	for _, s := range []*side{e.a, e.b} {
		must(t, s.q.Modify(&transport.Attr{State: transport.StateInit, Port: 1, AccessFlags: s.access},
			transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags, e.now))
		must(t, s.q.Modify(&transport.Attr{State: transport.StateRTR, PathMTU: o.mtu, DestQPN: s.peer.q.QPN(),
			RQPSN: s.peer.sqPSN, MaxDestRdAtomic: destRd(s), MinRNRTimer: o.minRNR,
			AV: transport.AV{DGID: s.peer.ip, SGID: s.ip, HopLimit: 64, DMAC: s.peer.mac, SMAC: s.mac}},
			transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN|
				transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer, e.now))
	}
	for _, s := range []*side{e.a, e.b} {
		if o.bRTR && s == e.b {
			continue
		}
		must(t, s.q.Modify(&transport.Attr{State: transport.StateRTS, Timeout: o.timeout, RetryCnt: o.retry,
			RNRRetry: o.rnr, SQPSN: s.sqPSN, MaxRdAtomic: o.maxRdAtomic},
			transport.AttrState|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrSQPSN|
				transport.AttrMaxQPRdAtomic, e.now))
	}
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// deliver moves every queued frame to its peer until both rings are empty.
// It returns the number of frames delivered.
func (e *epair) deliver() int {
	n := 0
	for {
		moved := false
		for _, s := range []*side{e.a, e.b} {
			for {
				f, ok := s.out.pop()
				if !ok {
					break
				}
				moved = true
				n++
				if err := wire.Parse(f, &e.pkt); err != nil {
					e.t.Fatalf("%s sent a frame that does not parse: %v", s.name, err)
				}
				if e.hook != nil && !e.hook(s, &e.pkt) {
					continue
				}
				if e.rec {
					l := logged{fromA: s == e.a, raw: append([]byte(nil), f...)}
					if err := wire.Parse(l.raw, &l.p); err != nil {
						e.t.Fatal(err)
					}
					e.log = append(e.log, l)
				}
				s.peer.q.Receive(&e.pkt, e.now)
				if !e.batch {
					s.peer.q.EndBatch(e.now)
				}
			}
			if e.batch {
				s.peer.q.EndBatch(e.now)
			}
		}
		if !moved {
			// Work due now (a paced READ response, an owed ACK) runs
			// before the delivery is over, as the device's drive loop
			// calls a QP again when its deadline is now.
			for _, s := range []*side{e.a, e.b} {
				if d, ok := s.q.Deadline(); ok && !d.After(e.now) {
					s.q.Tick(e.now)
					moved = moved || s.out.head != s.out.tail
				}
			}
		}
		if !moved {
			return n
		}
	}
}

// run delivers frames and fires timers (advancing the fake clock to each
// deadline) until nothing is left to do, at most steps timer firings.
func (e *epair) run(steps int) {
	for i := 0; ; i++ {
		e.deliver()
		next, ok := time.Time{}, false
		for _, s := range []*side{e.a, e.b} {
			if d, has := s.q.Deadline(); has && (!ok || d.Before(next)) {
				next, ok = d, true
			}
		}
		if !ok {
			return
		}
		if i >= steps {
			e.t.Fatalf("still busy after %d timer steps", steps)
		}
		if next.After(e.now) {
			e.now = next
		}
		e.a.q.Tick(e.now)
		e.b.q.Tick(e.now)
	}
}

func (e *epair) post(s *side, wr *transport.SendWR) {
	e.t.Helper()
	if err := s.q.PostSend(wr, e.now); err != nil {
		e.t.Fatalf("post: %v", err)
	}
}

func (s *side) sge(off, n int) transport.SGE {
	return transport.SGE{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

func (l logged) String() string {
	s := fmt.Sprintf("%v psn=%#x ackreq=%v", l.p.Opcode(), uint32(l.p.BTH.PSN()), l.p.BTH.AckReq())
	if l.p.AETH != nil {
		s += fmt.Sprintf(" syn=%#x", uint8(l.p.AETH.Syndrome()))
	}
	if l.fromA {
		return "A→B " + s
	}
	return "B→A " + s
}
