package qp

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
)

type end struct {
	dev *Device
	pd  *PD
	cq  *CQ
	qp  *QP
	buf []byte
	mr  *MR
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
		d, err := Open(Config{Link: l, IP: ip, Neighbors: map[netip.Addr]net.HardwareAddr{peer: peerMAC}, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd := d.AllocPD()
		cq, _ := d.CreateCQ(4096)
		q, err := pd.CreateQP(InitAttr{SendCQ: cq, RecvCQ: cq, Cap: Caps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}})
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
	if err := a.qp.Connect(context.Background(), Remote{QPN: b.qp.QPN(), PSN: 100, GID: ipB}, ConnectOptions{SQPSN: 200}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(context.Background(), Remote{QPN: a.qp.QPN(), PSN: 200, GID: ipA}, ConnectOptions{SQPSN: 100}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func wait(t *testing.T, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]WC
	n, err := cq.Wait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("wait: n=%d err=%v", n, err)
	}
	return wc[0]
}

func TestWriteSmoke(t *testing.T) {
	bubble(t, func(t *testing.T) {
		a, b := newPair(t, nic.MemConfig{}, 1<<16)
		for i := range a.buf {
			a.buf[i] = byte(i * 7)
		}
		n := uint32(5000)
		err := a.qp.PostSend(&SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []SGE{{Addr: a.mr.IOVA(), Length: n, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.IOVA() + 8, RKey: b.mr.RKey()})
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
	})
}
