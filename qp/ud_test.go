package qp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/wire"
)

// udEnd is one UD QP with one buffer: the send area at [0, 4096) and
// receive slots of 40+1024 bytes after it.
type udEnd struct {
	ep  *sim.Endpoint
	pd  *qp.PD
	cq  *qp.CQ
	q   *qp.QP
	mr  *qp.MR
	buf []byte
}

const (
	udQKey    = 0x11111111 // ibv_ud_pingpong's
	udRecvOff = 4096
	udSlot    = qp.GRHLen + 1024
)

func newUDEnd(t *testing.T, ep *sim.Endpoint, qkey uint32, sqpsn uint32) *udEnd {
	t.Helper()
	e := &udEnd{ep: ep, pd: ep.Dev.AllocPD(), buf: make([]byte, udRecvOff+8*udSlot)}
	var err error
	if e.cq, err = ep.Dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, qp.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.q, err = e.pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq, Type: qp.QPTypeUD, Cap: qp.Caps{MaxSendWR: 8, MaxRecvWR: 8}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// ibv_ud_pingpong's three modify calls, unchanged.
	if err := e.q.Modify(ctx, qp.Attr{State: qp.StateInit, PKeyIndex: 0, Port: 1, QKey: qkey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Modify(ctx, qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Modify(ctx, qp.Attr{State: qp.StateRTS, SQPSN: wire.PSN(sqpsn)}, qp.AttrState|qp.AttrSQPSN); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *udEnd) recv(t *testing.T, slot int, n uint32) {
	t.Helper()
	if err := e.q.PostRecv(&qp.RecvWR{WRID: uint64(100 + slot), SGL: []qp.SGE{{Addr: e.mr.IOVA() + uint64(udRecvOff+slot*udSlot), Length: n, LKey: e.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
}

func (e *udEnd) ah(t *testing.T, to *sim.Endpoint) *qp.AH {
	t.Helper()
	ah, err := e.pd.CreateAH(context.Background(), qp.AHAttr{GID: to.GID(), HopLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

func (e *udEnd) send(t *testing.T, ah *qp.AH, qpn, qkey uint32, n int, op qp.WROpcode, imm uint32) {
	t.Helper()
	wr := qp.SendWR{WRID: 7, Opcode: op, Flags: qp.SendSignaled, Imm: imm, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey,
		SGL: []qp.SGE{{Addr: e.mr.IOVA(), Length: uint32(n), LKey: e.mr.LKey()}}}
	if err := e.q.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
}

func udPair(t *testing.T, seed int64, tap *bytes.Buffer) (*sim.Net, *udEnd, *udEnd) {
	t.Helper()
	cfg := sim.Config{Seed: seed}
	if tap != nil {
		cfg.Tap = tap
	}
	n, err := sim.NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, newUDEnd(t, n.A, udQKey, 0x806a08), newUDEnd(t, n.B, udQKey, 0xf173ed)
}

func wait1(t *testing.T, n *sim.Net, cq *qp.CQ) qp.WC {
	t.Helper()
	var wcs [1]qp.WC
	if _, err := n.Wait(cq, wcs[:], time.Second); err != nil {
		t.Fatalf("seed %d: %v", n.Seed(), err)
	}
	return wcs[0]
}

func TestUDSendRecv(t *testing.T) {
	var tap bytes.Buffer
	n, a, b := udPair(t, 1, &tap)
	for i := range 512 {
		a.buf[i] = byte(i * 7)
	}
	b.recv(t, 0, udSlot)
	ah := a.ah(t, n.B)
	a.send(t, ah, b.q.QPN(), udQKey, 512, qp.WRSendWithImm, 0xdeadbeef)
	if wc := wait1(t, n, a.cq); wc.Status != qp.WCSuccess || wc.Opcode != qp.WCSend || wc.ByteLen != 512 || wc.Flags&qp.WCWithImm == 0 {
		t.Fatalf("send completion %v", wc)
	}
	wc := wait1(t, n, b.cq)
	if wc.Status != qp.WCSuccess || wc.Opcode != qp.WCRecv || wc.ByteLen != 40+512 || wc.SrcQP != a.q.QPN() ||
		wc.Flags&qp.WCGRH == 0 || wc.Flags&qp.WCWithImm == 0 || wc.Imm != 0xdeadbeef || wc.WRID != 100 {
		t.Fatalf("receive completion %v src_qp %#x", wc, wc.SrcQP)
	}
	got := b.buf[udRecvOff : udRecvOff+udSlot]
	if !bytes.Equal(got[40:40+512], a.buf[:512]) {
		t.Fatal("payload differs")
	}
	// The GRH area: 20 zero bytes, then the IPv4 header as received.
	if !bytes.Equal(got[:20], make([]byte, 20)) || got[20] != 0x45 || got[20+9] != 17 {
		t.Fatalf("GRH area % x", got[:40])
	}
	if !bytes.Equal(got[20+12:20+16], n.A.IP.AsSlice()) {
		t.Fatalf("GRH source % x, want %v", got[32:36], n.A.IP)
	}
	// Answer along the GRH, as ibv_ud_pingpong does not but every UD
	// server (and the GSI) does.
	ahAttr, err := qp.AHAttrFromWC(&wc, got[:40])
	if err != nil {
		t.Fatal(err)
	}
	if ahAttr.GID != n.A.GID() || ahAttr.HopLimit != 1 || ahAttr.SGIDIndex != 1 {
		t.Fatalf("AHAttrFromWC = %+v, want GID %v hop limit 1", ahAttr, n.A.GID())
	}

	// On the wire: one UD SEND_ONLY_WITH_IMMEDIATE, the DETH with the Q_Key
	// and source QP, P_Key 0xFFFF, rxe's UD source port, PSN = sq_psn.
	frames, err := pcapfile.ReadAll(bytes.NewReader(tap.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 1 {
		t.Fatalf("%d frames on the wire, want 1 (no ACKs on UD)", len(frames))
	}
	var p wire.Packet
	if err := wire.Parse(frames[0].Data, &p); err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != wire.UDSendOnlyWithImmediate || p.DETH.QKey() != udQKey || p.DETH.SrcQP() != a.q.QPN() ||
		p.BTH.PKey() != 0xFFFF || p.BTH.DestQP() != b.q.QPN() || p.BTH.PSN() != 0x806a08 ||
		p.UDP.SrcPort() != wire.UDSourcePort(a.q.QPN()) || p.IPv4.TTL() != 1 || len(p.Payload) != 512 {
		t.Fatalf("frame: op %v qkey %#x srcqp %#x pkey %#x dqp %#x psn %#x sport %d ttl %d",
			p.Opcode(), p.DETH.QKey(), p.DETH.SrcQP(), p.BTH.PKey(), p.BTH.DestQP(), p.BTH.PSN(), p.UDP.SrcPort(), p.IPv4.TTL())
	}
	if got := a.q.Query().SQPSN; got != 0x806a09 {
		t.Fatalf("sq_psn after one send = %#x, want 0x806a09", got)
	}
}

// TestUDDrops: each datagram that cannot be received is dropped and
// counted, and the receive it did not use still takes the next one.
func TestUDDrops(t *testing.T) {
	n, a, b := udPair(t, 2, nil)
	ah := a.ah(t, n.B)
	settle := func() {
		if err := n.RunFor(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(e *udEnd) {
		var wcs [8]qp.WC
		e.cq.Poll(wcs[:])
	}
	// No receive posted.
	a.send(t, ah, b.q.QPN(), udQKey, 64, qp.WRSend, 0)
	settle()
	// Wrong Q_Key.
	b.recv(t, 0, qp.GRHLen+64)
	a.send(t, ah, b.q.QPN(), 0x22222222, 64, qp.WRSend, 0)
	settle()
	// A receive buffer shorter than 40 + payload: rxe drops it (class D)
	// and keeps the WQE.
	a.send(t, ah, b.q.QPN(), udQKey, 65, qp.WRSend, 0)
	settle()
	c := b.q.Counters()
	if c[qp.CntUDNoRecv] != 1 || c[qp.CntRcvdBadQKey] != 1 || c[qp.CntUDRecvTooShort] != 1 {
		t.Fatalf("counters: no_recv %d bad_qkey %d too_short %d", c[qp.CntUDNoRecv], c[qp.CntRcvdBadQKey], c[qp.CntUDRecvTooShort])
	}
	var wcs [4]qp.WC
	if k, _ := b.cq.Poll(wcs[:]); k != 0 {
		t.Fatalf("dropped datagrams completed: %v", wcs[:k])
	}
	// Exactly 40 + payload fits, in the WQE that was kept.
	a.send(t, ah, b.q.QPN(), udQKey, 64, qp.WRSend, 0)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.ByteLen != qp.GRHLen+64 || wc.WRID != 100 {
		t.Fatalf("completion %v", wc)
	}
	drain(a)

	// A QP in INIT takes no datagrams.
	c0 := newUDEnd(t, n.B, udQKey, 0)
	if err := c0.q.Modify(context.Background(), qp.Attr{State: qp.StateReset}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := c0.q.Modify(context.Background(), qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
		t.Fatal(err)
	}
	c0.recv(t, 0, udSlot)
	a.send(t, ah, c0.q.QPN(), udQKey, 8, qp.WRSend, 0)
	settle()
	if got := c0.q.Counters()[qp.CntRcvdWrongState]; got != 1 {
		t.Fatalf("rcvd_wrong_state = %d, want 1", got)
	}

	// Longer than the port MTU (1024): C10-93.1.1, completed, nothing sent.
	before := n.A.Dev.Counters()[qp.CntSentPkts]
	a.send(t, ah, b.q.QPN(), udQKey, 1025, qp.WRSend, 0)
	if wc := wait1(t, n, a.cq); wc.Status != qp.WCSuccess {
		t.Fatalf("over-MTU send completion %v", wc)
	}
	if got := n.A.Dev.Counters(); got[qp.CntSentPkts] != before || got[qp.CntUDSendOverMTU] != 1 {
		t.Fatalf("sent_pkts %d (was %d), ud_send_over_mtu %d", got[qp.CntSentPkts], before, got[qp.CntUDSendOverMTU])
	}
}

func TestUDPostErrors(t *testing.T) {
	n, a, b := udPair(t, 3, nil)
	ah := a.ah(t, n.B)
	sge := []qp.SGE{{Addr: a.mr.IOVA(), Length: 8, LKey: a.mr.LKey()}}
	other, err := n.A.Dev.AllocPD().CreateAH(context.Background(), qp.AHAttr{GID: n.B.GID()})
	if err != nil {
		t.Fatal(err)
	}
	gone := a.ah(t, n.B)
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := gone.Destroy(); err == nil {
		t.Fatal("second Destroy succeeded")
	}
	for name, wr := range map[string]qp.SendWR{
		"no AH":            {Opcode: qp.WRSend, SGL: sge, RemoteQPN: b.q.QPN()},
		"destroyed AH":     {Opcode: qp.WRSend, SGL: sge, AH: gone, RemoteQPN: b.q.QPN()},
		"AH of another PD": {Opcode: qp.WRSend, SGL: sge, AH: other, RemoteQPN: b.q.QPN()},
		"RDMA WRITE":       {Opcode: qp.WRRDMAWrite, SGL: sge, AH: ah, RemoteQPN: b.q.QPN()},
		"QPN 0":            {Opcode: qp.WRSend, SGL: sge, AH: ah},
		"QPN > 24 bits":    {Opcode: qp.WRSend, SGL: sge, AH: ah, RemoteQPN: 1 << 24},
	} {
		if err := a.q.PostSend(&wr); !errors.Is(err, qp.ErrInvalidArgument) {
			t.Errorf("%s: PostSend = %v, want ErrInvalidArgument", name, err)
		}
	}
	// RC attributes are refused on UD transitions, and the Q_Key is required.
	c, _ := n.A.Dev.CreateCQ(4)
	u, err := a.pd.CreateQP(qp.InitAttr{SendCQ: c, RecvCQ: c, Type: qp.QPTypeUD, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Modify(context.Background(), qp.Attr{State: qp.StateInit, Port: 1}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("INIT without Q_Key: %v", err)
	}
	if err := u.Modify(context.Background(), qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: qp.RemoteWrite},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey|qp.AttrAccessFlags); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("INIT with access flags: %v", err)
	}
	if _, err := qp.AHAttrFromWC(&qp.WC{}, make([]byte, 40)); err == nil {
		t.Fatal("AHAttrFromWC without WCGRH succeeded")
	}
	if _, err := qp.AHAttrFromWC(&qp.WC{Flags: qp.WCGRH}, make([]byte, 39)); err == nil {
		t.Fatal("AHAttrFromWC with 39 bytes succeeded")
	}
}

// TestUDIPv6 checks the GRH area for IPv6: the whole 40-byte IPv6 header.
func TestUDIPv6(t *testing.T) {
	net, err := sim.NewPair(sim.Config{Seed: 4, IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	a, b := newUDEnd(t, net.A, udQKey, 1), newUDEnd(t, net.B, udQKey, 2)
	b.recv(t, 0, udSlot)
	a.send(t, a.ah(t, net.B), b.q.QPN(), udQKey, 100, qp.WRSend, 0)
	wc := wait1(t, net, b.cq)
	g := b.buf[udRecvOff : udRecvOff+40]
	if wc.ByteLen != 140 || g[0]>>4 != 6 || g[6] != 17 || !bytes.Equal(g[8:24], net.A.IP.AsSlice()) {
		t.Fatalf("completion %v, GRH % x", wc, g)
	}
	ah, err := qp.AHAttrFromWC(&wc, g)
	if err != nil || ah.GID != net.A.IP || ah.HopLimit != 1 {
		t.Fatalf("AHAttrFromWC = %+v, %v", ah, err)
	}
}

// TestUDPrivilegedQKey: a WR Q_Key with the high bit set sends the QP's
// own Q_Key (IBTA C10-15), so it reaches a peer with that Q_Key.
func TestUDPrivilegedQKey(t *testing.T) {
	var tap bytes.Buffer
	n, a, b := udPair(t, 6, &tap)
	b.recv(t, 0, udSlot)
	a.send(t, a.ah(t, n.B), b.q.QPN(), 0x80000000, 16, qp.WRSend, 0)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.ByteLen != 56 {
		t.Fatalf("completion %v", wc)
	}
	frames, err := pcapfile.ReadAll(bytes.NewReader(tap.Bytes()))
	if err != nil || len(frames) != 1 {
		t.Fatalf("%d frames, %v", len(frames), err)
	}
	var p wire.Packet
	if err := wire.Parse(frames[0].Data, &p); err != nil || p.DETH.QKey() != udQKey {
		t.Fatalf("DETH Q_Key %#x, %v", p.DETH.QKey(), err)
	}
}

// TestUDLossy: over a link that drops, duplicates and reorders (seeded),
// every datagram that arrives is received once per copy, nothing is sent
// twice and nothing answers: UD has no ACKs and no retries. A duplicated
// frame is a second datagram to UD (the PSN is not checked).
func TestUDLossy(t *testing.T) {
	const seed, count = 8, 100
	n, err := sim.NewPair(sim.Config{Seed: seed, AtoB: sim.Faults{Drop: 0.1, Duplicate: 0.05, Reorder: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, b := newUDEnd(t, n.A, udQKey, 0), newUDEnd(t, n.B, udQKey, 0)
	// Plenty of receives: a UD QP sized for the burst.
	cq, _ := n.B.Dev.CreateCQ(2 * count)
	rq, err := b.pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Type: qp.QPTypeUD, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 2 * count}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range []struct {
		a    qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
	} {
		if err := rq.Modify(ctx, s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 * count {
		if err := rq.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: b.mr.IOVA() + udRecvOff, Length: udSlot, LKey: b.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := a.ah(t, n.B)
	var wcs [16]qp.WC
	for range count {
		wr := qp.SendWR{Opcode: qp.WRSend, AH: ah, RemoteQPN: rq.QPN(), RemoteQKey: udQKey,
			SGL: []qp.SGE{{Addr: a.mr.IOVA(), Length: 100, LKey: a.mr.LKey()}}}
		if err := a.q.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.RunFor(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		k, err := cq.Poll(wcs[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != qp.WCSuccess || wc.ByteLen != 140 {
				t.Fatalf("seed %d: %v", seed, wc)
			}
		}
		got += k
		if k == 0 {
			break
		}
	}
	ls := n.A.LinkStats()
	if want := count - int(ls.Dropped) + int(ls.Duplicated); got != want || ls.Dropped == 0 {
		t.Fatalf("seed %d: %d received, want %d sent - %d dropped + %d duplicated", seed, got, want, ls.Dropped, ls.Duplicated)
	}
	if sent := n.A.Dev.Counters()[qp.CntSentPkts]; sent != count {
		t.Fatalf("seed %d: %d packets sent for %d datagrams", seed, sent, count)
	}
	if sent := n.B.Dev.Counters()[qp.CntSentPkts]; sent != 0 {
		t.Fatalf("seed %d: the receiver sent %d packets", seed, sent)
	}
}

// TestUDOnSRQ: two UD QPs on B take their receives from one SRQ: datagrams
// from A to either land in the SRQ's WRs in posting order, each completion
// names the QP it arrived on and the sender's QPN, with the 40-byte GRH
// area in front of the payload; a datagram longer than the SRQ's next
// buffer consumes that WR with REM_INV_REQ_ERR (rxe's class E for UD on an
// SRQ) and the QP goes on; an empty SRQ drops the datagram; PostRecv on
// the QPs themselves fails.
func TestUDOnSRQ(t *testing.T) {
	n, a, b := udPair(t, 1, nil)
	srq, err := b.pd.CreateSRQ(qp.SRQInitAttr{MaxWR: 8})
	if err != nil {
		t.Fatal(err)
	}
	var qs [2]*qp.QP
	ctx := context.Background()
	for i := range qs {
		q, err := b.pd.CreateQP(qp.InitAttr{SendCQ: b.cq, RecvCQ: b.cq, Type: qp.QPTypeUD, Cap: qp.Caps{MaxSendWR: 8}, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ctx, qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ctx, qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
			t.Fatal(err)
		}
		qs[i] = q
	}
	if err := qs[0].PostRecv(&qp.RecvWR{WRID: 1}); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v, want ErrInvalidArgument", err)
	}
	post := func(slot int, n uint32) {
		t.Helper()
		if err := srq.PostRecv(&qp.RecvWR{WRID: uint64(100 + slot), SGL: []qp.SGE{{Addr: b.mr.IOVA() + uint64(udRecvOff+slot*udSlot), Length: n, LKey: b.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := a.ah(t, n.B)
	sendTo := func(q *qp.QP, size int, fill byte) {
		t.Helper()
		for i := range size {
			a.buf[i] = fill + byte(i)
		}
		a.send(t, ah, q.QPN(), udQKey, size, qp.WRSend, 0)
		if wc := wait1(t, n, a.cq); wc.Status != qp.WCSuccess {
			t.Fatalf("send: %v", wc)
		}
	}
	for slot := range 4 {
		post(slot, udSlot)
	}
	// Alternate the QPs: the SRQ's WRs are taken in posting order.
	for k := range 4 {
		q := qs[k%2]
		size := 100 + 50*k
		sendTo(q, size, byte(16*k))
		wc := wait1(t, n, b.cq)
		if wc.Status != qp.WCSuccess || wc.WRID != uint64(100+k) || wc.QPNum != q.QPN() || wc.SrcQP != a.q.QPN() ||
			wc.ByteLen != uint32(qp.GRHLen+size) || wc.Flags&qp.WCGRH == 0 {
			t.Fatalf("datagram %d: %v; want WR %d on QP %#x from %#x, %d bytes with GRH", k, wc, 100+k, q.QPN(), a.q.QPN(), qp.GRHLen+size)
		}
		got := b.buf[udRecvOff+k*udSlot+qp.GRHLen:][:size]
		for i := range got {
			if got[i] != byte(16*k)+byte(i) {
				t.Fatalf("datagram %d: byte %d is %#x, want %#x", k, i, got[i], byte(16*k)+byte(i))
			}
		}
	}
	// A buffer too short for GRH + payload: that WR completes with an
	// error, the next one takes the next datagram.
	post(4, qp.GRHLen+10)
	post(5, udSlot)
	sendTo(qs[1], 200, 1)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCRemInvReqErr || wc.WRID != 104 || wc.QPNum != qs[1].QPN() {
		t.Fatalf("short buffer: %v, want WR 104 with REM_INV_REQ_ERR", wc)
	}
	sendTo(qs[1], 200, 1)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.WRID != 105 {
		t.Fatalf("after the short buffer: %v, want WR 105", wc)
	}
	if st := qs[1].State(); st != qp.StateRTR {
		t.Fatalf("QP after class E: %v, want RTR", st)
	}
	// The SRQ is empty: the datagram is dropped, nothing completes; the
	// next WR posted takes the next datagram.
	sendTo(qs[0], 10, 3)
	var wcs [1]qp.WC
	if k, _ := n.Wait(b.cq, wcs[:], 10*time.Millisecond); k != 0 {
		t.Fatalf("empty SRQ: completion %v", wcs[0])
	}
	post(6, udSlot)
	sendTo(qs[0], 10, 3)
	if wc := wait1(t, n, b.cq); wc.Status != qp.WCSuccess || wc.WRID != 106 || wc.ByteLen != qp.GRHLen+10 {
		t.Fatalf("after the drop: %v, want WR 106", wc)
	}
}
