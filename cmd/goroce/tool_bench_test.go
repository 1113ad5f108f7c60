package main

import (
	"context"
	"github.com/goroce/goroce/qp"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/nic"
)

// benchPerfPair sets up a client and a server run of test with args on the
// two in-memory devices and connects their QPs directly (no TCP), as the
// exchange would.
func benchPerfPair(b *testing.B, test perftest.Test, args string) (cli, srv *perfRun, cliKeys, srvKeys []perftest.KeyMsg) {
	b.Helper()
	open := memDevices(b, nic.MemConfig{Seed: 9, QueueLen: 1 << 14})
	env := toolEnv{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard}
	neg := perftest.Negotiated{PeerVersion: perftest.Version, CycleBuffer: 4096, CacheLine: 64, MTU: perftest.MTU1024}
	mk := func(dev string, server bool) (*perfRun, []perftest.KeyMsg) {
		fargs := strings.Fields(args)
		if !server {
			fargs = append(fargs, "peer")
		}
		f, err := perftest.ParseFlags(test, fargs)
		if err != nil {
			b.Fatal(err)
		}
		d, err := open(context.Background(), dev)
		if err != nil {
			b.Fatal(err)
		}
		r := &perfRun{env: env, ctx: env.ctx, f: f, test: test, verb: test.Verb(), server: server}
		if err := r.init(d); err != nil {
			b.Fatal(err)
		}
		keys, err := r.setup(neg)
		if err != nil {
			b.Fatal(err)
		}
		return r, keys
	}
	srv, srvKeys = mk("a", true)
	cli, cliKeys = mk("b", false)
	if err := srv.connectQPs(srvKeys, cliKeys); err != nil {
		b.Fatal(err)
	}
	if err := cli.connectQPs(cliKeys, srvKeys); err != nil {
		b.Fatal(err)
	}
	return cli, srv, cliKeys, srvKeys
}

// BenchmarkWriteBW is goroce write_bw's client loop (run_iter_bw: tx_depth
// 128, a completion every 100) against a goroce server over the in-memory
// link: one op is one 1000-message run. allocs/op are the run's own
// arrays (timestamps, work requests), none per message; the MB/s are real.
func BenchmarkWriteBW(b *testing.B) {
	for _, size := range []string{"64", "65536"} {
		b.Run(size, func(b *testing.B) {
			cli, _, _, srvKeys := benchPerfPair(b, perftest.WriteBW, "-n 1000 -s "+size)
			p := &poller{ctx: context.Background(), watch: &progressWatch{}}
			var msgs, bytes float64
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				rep, err := cli.bwClient(p, cli.f.Size, srvKeys)
				if err != nil {
					b.Fatal(err)
				}
				msgs += float64(rep.Iters)
				bytes += float64(rep.Iters * rep.Size)
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(bytes/secs/1e6, "MB/s")
			b.ReportMetric(msgs/secs, "msgs/s")
		})
	}
}

// BenchmarkPingpong is goroce pingpong's loop (strict SEND/RECV
// ping-pong, 4096-byte messages, busy polling) between two goroce devices
// over the in-memory link: one op is one 200-iteration run of both sides;
// with the devices in the normal mode and in busy-poll mode (the loops'
// CQ polls drive the devices).
func BenchmarkPingpong(b *testing.B) {
	b.Run("normal", func(b *testing.B) { benchPingpong(b, false) })
	b.Run("busypoll", func(b *testing.B) { benchPingpong(b, true) })
}

func benchPingpong(b *testing.B, busy bool) {
	open := memDevicesMode(b, nic.MemConfig{Seed: 9}, busy)
	f := pingpong.DefaultFlags()
	f.GIDIndex, f.RxDepth = 1, 500
	var pps [2]*ppContext
	var dests [2]pingpong.Dest
	for i, name := range []string{"a", "b"} {
		d, err := open(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		if pps[i], err = ppInitCtx(context.Background(), d, f); err != nil {
			b.Fatal(err)
		}
		g, _ := d.GID(1)
		dests[i] = pingpong.Dest{QPN: pps[i].qp.QPN(), PSN: randomPSN(), GID: gidBytes(g)}
	}
	for i := range pps {
		rem := dests[1-i]
		if err := modifyToRTS(context.Background(), pps[i].qp, rtrRTS{mtu: qp.MTU1024, destQPN: rem.QPN, rqPSN: rem.PSN, sqPSN: dests[i].PSN,
			dgid: rem.GID, global: true, sgidIndex: 1, hopLimit: 1, maxDestRdAtomic: 1, maxRdAtomic: 1, timeout: 14}); err != nil {
			b.Fatal(err)
		}
	}
	for _, pp := range pps {
		if pp.routs = pp.postRecv(pp.rxDepth); pp.routs != pp.rxDepth {
			b.Fatalf("posted %d receives", pp.routs)
		}
	}
	const iters = 200
	p := [2]*poller{{ctx: context.Background(), watch: &progressWatch{}}, {ctx: context.Background(), watch: &progressWatch{}}}
	b.ReportAllocs()
	start := time.Now()
	runs := 0
	for b.Loop() {
		errc := make(chan error, 1)
		go func() { errc <- pps[0].loop(p[0], iters) }()
		pps[1].pending = pingpongRecvWRID | pingpongSendWRID
		pps[0].pending = pingpongRecvWRID
		if err := pps[1].qp.PostSend(&pps[1].sendWR); err != nil {
			b.Fatal(err)
		}
		if err := pps[1].loop(p[1], iters); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		runs++
	}
	b.ReportMetric(time.Since(start).Seconds()*1e6/float64(runs*iters), "µs/iter")
}
