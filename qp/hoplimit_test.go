package qp_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestRouteHopLimit: with Config.RouteHopLimit set (what netdev does), the
// AV's hop limit is replaced by the route's, as the kernel does for RoCE, so
// an application asking for hop limit 1 (rc_pingpong) still sends TTL 64
// like rxe and mlx5.
func TestRouteHopLimit(t *testing.T) {
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
	mk := func(d *qp.Device) (*qp.QP, *qp.CQ, *qp.MR) {
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(16)
		q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 64), memreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return q, cq, mr
	}
	qa, cqa, mra := mk(da)
	qb, cqb, mrb := mk(db)
	if err := qa.Connect(context.Background(), qp.Remote{QPN: qb.QPN(), PSN: 1, GID: ipB}, qp.ConnectOptions{SQPSN: 2, HopLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(context.Background(), qp.Remote{QPN: qa.QPN(), PSN: 2, GID: ipA}, qp.ConnectOptions{SQPSN: 1, HopLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{{Addr: mrb.IOVA(), Length: 64, LKey: mrb.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []qp.SGE{{Addr: mra.IOVA(), Length: 8, LKey: mra.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, cqa); wc.Status != transport.WCSuccess {
		t.Fatal(wc)
	}
	if wc := wait(t, cqb); wc.Status != transport.WCSuccess {
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
}
