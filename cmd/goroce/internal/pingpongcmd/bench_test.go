package pingpongcmd

import (
	"context"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// BenchmarkPingpong is goroce pingpong's loop (strict SEND/RECV
// ping-pong, 4096-byte messages, busy polling) between two goroce devices
// over the in-memory link: one op is one 200-iteration run of both sides;
// with the devices in the threaded mode and in busy-poll mode (the loops'
// CQ polls drive the devices).
func BenchmarkPingpong(b *testing.B) {
	b.Run("normal", func(b *testing.B) { benchPingpong(b, qp.ModeThreaded) })
	b.Run("busypoll", func(b *testing.B) { benchPingpong(b, qp.ModeBusyPoll) })
}

func benchPingpong(b *testing.B, mode qp.Mode) {
	open := tooltest.MemDevicesMode(b, nic.MemConfig{Seed: 9}, mode)
	f := pingpong.DefaultFlags()
	f.GIDIndex, f.RxDepth = 1, 500
	var pps [2]*endpoint
	var dests [2]pingpong.Dest
	for i, name := range []string{"a", "b"} {
		d, err := open(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		if pps[i], err = initEndpoint(context.Background(), d, f); err != nil {
			b.Fatal(err)
		}
		g, _ := d.GID(d.IPv4GIDIndex())
		dests[i] = pingpong.Dest{QPN: pps[i].QP.QPN(), PSN: tool.RandomPSN(), GID: tool.GIDBytes(g)}
	}
	for i := range pps {
		rem := dests[1-i]
		if err := tool.ModifyToRTS(context.Background(), pps[i].QP, tool.ConnectAttrs{MTU: qp.MTU1024, DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: dests[i].PSN,
			DGID: rem.GID, Global: true, SGIDIndex: f.GIDIndex, HopLimit: 1, MaxDestRdAtomic: 1, MaxRdAtomic: 1, Timeout: 14}); err != nil {
			b.Fatal(err)
		}
	}
	for _, pp := range pps {
		if pp.Routs = pp.PostRecv(pp.RxDepth); pp.Routs != pp.RxDepth {
			b.Fatalf("posted %d receives", pp.Routs)
		}
	}
	const iters = 200
	p := [2]*tool.Poller{{Ctx: context.Background(), Watch: &tool.ProgressWatch{}}, {Ctx: context.Background(), Watch: &tool.ProgressWatch{}}}
	b.ReportAllocs()
	start := time.Now()
	runs := 0
	for b.Loop() {
		errc := make(chan error, 1)
		go func() { errc <- pps[0].Loop(p[0], iters) }()
		pps[1].Pending = pingpong.RecvWRID | pingpong.SendWRID
		pps[0].Pending = pingpong.RecvWRID
		if err := pps[1].QP.PostSend(&pps[1].SendWR); err != nil {
			b.Fatal(err)
		}
		if err := pps[1].Loop(p[1], iters); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		runs++
	}
	b.ReportMetric(time.Since(start).Seconds()*1e6/float64(runs*iters), "µs/iter")
}
