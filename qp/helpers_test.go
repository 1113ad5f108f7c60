package qp_test

// Shared helpers of the data-path tests (ops_test.go, errors_test.go,
// wire_test.go, bench_test.go): a configurable two-endpoint pair from the
// shared harness (package sim, on the real clock or a synctest bubble's)
// with a pcap tap, canary-guarded buffers, and a decoder that turns the tap back into parsed packets (internal/pcapfile +
// wire.Parse) so that tests assert what went over the wire.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// canary is the byte every buffer is filled with before an operation; every
// byte outside the operation's target range must still hold it afterwards.
const canary = 0xC5

const allAccess = memreg.LocalWrite | memreg.RemoteWrite | memreg.RemoteRead | memreg.RemoteAtomic

// xopts configures newX. Zero values give a 1500-byte link (path MTU 1024),
// PSNs 200 (A) and 100 (B), every QP access flag, 64 KiB buffers.
type xopts struct {
	linkMTU      int
	psnA, psnB   uint32 // first PSN each side sends
	setPSN       bool   // use psnA/psnB even when zero
	connA, connB qp.ConnectOptions
	sqSigAllA    bool
	capsA        qp.Caps
	size         int // main buffer of each side
	noTap        bool
	v6           bool  // IPv6 GIDs (2001:2::1 and 2001:2::2) instead of IPv4
	seed         int64 // the link's faults and the devices' keys
	faultsAB     sim.Faults
	faultsBA     sim.Faults
	busyPoll     bool // devices in busy-poll mode (busypoll_test.go)
}

// xend is one endpoint: a device with a main MR (buf/mr), a second MR in the
// same PD (buf2/mr2) and an MR in another PD (bufO/mrO), and separate send
// and receive CQs.
type xend struct {
	dev        *qp.Device
	pd, pdO    *qp.PD
	scq, rcq   *qp.CQ
	qp         *qp.QP
	buf, buf2  []byte
	mr, mr2    *qp.MR
	bufO       []byte
	mrO        *qp.MR
	link       *nic.MemLink
	ip         netip.Addr
	otherQPN   uint32
	sentPSN    uint32 // the SQ PSN given at connect
	expPSNPeer uint32
}

type xpair struct {
	t      testing.TB
	a, b   *xend
	tap    *tapBuf
	dec    tapDecoder
	bubble bool // the test runs in a synctest bubble (bubble)
}

// bubbles holds the tests running in a synctest bubble.
var bubbles sync.Map // testing.TB → struct{}

// bubble runs f in a synctest bubble: time is fake and moves only when
// every goroutine of the test (the devices' own included) is blocked. A
// pair made in it by newX settles by waiting for that (synctest.Wait)
// instead of sleeping on the wall clock, and the engines' timers (ACK
// timeout, RNR back-off) fire at their exact fake-clock instants, after
// everything that could run before them has: the outcome no longer
// depends on the machine's load. Busy-poll pairs cannot use it (a
// spinning poller never blocks, so time never moves), nor real sockets.
func bubble(t *testing.T, f func(t *testing.T)) {
	synctest.Test(t, func(t *testing.T) {
		bubbles.Store(testing.TB(t), struct{}{})
		defer bubbles.Delete(testing.TB(t))
		f(t)
	})
}

// pause lets the devices run: in a bubble until every goroutine is
// blocked, otherwise for a millisecond of real time.
func (x *xpair) pause() {
	if x.bubble {
		synctest.Wait()
		return
	}
	time.Sleep(time.Millisecond)
}

// tapBuf is the pcap tap: an io.Writer safe for the link goroutines and
// the test reading it.
type tapBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *tapBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *tapBuf) snapshot() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

// capPkt is one decoded frame of the tap.
type capPkt struct {
	fromA bool
	raw   []byte
	p     wire.Packet
}

func (c capPkt) String() string {
	dir := "B→A"
	if c.fromA {
		dir = "A→B"
	}
	s := fmt.Sprintf("%s %v psn=%#x ackreq=%v", dir, c.p.Opcode(), uint32(c.p.BTH.PSN()), c.p.BTH.AckReq())
	if c.p.AETH != nil {
		s += fmt.Sprintf(" syn=%#x msn=%d", uint8(c.p.AETH.Syndrome()), c.p.AETH.MSN())
	}
	return s
}

// tapDecoder reads the tap incrementally: next returns the frames delivered
// since its last call, skipping a record still being written.
type tapDecoder struct {
	off int
}

func (x *xpair) next() []capPkt {
	x.t.Helper()
	snap := x.tap.snapshot()
	if len(snap) < 24 {
		return nil
	}
	if x.dec.off == 0 {
		x.dec.off = 24
	}
	end := x.dec.off
	for end+16 <= len(snap) {
		n := int(binary.LittleEndian.Uint32(snap[end+8:]))
		if end+16+n > len(snap) {
			break
		}
		end += 16 + n
	}
	stream := append(append([]byte(nil), snap[:24]...), snap[x.dec.off:end]...)
	x.dec.off = end
	recs, err := pcapfile.ReadAll(bytes.NewReader(stream))
	if err != nil {
		x.t.Fatalf("tap: %v", err)
	}
	out := make([]capPkt, 0, len(recs))
	for i, r := range recs {
		c := capPkt{raw: append([]byte(nil), r.Data...)}
		if err := wire.Parse(c.raw, &c.p); err != nil {
			x.t.Fatalf("tap frame %d does not parse: %v", i, err)
		}
		if !wire.VerifyICRC(c.p.L3) {
			x.t.Fatalf("tap frame %d: bad ICRC", i)
		}
		c.fromA = c.p.SrcIP() == x.a.ip
		out = append(out, c)
	}
	return out
}

// settle waits until neither link has frames in flight, so that the tap
// holds every frame of the operation that just completed.
func (x *xpair) settle() {
	x.t.Helper()
	if x.bubble {
		for range 2000 {
			synctest.Wait()
			if x.a.link.Pending() == 0 && x.b.link.Pending() == 0 {
				return
			}
			time.Sleep(time.Millisecond) // fake time: a held (delayed, reordered) frame comes due
		}
		x.t.Fatalf("links did not go idle")
	}
	for i := 0; i < 2000; i++ {
		x.a.dev.Poll() // busy-poll devices move only when polled; no-op otherwise
		x.b.dev.Poll()
		if x.a.link.Pending() == 0 && x.b.link.Pending() == 0 {
			// One more round: a frame may be between ReadBatch and the
			// engine, whose answer is not queued yet.
			time.Sleep(time.Millisecond)
			if x.a.link.Pending() == 0 && x.b.link.Pending() == 0 {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	x.t.Fatalf("links did not go idle")
}

func newX(t testing.TB, o xopts) *xpair {
	t.Helper()
	if !o.setPSN && o.psnA == 0 && o.psnB == 0 {
		o.psnA, o.psnB = 200, 100
	}
	if o.size == 0 {
		o.size = 64 << 10
	}
	x := &xpair{t: t, tap: &tapBuf{}}
	_, x.bubble = bubbles.Load(t)
	if x.bubble && o.busyPoll {
		t.Fatal("a busy-poll pair cannot run in a synctest bubble: its pollers never block")
	}
	cfg := sim.Config{Mode: sim.Goroutines, Seed: o.seed, MTU: o.linkMTU, AtoB: o.faultsAB, BtoA: o.faultsBA, IPv6: o.v6}
	if o.busyPoll {
		cfg.Mode = sim.BusyPoll
	}
	if !o.noTap {
		cfg.Tap = x.tap
	}
	n := simtest.NewPair(t, cfg)
	// An ACK timeout of ≈1.07 s (18) instead of Connect's 67 ms: on a loaded
	// machine (and under -race) a 67 ms stall makes go-back-N resend, which
	// tests counting frames would see (outside a bubble).
	for _, c := range []*qp.ConnectOptions{&o.connA, &o.connB} {
		if c.Timeout == 0 && !c.SetRetry {
			c.Timeout = 18
		}
	}
	o.connA.SQPSN, o.connB.SQPSN = o.psnA, o.psnB
	qa, qb := simtest.ConnectQPs(t, n,
		sim.QPOptions{BufSize: o.size, CQSize: 8192, Caps: o.capsA, SQSigAll: o.sqSigAllA, Connect: o.connA},
		sim.QPOptions{BufSize: o.size, CQSize: 8192, Connect: o.connB})
	mk := func(ep *sim.Endpoint, e *sim.QPEnd, sent uint32) *xend {
		x := &xend{dev: ep.Dev, pd: e.PD, pdO: ep.Dev.AllocPD(), scq: e.SendCQ, rcq: e.RecvCQ, qp: e.QP,
			buf: e.Buf, mr: e.MR, buf2: make([]byte, 16<<10), bufO: make([]byte, 4096), link: ep.Link, ip: ep.IP, sentPSN: sent}
		var err error
		if x.mr2, err = x.pd.RegMR(x.buf2, allAccess); err != nil {
			t.Fatal(err)
		}
		if x.mrO, err = x.pdO.RegMR(x.bufO, allAccess); err != nil {
			t.Fatal(err)
		}
		return x
	}
	x.a, x.b = mk(n.A, qa, o.psnA), mk(n.B, qb, o.psnB)
	x.a.otherQPN, x.b.otherQPN = x.b.qp.QPN(), x.a.qp.QPN()
	return x
}

// sge returns an SGE of e's main MR at offset off.
func (e *xend) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *xend) sge2(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr2.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr2.LKey()}
}

// reset fills every buffer of e with the canary.
func (e *xend) reset() {
	for _, b := range [][]byte{e.buf, e.buf2, e.bufO} {
		for i := range b {
			b[i] = canary
		}
	}
}

// pattern returns n deterministic bytes that never contain the canary.
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9E3779B97F4A7C15))
	b := make([]byte, n)
	for i := range b {
		v := byte(r.Uint32())
		if v == canary {
			v = 0x5A
		}
		b[i] = v
	}
	return b
}

// region names a range of a buffer that an operation may change.
type region struct {
	off  int
	want []byte // expected bytes at off
}

// checkBuf asserts that buf holds the wanted bytes in each region and the
// canary everywhere else.
func checkBuf(t testing.TB, name string, buf []byte, regions ...region) {
	t.Helper()
	mask := make([]bool, len(buf))
	for _, r := range regions {
		got := buf[r.off : r.off+len(r.want)]
		if !bytes.Equal(got, r.want) {
			i := 0
			for i < len(got) && got[i] == r.want[i] {
				i++
			}
			t.Fatalf("%s: region at %d (%d bytes) differs first at +%d: got %#x want %#x", name, r.off, len(r.want), i, got[i], r.want[i])
		}
		for i := range r.want {
			mask[r.off+i] = true
		}
	}
	for i, v := range buf {
		if !mask[i] && v != canary {
			t.Fatalf("%s: canary overwritten at %d (%#x)", name, i, v)
		}
	}
}

// waitWC waits for one completion (the timeout only guards against a hang;
// no test outcome depends on timing).
func waitWC(t testing.TB, cq *qp.CQ) qp.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]qp.WC
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("waiting for a completion: n=%d err=%v", n, err)
	}
	return wc[0]
}

// expectWC waits for a completion and checks its WR ID, status and opcode.
func expectWC(t testing.TB, cq *qp.CQ, wrID uint64, st qp.WCStatus, op transport.WCOpcode) qp.WC {
	t.Helper()
	wc := waitWC(t, cq)
	if wc.WRID != wrID || wc.Status != st || (st == transport.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %v, want wr_id=%d status=%v opcode=%v", wc, wrID, st, op)
	}
	return wc
}

// noWC asserts that cq is empty right now.
func noWC(t testing.TB, cq *qp.CQ, what string) {
	t.Helper()
	var wc [4]qp.WC
	if n, _ := cq.Poll(wc[:]); n != 0 {
		t.Fatalf("%s: unexpected completion(s): %v", what, wc[:n])
	}
}

func (x *xpair) post(e *xend, wr *qp.SendWR) {
	x.t.Helper()
	if err := e.qp.PostSend(wr); err != nil {
		x.t.Fatalf("post send %v: %v", wr.Opcode, err)
	}
}

func (x *xpair) recv(e *xend, wrID uint64, sgl ...qp.SGE) {
	x.t.Helper()
	if err := e.qp.PostRecv(&qp.RecvWR{WRID: wrID, SGL: sgl}); err != nil {
		x.t.Fatalf("post recv: %v", err)
	}
}

// filter returns the frames sent by A (fromA) or by B.
func filter(ps []capPkt, fromA bool) []capPkt {
	var out []capPkt
	for _, p := range ps {
		if p.fromA == fromA {
			out = append(out, p)
		}
	}
	return out
}

// requests returns the request packets sent by A (fromA) or by B.
func requests(ps []capPkt, fromA bool) []capPkt {
	var out []capPkt
	for _, p := range ps {
		if p.fromA == fromA && p.p.Opcode().Info().Request {
			out = append(out, p)
		}
	}
	return out
}

// firstCopies drops retransmissions: with the real clock an ACK timeout can
// fire on a loaded machine, and go-back-N then resends packets. Every
// resent frame must equal the first copy in its BTH and payload.
func firstCopies(t testing.TB, ps []capPkt) []capPkt {
	t.Helper()
	type key struct {
		fromA  bool
		resp   bool
		psn    wire.PSN
		opcode wire.Opcode
	}
	seen := map[key]int{}
	var out []capPkt
	for _, p := range ps {
		k := key{p.fromA, !p.p.Opcode().Info().Request, p.p.BTH.PSN(), p.p.Opcode()}
		if p.p.Opcode() == wire.RCAcknowledge {
			out = append(out, p)
			continue
		}
		if i, ok := seen[k]; ok {
			o := &out[i]
			if !bytes.Equal(o.p.Payload, p.p.Payload) {
				t.Fatalf("retransmission of %v differs from the original", &p)
			}
			continue
		}
		seen[k] = len(out)
		out = append(out, p)
	}
	return out
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// end is one side of a QP pair on devices a test opened itself (on a
// network interface, or with a device option the harness does not set).
type end struct {
	dev *qp.Device
	cq  *qp.CQ // send and receive
	q   *qp.QP
	buf []byte
	mr  *qp.MR
}

// connectEnds connects a QP pair on da and db with the shared harness
// (sim.ConnectQPs, one CQ per side); A sends from psnA, B from psnB.
func connectEnds(t testing.TB, da, db *qp.Device, o sim.QPOptions, psnA, psnB uint32) (a, b *end) {
	t.Helper()
	oa, ob := o, o
	oa.SharedCQ, ob.SharedCQ = true, true
	oa.Connect.SQPSN, ob.Connect.SQPSN = psnA, psnB
	ea, eb, err := sim.ConnectQPs(context.Background(), da, db, oa, ob)
	if err != nil {
		t.Fatal(err)
	}
	return &end{dev: da, cq: ea.SendCQ, q: ea.QP, buf: ea.Buf, mr: ea.MR},
		&end{dev: db, cq: eb.SendCQ, q: eb.QP, buf: eb.Buf, mr: eb.MR}
}
