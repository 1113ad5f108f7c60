package perftestcmd

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// benchPerfPair sets up a client and a server run of test with args on the
// two in-memory devices and connects their QPs directly (no TCP), as the
// exchange would.
func benchPerfPair(b *testing.B, test perftest.Test, args string) (cli, srv *runner, cliKeys, srvKeys []perftest.KeyMsg) {
	b.Helper()
	open := tooltest.MemDevices(b, nic.MemConfig{Seed: 9, QueueLen: 1 << 14})
	env := tool.Env{Ctx: context.Background(), Stdout: io.Discard, Stderr: io.Discard}
	neg := perftest.Negotiated{PeerVersion: perftest.Version, CycleBuffer: 4096, CacheLine: 64, MTU: perftest.MTU1024}
	mk := func(dev string, server bool) (*runner, []perftest.KeyMsg) {
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
		r := &runner{env: env, ctx: env.Ctx, f: f, test: test, verb: test.Verb(), server: server}
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
			p := &tool.Poller{Ctx: context.Background(), Watch: &tool.ProgressWatch{}}
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
