package qp_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/qp"
)

// Addresses of devices the tests open themselves (not through newX), from
// the benchmarking prefix 198.18.0.0/15 (RFC 2544).
var (
	ipA = netip.MustParseAddr("198.18.0.1")
	ipB = netip.MustParseAddr("198.18.0.2")
)

func TestWriteSmoke(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{noTap: true})
		a, b := x.a, x.b
		for i := range a.buf {
			a.buf[i] = byte(i * 7)
		}
		n := 5000
		x.post(a, &qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.sge(0, n)}, RemoteAddr: b.mr.IOVA() + 8, RKey: b.mr.RKey()})
		expectWC(t, a.scq, 1, qp.WCSuccess, qp.WCRDMAWrite)
		if !bytes.Equal(b.buf[8:8+n], a.buf[:n]) {
			t.Fatal("data mismatch")
		}
	})
}
