package transport_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/transport"
)

// TestPostSendListQueueFull: a list longer than the send queue. On UC a
// WRITE completes when sent, so the list pumps where the queue fills and
// every WR is posted, as one PostSend per WR would; on RC nothing frees a
// slot before an ACK, so the list stops at the queue's depth with
// ErrQueueFull (bad_wr), the posted WRs sent and completed once delivered.
func TestPostSendListQueueFull(t *testing.T) {
	for _, uc := range []bool{false, true} {
		e := newEPair(t, eopts{uc: uc, sqWR: 4})
		wrs := make([]transport.SendWR, 10)
		for i := range wrs {
			wrs[i] = transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []transport.SGE{e.a.sge(i*64, 64)}, RemoteAddr: e.b.mr.IOVA() + uint64(i*64), RKey: e.b.mr.RKey()}
		}
		n, err := e.a.q.PostSendList(wrs, e.now)
		want := 4
		if uc {
			want = len(wrs)
		}
		if n != want || (n < len(wrs)) != errors.Is(err, transport.ErrQueueFull) {
			t.Fatalf("uc %v: posted %d (%v), want %d", uc, n, err, want)
		}
		e.deliver()
		wcs := e.a.scq.take()
		if len(wcs) != want {
			t.Fatalf("uc %v: %d completions, want %d", uc, len(wcs), want)
		}
		for i, wc := range wcs {
			if wc.Status != transport.WCSuccess || wc.WRID != uint64(i) {
				t.Fatalf("uc %v: completion %d: %+v", uc, i, wc)
			}
		}
	}
}
