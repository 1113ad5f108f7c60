package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/goroce/goroce/qp"
)

// Multicast on RoCE, as rdma_cm does it (cma.c cma_iboe_join_multicast,
// librdmacm's ucma_process_join): there is no SA, so no MCMemberRecord
// exchange goes on the wire; the join is local.
//
//   - the MGID is the group's IPv4 address mapped into a GID
//     (::ffff:a.b.c.d, cma_iboe_set_mgid for RoCEv2); IPv6 groups are
//     refused on RoCEv2 (the kernel returns -ENOTSUPP), so is the
//     unspecified address (-EINVAL);
//   - the join event's address handle goes to the MGID with hop limit 64
//     (IPV6_DEFAULT_HOPLIMIT for an IPv4 group on RoCEv2), MLID 0, QPN
//     0xFFFFFF and the port space's Q_Key (RDMA_UDP_QKEY 0x01234567 for
//     the UDP and IB port spaces, cma_set_default_qkey);
//   - a full member's QP is attached to the MGID (ibv_attach_mcast in
//     ucma_process_join) and the group joined on the interface (the
//     kernel's cma_igmp_send; goroce's qp.Config.JoinGroup); a send-only
//     full member is neither.

// JoinFlags says how to join (rdma_join_multicast_ex's join_flags).
type JoinFlags int

const (
	// JoinFullMember sends to and receives from the group
	// (RDMA_MC_JOIN_FLAG_FULLMEMBER).
	JoinFullMember JoinFlags = iota
	// JoinSendOnlyFullMember only sends: the QP is not attached and the
	// group is not joined on the interface
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER).
	JoinSendOnlyFullMember
)

// MulticastQKey is the Q_Key of every group rdma_cm joins in the UDP and
// IB port spaces (RDMA_UDP_QKEY).
const MulticastQKey = udpQKey

// Multicast is a group joined with JoinMulticast: a UD QP in RTS with the
// group's Q_Key (attached to the group unless joined send-only) and the
// address handle to send to it.
type Multicast struct {
	resources // QP, PD, SendCQ, RecvCQ
	ah        *qp.AH
	mgid      qp.GID
	group     netip.Addr
	attached  bool
	once      sync.Once
	err       error
}

// JoinMulticast joins the IPv4 multicast group (rdma_join_multicast on a
// RoCEv2 device): a UD QP made as Options say (PD, CQs, Cap, Prepare,
// called in INIT: post receives there), with Q_Key MulticastQKey, in RTS,
// attached to the group's MGID unless flags is JoinSendOnlyFullMember.
// Options.Local, when set, must be an address of dev (rdma_bind_addr).
// ctx bounds the join (nothing waits on the network).
func JoinMulticast(ctx context.Context, dev *qp.Device, group netip.Addr, opts Options, flags JoinFlags) (*Multicast, error) {
	o := opts.withDefaults()
	group = group.Unmap()
	switch {
	case !group.IsValid() || group.IsUnspecified():
		return nil, fmt.Errorf("cm: join multicast %v: no group address: %w", group, syscall.EINVAL)
	case group.Is6():
		// cma_iboe_join_multicast: "else if (gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP) err = -ENOTSUPP".
		return nil, fmt.Errorf("cm: join multicast %v: IPv6 groups are not supported on RoCEv2 (as rdma_cm): %w", group, errors.ErrUnsupported)
	case !group.IsMulticast():
		return nil, fmt.Errorf("cm: join multicast %v: not a multicast address: %w", group, syscall.EINVAL)
	case flags != JoinFullMember && flags != JoinSendOnlyFullMember:
		return nil, fmt.Errorf("cm: join multicast %v: unknown join flags %d: %w", group, flags, syscall.EINVAL)
	}
	if o.Local.IsValid() {
		if err := checkLocal(dev, o.Local.Addr()); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := &Multicast{group: group, mgid: netip.AddrFrom16(group.As16())}
	var err error
	if m.resources, err = newUDQP(dev, &o, udpQKey); err != nil {
		return nil, err
	}
	if m.ah, err = m.pd.CreateAH(ctx, qp.AHAttr{GID: m.mgid, HopLimit: 64}); err != nil {
		m.Leave()
		return nil, fmt.Errorf("cm: join multicast %v: %w", group, err)
	}
	if flags == JoinFullMember {
		if err := m.qp.AttachMcast(m.mgid, 0); err != nil {
			m.Leave()
			return nil, fmt.Errorf("cm: join multicast %v: %w", group, err)
		}
		m.attached = true
	}
	return m, nil
}

// AH is the address handle to the group (the join event's ah_attr).
func (m *Multicast) AH() *qp.AH { return m.ah }

// MGID is the group's GID (::ffff:a.b.c.d).
func (m *Multicast) MGID() qp.GID { return m.mgid }

// MLID is the group's LID: 0 on RoCE.
func (m *Multicast) MLID() uint16 { return 0 }

// Group is the group's IP address.
func (m *Multicast) Group() netip.Addr { return m.group }

// RemoteQPN is where a send to the group goes: 0xFFFFFF.
func (m *Multicast) RemoteQPN() uint32 { return qp.MulticastQPN }

// RemoteQKey is the group's Q_Key (MulticastQKey).
func (m *Multicast) RemoteQKey() uint32 { return udpQKey }

// Leave leaves the group (rdma_leave_multicast): the QP is detached and
// destroyed, with the AH and the PD and CQs it allocated itself. Leave is
// idempotent.
func (m *Multicast) Leave() error {
	m.once.Do(func() {
		if m.attached {
			m.err = m.qp.DetachMcast(m.mgid, 0)
		}
		if m.ah != nil {
			m.ah.Destroy()
		}
		if err := m.free(); err != nil && m.err == nil {
			m.err = err
		}
	})
	return m.err
}
