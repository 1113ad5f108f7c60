package sim_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
	"github.com/goroce/goroce/transport"
)

// The property test: many mixed operations on several QPs in both
// directions through a lossy, duplicating, reordering, corrupting link.
// Checked: every WR completes exactly once, in order, with SUCCESS; every
// received message is byte-identical to what was sent, in posting order;
// WRITE targets and READ results are byte-identical at completion time; the
// shared FETCH_ADD counter equals the sum of all adds and the returned
// values form one serial order; CMP_SWAP results are consistent with one
// serial order of the successful swaps.

const (
	propQPs       = 3
	propWindow    = 12      // outstanding WRs per QP
	propSlots     = 32      // WRITE/READ slots per QP (> window)
	propSlotSize  = 4096    // bytes per slot (≤ 4 path MTUs at 1024)
	propSrcSize   = 1 << 16 // READ source region
	propRecvSlots = 24
)

type side struct {
	ep      *sim.Endpoint
	pd      *qp.PD
	cq      *qp.CQ
	qps     []*qp.QP
	mem     []byte // layout below
	mr      *qp.MR
	mr2     *qp.MR // a second region to build two-MR SGE lists
	mem2    []byte
	counter int // offset of the FETCH_ADD counter
	casWord int // offset of the CMP_SWAP word
}

// memory layout of side.mem, per QP i:
//
//	srcBase(i)  : propSlots × propSlotSize — local sources of SEND/WRITE, sinks of READ
//	dstBase(i)  : propSlots × propSlotSize — WRITE targets of the peer
//	recvBase(i) : propRecvSlots × propSlotSize — RECV buffers
//	readSrc     : propSrcSize shared READ source (constant content)
//	counters    : 16 bytes
func srcBase(i int) int  { return i * 3 * propSlots * propSlotSize }
func dstBase(i int) int  { return srcBase(i) + propSlots*propSlotSize }
func recvBase(i int) int { return dstBase(i) + propSlots*propSlotSize }
func readSrcOff() int    { return propQPs * 3 * propSlots * propSlotSize }
func memSize() int       { return readSrcOff() + propSrcSize + 64 }

type pending struct {
	wrid   uint64
	op     transport.WROpcode
	slot   int
	size   int
	remote int    // remote offset (WRITE target / READ source)
	add    uint64 // FETCH_ADD
	cmp    uint64 // CMP_SWAP compare
	swap   uint64
	data   []byte // expected bytes
	imm    uint32
}

type flow struct {
	src, dst *side
	qi       int
	rng      *rand.Rand
	sendQ    []pending // outstanding, in posting order
	next     uint64
	sentMsgs uint64 // SEND/SEND_IMM/WRITE_IMM messages posted (receiver checks them in order)
	msgs     [][]byte
	imms     []uint32
	hasImm   []bool
	isWImm   []bool
	recvSeen uint64
	recvPost uint64
	done     int
}

func payload(seed int64, dir, qi int, seq uint64, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed)^uint64(dir)<<40^uint64(qi)<<32, seq))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newSide(t testing.TB, ep *sim.Endpoint) *side {
	s := &side{ep: ep, pd: ep.Dev.AllocPD(), mem: make([]byte, memSize()), mem2: make([]byte, 1<<16)}
	var err error
	if s.cq, err = ep.Dev.CreateCQ(1 << 16); err != nil {
		t.Fatal(err)
	}
	acc := memreg.LocalWrite | memreg.RemoteWrite | memreg.RemoteRead | memreg.RemoteAtomic
	if s.mr, err = s.pd.RegMR(s.mem, acc); err != nil {
		t.Fatal(err)
	}
	if s.mr2, err = s.pd.RegMR(s.mem2, memreg.LocalWrite); err != nil {
		t.Fatal(err)
	}
	s.counter = readSrcOff() + propSrcSize
	s.casWord = s.counter + 8
	for i := 0; i < propQPs; i++ {
		q, err := s.pd.CreateQP(qp.InitAttr{SendCQ: s.cq, RecvCQ: s.cq,
			Cap: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 3, MaxRecvSGE: 3}})
		if err != nil {
			t.Fatal(err)
		}
		s.qps = append(s.qps, q)
	}
	return s
}

func (s *side) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

type propResult struct {
	ops, bytes int
	counters   transport.Counters
	link       [2]nic.MemStats
	simTime    time.Duration
	steps      int
	// Per queue (runPropertyQueues): frames A sent, A's QPs on it.
	queueFrames, queueQPs []uint64
}

func runProperty(t testing.TB, seed int64, totalOps int, faults nic.Faults) propResult {
	return runPropertyQueues(t, seed, totalOps, faults, 1)
}

// runPropertyQueues is runProperty on devices with that many queues
// (sim.Config.Queues).
func runPropertyQueues(t testing.TB, seed int64, totalOps int, faults nic.Faults, queues int) propResult {
	n := simtest.NewPair(t, sim.Config{Seed: seed, AtoB: faults, BtoA: faults, Queues: queues})
	a, b := newSide(t, n.A), newSide(t, n.B)
	for _, s := range []*side{a, b} {
		r := rand.New(rand.NewPCG(uint64(seed), 99))
		for i := readSrcOff(); i < readSrcOff()+propSrcSize; i++ {
			s.mem[i] = byte(r.Uint32())
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	for i := 0; i < propQPs; i++ {
		pa, pb := rng.Uint32()&0xFFFFFF, rng.Uint32()&0xFFFFFF
		if i == 0 {
			pa, pb = 0xFFFFF8, 0xFFFFFA // exercise PSN wrap-around
		}
		o := qp.ConnectOptions{Timeout: 10, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
		oa, ob := o, o
		oa.SQPSN, ob.SQPSN = pa, pb
		if err := a.qps[i].Connect(context.Background(), qp.Remote{QPN: b.qps[i].QPN(), PSN: pb, GID: b.ep.IP}, oa); err != nil {
			t.Fatal(err)
		}
		if err := b.qps[i].Connect(context.Background(), qp.Remote{QPN: a.qps[i].QPN(), PSN: pa, GID: a.ep.IP}, ob); err != nil {
			t.Fatal(err)
		}
	}
	var flows []*flow
	for i := 0; i < propQPs; i++ {
		flows = append(flows, &flow{src: a, dst: b, qi: i, rng: rand.New(rand.NewPCG(uint64(seed), uint64(10+i)))})
		flows = append(flows, &flow{src: b, dst: a, qi: i, rng: rand.New(rand.NewPCG(uint64(seed), uint64(20+i)))})
	}
	// Pre-post RECVs.
	for _, f := range flows {
		for f.recvPost < propRecvSlots {
			f.postRecv(t)
		}
	}
	var fadds [2][]([2]uint64) // per target side: (orig, add)
	var cas [2][][3]uint64     // per target side: (orig, compare, swap)
	posted, completed := 0, 0
	res := propResult{}
	wcs := make([]qp.WC, 64)
	var fatal error
	fail := func(format string, args ...any) {
		if fatal == nil {
			fatal = fmt.Errorf("seed %d (replay: GOROCE_SEED=%d): ", seed, seed)
			fatal = fmt.Errorf("%w"+format, append([]any{fatal}, args...)...)
		}
	}
	sideIdx := func(s *side) int {
		if s == a {
			return 0
		}
		return 1
	}
	drain := func(s *side) {
		for {
			k, err := s.cq.Poll(wcs)
			if err != nil {
				fail("poll: %v", err)
				return
			}
			if k == 0 {
				return
			}
			for _, wc := range wcs[:k] {
				if wc.Status != transport.WCSuccess {
					fail("completion %v", wc)
					return
				}
				f := flowOf(flows, s, wc.QPNum)
				if wc.Opcode == transport.WCRecv || wc.Opcode == transport.WCRecvRDMAWithImm {
					// s is the receiver: find the flow whose dst is s on this QP.
					rf := recvFlowOf(flows, s, wc.QPNum)
					if err := rf.checkRecv(&wc); err != nil {
						fail("%v", err)
						return
					}
					rf.postRecv(t)
					continue
				}
				if len(f.sendQ) == 0 || f.sendQ[0].wrid != wc.WRID {
					fail("qp %#x: completion for wr %d out of order or duplicated (expected %v)", wc.QPNum, wc.WRID, f.sendQ)
					return
				}
				p := f.sendQ[0]
				f.sendQ = f.sendQ[1:]
				completed++
				res.ops++
				res.bytes += p.size
				switch p.op {
				case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
					got := f.dst.mem[dstBase(f.qi)+p.remote : dstBase(f.qi)+p.remote+p.size]
					if !bytes.Equal(got, p.data) {
						fail("qp %#x wr %d: WRITE target differs", wc.QPNum, wc.WRID)
					}
				case transport.WRRDMARead:
					got := f.src.mem[srcBase(f.qi)+p.slot*propSlotSize : srcBase(f.qi)+p.slot*propSlotSize+p.size]
					want := f.dst.mem[readSrcOff()+p.remote : readSrcOff()+p.remote+p.size]
					if !bytes.Equal(got, want) {
						fail("qp %#x wr %d: READ result differs", wc.QPNum, wc.WRID)
					}
				case transport.WRAtomicFetchAdd:
					orig := binary.LittleEndian.Uint64(f.src.mem[srcBase(f.qi)+p.slot*propSlotSize:])
					fadds[sideIdx(f.dst)] = append(fadds[sideIdx(f.dst)], [2]uint64{orig, p.add})
				case transport.WRAtomicCmpAndSwp:
					orig := binary.LittleEndian.Uint64(f.src.mem[srcBase(f.qi)+p.slot*propSlotSize:])
					cas[sideIdx(f.dst)] = append(cas[sideIdx(f.dst)], [3]uint64{orig, p.cmp, p.swap})
				}
			}
		}
	}
	for completed < totalOps && fatal == nil {
		// Keep every flow's window full.
		for _, f := range flows {
			for len(f.sendQ) < propWindow && posted < totalOps {
				if err := f.post(t, seed); err != nil {
					fail("post: %v", err)
					break
				}
				posted++
			}
		}
		before := completed
		stepsBefore := n.Steps()
		for completed == before && fatal == nil {
			if !n.Step() {
				fail("idle with %d of %d operations complete", completed, totalOps)
				break
			}
			drain(a)
			drain(b)
			if n.Steps()-stepsBefore > 2_000_000 {
				fail("no completion in 2e6 steps")
			}
		}
		if n.Clock().Elapsed() > 24*time.Hour {
			fail("simulated time ran away: %v", n.Clock().Elapsed())
		}
	}
	if fatal != nil {
		for _, s := range []*side{a, b} {
			k, _ := s.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != transport.WCSuccess && wc.Status != transport.WCWRFlushErr {
					t.Logf("%s: %v", s.ep.Dev.Name(), wc)
				}
			}
			var line string
			c := s.ep.Dev.Counters()
			c.Each(func(name string, v uint64) {
				if v != 0 {
					line += fmt.Sprintf(" %s=%d", name, v)
				}
			})
			t.Logf("%s counters:%s", s.ep.Dev.Name(), line)
		}
		t.Fatal(fatal)
	}
	// Drain the remaining receives so message checks are complete.
	_ = n.RunUntil(func() bool {
		drain(a)
		drain(b)
		for _, f := range flows {
			if f.recvSeen != f.sentMsgs {
				return false
			}
		}
		return true
	}, time.Hour)
	if fatal != nil {
		t.Fatal(fatal)
	}
	for _, f := range flows {
		if f.recvSeen != f.sentMsgs {
			t.Fatalf("seed %d: qp %d: %d of %d messages received", seed, f.qi, f.recvSeen, f.sentMsgs)
		}
	}
	for si, s := range []*side{a, b} {
		checkFetchAdd(t, seed, fadds[si], binary.LittleEndian.Uint64(s.mem[s.counter:]))
		checkCmpSwap(t, seed, cas[si], binary.LittleEndian.Uint64(s.mem[s.casWord:]))
	}
	ca, cb := a.ep.Dev.Counters(), b.ep.Dev.Counters()
	res.counters = ca
	res.counters.Add(&cb)
	res.link = [2]nic.MemStats{n.A.Link.MemStats(), n.B.Link.MemStats()}
	res.simTime = n.Clock().Elapsed()
	res.steps = n.Steps()
	res.queueFrames = make([]uint64, len(n.A.Links))
	res.queueQPs = make([]uint64, len(n.A.Links))
	for i, l := range n.A.Links {
		res.queueFrames[i] = l.MemStats().TxFrames
	}
	for _, q := range a.qps {
		res.queueQPs[q.Queue()]++
	}
	return res
}

func flowOf(flows []*flow, s *side, qpn uint32) *flow {
	for _, f := range flows {
		if f.src == s && f.src.qps[f.qi].QPN() == qpn {
			return f
		}
	}
	panic("no flow")
}

func recvFlowOf(flows []*flow, s *side, qpn uint32) *flow {
	for _, f := range flows {
		if f.dst == s && f.dst.qps[f.qi].QPN() == qpn {
			return f
		}
	}
	panic("no flow")
}

func (f *flow) postRecv(t testing.TB) {
	slot := int(f.recvPost % propRecvSlots)
	off := recvBase(f.qi) + slot*propSlotSize
	// Three SGEs of uneven length covering the slot.
	sgl := []qp.SGE{f.dst.sge(off, 100), f.dst.sge(off+100, 1900), f.dst.sge(off+2000, propSlotSize-2000)}
	if err := f.dst.qps[f.qi].PostRecv(&qp.RecvWR{WRID: f.recvPost, SGL: sgl}); err != nil {
		t.Fatal(err)
	}
	f.recvPost++
}

func (f *flow) checkRecv(wc *qp.WC) error {
	seq := f.recvSeen
	if wc.WRID != seq {
		return fmt.Errorf("qp %d: receive completion wr %d, want %d", f.qi, wc.WRID, seq)
	}
	if seq >= uint64(len(f.msgs)) {
		return fmt.Errorf("qp %d: receive completion %d but only %d messages sent", f.qi, seq, len(f.msgs))
	}
	want := f.msgs[seq]
	if f.isWImm[seq] {
		if wc.Opcode != transport.WCRecvRDMAWithImm || wc.Imm != f.imms[seq] {
			return fmt.Errorf("qp %d msg %d: got %v, want RECV_RDMA_WITH_IMM imm %#x", f.qi, seq, wc, f.imms[seq])
		}
	} else {
		slot := int(seq % propRecvSlots)
		off := recvBase(f.qi) + slot*propSlotSize
		if wc.ByteLen != uint32(len(want)) || !bytes.Equal(f.dst.mem[off:off+len(want)], want) {
			return fmt.Errorf("qp %d msg %d: received %d bytes differing from the %d sent", f.qi, seq, wc.ByteLen, len(want))
		}
		if f.hasImm[seq] != (wc.Flags&transport.WCWithImm != 0) || (f.hasImm[seq] && wc.Imm != f.imms[seq]) {
			return fmt.Errorf("qp %d msg %d: immediate mismatch: %v", f.qi, seq, wc)
		}
	}
	f.recvSeen++
	f.msgs[seq] = nil
	return nil
}

func (f *flow) post(t testing.TB, seed int64) error {
	r := f.rng
	slot := int(f.next % propSlots)
	p := pending{wrid: f.next, slot: slot}
	f.next++
	local := srcBase(f.qi) + slot*propSlotSize
	q := f.src.qps[f.qi]
	wr := &qp.SendWR{WRID: p.wrid, Flags: transport.SendSignaled}
	size := []int{0, 1, 7, 100, 1023, 1024, 1025, 2048, 3000, propSlotSize}[r.IntN(10)]
	dir := 0
	if f.src == f.dst {
		dir = 2
	} else if f.src.ep.IP.As4()[3] == 2 {
		dir = 1
	}
	switch k := r.IntN(100); {
	case k < 25:
		p.op = transport.WRSend
		if r.IntN(2) == 0 {
			p.op = transport.WRSendWithImm
		}
	case k < 45:
		p.op = transport.WRRDMAWrite
	case k < 55:
		p.op = transport.WRRDMAWriteWithImm
	case k < 75:
		p.op = transport.WRRDMARead
	case k < 88:
		p.op = transport.WRAtomicFetchAdd
	default:
		p.op = transport.WRAtomicCmpAndSwp
	}
	wr.Opcode = p.op
	switch p.op {
	case transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
		p.size = size
		p.data = payload(seed, dir, f.qi, p.wrid, size)
		copy(f.src.mem[local:], p.data)
		// Split the source over two SGEs (the second from another MR) now and then.
		if size > 10 && r.IntN(3) == 0 {
			// The tail (at most 512 bytes) comes from a second MR, at a place
			// that belongs to this QP and slot until the WR completes.
			cut := max(size-512, r.IntN(size))
			off2 := (f.qi*propSlots + slot) * 512
			copy(f.src.mem2[off2:], p.data[cut:])
			wr.SGL = []qp.SGE{f.src.sge(local, cut),
				{Addr: f.src.mr2.IOVA() + uint64(off2), Length: uint32(size - cut), LKey: f.src.mr2.LKey()}}
		} else {
			wr.SGL = []qp.SGE{f.src.sge(local, size)}
		}
		if p.op == transport.WRRDMAWrite || p.op == transport.WRRDMAWriteWithImm {
			p.remote = slot * propSlotSize
			wr.RemoteAddr, wr.RKey = f.dst.mr.IOVA()+uint64(dstBase(f.qi)+p.remote), f.dst.mr.RKey()
		}
		if p.op != transport.WRRDMAWrite {
			p.imm = r.Uint32()
			wr.Imm = p.imm
			f.msgs = append(f.msgs, p.data)
			f.imms = append(f.imms, p.imm)
			f.hasImm = append(f.hasImm, p.op != transport.WRSend)
			f.isWImm = append(f.isWImm, p.op == transport.WRRDMAWriteWithImm)
			f.sentMsgs++
		}
	case transport.WRRDMARead:
		p.size = size
		p.remote = r.IntN(propSrcSize - size + 1)
		clear(f.src.mem[local : local+propSlotSize])
		wr.SGL = []qp.SGE{f.src.sge(local, size)}
		wr.RemoteAddr, wr.RKey = f.dst.mr.IOVA()+uint64(readSrcOff()+p.remote), f.dst.mr.RKey()
	case transport.WRAtomicFetchAdd:
		p.size = 8
		p.add = uint64(r.IntN(1000) + 1)
		wr.SGL = []qp.SGE{f.src.sge(local, 8)}
		wr.RemoteAddr, wr.RKey, wr.CompareAdd = f.dst.mr.IOVA()+uint64(f.dst.counter), f.dst.mr.RKey(), p.add
	case transport.WRAtomicCmpAndSwp:
		p.size = 8
		// Guess the current value from the local view of past results; often wrong on purpose.
		p.cmp = uint64(r.IntN(4))
		if r.IntN(2) == 0 {
			p.cmp = binary.LittleEndian.Uint64(f.dst.mem[f.dst.casWord:]) // peek: the simulator is single-threaded
		}
		p.swap = uint64(f.qi+1)<<48 | uint64(dir)<<40 | p.wrid
		wr.SGL = []qp.SGE{f.src.sge(local, 8)}
		wr.RemoteAddr, wr.RKey = f.dst.mr.IOVA()+uint64(f.dst.casWord), f.dst.mr.RKey()
		wr.CompareAdd, wr.Swap = p.cmp, p.swap
	}
	f.sendQ = append(f.sendQ, p)
	return q.PostSend(wr)
}

// checkFetchAdd: sorted by the returned original value, each add must lead
// exactly to the next original value, from 0 to the final counter: one
// serial order, every add executed exactly once.
func checkFetchAdd(t testing.TB, seed int64, ops [][2]uint64, final uint64) {
	slices.SortFunc(ops, func(x, y [2]uint64) int {
		switch {
		case x[0] < y[0]:
			return -1
		case x[0] > y[0]:
			return 1
		}
		return 0
	})
	v := uint64(0)
	for _, o := range ops {
		if o[0] != v {
			t.Fatalf("seed %d: FETCH_ADD results are not one serial order: got original %d, expected %d", seed, o[0], v)
		}
		v += o[1]
	}
	if v != final {
		t.Fatalf("seed %d: counter %d, sum of adds %d", seed, final, v)
	}
}

// checkCmpSwap: the successful swaps (original == compare) must chain from
// 0 to the final value, each exactly once; failed ones must have returned a
// value that differs from their compare.
func checkCmpSwap(t testing.TB, seed int64, ops [][3]uint64, final uint64) {
	next := map[uint64]uint64{}
	succ := 0
	for _, o := range ops {
		if o[0] == o[1] {
			if _, dup := next[o[0]]; dup {
				t.Fatalf("seed %d: two CMP_SWAPs succeeded from value %#x", seed, o[0])
			}
			next[o[0]] = o[2]
			succ++
		}
	}
	v, steps := uint64(0), 0
	for {
		n, ok := next[v]
		if !ok {
			break
		}
		v = n
		steps++
	}
	if steps != succ || v != final {
		t.Fatalf("seed %d: CMP_SWAP chain of %d of %d successes ends at %#x, word is %#x", seed, steps, succ, v, final)
	}
}

// TestPropertyLossy is the CI property run: fixed seeds, 5 % drop, 2 %
// duplicate, 5 % reorder, 0.5 % corrupt in each direction. GOROCE_SEED
// replays one seed; GOROCE_PROPERTY_OPS sets the volume per seed.
func TestPropertyLossy(t *testing.T) {
	ops := 36_000
	if testing.Short() {
		ops = 3_000
	}
	if v, err := strconv.Atoi(os.Getenv("GOROCE_PROPERTY_OPS")); err == nil && v > 0 {
		ops = v
	}
	faults := nic.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.05, Corrupt: 0.005}
	total := 0
	for _, seed := range simtest.Seeds(t, 1, 2, 3) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			start := time.Now()
			r := runProperty(t, seed, ops, faults)
			total += r.ops
			t.Logf("seed %d: %d ops, %d bytes, %v simulated in %d steps (%v wall); link A→B dropped %d dup %d reordered %d corrupted %d",
				seed, r.ops, r.bytes, r.simTime.Round(time.Millisecond), r.steps, time.Since(start).Round(time.Millisecond),
				r.link[0].Dropped, r.link[0].Duplicated, r.link[0].Reordered, r.link[0].Corrupted)
			var line string
			r.counters.Each(func(name string, v uint64) {
				if v != 0 {
					line += fmt.Sprintf(" %s=%d", name, v)
				}
			})
			t.Logf("counters:%s", line)
		})
	}
	t.Logf("total operations: %d", total)
}

// TestPropertyLossyQueues is TestPropertyLossy on two-queue devices
// (sim.Config.Queues: two link pairs, each with the faults): the QPs
// spread over the queues by their UDP source ports, each queue's frames
// are read by Device.Poll's look at that queue. Every property holds as on
// one queue, and both queues carry frames.
func TestPropertyLossyQueues(t *testing.T) {
	ops := 12_000
	if testing.Short() {
		ops = 3_000
	}
	faults := nic.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.05, Corrupt: 0.005}
	for _, seed := range simtest.Seeds(t, 1, 2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := runPropertyQueues(t, seed, ops, faults, 2)
			t.Logf("seed %d: %d ops, %v simulated; frames sent by A per queue %v, QPs per queue %v; retransmitted %d",
				seed, r.ops, r.simTime.Round(time.Millisecond), r.queueFrames, r.queueQPs, r.counters[transport.CntRetransmittedPkts])
			for q, f := range r.queueFrames {
				if f == 0 || r.queueQPs[q] == 0 {
					t.Fatalf("seed %d: queue %d carried %d frames of %d QPs: the QPs did not spread (%v, %v)", seed, q, f, r.queueQPs[q], r.queueFrames, r.queueQPs)
				}
			}
		})
	}
}

// TestPropertyClean runs the same workload without faults: nothing may be
// retransmitted.
func TestPropertyClean(t *testing.T) {
	r := runProperty(t, 42, 5_000, nic.Faults{})
	if r.counters[transport.CntRetransmittedPkts] != 0 || r.counters[transport.CntSentNAKs] != 0 {
		t.Fatalf("clean link: %d retransmissions, %d NAKs", r.counters[transport.CntRetransmittedPkts], r.counters[transport.CntSentNAKs])
	}
}

// TestPropertyReplay: the same seed gives exactly the same run.
func TestPropertyReplay(t *testing.T) {
	faults := nic.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.05, Corrupt: 0.005}
	r1 := runProperty(t, 7, 2_000, faults)
	r2 := runProperty(t, 7, 2_000, faults)
	if r1.counters != r2.counters || r1.simTime != r2.simTime || r1.steps != r2.steps || r1.link != r2.link {
		t.Fatalf("seed 7 ran differently twice:\n%+v\n%+v", r1, r2)
	}
	if r1.counters[transport.CntRetransmittedPkts] == 0 || r1.link[0].Corrupted == 0 {
		t.Fatalf("the faults did not bite: %+v", r1)
	}
}
