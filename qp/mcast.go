package qp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/goroce/goroce/wire"
)

// UD multicast (ibv_attach_mcast, ibv_detach_mcast), as rxe does it on
// RoCEv2 (rxe_mcast.c, rxe_recv.c rxe_rcv_mcast_pkt):
//
//   - a multicast GID is an IPv6 multicast address (ff00::/8) or an
//     IPv4-mapped IPv4 multicast address (::ffff:224.0.0.0/100), which is
//     what rdma_cm makes of an IPv4 group on RoCEv2 (cma_iboe_set_mgid);
//   - a datagram to a group goes to QPN 0xFFFFFF (IB_MULTICAST_QPN), to
//     the group's IP address and its multicast MAC (ib_resolve_eth_dmac:
//     01:00:5e + the low 23 bits for IPv4, 33:33 + the last four bytes for
//     IPv6);
//   - a received datagram whose destination is a group goes to every QP of
//     the device attached to it, each checking its own Q_Key and taking
//     its own receive WR (rxe_rcv_mcast_pkt);
//   - the first QP attached to a group joins it on the interface
//     (Config.JoinGroup: an IGMP membership, so the NIC's filter and the
//     switches pass the group's frames; rdma_cm's cma_igmp_send does this
//     for rxe), the last one detached leaves it;
//   - a QP attached to a group cannot be destroyed (ib core counts the
//     attachment in qp->usecnt: ib_destroy_qp fails with EBUSY);
//   - a datagram a QP sends to a group of which QPs of its own device are
//     members is delivered to them too, the sender included when it is
//     attached (rxe's skb, which has no socket, is looped back by the IP
//     stack's multicast output, ip_mc_output), unless the sending QP was
//     created with BlockSelfMcastLoopback (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).

// MulticastQPN is the destination QPN of every multicast datagram.
const MulticastQPN = 0xFFFFFF

// Multicast limits (rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH).
const (
	MaxMcastGroups    = 8192
	MaxMcastQPsAttach = 56
)

// ErrQPBusy is wrapped by QP.Destroy's error while the QP is attached to
// a multicast group (EBUSY, as ib_destroy_qp_user).
var ErrQPBusy = errors.New("qp: QP attached to a multicast group")

// IsMulticastGID reports whether gid is a multicast GID: an IPv6 multicast
// address, or an IPv4-mapped IPv4 multicast address (rdma_is_multicast_addr).
func IsMulticastGID(gid GID) bool {
	if gid.Is4In6() || gid.Is4() {
		return gid.Unmap().IsMulticast()
	}
	return gid.Is6() && gid.IsMulticast()
}

// MulticastMAC returns the Ethernet address the frames to multicast GID
// gid go to: 01:00:5e and the low 23 bits of an IPv4 group, 33:33 and the
// last four bytes of an IPv6 one (ib_resolve_eth_dmac, ip_eth_mc_map,
// ipv6_eth_mc_map). It returns nil for a GID that is not multicast.
func MulticastMAC(gid GID) net.HardwareAddr {
	if !IsMulticastGID(gid) {
		return nil
	}
	b := gid.As16()
	if gid.Is4In6() || gid.Is4() {
		return net.HardwareAddr{0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]}
	}
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// mcastGroup is one group with QPs of the device attached (under d.mu).
type mcastGroup struct {
	qps   []*QP
	leave func() // the interface membership (Config.JoinGroup), nil without one
}

// mgid is the table key of a multicast GID: its 16-byte form.
func mgid(gid GID) GID { return netip.AddrFrom16(gid.As16()) }

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast): datagrams to the group go to it too. lid is IB's
// multicast LID, 0 on RoCE (it is recorded nowhere). Attaching twice is
// not an error (rxe). The device's first QP on a group joins it on the
// interface (Config.JoinGroup), which may fail.
func (q *QP) AttachMcast(gid GID, lid uint16) error {
	d := q.dev
	if !IsMulticastGID(gid) {
		return fmt.Errorf("qp: attach mcast: %v is not a multicast GID: %w", gid, ErrInvalidArgument)
	}
	key := mgid(gid)
	d.mu.Lock()
	if err := q.usable(); err != nil {
		d.mu.Unlock()
		return err
	}
	if q.eng.Type() != QPTypeUD {
		d.mu.Unlock()
		return fmt.Errorf("qp: attach mcast: a %v QP cannot join a group (UD only): %w", q.eng.Type(), ErrInvalidArgument)
	}
	g := d.mc.groups[key]
	if g != nil {
		defer d.mu.Unlock()
		if slices.Contains(g.qps, q) {
			return nil
		}
		if len(g.qps) >= MaxMcastQPsAttach {
			return fmt.Errorf("qp: attach mcast: %d QPs on %v already: %w", len(g.qps), gid, ErrQueueFull)
		}
		g.qps = append(g.qps, q)
		q.mcast++
		return nil
	}
	if len(d.mc.groups) >= MaxMcastGroups {
		d.mu.Unlock()
		return fmt.Errorf("qp: attach mcast: %d groups already: %w", len(d.mc.groups), ErrQueueFull)
	}
	// The first QP on the group: join it on the interface outside d.mu
	// (a socket option), then record it unless someone else did meanwhile.
	d.mu.Unlock()
	var leave func()
	if d.cfg.JoinGroup != nil {
		var err error
		if leave, err = d.cfg.JoinGroup(key.Unmap()); err != nil {
			return fmt.Errorf("qp: attach mcast: joining %v on the interface: %w", key.Unmap(), err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := q.usable(); err != nil {
		if leave != nil {
			leave()
		}
		return err
	}
	if g := d.mc.groups[key]; g != nil {
		if leave != nil {
			leave() // joined twice: the group's own membership stays
		}
		if !slices.Contains(g.qps, q) {
			g.qps = append(g.qps, q)
			q.mcast++
		}
		return nil
	}
	if d.mc.groups == nil {
		d.mc.groups = map[GID]*mcastGroup{}
	}
	d.mc.groups[key] = &mcastGroup{qps: []*QP{q}, leave: leave}
	q.mcast++
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast); the
// device's last QP on it leaves the group on the interface. Detaching a
// QP that is not attached is ErrInvalidArgument (rxe: EINVAL).
func (q *QP) DetachMcast(gid GID, lid uint16) error {
	d := q.dev
	d.mu.Lock()
	if q.destroyed {
		d.mu.Unlock()
		return fmt.Errorf("qp: QP %#x: %w", q.eng.QPN(), ErrDestroyed)
	}
	key := mgid(gid)
	g := d.mc.groups[key]
	i := -1
	if g != nil {
		i = slices.Index(g.qps, q)
	}
	if i < 0 {
		d.mu.Unlock()
		return fmt.Errorf("qp: detach mcast: QP %#x is not attached to %v: %w", q.eng.QPN(), gid, ErrInvalidArgument)
	}
	g.qps = slices.Delete(g.qps, i, i+1)
	q.mcast--
	var leave func()
	if len(g.qps) == 0 {
		delete(d.mc.groups, key)
		leave = g.leave
	}
	d.mu.Unlock()
	if leave != nil {
		leave()
	}
	return nil
}

// inputMcast hands a datagram to a multicast group to every QP attached
// (d.mu held): the destination MAC must be the group's (either mapping:
// rxe's filter entry is ipv6_eth_mc_map's even for IPv4 groups) and the
// destination QPN 0xFFFFFF.
func (d *Device) inputMcast(pkt *wire.Packet, dst netip.Addr, now time.Time) {
	key := netip.AddrFrom16(dst.As16())
	if pkt.Eth != nil {
		m := pkt.Eth.Dst()
		b := key.As16()
		v4 := m[0] == 0x01 && m[1] == 0x00 && m[2] == 0x5e && dst.Is4() && m[3] == b[13]&0x7f && m[4] == b[14] && m[5] == b[15]
		v6 := m[0] == 0x33 && m[1] == 0x33 && [4]byte(m[2:6]) == [4]byte(b[12:16])
		if !v4 && !v6 {
			d.stats.rx.WrongDst++
			return
		}
	}
	g := d.mc.groups[key]
	if g == nil || pkt.BTH.DestQP() != MulticastQPN {
		d.stats.rx.NoQP++
		return
	}
	for _, q := range g.qps {
		q.eng.Receive(pkt, now)
		d.touch(q)
	}
}

// mcLoopMax bounds the looped-back datagrams one call collects (a post
// list of UD sends to a group); more are dropped from the loopback only.
const mcLoopMax = 256

// loopMcast keeps a copy of a frame a QP of the device sent to a
// multicast MAC for deliverLoopedMcast (d.mu held: an engine is sending).
// It is not delivered at once: the sending QP's engine is in the middle
// of its send, and may itself be attached.
func (d *Device) loopMcast(from uint32, frame []byte) {
	if q := d.tab.qps[from]; q != nil && q.noMcastLoop {
		return
	}
	if d.mc.loopN == mcLoopMax {
		return
	}
	if d.mc.loopN == len(d.mc.loop) {
		d.mc.loop = append(d.mc.loop, nil)
	}
	d.mc.loop[d.mc.loopN] = append(d.mc.loop[d.mc.loopN][:0], frame...)
	d.mc.loopN++
}

// deliverLoopedMcast hands the datagrams collected by loopMcast to the
// device's attached QPs (d.mu held, at the end of a call). The buffers
// are kept for the next ones: no allocation once they have grown.
func (d *Device) deliverLoopedMcast(now time.Time) {
	for i := 0; i < d.mc.loopN; i++ {
		if err := wire.Parse(d.mc.loop[i], &d.mc.pkt); err != nil {
			continue
		}
		if dst := d.mc.pkt.DstIP(); dst.IsMulticast() {
			d.inputMcast(&d.mc.pkt, dst, now)
		}
	}
	d.mc.loopN = 0
}
