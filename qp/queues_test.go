package qp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// queuePair opens two devices with queues in-memory link pairs each
// (Config.Links). With cross, A's queue i is joined to B's queue
// queues-1-i, so every frame arrives on another queue than the one its QP
// sends on: each queue's reader must deliver to any QP.
func queuePair(t *testing.T, queues int, cross bool, mode qp.Mode, f nic.Faults) (a, b *qp.Device, la, lb []*nic.MemLink) {
	t.Helper()
	la, lb = make([]*nic.MemLink, queues), make([]*nic.MemLink, queues)
	for i := range queues {
		j := i
		if cross {
			j = queues - 1 - i
		}
		la[i], lb[j] = nic.NewMemPair(nic.MemConfig{Seed: int64(i + 1), AtoB: f, BtoA: f})
	}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	links := func(ls []*nic.MemLink) []nic.Link {
		var out []nic.Link
		for _, l := range ls {
			out = append(out, l)
		}
		return out
	}
	var err error
	a, err = qp.Open(qp.Config{Name: "mqA", Links: links(la), IP: ipA, Mode: mode, Seed: 1,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: lb[0].HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err = qp.Open(qp.Config{Name: "mqB", Links: links(lb), IP: ipB, Mode: mode, Seed: 2,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipA: la[0].HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if mode == qp.ModeBusyPoll {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, d := range []*qp.Device{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); d.Progress(ctx) }()
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
	return a, b, la, lb
}

// TestQueues runs WRITE+SEND rounds on 8 QP pairs of two-queue devices,
// in the threaded and busy-poll modes, with straight and crossed queues,
// on a clean and a lossy link: every byte arrives, every QP's queue is the
// one its UDP source port picks, and both queues carry frames.
func TestQueues(t *testing.T) {
	for _, mode := range []qp.Mode{qp.ModeThreaded, qp.ModeBusyPoll} {
		for _, cross := range []bool{false, true} {
			for _, lossy := range []bool{false, true} {
				name := fmt.Sprintf("%v/cross=%v/lossy=%v", mode, cross, lossy)
				t.Run(name, func(t *testing.T) {
					var f nic.Faults
					if lossy {
						f = nic.Faults{Drop: 0.02, Duplicate: 0.01, Reorder: 0.02}
					}
					testQueues(t, mode, cross, f)
				})
			}
		}
	}
}

func testQueues(t *testing.T, mode qp.Mode, cross bool, f nic.Faults) {
	const (
		pairs  = 8
		rounds = 40
		size   = 8192
	)
	a, b, la, lb := queuePair(t, 2, cross, mode, f)
	if a.Queues() != 2 || b.Queues() != 2 {
		t.Fatalf("queues: %d and %d, want 2", a.Queues(), b.Queues())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type pair struct{ ea, eb *sim.QPEnd }
	var ps []pair
	perQueue := [2]int{}
	// Timeout 14 (67 ms; 8 tries ≈ 0.5 s without progress): this test runs on
	// real time, and under the race detector on a loaded 2-core machine the
	// 16.8 ms of Timeout 12 was reached by ACKs that were only late — every
	// spurious timeout resends 16 frames per QP, the eight QPs' go-back-N
	// bursts delayed the ACKs further, and two QPs ran out of retries
	// (RETRY_EXC_ERR) on a lossless link in about 1 of 16 subtests at load
	// 9–11. Loss recovery is what this test checks, not the timer's speed.
	for range pairs {
		ea, eb, err := sim.ConnectQPs(ctx, a, b, sim.QPOptions{Connect: qp.ConnectOptions{Timeout: 14, RetryCnt: 7}},
			sim.QPOptions{Connect: qp.ConnectOptions{Timeout: 14, RetryCnt: 7}})
		if err != nil {
			t.Fatal(err)
		}
		// Both ends hash the same UDP source port, so they pick the same
		// queue index.
		if qa, qb := ea.QP.Queue(), eb.QP.Queue(); qa != qb {
			t.Fatalf("QP %#x is on queue %d, its peer %#x on %d", ea.QP.QPN(), qa, eb.QP.QPN(), qb)
		}
		perQueue[ea.QP.Queue()]++
		ps = append(ps, pair{ea, eb})
	}
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := queueRounds(ctx, p.ea, p.eb, i, rounds, size); err != nil {
				errs <- fmt.Errorf("pair %d (QP %#x, queue %d): %w", i, p.ea.QP.QPN(), p.ea.QP.Queue(), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var rx [2][2]uint64
	for i := range 2 {
		rx[0][i], rx[1][i] = la[i].Stats().RxFrames, lb[i].Stats().RxFrames
	}
	t.Logf("QPs per queue %v; frames received per queue: A %v, B %v", perQueue, rx[0], rx[1])
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Fatalf("the QPs did not spread: %v per queue", perQueue)
	}
	for i := range 2 {
		if rx[0][i] == 0 || rx[1][i] == 0 {
			t.Fatalf("queue %d received no frames: A %v, B %v", i, rx[0], rx[1])
		}
	}
}

// queueRounds: A WRITEs size bytes into B's buffer, then SENDs the round's
// number; B checks the bytes when the SEND arrives.
func queueRounds(ctx context.Context, ea, eb *sim.QPEnd, seed, rounds, size int) error {
	wcs := make([]qp.WC, 8)
	for r := range rounds {
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(seed*31 + r*7 + i)
		}
		copy(ea.Buf[:size], want)
		if err := eb.QP.PostRecv(&qp.RecvWR{WRID: uint64(r), SGL: []qp.SGE{eb.SGE(size, 64)}}); err != nil {
			return err
		}
		if err := ea.QP.PostSend(&qp.SendWR{WRID: uint64(r), Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{ea.SGE(0, size)},
			RemoteAddr: eb.MR.IOVA(), RKey: eb.MR.RKey()}); err != nil {
			return err
		}
		if err := ea.QP.PostSend(&qp.SendWR{WRID: uint64(r), Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{ea.SGE(size, 8)}}); err != nil {
			return err
		}
		if _, err := waitOne(ctx, eb.RecvCQ, wcs); err != nil {
			return fmt.Errorf("round %d: receive: %w", r, err)
		}
		if !bytes.Equal(eb.Buf[:size], want) {
			return fmt.Errorf("round %d: the WRITE's bytes differ", r)
		}
		if _, err := waitOne(ctx, ea.SendCQ, wcs); err != nil {
			return fmt.Errorf("round %d: send: %w", r, err)
		}
	}
	return nil
}

func waitOne(ctx context.Context, cq *qp.CQ, wcs []qp.WC) (qp.WC, error) {
	n, err := cq.Wait(ctx, wcs[:1])
	if err != nil {
		return qp.WC{}, err
	}
	if n != 1 || wcs[0].Status != qp.WCSuccess {
		return wcs[0], fmt.Errorf("completion %+v", wcs[0])
	}
	return wcs[0], nil
}

// TestQueuesRefused: only AF_XDP has queues; asking another backend for
// more than one, or more than MaxQueues, fails before anything is opened.
func TestQueuesRefused(t *testing.T) {
	for _, backend := range []string{qp.BackendUDP, qp.BackendAFPacket} {
		_, _, err := qp.OpenInterface(context.Background(), "lo", qp.InterfaceOptions{Backend: backend, Queues: 2})
		if !errors.Is(err, qp.ErrNotSupported) {
			t.Errorf("%s with 2 queues: %v, want ErrNotSupported", backend, err)
		}
	}
	_, _, err := qp.OpenInterface(context.Background(), "lo", qp.InterfaceOptions{Queues: qp.MaxQueues + 1})
	if !errors.Is(err, qp.ErrInvalidArgument) {
		t.Errorf("%d queues: %v, want ErrInvalidArgument", qp.MaxQueues+1, err)
	}
	la, lb := nic.NewMemPair(nic.MemConfig{})
	defer la.Close()
	defer lb.Close()
	_, err = qp.Open(qp.Config{Link: lb, Links: []nic.Link{la, lb}, IP: netip.MustParseAddr("198.18.0.1")})
	if !errors.Is(err, qp.ErrInvalidArgument) {
		t.Errorf("Link not Links[0]: %v, want ErrInvalidArgument", err)
	}
}

// TestQueuesBadFrames: frames a queue's reader parses outside the device
// lock are counted like any other: garbage on queue 1 counts as NotRoCE or
// a parse error, never reaches a QP, and the device keeps working.
func TestQueuesBadFrames(t *testing.T) {
	_, b, la, _ := queuePair(t, 2, false, qp.ModeThreaded, nic.Faults{})
	junk := make([]byte, 60)
	copy(junk, b.MAC())             // to B
	junk[12], junk[13] = 0x08, 0x00 // IPv4, then zeros: no valid header
	short := append([]byte(nil), junk[:20]...)
	if n, err := la[1].WriteBatch([][]byte{junk, short}); n != 2 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", n, err)
	}
	deadline := time.Now().Add(10 * time.Second) // liveness only
	for {
		s := b.RxStats()
		if s.Frames >= 2 {
			if bad := s.NotRoCE + s.ParseErrors + s.BadICRC; bad != 2 || s.NoQP != 0 {
				t.Fatalf("RxStats %+v: want the 2 frames counted as bad", s)
			}
			t.Logf("RxStats %+v", s)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue 1's reader never counted the frames: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueuesWaitWrite: MR.WaitWrite with a context that never ends, on
// crossed queues: a WRITE for a QP of queue 0 arrives on queue 1, whose
// reader places it while the waiter reads queue 0's link; the waiter must
// still return (the reader kicks it), for the QPs of both queues.
func TestQueuesWaitWrite(t *testing.T) {
	a, b, _, _ := queuePair(t, 2, true, qp.ModeThreaded, nic.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[int]bool{}
	for i := 0; i < 8; i++ {
		ea, eb, err := sim.ConnectQPs(ctx, a, b, sim.QPOptions{}, sim.QPOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen[eb.QP.Queue()] = true
		for r := range 3 {
			n := eb.MR.Writes()
			done := make(chan error, 1)
			go func() {
				_, err := eb.MR.WaitWrite(context.Background(), n) // no deadline: nothing else wakes it
				done <- err
			}()
			time.Sleep(time.Millisecond) // let the waiter take the link (not required for the outcome)
			if err := ea.QP.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{ea.SGE(0, 64)},
				RemoteAddr: eb.MR.IOVA(), RKey: eb.MR.RKey()}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pair %d round %d: WaitWrite: %v", i, r, err)
				}
			case <-time.After(10 * time.Second): // liveness only
				t.Fatalf("pair %d (B's QP on queue %d) round %d: WaitWrite did not return after the WRITE was placed (%d writes)",
					i, eb.QP.Queue(), r, eb.MR.Writes())
			}
		}
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("B's QPs were only on queues %v", seen)
	}
}
