package qp_test

import (
	"math"
	"testing"

	"github.com/goroce/goroce/qp"
)

// TestMRSGE: MR.SGE names a range of the MR, and a range outside it gives
// an element the device refuses (a WCLocProtErr completion, nothing sent
// from outside the MR), never a panic.
func TestMRSGE(t *testing.T) {
	x := newX(t, xopts{})
	mr := x.a.mr
	if got, want := mr.SGE(16, 32), (qp.SGE{Addr: mr.IOVA() + 16, Length: 32, LKey: mr.LKey()}); got != want {
		t.Fatalf("SGE(16, 32) = %+v, want %+v", got, want)
	}
	if got, want := mr.SGE(0, mr.Len()), (qp.SGE{Addr: mr.IOVA(), Length: uint32(mr.Len()), LKey: mr.LKey()}); got != want {
		t.Fatalf("SGE(0, Len) = %+v, want %+v", got, want)
	}
	bad := qp.SGE{Addr: mr.IOVA() + uint64(mr.Len()), Length: 1, LKey: mr.LKey()}
	for _, r := range [][2]int{{-1, 8}, {0, -1}, {mr.Len() - 8, 16}, {mr.Len() + 1, 0}, {8, math.MaxInt}, {math.MaxInt, 8}, {math.MinInt, 8}} {
		if got := mr.SGE(r[0], r[1]); got != bad {
			t.Errorf("SGE(%d, %d) = %+v, want the refused %+v", r[0], r[1], got, bad)
		}
	}
	x.b.reset()
	x.post(x.a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{mr.SGE(mr.Len()-8, 16)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()})
	expectWC(t, x.a.scq, 1, qp.WCLocProtErr, 0)
	checkBuf(t, "B", x.b.buf)
}
