package qp_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
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
		want := []time.Duration{200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
		if len(deadlines) != len(want) || deadlines[0] != want[0] || deadlines[1] != want[1] || deadlines[2] != want[2] {
			t.Fatalf("Resolve saw context deadlines %v from its start, want %v", deadlines, want)
		}
	})
}
