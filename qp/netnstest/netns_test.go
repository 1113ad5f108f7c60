package netnstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// region is each QP's share of an endpoint's buffer: the first half is its
// local source/sink, the second half the target of the peer's RDMA.
const region = 256 << 10

type conn struct {
	qp       *qp.QP
	scq, rcq *qp.CQ
}

type endpoint struct {
	name  string
	dev   *qp.Device
	info  *qp.InterfaceInfo
	pd    *qp.PD
	buf   []byte
	mr    *qp.MR
	conns []conn
}

func (e *endpoint) sge(c, off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(c*region+off), Length: uint32(n), LKey: e.mr.LKey()}
}

func (e *endpoint) local(c int) []byte  { return e.buf[c*region : c*region+region/2] }
func (e *endpoint) remote(c int) []byte { return e.buf[c*region+region/2 : (c+1)*region] }
func (e *endpoint) remoteVA(c int) uint64 {
	return e.mr.IOVA() + uint64(c*region+region/2)
}

type setup struct {
	backA, backB string
	mtu          int
	nqp          int
	wrap         func(side netns.Side) func(nic.Link) nic.Link
	prep         func(t *testing.T, p *netns.Pair) // after the pair is created
	connect      qp.ConnectOptions
	queues       int // veth queues and InterfaceOptions.Queues
}

// open builds both endpoints in their namespaces and connects nqp QP pairs
// at the smaller of the two ports' path MTUs. It returns that MTU.
func open(t *testing.T, s setup) (*endpoint, *endpoint, int) {
	t.Helper()
	p := netns.NewPair(t, netns.Options{MTU: s.mtu, NoDAD: true, Queues: s.queues})
	if s.prep != nil {
		s.prep(t, p)
	}
	mk := func(side netns.Side, backend string) *endpoint {
		e := &endpoint{name: side.String()}
		o := qp.InterfaceOptions{Backend: backend, Logger: quiet, Seed: int64(side) + 1, Queues: s.queues}
		if s.wrap != nil {
			o.WrapLink = s.wrap(side)
		}
		err := p.Do(side, func() error {
			var err error
			e.dev, e.info, err = qp.OpenInterface(context.Background(), p.End(side).Ifname, o)
			return err
		})
		if err != nil {
			t.Fatalf("side %v: %v", side, err)
		}
		t.Cleanup(func() { e.dev.Close() })
		t.Logf("side %v: %s (%s), link MTU %d, path MTU %d", side, e.info.Backend, e.info.Mode, e.info.LinkMTU, e.info.PathMTU)
		e.pd = e.dev.AllocPD()
		e.buf = make([]byte, s.nqp*region)
		e.mr, err = e.pd.RegMR(e.buf, qp.LocalWrite|qp.RemoteWrite|qp.RemoteRead|qp.RemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		for range s.nqp {
			var c conn
			c.scq, _ = e.dev.CreateCQ(256)
			c.rcq, _ = e.dev.CreateCQ(256)
			c.qp, err = e.pd.CreateQP(qp.InitAttr{SendCQ: c.scq, RecvCQ: c.rcq,
				Cap: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
			if err != nil {
				t.Fatal(err)
			}
			e.conns = append(e.conns, c)
		}
		return e
	}
	a := mk(netns.A, s.backA)
	b := mk(netns.B, s.backB)
	mtu := min(a.dev.ActiveMTU(), b.dev.ActiveMTU())
	for i := range s.nqp {
		oa, ob := s.connect, s.connect
		oa.SQPSN, ob.SQPSN = uint32(0x100*(i+1)), 0xFFFFF0-uint32(i) // B's PSNs wrap
		if err := a.conns[i].qp.Connect(context.Background(), qp.Remote{QPN: b.conns[i].qp.QPN(), PSN: ob.SQPSN, GID: p.B.Addr, MTU: mtu}, oa); err != nil {
			t.Fatalf("connect A: %v", err)
		}
		if err := b.conns[i].qp.Connect(context.Background(), qp.Remote{QPN: a.conns[i].qp.QPN(), PSN: oa.SQPSN, GID: p.A.Addr, MTU: mtu}, ob); err != nil {
			t.Fatalf("connect B: %v", err)
		}
	}
	return a, b, mtu.Bytes()
}

func wait(cq *qp.CQ, what string) (qp.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]qp.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		return qp.WC{}, fmt.Errorf("%s: no completion: %w", what, err)
	}
	if err := wc[0].Err(); err != nil {
		return wc[0], fmt.Errorf("%s: %w", what, err)
	}
	return wc[0], nil
}

// fence orders the test goroutine's memory accesses with both devices'
// receive goroutines, which read and write registered memory under the
// device lock. The real ordering of an RDMA WRITE's placement before the
// requester's completion runs through the kernel (a frame to the peer and
// an ACK back), which the race detector cannot see; taking each device's
// lock (Counters does) gives it a happens-before edge. A real application
// relies on the same ordering through the NIC.
func fence(x, y *endpoint) {
	x.dev.Counters()
	y.dev.Counters()
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// exercise runs every operation class over connection c, alternating the
// requester between a and b, with messages of sizes around and above the
// path MTU. It returns the first failure.
func exercise(a, b *endpoint, c, pmtu int, rng *rand.Rand) error {
	sizes := []int{0, 1, pmtu - 1, pmtu, pmtu + 1, 3*pmtu + 5, 64 << 10}
	type op struct {
		name string
		run  func(x, y *endpoint, i, size int) error
	}
	ops := []op{
		{"SEND", func(x, y *endpoint, i, size int) error { return send(x, y, c, i, size, qp.WRSend, rng) }},
		{"SEND_WITH_IMM", func(x, y *endpoint, i, size int) error {
			return send(x, y, c, i, size, qp.WRSendWithImm, rng)
		}},
		{"RDMA_WRITE", func(x, y *endpoint, i, size int) error {
			return write(x, y, c, i, size, qp.WRRDMAWrite, rng)
		}},
		{"RDMA_WRITE_WITH_IMM", func(x, y *endpoint, i, size int) error {
			return write(x, y, c, i, size, qp.WRRDMAWriteWithImm, rng)
		}},
		{"RDMA_READ", func(x, y *endpoint, i, size int) error { return read(x, y, c, i, size, rng) }},
		{"ATOMIC_FETCH_ADD", func(x, y *endpoint, i, size int) error { return fetchAdd(x, y, c, i) }},
		{"ATOMIC_CMP_SWAP", func(x, y *endpoint, i, size int) error { return cmpSwap(x, y, c, i) }},
	}
	for _, o := range ops {
		for i := range 2 * len(sizes) {
			x, y := a, b
			if i%2 == 1 {
				x, y = b, a
			}
			if err := o.run(x, y, i, sizes[i%len(sizes)]); err != nil {
				return fmt.Errorf("QP %d %s #%d (%s→%s, %d bytes): %w", c, o.name, i, x.name, y.name, sizes[i%len(sizes)], err)
			}
		}
	}
	return nil
}

func send(a, b *endpoint, c, i, size int, op qp.WROpcode, rng *rand.Rand) error {
	src := a.local(c)[:size]
	fill(rng, src)
	dst := b.local(c)
	clear(dst[:size+16])
	half := (size + 16) / 2
	if err := b.conns[c].qp.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{b.sge(c, 0, half), b.sge(c, half, size+16-half)}}); err != nil {
		return err
	}
	wr := &qp.SendWR{WRID: uint64(i), Opcode: op, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(c, 0, size)},
		Imm: 0xC0DE0000 + uint32(i)}
	fence(a, b)
	if err := a.conns[c].qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := wait(a.conns[c].scq, "sender"); err != nil {
		return err
	}
	fence(a, b)
	wc, err := wait(b.conns[c].rcq, "receiver")
	if err != nil {
		return err
	}
	if wc.ByteLen != uint32(size) || !bytes.Equal(dst[:size], src) || dst[size] != 0 {
		return fmt.Errorf("received %d bytes, want %d identical bytes", wc.ByteLen, size)
	}
	if op == qp.WRSendWithImm && (wc.Flags&qp.WCWithImm == 0 || wc.Imm != wr.Imm) {
		return fmt.Errorf("immediate %#x flags %#x, want %#x", wc.Imm, wc.Flags, wr.Imm)
	}
	return nil
}

func write(a, b *endpoint, c, i, size int, op qp.WROpcode, rng *rand.Rand) error {
	src := a.local(c)[:size]
	fill(rng, src)
	dst := b.remote(c)[:size+1]
	clear(dst)
	if op == qp.WRRDMAWriteWithImm {
		if err := b.conns[c].qp.PostRecv(&qp.RecvWR{WRID: uint64(i)}); err != nil {
			return err
		}
	}
	wr := &qp.SendWR{WRID: uint64(i), Opcode: op, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(c, 0, size)},
		RemoteAddr: b.remoteVA(c), RKey: b.mr.RKey(), Imm: 0xBEEF0000 + uint32(i)}
	fence(a, b)
	if err := a.conns[c].qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := wait(a.conns[c].scq, "writer"); err != nil {
		return err
	}
	fence(a, b)
	if op == qp.WRRDMAWriteWithImm {
		wc, err := wait(b.conns[c].rcq, "target")
		if err != nil {
			return err
		}
		if wc.Opcode != qp.WCRecvRDMAWithImm || wc.Imm != wr.Imm || wc.ByteLen != uint32(size) {
			return fmt.Errorf("receive completion %v", wc)
		}
	}
	if !bytes.Equal(dst[:size], src) || dst[size] != 0 {
		return fmt.Errorf("remote memory differs from the bytes written")
	}
	return nil
}

func read(a, b *endpoint, c, i, size int, rng *rand.Rand) error {
	remote := b.remote(c)[:size]
	fill(rng, remote)
	dst := a.local(c)[:size+1]
	clear(dst)
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(c, 0, size)}, RemoteAddr: b.remoteVA(c), RKey: b.mr.RKey()}
	fence(a, b)
	if err := a.conns[c].qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := wait(a.conns[c].scq, "reader"); err != nil {
		return err
	}
	fence(a, b)
	if !bytes.Equal(dst[:size], remote) || dst[size] != 0 {
		return fmt.Errorf("local buffer differs from the remote bytes")
	}
	return nil
}

// The atomics work on the first 8 bytes of b's remote area; each class
// starts after the WRITE/READ ops left arbitrary bytes there.
func fetchAdd(a, b *endpoint, c, i int) error {
	target := b.remote(c)[:8]
	fence(a, b)
	before := binary.LittleEndian.Uint64(target)
	add := uint64(i*1000 + 1)
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRAtomicFetchAdd, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(c, 0, 8)}, RemoteAddr: b.remoteVA(c), RKey: b.mr.RKey(), CompareAdd: add}
	fence(a, b)
	if err := a.conns[c].qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := wait(a.conns[c].scq, "fetch_add"); err != nil {
		return err
	}
	fence(a, b)
	if got := binary.LittleEndian.Uint64(a.local(c)); got != before {
		return fmt.Errorf("returned %d, want %d", got, before)
	}
	if after := binary.LittleEndian.Uint64(target); after != before+add {
		return fmt.Errorf("counter %d, want %d (executed twice?)", after, before+add)
	}
	return nil
}

func cmpSwap(a, b *endpoint, c, i int) error {
	target := b.remote(c)[:8]
	fence(a, b)
	before := binary.LittleEndian.Uint64(target)
	compare := before
	if i%3 == 2 {
		compare = before + 1 // must fail and leave the value alone
	}
	swap := 0xABCD0000 + uint64(i)
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRAtomicCmpAndSwp, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(c, 0, 8)}, RemoteAddr: b.remoteVA(c), RKey: b.mr.RKey(), CompareAdd: compare, Swap: swap}
	fence(a, b)
	if err := a.conns[c].qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := wait(a.conns[c].scq, "cmp_swap"); err != nil {
		return err
	}
	fence(a, b)
	if got := binary.LittleEndian.Uint64(a.local(c)); got != before {
		return fmt.Errorf("returned %#x, want %#x", got, before)
	}
	want := before
	if compare == before {
		want = swap
	}
	if after := binary.LittleEndian.Uint64(target); after != want {
		return fmt.Errorf("value %#x, want %#x", after, want)
	}
	return nil
}

// run exercises every connection, concurrently, and checks that no frame
// was dropped by the devices as malformed or misaddressed.
func run(t *testing.T, a, b *endpoint, pmtu int, seed uint64) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(a.conns))
	start := time.Now()
	for c := range a.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[c] = exercise(a, b, c, pmtu, rand.New(rand.NewPCG(seed, uint64(c))))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
	ca, cb := a.dev.Counters(), b.dev.Counters()
	t.Logf("%d QP(s), path MTU %d: %v; A sent %d pkts (%d retransmitted), B sent %d (%d retransmitted)", len(a.conns), pmtu,
		time.Since(start).Round(time.Millisecond), ca[qp.CntSentPkts], ca[qp.CntRetransmittedPkts],
		cb[qp.CntSentPkts], cb[qp.CntRetransmittedPkts])
	for _, e := range []*endpoint{a, b} {
		rs := e.dev.RxStats()
		if rs.BadICRC != 0 || rs.ParseErrors != 0 || rs.WrongDst != 0 || rs.NoQP != 0 {
			t.Errorf("side %s dropped frames: %+v", e.name, rs)
		}
	}
}

type pair struct{ name, a, b string }

var pairs = []pair{
	{"afxdp-afxdp", qp.BackendAFXDP, qp.BackendAFXDP},
	{"afpacket-afpacket", qp.BackendAFPacket, qp.BackendAFPacket},
	{"afxdp-afpacket", qp.BackendAFXDP, qp.BackendAFPacket},
	{"udp-udp", qp.BackendUDP, qp.BackendUDP},
	// A raw sender's frames reach a UDP socket, which never sees their IP
	// header: the transport sends IPv4 ID 0 (with DF), the ID the UDP
	// backend rebuilds for the ICRC (docs/backends.md).
	{"udp-afxdp", qp.BackendUDP, qp.BackendAFXDP},
	{"afpacket-udp", qp.BackendAFPacket, qp.BackendUDP},
}

// TestOperations runs every operation class, one QP, between each backend
// pair at MTU 1500 (path MTU 1024) and 9000 (4096, AF_XDP included: its
// frames span UMEM chunks with multi-buffer AF_XDP), with messages up to
// 64 KiB in both directions, data checked byte for byte.
func TestOperations(t *testing.T) {
	for _, pr := range pairs {
		for _, mtu := range []int{1500, 9000} {
			t.Run(fmt.Sprintf("%s/mtu%d", pr.name, mtu), func(t *testing.T) {
				a, b, pmtu := open(t, setup{backA: pr.a, backB: pr.b, mtu: mtu, nqp: 1})
				want := map[int]int{1500: 1024, 9000: 4096}[mtu]
				if pmtu != want {
					t.Errorf("path MTU %d, want %d", pmtu, want)
				}
				run(t, a, b, pmtu, 1)
			})
		}
	}
}

// TestManyQPs runs four QP pairs at once over each backend pair.
func TestManyQPs(t *testing.T) {
	for _, pr := range pairs {
		t.Run(pr.name, func(t *testing.T) {
			a, b, pmtu := open(t, setup{backA: pr.a, backB: pr.b, mtu: 1500, nqp: 4})
			run(t, a, b, pmtu, 2)
		})
	}
}

// TestLoss runs the operations with loss. The tc netem case needs the
// kernel's sch_netem; the wrapper case drops 3% of the frames each side
// transmits, so the retransmission paths run over real interfaces.
func TestLoss(t *testing.T) {
	t.Run("netem", func(t *testing.T) {
		p := netns.NewPair(t, netns.Options{})
		out, err := p.Command(netns.A, "tc", "qdisc", "add", "dev", p.A.Ifname, "root", "netem", "loss", "2%").CombinedOutput()
		if err != nil {
			if _, lerr := exec.LookPath("tc"); lerr != nil {
				t.Skip("tc (iproute2) not installed")
			}
			t.Skipf("tc netem unavailable in this kernel (sch_netem): %v: %s", err, strings.TrimSpace(string(out)))
		}
		// netem exists: run udp-udp with 2% loss each way.
		t.Log("netem available; running udp-udp with 2% loss each way")
		a, b, pmtu := open(t, setup{backA: qp.BackendUDP, backB: qp.BackendUDP, mtu: 1500, nqp: 1, prep: netem,
			connect: qp.ConnectOptions{Timeout: 13}}) // 34 ms: robust against scheduler stalls on a loaded 2-core machine
		run(t, a, b, pmtu, 3)
	})
	t.Run("wrapper/afxdp-afpacket", func(t *testing.T) {
		const seed = 4
		var links [2]*nic.DropLink
		wrap := func(side netns.Side) func(nic.Link) nic.Link {
			return func(l nic.Link) nic.Link {
				w, d := nic.WithDrops(l, 0.03, seed, uint64(side), nil)
				links[side] = d
				return w
			}
		}
		a, b, pmtu := open(t, setup{backA: qp.BackendAFXDP, backB: qp.BackendAFPacket, mtu: 1500, nqp: 2, wrap: wrap,
			connect: qp.ConnectOptions{Timeout: 13}}) // 34 ms local ACK timeout: 8 spurious timeouts in a row need a 270 ms stall
		run(t, a, b, pmtu, seed)
		retx := a.dev.Counters()[qp.CntRetransmittedPkts] + b.dev.Counters()[qp.CntRetransmittedPkts]
		_, dropA := links[0].Counts()
		_, dropB := links[1].Counts()
		t.Logf("dropped A %d, B %d; retransmitted %d", dropA, dropB, retx)
		if dropA == 0 || dropB == 0 || retx == 0 {
			t.Errorf("the loss path did not run: dropped %d/%d, retransmitted %d", dropA, dropB, retx)
		}
	})
}

// netem adds loss on both veth ends (egress). The UDP backend is used:
// AF_PACKET (PACKET_QDISC_BYPASS) and AF_XDP transmit around the qdisc
// layer, so netem would never see their frames.
func netem(t *testing.T, p *netns.Pair) {
	for _, s := range []netns.Side{netns.A, netns.B} {
		if out, err := p.Command(s, "tc", "qdisc", "add", "dev", p.End(s).Ifname, "root", "netem", "loss", "2%").CombinedOutput(); err != nil {
			t.Fatalf("netem on side %v: %v: %s", s, err, out)
		}
	}
}
