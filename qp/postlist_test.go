package qp_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

func TestPostSendList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{noTap: true})
		a, b := x.a, x.b
		for i := range a.buf {
			a.buf[i] = byte(i*3 + 1)
		}
		wrs := make([]qp.SendWR, 10)
		for i := range wrs {
			wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL:        []qp.SGE{{Addr: a.mr.IOVA() + uint64(i*1000), Length: 1000, LKey: a.mr.LKey()}},
				RemoteAddr: b.mr.IOVA() + uint64(i*1000), RKey: b.mr.RKey()}
		}
		// An invalid 11th WR (too many SGEs) stops the list there, like bad_wr.
		bad := qp.SendWR{WRID: 99, Opcode: transport.WRSend, SGL: make([]qp.SGE, 9)}
		n, err := a.qp.PostSendList(append(wrs, bad))
		if n != 10 || err == nil {
			t.Fatalf("posted %d, err %v; want 10 and an error for the 11th", n, err)
		}
		for i := 0; i < 10; i++ {
			if wc := waitWC(t, a.scq); wc.Status != transport.WCSuccess || wc.WRID != uint64(i) {
				t.Fatalf("completion %d: %v", i, wc)
			}
		}
		if !bytes.Equal(b.buf[:10000], a.buf[:10000]) {
			t.Fatal("remote memory differs")
		}
	})
}

// TestPostRecvList: a list of receives posted in one call takes SENDs in
// order; an invalid one stops the list there, like bad_wr.
func TestPostRecvList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{noTap: true})
		a, b := x.a, x.b
		for i := range a.buf {
			a.buf[i] = byte(i*5 + 2)
		}
		wrs := make([]qp.RecvWR, 4)
		for i := range wrs {
			wrs[i] = qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: b.mr.IOVA() + uint64(i*1000), Length: 1000, LKey: b.mr.LKey()}}}
		}
		bad := qp.RecvWR{WRID: 99, SGL: make([]qp.SGE, 9)}
		n, err := b.qp.PostRecvList(append(wrs, bad))
		if n != 4 || err == nil {
			t.Fatalf("posted %d, err %v; want 4 and an error for the 5th", n, err)
		}
		for i := range 4 {
			x.post(a, &qp.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
				SGL: []qp.SGE{{Addr: a.mr.IOVA() + uint64(i*1000), Length: 1000, LKey: a.mr.LKey()}}})
		}
		for i := range 4 {
			if wc := waitWC(t, b.rcq); wc.Status != transport.WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != 1000 {
				t.Fatalf("receive completion %d: %v", i, wc)
			}
		}
		if !bytes.Equal(b.buf[:4000], a.buf[:4000]) {
			t.Fatal("received data differs")
		}
	})
}
