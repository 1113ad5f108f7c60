//go:build linux

package qp_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// BenchmarkRTT is the sleeping round trip the device core is judged by:
// an 8-byte signalled RDMA WRITE, waited for with CQ.Wait, between two
// namespaces (veth, MTU 1500), on each backend; and, as the yardstick, a
// Go net TCP 64-byte ping-pong over the same veth. Both ends run in this
// process, so syscalls counted with strace -f -c cover both sides of each
// round trip. It reports the p50, p99 and mean round trip, and the
// process's CPU time per round trip. No timing here is a pass/fail.
func BenchmarkRTT(b *testing.B) {
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		b.Run(backend, func(b *testing.B) { benchRTT(b, backend) })
	}
	b.Run("tcp", benchTCPRTT)
}

func reportRTT(b *testing.B, samples []time.Duration, cpu0 syscall.Rusage) {
	var cpu1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	b.ReportMetric(us(samples[len(samples)/2]), "p50-µs")
	b.ReportMetric(us(samples[len(samples)*99/100]), "p99-µs")
	b.ReportMetric(us(sum/time.Duration(len(samples))), "mean-µs")
	cpu := time.Duration(cpu1.Utime.Nano()+cpu1.Stime.Nano()-cpu0.Utime.Nano()-cpu0.Stime.Nano()) / time.Duration(len(samples))
	b.ReportMetric(us(cpu), "cpu-µs/rtt")
}

// BenchmarkIdle is the idle cost of the sleeping mode: a connected pair of
// devices on each backend with nothing to do, CPU time of the whole
// process per second of wall time (run with -benchtime 5x: five seconds).
func BenchmarkIdle(b *testing.B) {
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		b.Run(backend, func(b *testing.B) {
			rttPair(b, backend)
			time.Sleep(100 * time.Millisecond)
			var cpu0, cpu1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
			t0 := time.Now()
			// A second per iteration: a large -benchtime must not make it
			// sleep for minutes.
			for i := 0; i < min(b.N, 10); i++ {
				time.Sleep(time.Second)
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
			cpu := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
			b.ReportMetric(float64(cpu)/1e3/time.Since(t0).Seconds(), "cpu-µs/s")
		})
	}
}

type rttEnd struct {
	dev *qp.Device
	cq  *qp.CQ
	q   *qp.QP
	mr  *qp.MR
}

func benchRTT(b *testing.B, backend string) {
	x, y := rttPair(b, backend)
	wr := &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: x.mr.IOVA(), Length: 8, LKey: x.mr.LKey()}}, RemoteAddr: y.mr.IOVA(), RKey: y.mr.RKey()}
	var wc [1]qp.WC
	ctx := context.Background()
	step := func() {
		if err := x.q.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if k, err := x.cq.Wait(ctx, wc[:]); k != 1 || err != nil || wc[0].Status != qp.WCSuccess {
			b.Fatalf("completion %v %v", wc[0], err)
		}
	}
	for range 100 {
		step() // warm up: ARP done, buffers touched
	}
	samples := make([]time.Duration, 0, 1<<16)
	var cpu0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		step()
		if len(samples) < cap(samples) {
			samples = append(samples, time.Since(t0))
		}
	}
	reportRTT(b, samples, cpu0)
}

// rttPair opens a connected pair of devices on backend between two new
// namespaces.
func rttPair(b *testing.B, backend string) (x, y *rttEnd) {
	p := netns.NewPair(b, netns.Options{MTU: 1500, NoDAD: true})
	mk := func(s netns.Side) *rttEnd {
		var e rttEnd
		var err error
		if err := p.Do(s, func() error {
			e.dev, _, err = qp.OpenInterface(context.Background(), p.End(s).Ifname, qp.InterfaceOptions{Backend: backend, Logger: quiet, Seed: 1})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.dev.Close() })
		pd := e.dev.AllocPD()
		e.cq, _ = e.dev.CreateCQ(64)
		if e.q, err = pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq,
			Cap: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			b.Fatal(err)
		}
		if e.mr, err = pd.RegMR(make([]byte, 4096), qp.LocalWrite|qp.RemoteWrite); err != nil {
			b.Fatal(err)
		}
		return &e
	}
	x, y = mk(netns.A), mk(netns.B)
	if err := x.q.Connect(context.Background(), qp.Remote{QPN: y.q.QPN(), PSN: 1, GID: p.B.Addr}, qp.ConnectOptions{SQPSN: 2}); err != nil {
		b.Fatal(err)
	}
	if err := y.q.Connect(context.Background(), qp.Remote{QPN: x.q.QPN(), PSN: 2, GID: p.A.Addr}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		b.Fatal(err)
	}
	return x, y
}

func benchTCPRTT(b *testing.B) {
	p := netns.NewPair(b, netns.Options{MTU: 1500, NoDAD: true})
	var ln net.Listener
	if err := p.Do(netns.B, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.Addr, 5201).String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	var c net.Conn
	if err := p.Do(netns.A, func() (err error) {
		c, err = net.Dial("tcp", netip.AddrPortFrom(p.B.Addr, 5201).String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	step := func() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		step()
	}
	samples := make([]time.Duration, 0, 1<<16)
	var cpu0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		step()
		if len(samples) < cap(samples) {
			samples = append(samples, time.Since(t0))
		}
	}
	reportRTT(b, samples, cpu0)
}
