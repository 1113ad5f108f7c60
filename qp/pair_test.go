package qp_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

type end struct {
	dev *qp.Device
	pd  *qp.PD
	cq  *qp.CQ
	qp  *qp.QP
	buf []byte
	mr  *qp.MR
}

var (
	ipA = netip.MustParseAddr("198.18.0.1")
	ipB = netip.MustParseAddr("198.18.0.2")
)

func newPair(t *testing.T, cfg nic.MemConfig, size int) (*end, *end) {
	t.Helper()
	la, lb := nic.NewMemPair(cfg)
	macA, macB := la.HardwareAddr(), lb.HardwareAddr()
	mk := func(l nic.Link, ip, peer netip.Addr, peerMAC net.HardwareAddr) *end {
		d, err := qp.Open(qp.Config{Link: l, IP: ip, Neighbors: map[netip.Addr]net.HardwareAddr{peer: peerMAC}, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(4096)
		q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, size)
		mr, err := pd.RegMR(buf, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead|memreg.RemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		return &end{dev: d, pd: pd, cq: cq, qp: q, buf: buf, mr: mr}
	}
	a := mk(la, ipA, ipB, macB)
	b := mk(lb, ipB, ipA, macA)
	if err := a.qp.Connect(context.Background(), qp.Remote{QPN: b.qp.QPN(), PSN: 100, GID: ipB}, qp.ConnectOptions{SQPSN: 200}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(context.Background(), qp.Remote{QPN: a.qp.QPN(), PSN: 200, GID: ipA}, qp.ConnectOptions{SQPSN: 100}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func wait(t *testing.T, cq *qp.CQ) qp.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]qp.WC
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("wait: n=%d err=%v", n, err)
	}
	return wc[0]
}

func TestWriteSmoke(t *testing.T) {
	a, b := newPair(t, nic.MemConfig{}, 1<<16)
	for i := range a.buf {
		a.buf[i] = byte(i * 7)
	}
	n := uint32(5000)
	err := a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{{Addr: a.mr.IOVA(), Length: n, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.IOVA() + 8, RKey: b.mr.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wc := wait(t, a.cq)
	if wc.Status != transport.WCSuccess {
		t.Fatalf("wc %v", wc)
	}
	if !bytes.Equal(b.buf[8:8+n], a.buf[:n]) {
		t.Fatal("data mismatch")
	}
}
