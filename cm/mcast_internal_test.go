package cm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
)

// TestJoinMulticast: B joins 239.1.2.3 as a full member (its receives
// posted in Prepare), A as a send-only member; A's datagrams to the
// join's address handle reach B's QP with the group's Q_Key; the join's
// fields are rdma_cm's on RoCEv2; IPv6 and unicast groups are refused as
// the kernel refuses them; after Leave, B's QP is gone and its device in
// no group.
func TestJoinMulticast(t *testing.T) {
	a, b := devPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	group := netip.MustParseAddr("239.1.2.3")
	pdB := b.AllocPD()
	bufB := make([]byte, 4*(qp.GRHLen+64))
	mrB, err := pdB.RegMR(bufB, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := JoinMulticast(ctx, b, group, Options{PD: pdB, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4},
		Prepare: func(q *qp.QP) error {
			for i := range 4 {
				if err := q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: mrB.IOVA() + uint64(i*(qp.GRHLen+64)), Length: qp.GRHLen + 64, LKey: mrB.LKey()}}}); err != nil {
					return err
				}
			}
			return nil
		}}, JoinFullMember)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Leave()
	if recv.MGID() != netip.MustParseAddr("::ffff:239.1.2.3") || recv.MLID() != 0 || recv.RemoteQPN() != 0xFFFFFF ||
		recv.RemoteQKey() != 0x01234567 || recv.QP().Query().QKey != 0x01234567 || recv.QP().State() != qp.StateRTS {
		t.Fatalf("join: MGID %v MLID %d QPN %#x Q_Key %#x, QP Q_Key %#x in %v", recv.MGID(), recv.MLID(), recv.RemoteQPN(),
			recv.RemoteQKey(), recv.QP().Query().QKey, recv.QP().State())
	}
	if av := recv.AH().AV(); av.HopLimit != 64 || av.DGID != recv.MGID() || av.DMAC != [6]byte{1, 0, 0x5e, 1, 2, 3} {
		t.Fatalf("join's AH: %+v", av)
	}
	send, err := JoinMulticast(ctx, a, group, Options{}, JoinSendOnlyFullMember)
	if err != nil {
		t.Fatal(err)
	}
	defer send.Leave()
	bufA := make([]byte, 64)
	copy(bufA, "to the group")
	mrA, err := send.PD().RegMR(bufA, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := send.QP().PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRSendWithImm, Imm: send.QP().QPN(), AH: send.AH(),
			RemoteQPN: send.RemoteQPN(), RemoteQKey: send.RemoteQKey(), SGL: []qp.SGE{mrA.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := make([]qp.WC, 4)
	for got := 0; got < 3; {
		n, err := recv.RecvCQ().Wait(ctx, wcs)
		if err != nil {
			t.Fatalf("received %d of 3: %v", got, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != qp.WCSuccess || wc.Imm != send.QP().QPN() || wc.ByteLen != qp.GRHLen+64 {
				t.Fatalf("datagram %d: %v", got, wc)
			}
			got++
		}
	}
	if string(bufB[qp.GRHLen:qp.GRHLen+12]) != "to the group" {
		t.Fatalf("payload %q", bufB[qp.GRHLen:qp.GRHLen+12])
	}
	for _, c := range []struct {
		g    string
		want error
	}{{"ff0e::1", errors.ErrUnsupported}, {"198.18.0.9", syscall.EINVAL}, {"0.0.0.0", syscall.EINVAL}} {
		if _, err := JoinMulticast(ctx, a, netip.MustParseAddr(c.g), Options{}, JoinFullMember); !errors.Is(err, c.want) {
			t.Errorf("join %s: %v, want %v", c.g, err, c.want)
		}
	}
	if _, err := JoinMulticast(ctx, a, group, Options{Local: netip.MustParseAddrPort("198.18.0.77:0")}, JoinFullMember); err == nil {
		t.Error("join bound to an address not the device's succeeded")
	}
	q := recv.QP()
	if err := recv.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := q.DetachMcast(recv.MGID(), 0); !errors.Is(err, qp.ErrDestroyed) {
		t.Fatalf("QP after Leave: %v, want destroyed", err)
	}
}
