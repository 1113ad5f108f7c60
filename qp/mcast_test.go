package qp_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/wire"
)

// TestMulticastMAC: the MAC mappings of ib_resolve_eth_dmac.
func TestMulticastMAC(t *testing.T) {
	for _, c := range []struct {
		gid  string
		want string
	}{
		{"::ffff:239.1.2.3", "01:00:5e:01:02:03"},
		{"::ffff:224.129.255.7", "01:00:5e:01:ff:07"}, // the 24th bit is dropped
		{"239.1.2.3", "01:00:5e:01:02:03"},
		{"ff0e::1:2:3:4", "33:33:00:03:00:04"},
		{"ff12::8000:1", "33:33:80:00:00:01"},
		{"::ffff:198.18.0.1", ""},
		{"fe80::1", ""},
	} {
		got := qp.MulticastMAC(netip.MustParseAddr(c.gid))
		if got.String() != c.want || qp.IsMulticastGID(netip.MustParseAddr(c.gid)) != (c.want != "") {
			t.Errorf("%s: MAC %q, want %q", c.gid, got, c.want)
		}
	}
}

// TestUDMulticast: a datagram A sends to an IPv4 group (QPN 0xFFFFFF, the
// IPv4-mapped MGID, destination MAC 01:00:5e:01:02:03, IP 239.1.2.3)
// reaches every QP of B attached to the group and none that is not; a
// detached QP gets nothing more; the attachment rules of ib core and rxe
// hold (UD only, multicast GIDs only, attach twice is fine, detach of a
// QP not attached is EINVAL, an attached QP cannot be destroyed).
func TestUDMulticast(t *testing.T) {
	var tap bytes.Buffer
	n, a, b := udPair(t, 1, &tap)
	ctx := context.Background()
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	// A second UD QP on B, attached too; b.q is attached; a third is not.
	mk := func() *udEnd {
		t.Helper()
		return newUDEnd(t, n.B, udQKey, 0)
	}
	b2, b3 := mk(), mk()
	for _, e := range []*udEnd{b, b2, b3} {
		e.recv(t, 0, udSlot)
		e.recv(t, 1, udSlot)
	}
	for _, e := range []*udEnd{b, b2} {
		if err := e.q.AttachMcast(group, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.q.AttachMcast(group, 0); err != nil {
		t.Fatalf("second attach: %v, want nil (rxe)", err)
	}
	ah, err := a.pd.CreateAH(ctx, qp.AHAttr{GID: group, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		a.buf[i] = byte(i + 1)
	}
	a.send(t, ah, qp.MulticastQPN, udQKey, 64, qp.WRSendWithImm, a.q.QPN())
	if wc := wait1(t, n, a.cq); wc.Status != qp.WCSuccess {
		t.Fatalf("send: %v", wc)
	}
	for name, e := range map[string]*udEnd{"b": b, "b2": b2} {
		wc := wait1(t, n, e.cq)
		if wc.Status != qp.WCSuccess || wc.QPNum != e.q.QPN() || wc.SrcQP != a.q.QPN() || wc.ByteLen != qp.GRHLen+64 ||
			wc.Flags&qp.WCWithImm == 0 || wc.Imm != a.q.QPN() {
			t.Fatalf("%s: %v", name, wc)
		}
		if got := e.buf[udRecvOff+qp.GRHLen:][:64]; !bytes.Equal(got, a.buf[:64]) {
			t.Fatalf("%s: payload % x", name, got[:8])
		}
		// The GRH area's IPv4 header names the group as destination.
		if dst := netip.AddrFrom4([4]byte(e.buf[udRecvOff+36 : udRecvOff+40])); dst != group.Unmap() {
			t.Fatalf("%s: GRH destination %v", name, dst)
		}
	}
	var wcs [1]qp.WC
	if k, _ := n.Wait(b3.cq, wcs[:], 10*time.Millisecond); k != 0 {
		t.Fatalf("a QP not attached received %v", wcs[0])
	}
	frames, err := pcapfile.ReadAll(bytes.NewReader(tap.Bytes()))
	if err != nil || len(frames) != 1 {
		t.Fatalf("%d frames on the wire (%v), want 1", len(frames), err)
	}
	var p wire.Packet
	if err := wire.Parse(frames[0].Data, &p); err != nil {
		t.Fatal(err)
	}
	if mac := macOf(p); mac != "01:00:5e:01:02:03" || p.DstIP() != group.Unmap() ||
		p.BTH.DestQP() != 0xFFFFFF || p.DETH.QKey() != udQKey || p.IPv4.TTL() != 64 {
		t.Fatalf("frame to %s %v QPN %#x Q_Key %#x TTL %d", mac, p.DstIP(), p.BTH.DestQP(), p.DETH.QKey(), p.IPv4.TTL())
	}

	// Detached, b2 gets nothing more; b still does.
	if err := b2.q.DetachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	a.send(t, ah, qp.MulticastQPN, udQKey, 8, qp.WRSend, 0)
	wait1(t, n, a.cq)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.ByteLen != qp.GRHLen+8 {
		t.Fatalf("b after b2 detached: %v", wc)
	}
	if k, _ := n.Wait(b2.cq, wcs[:], 10*time.Millisecond); k != 0 {
		t.Fatalf("a detached QP received %v", wcs[0])
	}
	// A unicast datagram to QPN 0xFFFFFF is no one's.
	if err := b2.q.DetachMcast(group, 0); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("detach of a QP not attached: %v", err)
	}
	if err := b.q.Destroy(); !errors.Is(err, qp.ErrQPBusy) {
		t.Fatalf("destroy of an attached QP: %v, want ErrQPBusy", err)
	}
	if err := b.q.AttachMcast(netip.MustParseAddr("::ffff:198.18.0.9"), 0); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("attach to a unicast GID: %v", err)
	}
	cq, _ := n.B.Dev.CreateCQ(4)
	rc, err := b.pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.AttachMcast(group, 0); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("attach of an RC QP: %v", err)
	}
	if err := b.q.DetachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.q.Destroy(); err != nil {
		t.Fatalf("destroy after detach: %v", err)
	}
}

// TestUDMulticastIPv6: an IPv6 group's frames go to 33:33 and the last
// four bytes of the group, and reach the attached QP.
func TestUDMulticastIPv6(t *testing.T) {
	var tap bytes.Buffer
	n, a, b := udPairIPv6(t, &tap)
	group := netip.MustParseAddr("ff0e::1:2:3:4")
	b.recv(t, 0, udSlot)
	if err := b.q.AttachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(context.Background(), qp.AHAttr{GID: group, HopLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	a.send(t, ah, qp.MulticastQPN, udQKey, 16, qp.WRSend, 0)
	wait1(t, n, a.cq)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.ByteLen != qp.GRHLen+16 {
		t.Fatalf("IPv6 group: %v", wc)
	}
	frames, _ := pcapfile.ReadAll(bytes.NewReader(tap.Bytes()))
	var p wire.Packet
	if len(frames) != 1 || wire.Parse(frames[0].Data, &p) != nil || macOf(p) != "33:33:00:03:00:04" {
		t.Fatalf("IPv6 group frame: %d frames", len(frames))
	}
}

func udPairIPv6(t *testing.T, tap *bytes.Buffer) (*sim.Net, *udEnd, *udEnd) {
	t.Helper()
	n, err := sim.NewPair(sim.Config{Seed: 1, IPv6: true, Tap: tap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, newUDEnd(t, n.A, udQKey, 1), newUDEnd(t, n.B, udQKey, 2)
}

func macOf(p wire.Packet) string {
	m := p.Eth.Dst()
	return net.HardwareAddr(m[:]).String()
}

// TestUDMulticastLoopback: a datagram a QP sends to a group goes to the
// QPs of its own device attached to it, the sender included (rxe: the IP
// stack loops a multicast skb back), and on the wire to the other
// device's members; a QP created with BlockSelfMcastLoopback is not
// looped back (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).
func TestUDMulticastLoopback(t *testing.T) {
	n, a, b := udPair(t, 1, nil)
	ctx := context.Background()
	group := netip.MustParseAddr("::ffff:239.9.9.9")
	b2 := newUDEnd(t, n.B, udQKey, 0)
	for _, e := range []*udEnd{a, b, b2} {
		for i := range 4 {
			e.recv(t, i, udSlot)
		}
		if err := e.q.AttachMcast(group, 0); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := b.pd.CreateAH(ctx, qp.AHAttr{GID: group})
	if err != nil {
		t.Fatal(err)
	}
	b.send(t, ah, qp.MulticastQPN, udQKey, 32, qp.WRSendWithImm, 7)
	// b's CQ has its send completion and its own datagram back.
	var sawSend, sawRecv bool
	for range 2 {
		wc := wait1(t, n, b.cq)
		switch {
		case wc.Opcode == qp.WCSend && wc.Status == qp.WCSuccess:
			sawSend = true
		case wc.Opcode == qp.WCRecv && wc.Status == qp.WCSuccess && wc.SrcQP == b.q.QPN() && wc.Imm == 7:
			sawRecv = true
		default:
			t.Fatalf("b: %v", wc)
		}
	}
	if !sawSend || !sawRecv {
		t.Fatalf("b: send %v, own datagram %v", sawSend, sawRecv)
	}
	for name, e := range map[string]*udEnd{"b2 (same device)": b2, "a (the wire)": a} {
		if wc := wait1(t, n, e.cq); wc.Status != qp.WCSuccess || wc.SrcQP != b.q.QPN() || wc.ByteLen != qp.GRHLen+32 {
			t.Fatalf("%s: %v", name, wc)
		}
	}
	// A blocking sender on B: its datagram reaches A only.
	cq, _ := n.B.Dev.CreateCQ(8)
	blk, err := b.pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Type: qp.QPTypeUD, Cap: qp.Caps{MaxSendWR: 2, MaxRecvWR: 2},
		BlockSelfMcastLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		a    qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
		{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
	} {
		if err := blk.Modify(ctx, m.a, m.mask); err != nil {
			t.Fatal(err)
		}
	}
	if err := blk.PostSend(&qp.SendWR{Opcode: qp.WRSend, AH: ah, RemoteQPN: qp.MulticastQPN, RemoteQKey: udQKey,
		SGL: []qp.SGE{{Addr: b.mr.IOVA(), Length: 8, LKey: b.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, n, a.cq); wc.Status != qp.WCSuccess || wc.SrcQP != blk.QPN() {
		t.Fatalf("a from the blocking sender: %v", wc)
	}
	var wcs [1]qp.WC
	for name, e := range map[string]*udEnd{"b": b, "b2": b2} {
		if k, _ := n.Wait(e.cq, wcs[:], 10*time.Millisecond); k != 0 {
			t.Fatalf("%s got a blocking sender's datagram: %v", name, wcs[0])
		}
	}
}
