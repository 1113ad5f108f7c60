package qp_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// TestConnectResolveContext: the neighbour resolution of Connect (the RTR
// transition) runs within the caller's context, a deadline included, and
// falls back to Config.ResolveTimeout only when that context has none.
func TestConnectResolveContext(t *testing.T) {
	bubble(t, func(t *testing.T) {
		la, lb := nic.NewMemPair(nic.MemConfig{})
		defer lb.Close()
		var deadlines []time.Duration // of each Resolve call's context, from its start
		d, err := qp.Open(qp.Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"), ResolveTimeout: 5 * time.Second,
			Resolve: func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					deadlines = append(deadlines, -1)
				} else {
					deadlines = append(deadlines, time.Until(dl))
				}
				<-ctx.Done() // a peer that never answers ARP
				return nil, ctx.Err()
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		cq, _ := d.CreateCQ(4)
		pd := d.AllocPD()
		peer := qp.Remote{QPN: 0x11, GID: netip.MustParseAddr("198.18.0.2")}

		q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = q.Connect(ctx, peer, qp.ConnectOptions{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || q.State() != qp.StateInit {
			t.Fatalf("Connect with a 200 ms context: %v, state %v; want DeadlineExceeded in INIT", err, q.State())
		}

		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if err := q.Connect(ctx, peer, qp.ConnectOptions{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Connect with a canceled context: %v, want Canceled", err)
		}

		if err := q.Connect(context.Background(), peer, qp.ConnectOptions{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Connect without a deadline: %v, want DeadlineExceeded after ResolveTimeout", err)
		}
		// A canceled context starts no resolution.
		want := []time.Duration{200 * time.Millisecond, 5 * time.Second}
		if len(deadlines) != len(want) || deadlines[0] != want[0] || deadlines[1] != want[1] {
			t.Fatalf("Resolve saw context deadlines %v from its start, want %v", deadlines, want)
		}
	})
}

// TestResolveSingleflight: concurrent resolutions of one IP (100 QPs
// connecting to one peer at once, or 100 requests claiming one source) make
// one Config.Resolve call, which all of them wait for; another IP gets its
// own. A caller whose context ends stops waiting without ending the call.
func TestResolveSingleflight(t *testing.T) {
	bubble(t, func(t *testing.T) {
		la, lb := nic.NewMemPair(nic.MemConfig{})
		defer lb.Close()
		var mu sync.Mutex
		calls := map[netip.Addr]int{}
		release := make(chan struct{})
		d, err := qp.Open(qp.Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"),
			Resolve: func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
				mu.Lock()
				calls[ip]++
				mu.Unlock()
				select {
				case <-release:
					return lb.HardwareAddr(), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		pd := d.AllocPD()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 101)
		for i := range 101 {
			gid := netip.MustParseAddr("198.18.0.2")
			if i == 100 {
				gid = netip.MustParseAddr("198.18.0.3")
			}
			wg.Go(func() {
				ah, err := pd.CreateAH(ctx, qp.AHAttr{GID: gid})
				if err != nil {
					errs <- err
					return
				}
				ah.Destroy()
			})
		}
		synctest.Wait()
		// One more, whose context ends while it waits for the call.
		sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
		defer scancel()
		if _, err := pd.CreateAH(sctx, qp.AHAttr{GID: netip.MustParseAddr("198.18.0.2")}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the caller whose context ended: %v", err)
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if calls[netip.MustParseAddr("198.18.0.2")] != 1 || calls[netip.MustParseAddr("198.18.0.3")] != 1 {
			t.Fatalf("Resolve calls %v, want one per IP", calls)
		}
	})
}
