package qp_test

import (
	"context"
	"testing"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// benchPairWrite posts a signalled RDMA WRITE and waits for its completion,
// through two devices over the in-memory link (their rx and timer
// goroutines, batching, parsing and the CQ wake-up included).
func benchPairWrite(b *testing.B, n int) {
	x := newX(b, xopts{linkMTU: 9000, size: 1 << 20, noTap: true})
	a, bb := x.a, x.b
	wr := &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(0, n)}, RemoteAddr: bb.mr.IOVA(), RKey: bb.mr.RKey()}
	var wc [1]qp.WC
	ctx := context.Background()
	step := func() {
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if k, err := a.scq.Wait(ctx, wc[:]); k != 1 || err != nil || wc[0].Status != transport.WCSuccess {
			b.Fatalf("completion %v %v", wc[0], err)
		}
	}
	step()
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

func BenchmarkPairWrite64(b *testing.B)  { benchPairWrite(b, 64) }
func BenchmarkPairWrite64K(b *testing.B) { benchPairWrite(b, 64<<10) }
