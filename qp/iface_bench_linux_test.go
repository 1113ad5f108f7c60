//go:build linux

package qp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// BenchmarkWrite measures one signalled RDMA WRITE and its completion over
// each real backend between two namespaces (veth, MTU 1500, path MTU 1024),
// with allocations counted: the whole data path — posting, the engine,
// txBatch, the backend's WriteBatch, the peer's ReadBatch, parsing, the
// responder's placement and ACK, the requester's completion — on both
// devices. A 64 KiB WRITE is 64 packets and one ACK, so allocs/op / 65 is
// the per-packet figure.
func BenchmarkWrite(b *testing.B) {
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		for _, size := range []int{64, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%d", backend, size), func(b *testing.B) { benchWrite(b, backend, size) })
		}
	}
}

func benchWrite(b *testing.B, backend string, size int) {
	p := netns.NewPair(b, netns.Options{MTU: 1500, NoDAD: true})
	type end struct {
		dev *qp.Device
		cq  *qp.CQ
		q   *qp.QP
		mr  *qp.MR
	}
	mk := func(s netns.Side) *end {
		var e end
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
		if e.mr, err = pd.RegMR(make([]byte, 1<<20), qp.LocalWrite|qp.RemoteWrite); err != nil {
			b.Fatal(err)
		}
		return &e
	}
	x, y := mk(netns.A), mk(netns.B)
	if err := x.q.Connect(context.Background(), qp.Remote{QPN: y.q.QPN(), PSN: 1, GID: p.B.Addr}, qp.ConnectOptions{SQPSN: 2}); err != nil {
		b.Fatal(err)
	}
	if err := y.q.Connect(context.Background(), qp.Remote{QPN: x.q.QPN(), PSN: 2, GID: p.A.Addr}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		b.Fatal(err)
	}
	wr := &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: x.mr.IOVA(), Length: uint32(size), LKey: x.mr.LKey()}}, RemoteAddr: y.mr.IOVA(), RKey: y.mr.RKey()}
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
	for range 10 {
		step() // warm up: ARP done, buffers touched
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}
