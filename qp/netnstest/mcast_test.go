package netnstest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// igmpGroups returns the IPv4 groups joined on ifname in side's namespace
// (/proc/net/igmp: an interface line, then one line per group, its
// address in hex as the kernel holds it, network order read as a
// little-endian word).
func igmpGroups(t *testing.T, p *netns.Pair, side netns.Side, ifname string) []netip.Addr {
	t.Helper()
	var b []byte
	if err := p.Do(side, func() (err error) {
		b, err = os.ReadFile("/proc/thread-self/net/igmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var groups []netip.Addr
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, " "):
			in = f[1] == ifname || f[1] == ifname+":"
		case in && len(f) >= 1 && len(f[0]) == 8:
			var v uint32
			fmt.Sscanf(f[0], "%x", &v)
			var a [4]byte
			binary.LittleEndian.PutUint32(a[:], v)
			groups = append(groups, netip.AddrFrom4(a))
		}
	}
	return groups
}

// TestMulticastOverVeth: on each raw backend, a UD QP attached to an IPv4
// group joins it on its interface (the kernel lists the membership in
// /proc/net/igmp and sends the IGMP report), receives what a QP on the
// other end of the veth pair sends to the group, and the detach leaves
// the group.
func TestMulticastOverVeth(t *testing.T) {
	netns.RequireRoot(t)
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket} {
		t.Run(backend, func(t *testing.T) {
			p := netns.NewPair(t, netns.Options{NoDAD: true})
			group := netip.MustParseAddr("::ffff:239.1.2.3")
			type ud struct {
				dev *qp.Device
				q   *qp.QP
				cq  *qp.CQ
				mr  *qp.MR
			}
			const qkey = 0x01234567
			mk := func(side netns.Side) *ud {
				u := &ud{}
				err := p.Do(side, func() (err error) {
					u.dev, _, err = qp.OpenInterface(context.Background(), p.End(side).Ifname,
						qp.InterfaceOptions{Backend: backend, Logger: quiet, Seed: int64(side) + 1})
					return err
				})
				if err != nil {
					t.Fatalf("side %v: %v", side, err)
				}
				t.Cleanup(func() { u.dev.Close() })
				pd := u.dev.AllocPD()
				u.cq, _ = u.dev.CreateCQ(64)
				u.mr, _ = pd.RegMR(make([]byte, 8*(qp.GRHLen+256)), qp.LocalWrite)
				u.q, err = pd.CreateQP(qp.InitAttr{Type: qp.QPTypeUD, SendCQ: u.cq, RecvCQ: u.cq, Cap: qp.Caps{MaxSendWR: 8, MaxRecvWR: 8}})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, m := range []struct {
					a    qp.Attr
					mask qp.AttrMask
				}{
					{qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
					{qp.Attr{State: qp.StateRTR}, qp.AttrState},
					{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
				} {
					if err := u.q.Modify(ctx, m.a, m.mask); err != nil {
						t.Fatal(err)
					}
				}
				return u
			}
			a, b := mk(netns.A), mk(netns.B)
			for i := range 8 {
				if err := b.q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{{Addr: b.mr.IOVA() + uint64(i*(qp.GRHLen+256)), Length: qp.GRHLen + 256, LKey: b.mr.LKey()}}}); err != nil {
					t.Fatal(err)
				}
			}
			has := func() bool {
				for _, g := range igmpGroups(t, p, netns.B, p.B.Ifname) {
					if g == group.Unmap() {
						return true
					}
				}
				return false
			}
			if has() {
				t.Fatal("B is in the group before any attach")
			}
			if err := b.q.AttachMcast(group, 0); err != nil {
				t.Fatal(err)
			}
			if !has() {
				t.Fatalf("after the attach, B's %s is not in %v: %v", p.B.Ifname, group, igmpGroups(t, p, netns.B, p.B.Ifname))
			}
			ah, err := a.q.PD().CreateAH(context.Background(), qp.AHAttr{GID: group})
			if err != nil {
				t.Fatal(err)
			}
			const n = 5
			for i := range n {
				if err := a.q.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRSendWithImm, Imm: uint32(i), AH: ah,
					RemoteQPN: qp.MulticastQPN, RemoteQKey: qkey,
					SGL: []qp.SGE{{Addr: a.mr.IOVA(), Length: 100, LKey: a.mr.LKey()}}}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wcs := make([]qp.WC, 8)
			got := 0
			for got < n {
				k, err := b.cq.Wait(ctx, wcs)
				if err != nil {
					t.Fatalf("B received %d of %d datagrams: %v", got, n, err)
				}
				for _, wc := range wcs[:k] {
					if wc.Status != qp.WCSuccess || wc.ByteLen != qp.GRHLen+100 || wc.Imm != uint32(got) || wc.SrcQP != a.q.QPN() {
						t.Fatalf("datagram %d: %v", got, wc)
					}
					got++
				}
			}
			if err := b.q.DetachMcast(group, 0); err != nil {
				t.Fatal(err)
			}
			if has() {
				t.Fatalf("after the detach, B is still in %v", group)
			}
		})
	}
}
