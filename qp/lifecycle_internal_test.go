package qp

// The white-box lifecycle tests: they reach into the device (its QPN
// allocator, its async-event hook, the busy-poll batch bound). The others
// are in lifecycle_test.go (package qp_test).

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/nic"
)

// TestCQOverrunFailsItsQPs: a CQ that overflows goes to the error state
// (rxe_cq_post), its QP to ERR (IBTA C11-25), posts to the QP fail with
// ErrCQOverrun, the CQ cannot serve a new QP, and the async-event hook
// sees IBV_EVENT_CQ_ERR and IBV_EVENT_QP_FATAL.
func TestCQOverrunFailsItsQPs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, err := OpenMemoryPair(MemoryPairOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer b.Close()
		var events []asyncEvent
		a.mu.Lock()
		a.onAsync = func(ev asyncEvent) { events = append(events, ev) }
		a.mu.Unlock()

		bufA, bufB := make([]byte, 64), make([]byte, 64)
		pdA, pdB := a.AllocPD(), b.AllocPD()
		mrA, _ := pdA.RegMR(bufA, LocalWrite)
		mrB, _ := pdB.RegMR(bufB, LocalWrite|RemoteWrite)
		scq, _ := a.CreateCQ(2)
		rcq, _ := a.CreateCQ(16)
		cqB, _ := b.CreateCQ(16)
		caps := Caps{MaxSendWR: 16, MaxRecvWR: 16}
		qa, err := pdA.CreateQP(InitAttr{SendCQ: scq, RecvCQ: rcq, Cap: caps})
		if err != nil {
			t.Fatal(err)
		}
		qb, err := pdB.CreateQP(InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
		if err != nil {
			t.Fatal(err)
		}
		gidA, _ := a.GID(a.IPv4GIDIndex())
		gidB, _ := b.GID(b.IPv4GIDIndex())
		if err := qa.Connect(context.Background(), Remote{QPN: qb.QPN(), PSN: 2, GID: gidB}, ConnectOptions{SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
		if err := qb.Connect(context.Background(), Remote{QPN: qa.QPN(), PSN: 1, GID: gidA}, ConnectOptions{SQPSN: 2}); err != nil {
			t.Fatal(err)
		}
		// A receive, so that ERR has something to flush into the receive CQ.
		if err := qa.PostRecv(&RecvWR{WRID: 100, SGL: []SGE{mrA.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		// One PostSendList: the pair's goroutines run beside this one (synctest
		// fakes time, it does not serialize them), so with four PostSends the
		// first completions could overrun the CQ before the fourth was posted.
		wrs := make([]SendWR, 4)
		for i := range wrs {
			wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{mrA.SGE(0, 8)}, RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()}
		}
		if n, err := qa.PostSendList(wrs); n != 4 || err != nil {
			t.Fatalf("PostSendList: %d posted, %v", n, err)
		}
		// The third completion overruns the two-entry CQ.
		wcs := make([]WC, 4)
		synctest.Wait()
		if !scq.failed() {
			t.Fatal("the send CQ did not overrun")
		}
		n, err := scq.Poll(wcs)
		if n != 2 || !errors.Is(err, ErrCQOverrun) {
			t.Fatalf("Poll: %d completions, %v; want the 2 that fit and ErrCQOverrun", n, err)
		}
		if st := qa.State(); st != StateErr {
			t.Fatalf("QP state %v after its send CQ overran, want ERR", st)
		}
		if err := qa.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mrA.SGE(0, 8)},
			RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()}); !errors.Is(err, ErrCQOverrun) {
			t.Fatalf("PostSend after the overrun: %v, want ErrCQOverrun", err)
		}
		if n, _ := rcq.Poll(wcs); n != 1 || wcs[0].WRID != 100 || !errors.Is(wcs[0].Err(), WCWRFlushErr) {
			t.Fatalf("receive CQ: %v, want the receive flushed", wcs[:n])
		}
		if _, err := pdA.CreateQP(InitAttr{SendCQ: scq, RecvCQ: rcq, Cap: caps}); !errors.Is(err, ErrCQOverrun) {
			t.Fatalf("CreateQP on the failed CQ: %v, want ErrCQOverrun", err)
		}
		a.mu.Lock()
		got := append([]asyncEvent(nil), events...)
		a.mu.Unlock()
		if len(got) != 2 || got[0].kind != eventCQErr || got[0].cq != scq || got[1].kind != eventQPFatal || got[1].qp != qa {
			t.Fatalf("async events %+v, want CQ_ERR for the send CQ, then QP_FATAL for the QP", got)
		}
	})
}

// TestQPNWrap: QP numbers are handed out cyclically (rxe: xa_alloc_cyclic
// from RXE_QPN_MIN): after 0xFFFFFF comes 0x11 again, never 0, 1 or a live
// number; CreateQP fails only while every number is in use.
func TestQPNWrap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, peer, err := OpenMemoryPair(MemoryPairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		defer peer.Close()
		cq, _ := d.CreateCQ(4)
		pd := d.AllocPD()
		ia := InitAttr{SendCQ: cq, RecvCQ: cq, Cap: Caps{MaxSendWR: 1, MaxRecvWR: 1}}
		d.mu.Lock()
		d.tab.nextQPN = minQPN // the first number is random (firstQPN)
		d.mu.Unlock()
		live, err := pd.CreateQP(ia) // 0x11 stays live through the wrap
		if err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		d.tab.nextQPN = maxQPN - 2
		d.mu.Unlock()
		var got []uint32
		for range 5 {
			q, err := pd.CreateQP(ia)
			if err != nil {
				t.Fatalf("CreateQP after %v: %v", got, err)
			}
			got = append(got, q.QPN())
			q.Destroy()
		}
		want := []uint32{maxQPN - 2, maxQPN - 1, maxQPN, 0x12, 0x13}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("QPNs through the wrap %#x, want %#x (0x11 is live)", got, want)
			}
		}

		// Exhaustion, with the range cut to 16 numbers.
		d.mu.Lock()
		d.tab.qpnLimit = minQPN + 15
		d.mu.Unlock()
		qps := []*QP{live}
		for len(qps) < 16 {
			q, err := pd.CreateQP(ia)
			if err != nil {
				t.Fatalf("CreateQP %d of 16: %v", len(qps)+1, err)
			}
			qps = append(qps, q)
		}
		if _, err := pd.CreateQP(ia); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("CreateQP with every QPN live: %v, want ErrQueueFull", err)
		}
		freed := qps[5].QPN()
		qps[5].Destroy()
		q, err := pd.CreateQP(ia)
		if err != nil || q.QPN() != freed {
			t.Fatalf("CreateQP after freeing %#x: %v, %v", freed, q, err)
		}
	})
}

// TestBusyPollBounded: one busy-poll Device.Poll reads at most
// busyPollBatches link batches, so a flooding peer cannot hold the device
// mutex (and every poster and poller behind it) for the whole flood.
func TestBusyPollBounded(t *testing.T) {
	la, lb := nic.NewMemPair(nic.MemConfig{})
	d, err := Open(Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"), Mode: ModeBusyPoll,
		Neighbors: map[netip.Addr]net.HardwareAddr{}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer lb.Close()
	const flood = 2000
	junk := make([][]byte, 100)
	for i := range junk {
		junk[i] = make([]byte, 60) // not RoCE: counted and dropped
	}
	for sent := 0; sent < flood; sent += len(junk) {
		if n, err := lb.WriteBatch(junk); n != len(junk) || err != nil {
			t.Fatalf("flood: %d, %v", n, err)
		}
	}
	first := d.Poll()
	if max := busyPollBatches * la.BatchSize(); first > max || la.Pending() == 0 {
		t.Fatalf("one Poll handled %d frames (at most %d allowed), %d left", first, max, la.Pending())
	}
	total := first
	for range flood {
		n := d.Poll()
		if n == 0 {
			break
		}
		total += n
	}
	if st := d.RxStats(); total != flood || st.NotRoCE != flood {
		t.Fatalf("polls handled %d frames, %d counted not RoCE; want %d", total, st.NotRoCE, flood)
	}
}
