package qp_test

// Shared helpers of the data-path tests (ops_test.go, errors_test.go,
// wire_test.go, bench_test.go): a configurable two-endpoint pair over the
// in-memory link with a pcap tap, canary-guarded buffers, and a decoder
// that turns the tap back into parsed packets (internal/pcapfile +
// wire.Parse) so that tests assert what went over the wire.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// canary is the byte every buffer is filled with before an operation; every
// byte outside the operation's target range must still hold it afterwards.
const canary = 0xC5

const allAccess = memreg.LocalWrite | memreg.RemoteWrite | memreg.RemoteRead | memreg.RemoteAtomic

// IPv6 addresses from the benchmarking prefix 2001:2::/48 (RFC 5180), the
// IPv6 sibling of 198.18.0.0/15; frames never leave the in-memory link.
var (
	ip6A = netip.MustParseAddr("2001:2::1")
	ip6B = netip.MustParseAddr("2001:2::2")
)

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
	v6           bool // IPv6 GIDs (ip6A/ip6B) instead of IPv4
	mem          nic.MemConfig
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
	t    testing.TB
	a, b *xend
	tap  *tapBuf
	dec  tapDecoder
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
	if o.linkMTU == 0 {
		o.linkMTU = 1500
	}
	if !o.setPSN && o.psnA == 0 && o.psnB == 0 {
		o.psnA, o.psnB = 200, 100
	}
	if o.size == 0 {
		o.size = 64 << 10
	}
	x := &xpair{t: t, tap: &tapBuf{}}
	mc := o.mem
	mc.MTU = o.linkMTU
	if !o.noTap {
		mc.Tap = x.tap
	}
	la, lb := nic.NewMemPair(mc)
	mk := func(l *nic.MemLink, ip, peer netip.Addr, peerMAC net.HardwareAddr, sigAll bool, caps qp.Caps) *xend {
		d, err := qp.Open(qp.Config{Link: l, IP: ip, Neighbors: map[netip.Addr]net.HardwareAddr{peer: peerMAC}, Seed: 1,
			BusyPoll: o.busyPoll})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		e := &xend{dev: d, pd: d.AllocPD(), pdO: d.AllocPD(), link: l, ip: ip}
		e.scq, _ = d.CreateCQ(8192)
		e.rcq, _ = d.CreateCQ(8192)
		if caps.MaxSendWR == 0 {
			caps = qp.Caps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}
		}
		e.qp, err = e.pd.CreateQP(qp.InitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: caps, SQSigAll: sigAll})
		if err != nil {
			t.Fatal(err)
		}
		e.buf, e.buf2, e.bufO = make([]byte, o.size), make([]byte, 16<<10), make([]byte, 4096)
		if e.mr, err = e.pd.RegMR(e.buf, allAccess); err != nil {
			t.Fatal(err)
		}
		if e.mr2, err = e.pd.RegMR(e.buf2, allAccess); err != nil {
			t.Fatal(err)
		}
		if e.mrO, err = e.pdO.RegMR(e.bufO, allAccess); err != nil {
			t.Fatal(err)
		}
		return e
	}
	ia, ib := ipA, ipB
	if o.v6 {
		ia, ib = ip6A, ip6B
	}
	x.a = mk(la, ia, ib, lb.HardwareAddr(), o.sqSigAllA, o.capsA)
	x.b = mk(lb, ib, ia, la.HardwareAddr(), false, qp.Caps{})
	ca, cb := o.connA, o.connB
	ca.SQPSN, cb.SQPSN = o.psnA, o.psnB
	// An ACK timeout of ≈1.07 s (18) instead of Connect's 67 ms: on a loaded
	// machine (and under -race) a 67 ms stall makes go-back-N resend, which
	// tests counting frames would see.
	for _, c := range []*qp.ConnectOptions{&ca, &cb} {
		if c.Timeout == 0 && !c.SetRetry {
			c.Timeout = 18
		}
	}
	x.a.sentPSN, x.b.sentPSN = o.psnA, o.psnB
	if err := x.a.qp.Connect(context.Background(), qp.Remote{QPN: x.b.qp.QPN(), PSN: o.psnB, GID: ib}, ca); err != nil {
		t.Fatal(err)
	}
	if err := x.b.qp.Connect(context.Background(), qp.Remote{QPN: x.a.qp.QPN(), PSN: o.psnA, GID: ia}, cb); err != nil {
		t.Fatal(err)
	}
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
