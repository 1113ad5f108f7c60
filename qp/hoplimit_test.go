package qp_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestRouteHopLimit: with Config.RouteHopLimit set (what netdev does), the
// AV's hop limit is replaced by the route's, as the kernel does for RoCE, so
// an application asking for hop limit 1 (rc_pingpong) still sends TTL 64
// like rxe and mlx5.
func TestRouteHopLimit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var tap bytes.Buffer
		la, lb := nic.NewMemPair(nic.MemConfig{Tap: &tap})
		ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
		da, err := qp.Open(qp.Config{Link: la, IP: ipA, RouteHopLimit: 64, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: lb.HardwareAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer da.Close()
		db, err := qp.Open(qp.Config{Link: lb, IP: ipB, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: la.HardwareAddr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// The devices are the test's own (RouteHopLimit is a device option);
		// their QPs come from the shared harness.
		o := sim.QPOptions{BufSize: 64, CQSize: 16, SharedCQ: true, Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}}
		oa, ob := o, o
		oa.Connect, ob.Connect = qp.ConnectOptions{SQPSN: 2, HopLimit: 1}, qp.ConnectOptions{SQPSN: 1, HopLimit: 1}
		ea, eb, err := sim.ConnectQPs(context.Background(), da, db, oa, ob)
		if err != nil {
			t.Fatal(err)
		}
		qa, qb, cqa, cqb := ea.QP, eb.QP, ea.SendCQ, eb.SendCQ
		if err := qb.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{eb.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []qp.SGE{ea.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, cqa); wc.Status != transport.WCSuccess {
			t.Fatal(wc)
		}
		if wc := waitWC(t, cqb); wc.Status != transport.WCSuccess {
			t.Fatal(wc)
		}
		recs, err := pcapfile.ReadAll(&tap)
		if err != nil || len(recs) < 2 {
			t.Fatalf("%d frames, %v", len(recs), err)
		}
		for _, r := range recs {
			var p wire.Packet
			if err := wire.Parse(r.Data, &p); err != nil {
				t.Fatal(err)
			}
			want := uint8(1) // B keeps the application's hop limit
			if p.SrcIP() == ipA {
				want = 64 // A's is replaced by the route's
			}
			if p.IPv4.TTL() != want {
				t.Fatalf("%v from %v: TTL %d, want %d", p.Opcode(), p.SrcIP(), p.IPv4.TTL(), want)
			}
		}
	})
}
