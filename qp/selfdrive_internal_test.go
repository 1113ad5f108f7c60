package qp

// White-box tests of the self-driving waiters (selfdrive.go). They run in
// synctest bubbles: a lost wake-up shows as a deadlock of the bubble, and
// time moves only when every goroutine waits, so nothing here depends on
// timing.

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/nic"
)

// oneReader is a MemLink whose WaitReadBatch fails the test when two
// goroutines are in it at once.
type oneReader struct {
	*nic.MemLink
	t       *testing.T
	in, max atomic.Int32
	writes  func(frames [][]byte) // when set, sees every WriteBatch
	// spinLimit, when set, bounds the waits in a row that end at their
	// deadline without the goroutine parking in between: past it the
	// reader spins on a deadline nobody re-arms, and the link reports
	// itself closed so that the test ends instead of spinning.
	spinLimit, spins atomic.Int32
}

func (l *oneReader) WriteBatch(frames [][]byte) (int, error) {
	if l.writes != nil {
		l.writes(frames)
	}
	return l.MemLink.WriteBatch(frames)
}

func (l *oneReader) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n := l.in.Add(1)
	defer l.in.Add(-1)
	if n > 1 {
		l.t.Errorf("%d goroutines read the link at once", n)
	}
	if n > l.max.Load() {
		l.max.Store(n)
	}
	got, err := l.MemLink.WaitReadBatch(bufs, sizes)
	if lim := l.spinLimit.Load(); lim > 0 {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			l.spins.Store(0)
		} else if l.spins.Add(1) > lim {
			l.t.Errorf("the link's reader spun %d times on a deadline in the past", lim)
			return 0, nic.ErrClosed
		}
	}
	return got, err
}

// selfPair is two devices on oneReader links with one connected RC QP
// pair, a registered buffer each.
type selfPair struct {
	a, b       *Device
	la, lb     *oneReader
	qa, qb     *QP
	cqa, cqb   *CQ
	mra, mrb   *MR
	bufa, bufb []byte
}

// freeLinkA WRITEs from A and waits for each, until a wait leaves A's link
// free: the driver gives the link up after a pass that found a waiter
// asleep (which one whose completion woke it first may not be).
func (p *selfPair) freeLinkA(t *testing.T) {
	t.Helper()
	for i := 0; p.a.linkOwner() != ownerNone; i++ {
		if i == 10 {
			t.Fatal("the driver never gave the link up to a waiter")
		}
		p.write(t, p.qa, p.mra, p.mrb, 1)
		wait1(t, p.cqa)
	}
}

func newSelfPair(t *testing.T, connA ConnectOptions) *selfPair {
	return newSelfPairMem(t, connA, nic.MemConfig{Seed: 3})
}

func newSelfPairMem(t *testing.T, connA ConnectOptions, mc nic.MemConfig) *selfPair {
	ma, mb := nic.NewMemPair(mc)
	p := &selfPair{la: &oneReader{MemLink: ma, t: t}, lb: &oneReader{MemLink: mb, t: t}}
	var err error
	p.a, err = Open(Config{Link: p.la, IP: memoryPairIPA, Seed: 1, Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPB: mb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	p.b, err = Open(Config{Link: p.lb, IP: memoryPairIPB, Seed: 2, Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPA: ma.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.a.Close(); p.b.Close() })
	if _, ok := p.a.drv.(*selfDriver); !ok {
		t.Fatal("the wrapped link is not a nic.Waiter: the test would not exercise self-driving")
	}
	p.bufa, p.bufb = make([]byte, 4096), make([]byte, 4096)
	pda, pdb := p.a.AllocPD(), p.b.AllocPD()
	acc := LocalWrite | RemoteWrite | RemoteRead
	p.mra, _ = pda.RegMR(p.bufa, acc)
	p.mrb, _ = pdb.RegMR(p.bufb, acc)
	p.cqa, _ = p.a.CreateCQ(64)
	p.cqb, _ = p.b.CreateCQ(64)
	caps := Caps{MaxSendWR: 16, MaxRecvWR: 16}
	if p.qa, err = pda.CreateQP(InitAttr{SendCQ: p.cqa, RecvCQ: p.cqa, Cap: caps}); err != nil {
		t.Fatal(err)
	}
	if p.qb, err = pdb.CreateQP(InitAttr{SendCQ: p.cqb, RecvCQ: p.cqb, Cap: caps}); err != nil {
		t.Fatal(err)
	}
	gidA, _ := p.a.GID(p.a.IPv4GIDIndex())
	gidB, _ := p.b.GID(p.b.IPv4GIDIndex())
	connA.SQPSN = 1
	if err := p.qa.Connect(context.Background(), Remote{QPN: p.qb.QPN(), PSN: 2, GID: gidB}, connA); err != nil {
		t.Fatal(err)
	}
	if err := p.qb.Connect(context.Background(), Remote{QPN: p.qa.QPN(), PSN: 1, GID: gidA}, ConnectOptions{SQPSN: 2}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *selfPair) write(t *testing.T, from *QP, mr, to *MR, wrID uint64) {
	t.Helper()
	if err := from.PostSend(&SendWR{WRID: wrID, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{mr.SGE(0, 8)}, RemoteAddr: to.IOVA(), RKey: to.RKey()}); err != nil {
		t.Fatal(err)
	}
}

func wait1(t *testing.T, cq *CQ) WC {
	t.Helper()
	var wc [1]WC
	if n, err := cq.Wait(context.Background(), wc[:]); n != 1 || err != nil {
		t.Fatalf("Wait: %d, %v", n, err)
	}
	return wc[0]
}

func (d *Device) linkOwner() linkOwner {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.(*selfDriver).owner
}

// TestSelfDrivePingPong: a write_lat-shaped ping-pong, each side waiting
// in CQ.Wait for its WRITE's completion and in MR.WaitWrite for the peer's
// WRITE. The waiters drive their devices (the link is left without a
// reader when a wait returns), never two goroutines read one link, and
// once the waiters are gone the driver goroutine takes the link back and
// serves the peer alone.
func TestSelfDrivePingPong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		const rounds = 50
		var wg sync.WaitGroup
		var tookA, tookB atomic.Int32 // waits that returned with the link free
		// seen is read before either side starts: A's first WRITE may land
		// before B's goroutine runs.
		side := func(q *QP, cq *CQ, mine, peer *MR, d *Device, took *atomic.Int32, first bool, seen uint64) {
			defer wg.Done()
			for i := range rounds {
				if !first || i > 0 {
					var err error
					if seen, err = mine.WaitWrite(context.Background(), seen); err != nil {
						t.Error(err)
						return
					}
				}
				p.write(t, q, mine, peer, uint64(i))
				if wc := wait1(t, cq); wc.Status != WCSuccess {
					t.Errorf("round %d: %v", i, wc.Status)
					return
				}
				if d.linkOwner() == ownerNone {
					took.Add(1)
				}
			}
		}
		wg.Add(2)
		seenA, seenB := p.mra.Writes(), p.mrb.Writes()
		go side(p.qa, p.cqa, p.mra, p.mrb, p.a, &tookA, true, seenA)
		go side(p.qb, p.cqb, p.mrb, p.mra, p.b, &tookB, false, seenB)
		wg.Wait()
		if tookA.Load() == 0 || tookB.Load() == 0 {
			t.Fatalf("no wait drove its device (A %d, B %d of %d)", tookA.Load(), tookB.Load(), rounds)
		}
		if got := p.mra.Writes(); got != rounds {
			t.Fatalf("A's MR counted %d WRITEs, want %d", got, rounds)
		}

		// Nobody waits on A now: its driver takes the link back at the
		// resume time (resumeKeep after the last firing of a ping-pong at
		// the latest) and answers B's WRITE (ACK) by itself.
		time.Sleep(resumeKeep + 2*resumeAfter)
		if o := p.a.linkOwner(); o != ownerDriver {
			t.Fatalf("A's link owner %v after the waiters left, want the driver", o)
		}
		p.write(t, p.qb, p.mrb, p.mra, 99)
		var wc [1]WC
		for {
			if n, _ := p.cqb.Poll(wc[:]); n == 1 {
				break
			}
			time.Sleep(time.Millisecond) // B's driver and A's: neither side waits in Wait
		}
		if wc[0].WRID != 99 || wc[0].Status != WCSuccess {
			t.Fatalf("B's WRITE to a target nobody waits on: %v", wc[0])
		}
		if p.la.max.Load() != 1 || p.lb.max.Load() != 1 {
			t.Fatalf("readers at once: A %d, B %d", p.la.max.Load(), p.lb.max.Load())
		}
	})
}

// TestSelfDriveKeep: while the application keeps leaving its wait and
// coming back (here a 40 µs round trip on the link and 10 µs of work
// after each), the resume timer fires about once per resumeKeep, not once
// per resumeAfter: each firing wakes the driver goroutine and, on a real
// machine, threads for it (selfdrive.go, resumeKeep). Once the
// application stops, the driver takes the link back within resumeKeep
// plus resumeAfter.
func TestSelfDriveKeep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hop := nic.Faults{Delay: 20 * time.Microsecond}
		p := newSelfPairMem(t, ConnectOptions{}, nic.MemConfig{Seed: 3, AtoB: hop, BtoA: hop})
		p.freeLinkA(t)
		s := p.a.drv.(*selfDriver)
		p.a.mu.Lock()
		fires0 := s.resumeFires
		p.a.mu.Unlock()
		const rounds, work = 200, 10 * time.Microsecond
		start := time.Now()
		for i := range rounds {
			p.write(t, p.qa, p.mra, p.mrb, uint64(i))
			if wc := wait1(t, p.cqa); wc.Status != WCSuccess {
				t.Fatalf("round %d: %v", i, wc.Status)
			}
			time.Sleep(work)
		}
		elapsed := time.Since(start)
		p.a.mu.Lock()
		fires := s.resumeFires - fires0
		p.a.mu.Unlock()
		// A firing that finds the application away re-arms for the
		// resume time, and the next one mostly finds it back: a few per
		// resumeKeep (9-17 in 10 ms over 100 runs, the goroutines of the memory pair
		// interleaving differently from run to run), against one per
		// resumeAfter (50) when every firing re-armed for resumeAfter.
		if most := uint64(elapsed / (2 * resumeAfter)); fires > most {
			t.Fatalf("the resume timer fired %d times in %v of ping-pong, want at most %d (half of one per resumeAfter %v)", fires, elapsed, most, resumeAfter)
		}
		t.Logf("%d firings in %v", fires, elapsed)
		time.Sleep(resumeKeep + resumeAfter)
		if o := p.a.linkOwner(); o != ownerDriver {
			t.Fatalf("A's link owner %v after the application stopped, want the driver", o)
		}
	})
}

// TestSelfDriveTimers: while a waiter drives the device, the engines'
// timers fire: a WRITE to a peer that is gone is retried at its ACK
// timeouts and completes with RETRY_EXC_ERR in the waiter's own Wait.
func TestSelfDriveTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{Timeout: 10, RetryCnt: 2, SetRetry: true})
		p.b.Close()
		p.write(t, p.qa, p.mra, p.mra, 1)
		if wc := wait1(t, p.cqa); wc.Status != WCRetryExcErr {
			t.Fatalf("WRITE to a closed peer: %v, want RETRY_EXC_ERR", wc.Status)
		}
		if c := p.qa.Counters(); c[CntRetransmittedPkts] == 0 {
			t.Fatal("no retransmission: the ACK timer did not fire")
		}
	})
}

// TestSelfDriveKick: a completion that another goroutine produces (a
// flush, moving the QP to ERR) reaches a waiter that drives the device and
// is parked on the link with no deadline; Close ends such a wait.
func TestSelfDriveKick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		p.freeLinkA(t)
		if err := p.qa.PostRecv(&RecvWR{WRID: 5, SGL: []SGE{{Addr: p.mra.IOVA(), Length: 8, LKey: p.mra.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan WC, 1)
		go func() { got <- wait1(t, p.cqa) }()
		synctest.Wait()
		if o := p.a.linkOwner(); o != ownerWaiter {
			t.Fatalf("A's link owner %v while a waiter waits, want the waiter", o)
		}
		if err := p.qa.Modify(context.Background(), Attr{State: StateErr}, AttrState); err != nil {
			t.Fatal(err)
		}
		if wc := <-got; wc.WRID != 5 || wc.Status != WCWRFlushErr {
			t.Fatalf("flushed receive: %v", wc)
		}

		errc := make(chan error, 1)
		go func() {
			var wc [1]WC
			_, err := p.cqa.Wait(context.Background(), wc[:])
			errc <- err
		}()
		synctest.Wait()
		p.a.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait across Close: %v, want ErrClosed", err)
		}
	})
}

// TestSelfDriveCancelWithDeadline: a waiter driving the device with a
// context that has a distant deadline and is cancelled before it (rping's
// connection context: WithCancel of the run's WithTimeout) returns within
// ctxSlice of the cancellation, not at the deadline.
func TestSelfDriveCancelWithDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		p.freeLinkA(t)
		run, stop := context.WithTimeout(context.Background(), time.Hour)
		defer stop()
		ctx, cancel := context.WithCancel(run)
		errc := make(chan error, 1)
		go func() {
			var wc [1]WC
			_, err := p.cqa.Wait(ctx, wc[:])
			errc <- err
		}()
		synctest.Wait()
		if o := p.a.linkOwner(); o != ownerWaiter {
			t.Fatalf("A's link owner %v while a waiter waits, want the waiter", o)
		}
		start := time.Now()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: %v, want context.Canceled", err)
		}
		if waited := time.Since(start); waited > ctxSlice {
			t.Fatalf("Wait returned %v after the cancellation, later than ctxSlice %v", waited, ctxSlice)
		}
	})
}

// TestSelfDriveLateKick: a kick whose past deadline reaches the link after
// the owner consumed its kickPending and re-armed (kickOwner stores the
// flag, then sets the deadline: the owner may run kicked and arm between
// the two) leaves the link's deadline in the past while armed says
// otherwise. The owner's next wait ends at once; it must set the deadline
// again instead of keeping armed's word for it, or every later wait fails
// before it looks at the link: the device is deaf and its reader spins
// (rsock's TestNetns hang, where a Read polls the CQ while a Write posts
// to the same CQ and kicks it).
func TestSelfDriveLateKick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		p.la.spinLimit.Store(1000)
		p.freeLinkA(t)
		if err := p.qa.PostRecv(&RecvWR{WRID: 7, SGL: []SGE{{Addr: p.mra.IOVA(), Length: 8, LKey: p.mra.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan WC, 1)
		go func() { got <- wait1(t, p.cqa) }()
		synctest.Wait()
		if o := p.a.linkOwner(); o != ownerWaiter {
			t.Fatalf("A's link owner %v while a waiter waits, want the waiter", o)
		}
		// The late half of a kick whose flag the owner already consumed.
		if err := p.la.SetWaitDeadline(kickedArm); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := p.qb.PostSend(&SendWR{WRID: 8, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{p.mrb.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if wc := <-got; wc.WRID != 7 || wc.Status != WCSuccess {
			t.Fatalf("A's receive after the late kick: %v", wc)
		}
		if wc := wait1(t, p.cqb); wc.WRID != 8 || wc.Status != WCSuccess {
			t.Fatalf("B's SEND: %v", wc)
		}
	})
}

// A waiter parked on the link (the self-driving owner) returns as soon as
// its context is cancelled, not at ctxSlice (this replaced
// TestSelfDriveInterrupt: CQ.Interrupt is no longer needed for it); with the fake clock of
// synctest no time passes between the cancel and the return. The same
// context a second time reuses the device's watch; a new one replaces it.
func TestSelfDriveCtxCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		p.freeLinkA(t)
		for round := range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				var wc [1]WC
				_, err := p.cqa.Wait(ctx, wc[:])
				errc <- err
			}()
			synctest.Wait()
			if o := p.a.linkOwner(); o != ownerWaiter {
				t.Fatalf("round %d: A's link owner %v while a waiter waits, want the waiter", round, o)
			}
			start := time.Now()
			cancel()
			err := <-errc
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("round %d: Wait after cancel: %v", round, err)
			}
			if waited := time.Since(start); waited != 0 {
				t.Fatalf("round %d: Wait returned %v (fake clock) after the cancel, want at once (ctxSlice is %v)", round, waited, ctxSlice)
			}
			if round == 0 {
				// A long-lived context: the watch registered once serves
				// many waits.
				ctx2, cancel2 := context.WithCancel(context.Background())
				for range 3 {
					go func() {
						var wc [1]WC
						_, err := p.cqa.Wait(ctx2, wc[:])
						errc <- err
					}()
					synctest.Wait()
					if err := p.qa.PostRecv(&RecvWR{WRID: 1, SGL: []SGE{{Addr: p.mra.IOVA(), Length: 8, LKey: p.mra.LKey()}}}); err != nil {
						t.Fatal(err)
					}
					if err := p.qb.PostSend(&SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{p.mrb.SGE(0, 8)}}); err != nil {
						t.Fatal(err)
					}
					if err := <-errc; err != nil {
						t.Fatalf("Wait with a live context: %v", err)
					}
					wait1(t, p.cqb)
				}
				cancel2()
			}
		}
	})
}
