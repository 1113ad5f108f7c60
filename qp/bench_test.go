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

// BenchmarkBusyPollWriteList64 is perftest's write_bw shape in one
// goroutine: 100 64-byte RDMA WRITEs per PostSendList, the last one
// signalled (cq-mod 100), then both ends' CQs polled (which drives both
// devices) until its completion. One op is one message.
func BenchmarkBusyPollWriteList64(b *testing.B) {
	const batch = 100
	x := newX(b, xopts{busyPoll: true, noTap: true})
	a, bb := x.a, x.b
	wrs := make([]qp.SendWR, batch)
	for i := range wrs {
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite,
			SGL: []qp.SGE{a.sge(0, 64)}, RemoteAddr: bb.mr.IOVA(), RKey: bb.mr.RKey()}
	}
	wrs[batch-1].Flags = transport.SendSignaled
	var wc [1]qp.WC
	step := func() {
		if n, err := a.qp.PostSendList(wrs); err != nil || n != batch {
			b.Fatal(n, err)
		}
		for {
			bb.scq.Poll(nil)
			k, err := a.scq.Poll(wc[:])
			if err != nil || (k == 1 && wc[0].Status != transport.WCSuccess) {
				b.Fatalf("completion %v %v", wc[0], err)
			}
			if k == 1 {
				return
			}
		}
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		step()
	}
}
