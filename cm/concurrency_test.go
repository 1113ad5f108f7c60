package cm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
)

// dialMany connects n clients on a to one listener on b, all at once, and
// checks every pair of QPs is connected to each other.
func dialMany(t *testing.T, a, b *qp.Device, n int, lossy bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	l, err := cm.Listen(ctx, b, "198.18.0.2:7174", cm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	clients := make([]*cm.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c, err := cm.Dial(ctx, a, "198.18.0.2:7174", cm.Options{PrivateData: []byte(fmt.Sprint(i))})
			if err != nil {
				errs <- fmt.Errorf("Dial %d: %w", i, err)
				return
			}
			clients[i] = c
		})
	}
	servers := map[uint32]*cm.Conn{}
	for range n {
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("Accept after %d: %v", len(servers), err)
		}
		servers[s.QP().QPN()] = s
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, c := range clients {
		s := servers[c.QP().Query().DestQPN]
		if s == nil || s.QP().Query().DestQPN != c.QP().QPN() {
			t.Fatalf("client %d (QP %#x) has no server QP pointing back", i, c.QP().QPN())
		}
		if got := string(bytes.TrimRight(s.PrivateData(), "\x00")); got != fmt.Sprint(i) || seen[got] {
			t.Fatalf("client %d's server side saw private data %q", i, got)
		}
		seen[string(bytes.TrimRight(s.PrivateData(), "\x00"))] = true
		if s.RemoteAddr() != c.LocalAddr() {
			t.Fatalf("client %d at %v, server sees %v", i, c.LocalAddr(), s.RemoteAddr())
		}
		send(t, ctx, c, s)
	}
	for _, c := range clients {
		wg.Go(func() {
			// On a lossy link Close may give up waiting for the DREP
			// (ErrTimeout); the DREQ's retries go on without it, and the
			// server's Done below proves they got through.
			if err := c.Close(); err != nil && !(lossy && errors.Is(err, cm.ErrTimeout)) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, s := range servers {
		<-s.Done()
		s.Close()
	}
}

// 100 concurrent Dials to one listener over the devices' real GSIs.
func TestConcurrentDials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			time.Sleep(time.Minute) // every timewait ends
			a.Close()
			b.Close()
		}()
		dialMany(t, a, b, 100, false)
	})
}

// Dial/Listen over the simulator's faulty link: seeded loss, duplication
// and reordering of every frame, CM MADs included, in both directions. The
// seed is logged on failure (GOROCE_SEED replays it).
func TestDialOverFaultyLink(t *testing.T) {
	for _, seed := range simtest.Seeds(t, 1, 2, 3) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := sim.Faults{Drop: 0.2, Duplicate: 0.05, Reorder: 0.1}
				n, err := sim.NewPair(sim.Config{Mode: sim.Goroutines, Seed: seed, AtoB: f, BtoA: f})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					time.Sleep(10 * time.Minute) // every DREQ retry and timewait ends
					n.Close()
				}()
				dialMany(t, n.A.Dev, n.B.Dev, 10, true)
				st := cm.AgentStats(n.A.Dev)
				t.Logf("seed %d: client agent %+v, link A→B %+v", seed, st, n.A.LinkStats())
				if t.Failed() {
					t.Logf("replay with GOROCE_SEED=%d", seed)
				}
			})
		})
	}
}

// send SENDs 8 bytes from c to s and checks they arrive.
func send(t *testing.T, ctx context.Context, c, s *cm.Conn) {
	t.Helper()
	src, dst := []byte("8 bytes!"), make([]byte, 8)
	mrS, err := s.PD().RegMR(dst, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.QP().PostRecv(&qp.RecvWR{WRID: 2, SGL: []qp.SGE{mrS.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	mrC, err := c.PD().RegMR(src, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.QP().PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{mrC.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	for _, cq := range []*qp.CQ{c.SendCQ(), s.RecvCQ()} {
		if _, err := cq.Wait(ctx, wcs); err != nil {
			t.Fatal(err)
		}
		if err := wcs[0].Err(); err != nil {
			t.Fatal(err)
		}
	}
	if string(dst) != string(src) {
		t.Fatalf("received %q", dst)
	}
}
