//go:build linux

package qp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
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
	mk := func(s netns.Side) *qp.Device {
		var dev *qp.Device
		if err := p.Do(s, func() error {
			var err error
			dev, _, err = qp.OpenInterface(context.Background(), p.End(s).Ifname, qp.InterfaceOptions{Backend: backend, Logger: quiet, Seed: 1})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		return dev
	}
	x, y := connectEnds(b, mk(netns.A), mk(netns.B), sim.QPOptions{BufSize: 1 << 20, CQSize: 64, SharedCQ: true,
		Access: qp.LocalWrite | qp.RemoteWrite, Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}, 2, 1)
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
