package transport_test

import (
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestRequestCounters: one message of each type, the WRITE (3 packets)
// with its second packet lost once: A counts one started request per type
// (tx_*), B one executed request per type (rx_*, mlx5's names for WRITE,
// READ and atomics); the go-back-N resend is counted as retransmitted
// packets, not as new requests.
func TestRequestCounters(t *testing.T) {
	e := newEPair(t, eopts{timeout: 10, retry: 7})
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.a && p.Opcode() == wire.RCRDMAWriteMiddle && !dropped {
			dropped = true
			return false
		}
		return true
	}
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{e.a.sge(0, 16)}})
	e.post(e.a, &transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{e.a.sge(0, 3000)},
		RemoteAddr: e.b.mr.IOVA() + 4096, RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 3, Opcode: transport.WRRDMARead, SGL: []transport.SGE{e.a.sge(8192, 100)},
		RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.post(e.a, &transport.SendWR{WRID: 4, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(9000, 8)}, RemoteAddr: e.b.mr.IOVA() + 8192, RKey: e.b.mr.RKey(), CompareAdd: 1})
	e.run(20)
	if w := e.a.scq.take(); len(w) != 1 || w[0].WRID != 4 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
	if !dropped || e.a.q.Counters[transport.CntRetransmittedPkts] == 0 {
		t.Fatal("the WRITE was not resent")
	}
	for _, c := range []struct {
		s    *side
		c    transport.Counter
		want uint64
	}{
		{e.a, transport.CntTxSendRequests, 1}, {e.a, transport.CntTxWriteRequests, 1},
		{e.a, transport.CntTxReadRequests, 1}, {e.a, transport.CntTxAtomicRequests, 1},
		{e.b, transport.CntRxSendRequests, 1}, {e.b, transport.CntRxWriteRequests, 1},
		{e.b, transport.CntRxReadRequests, 1}, {e.b, transport.CntRxAtomicRequests, 1},
		{e.a, transport.CntRxWriteRequests, 0}, {e.b, transport.CntTxSendRequests, 0},
	} {
		if got := c.s.q.Counters[c.c]; got != c.want {
			t.Errorf("%s %v = %d, want %d", c.s.name, c.c, got, c.want)
		}
	}
	for _, c := range []transport.Counter{transport.CntRxWriteRequests, transport.CntRxReadRequests, transport.CntRxAtomicRequests} {
		if !transport.MLX5Counter(c) {
			t.Errorf("%v is not marked as mlx5's", c)
		}
	}
	if transport.MLX5Counter(transport.CntRxSendRequests) || transport.MLX5Counter(transport.CntSentPkts) {
		t.Error("a counter mlx5 does not have is marked as mlx5's")
	}
}
