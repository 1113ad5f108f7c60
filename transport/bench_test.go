package transport_test

import (
	"testing"

	"github.com/goroce/goroce/transport"
)

// roundTrip posts one signalled WR on A, delivers every frame (requests,
// responses, ACKs) through Parse → Receive, and checks the completion.
func (e *epair) roundTrip(tb testing.TB, wr *transport.SendWR) {
	if err := e.a.q.PostSend(wr, e.now); err != nil {
		tb.Fatal(err)
	}
	e.deliver()
	if len(e.a.scq.wcs) != 1 || e.a.scq.wcs[0].Status != transport.WCSuccess {
		tb.Fatalf("completions %v", e.a.scq.wcs)
	}
	e.a.scq.wcs = e.a.scq.wcs[:0]
}

func benchEngine(b *testing.B, op transport.WROpcode, n int) {
	e := newEPair(b, eopts{mtu: transport.MTU4096, ringFrames: 256})
	e.a.scq.wcs = make([]transport.WC, 0, 4)
	wr := &transport.SendWR{WRID: 1, Opcode: op, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, n)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()}
	e.roundTrip(b, wr) // warm up
	pkts := (n + 4095) / 4096
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		e.roundTrip(b, wr)
	}
	b.ReportMetric(float64(b.N*max(pkts, 1)), "pkts")
}

// BenchmarkEngineWrite64 / 64K: one RDMA WRITE through two engines (post,
// build, parse, place, ACK, complete), path MTU 4096, no I/O.
func BenchmarkEngineWrite64(b *testing.B)  { benchEngine(b, transport.WRRDMAWrite, 64) }
func BenchmarkEngineWrite64K(b *testing.B) { benchEngine(b, transport.WRRDMAWrite, 64<<10) }
func BenchmarkEngineRead64K(b *testing.B)  { benchEngine(b, transport.WRRDMARead, 64<<10) }

// TestEngineDataPathAllocs guards the zero-allocation data path: a WRITE,
// READ, SEND and atomic round trip through two engines allocate nothing.
func TestEngineDataPathAllocs(t *testing.T) {
	e := newEPair(t, eopts{mtu: transport.MTU1024})
	e.a.scq.wcs = make([]transport.WC, 0, 4)
	e.b.rcq.wcs = make([]transport.WC, 0, 4)
	wrs := []*transport.SendWR{
		{Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 5000)}},
		{Opcode: transport.WRRDMARead, SGL: []transport.SGE{e.a.sge(0, 5000)}},
		{Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 5000)}},
		{Opcode: transport.WRRDMAWriteWithImm, SGL: []transport.SGE{e.a.sge(0, 64)}, Imm: 7},
		{Opcode: transport.WRAtomicFetchAdd, SGL: []transport.SGE{e.a.sge(0, 8)}, CompareAdd: 1},
		{Opcode: transport.WRAtomicCmpAndSwp, SGL: []transport.SGE{e.a.sge(0, 8)}},
	}
	for _, wr := range wrs {
		wr.Flags, wr.RemoteAddr, wr.RKey = transport.SendSignaled, e.b.mr.IOVA(), e.b.mr.RKey()
		recv := &transport.RecvWR{SGL: []transport.SGE{e.b.sge(8192, 8192)}}
		run := func() {
			if wr.Opcode == transport.WRSend || wr.Opcode == transport.WRRDMAWriteWithImm {
				if err := e.b.q.PostRecv(recv); err != nil {
					t.Fatal(err)
				}
			}
			e.roundTrip(t, wr)
			e.b.rcq.wcs = e.b.rcq.wcs[:0]
		}
		run()
		if n := testing.AllocsPerRun(50, run); n != 0 {
			t.Errorf("%v: %.1f allocations per round trip", wr.Opcode, n)
		}
	}
}
