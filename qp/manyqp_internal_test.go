package qp

import (
	"context"
	"math/bits"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// manyQPEnds is a manual-mode device pair on a fake clock with n connected
// RC QP pairs and a buffer registered on each end.
type manyQPEnds struct {
	a, b     *Device
	pa, pb   *PD
	qa, qb   []*QP
	mra, mrb *MR
	clock    time.Time
}

func newManyQPEnds(t *testing.T, n int) *manyQPEnds {
	t.Helper()
	e := &manyQPEnds{clock: time.Unix(1000, 0)}
	now := func() time.Time { return e.clock }
	la, lb := nic.NewMemPair(nic.MemConfig{Seed: 1})
	var err error
	e.a, err = Open(Config{Link: la, IP: memoryPairIPA, Mode: ModeManual, Now: now, Seed: 1,
		Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPB: lb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.a.Close() })
	e.b, err = Open(Config{Link: lb, IP: memoryPairIPB, Mode: ModeManual, Now: now, Seed: 2,
		Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPA: la.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.b.Close() })
	pdA, pdB := e.a.AllocPD(), e.b.AllocPD()
	e.pa, e.pb = pdA, pdB
	if e.mra, err = pdA.RegMR(make([]byte, 64), LocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.mrb, err = pdB.RegMR(make([]byte, 64), LocalWrite|RemoteWrite); err != nil {
		t.Fatal(err)
	}
	cqA, _ := e.a.CreateCQ(4 * n)
	cqB, _ := e.b.CreateCQ(4 * n)
	gidA, _ := e.a.GID(e.a.IPv4GIDIndex())
	gidB, _ := e.b.GID(e.b.IPv4GIDIndex())
	caps := Caps{MaxSendWR: 4, MaxRecvWR: 1}
	ctx := context.Background()
	for i := range n {
		qa, err := pdA.CreateQP(InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := pdB.CreateQP(InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
		if err != nil {
			t.Fatal(err)
		}
		psn := uint32(i + 1)
		if err := qa.Connect(ctx, Remote{QPN: qb.QPN(), PSN: psn + 0x1000, GID: gidB}, ConnectOptions{SQPSN: psn}); err != nil {
			t.Fatal(err)
		}
		if err := qb.Connect(ctx, Remote{QPN: qa.QPN(), PSN: psn, GID: gidA}, ConnectOptions{SQPSN: psn + 0x1000}); err != nil {
			t.Fatal(err)
		}
		e.qa, e.qb = append(e.qa, qa), append(e.qb, qb)
	}
	return e
}

func (e *manyQPEnds) write(t *testing.T, q *QP) {
	t.Helper()
	if err := q.PostSend(&SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL:        []SGE{{Addr: e.mra.IOVA(), Length: 8, LKey: e.mra.LKey()}},
		RemoteAddr: e.mrb.IOVA(), RKey: e.mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
}

// heapMoves is how many of qs changed their place in the deadline heap
// between before (their indexes) and now.
func heapMoves(qs []*QP, before []int) int {
	n := 0
	for i, q := range qs {
		if q.hidx != before[i] {
			n++
		}
	}
	return n
}

func heapIndexes(qs []*QP) []int {
	idx := make([]int, len(qs))
	for i, q := range qs {
		idx[i] = q.hidx
	}
	return idx
}

// TestManyQPsPostWork: with 1000 QPs on a device, half of them waiting
// for an ACK (in the deadline heap), a post on an idle QP moves at most
// one root-to-leaf path of the heap (⌊log2 n⌋+1 QPs change places), and a
// post on a waiting QP whose ACK timer is already armed moves none: no
// post touches the other QPs' places. Counting places, not time.
func TestManyQPsPostWork(t *testing.T) {
	const n = 1000
	e := newManyQPEnds(t, n)
	for i := 0; i < n; i += 2 {
		e.clock = e.clock.Add(time.Microsecond) // distinct ACK deadlines
		e.write(t, e.qa[i])
	}
	e.a.mu.Lock()
	inHeap := len(e.a.deadlines.heap)
	e.a.mu.Unlock()
	if inHeap != n/2 {
		t.Fatalf("%d QPs in the heap after posting on %d", inHeap, n/2)
	}
	for i := 1; i < n; i += 2 {
		e.clock = e.clock.Add(time.Microsecond)
		e.a.mu.Lock()
		before, size := heapIndexes(e.a.tab.qpList), len(e.a.deadlines.heap)
		e.a.mu.Unlock()
		e.write(t, e.qa[i]) // idle: pushed
		e.a.mu.Lock()
		moved, top := heapMoves(e.a.tab.qpList, before), e.a.deadlines.heap[0]
		e.a.mu.Unlock()
		if limit := bits.Len(uint(size+1)) + 1; moved > limit {
			t.Fatalf("post on idle QP %d moved %d QPs in a heap of %d (at most %d)", i, moved, size, limit)
		}
		if top != e.qa[0] {
			t.Fatalf("heap top is QP %#x, want the first poster %#x", top.QPN(), e.qa[0].QPN())
		}
		e.a.mu.Lock()
		before = heapIndexes(e.a.tab.qpList)
		e.a.mu.Unlock()
		e.write(t, e.qa[i-1]) // waiting: its ACK timer runs already
		e.a.mu.Lock()
		moved = heapMoves(e.a.tab.qpList, before)
		e.a.mu.Unlock()
		if moved != 0 {
			t.Fatalf("post on waiting QP %d moved %d QPs in the heap", i-1, moved)
		}
	}
	// Both ends make progress: every WRITE completes, and then no QP waits.
	for range 100 {
		e.b.Poll()
		if e.a.Poll() == 0 && e.b.Poll() == 0 {
			break
		}
	}
	e.a.mu.Lock()
	left := len(e.a.deadlines.heap)
	e.a.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d QPs still wait for an ACK after both ends drained the link", left)
	}
}

// TestCommEstAmongUnconnectedQPs: COMM_EST still reaches the one QP that
// received its first packet in RTR while 1000 other QPs of the device sit
// in RESET and INIT (the engine that accepted the packet reports it; no
// other QP is looked at), and none of them raises anything.
func TestCommEstAmongUnconnectedQPs(t *testing.T) {
	e := newManyQPEnds(t, 0)
	pdA, pdB := e.pa, e.pb
	cqA, _ := e.a.CreateCQ(16)
	cqB, _ := e.b.CreateCQ(16)
	ctx := context.Background()
	caps := Caps{MaxSendWR: 1, MaxRecvWR: 1}
	for i := range 1000 {
		q, err := pdB.CreateQP(InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := q.Modify(ctx, Attr{State: StateInit, Port: 1, AccessFlags: RemoteWrite},
				AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
		}
	}
	qa, err := pdA.CreateQP(InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := pdB.CreateQP(InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	gidA, _ := e.a.GID(e.a.IPv4GIDIndex())
	gidB, _ := e.b.GID(e.b.IPv4GIDIndex())
	if err := qa.Connect(ctx, Remote{QPN: qb.QPN(), PSN: 5, GID: gidB}, ConnectOptions{SQPSN: 9}); err != nil {
		t.Fatal(err)
	}
	// B's end only to RTR, as a passive side whose RTU was lost.
	if err := qb.Modify(ctx, Attr{State: StateInit, Port: 1, AccessFlags: RemoteWrite},
		AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := qb.Modify(ctx, Attr{State: StateRTR, PathMTU: MTU1024, DestQPN: qa.QPN(), RQPSN: 9,
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: AV{DGID: gidA, SGIDIndex: uint8(e.b.IPv4GIDIndex()), HopLimit: 64}},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if ev, ok := e.b.ev.queue.pop(); ok {
		t.Fatalf("event %+v before any packet", ev)
	}
	e.write(t, qa)
	e.b.Poll()
	e.a.Poll()
	if n, _ := cqA.Poll(make([]WC, 1)); n != 1 {
		t.Fatal("the WRITE to the RTR QP did not complete")
	}
	ev, ok := e.b.ev.queue.pop()
	if !ok || ev.Type != EventCommEst || ev.QP != qb {
		t.Fatalf("event %+v (%v), want COMM_EST for the RTR QP", ev, ok)
	}
	if ev, ok := e.b.ev.queue.pop(); ok {
		t.Fatalf("a second event %+v", ev)
	}
}
