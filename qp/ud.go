package qp

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// UD queue pairs. A QP created with InitAttr{Type: QPTypeUD} goes RESET →
// INIT (AttrPKeyIndex|AttrPort|AttrQKey) → RTR (AttrState only) → RTS
// (AttrSQPSN), exactly the modify calls of rdma-core's ibv_ud_pingpong.
// Each send names its destination: SendWR.AH (from PD.CreateAH),
// SendWR.RemoteQPN and SendWR.RemoteQKey. Each receive buffer gets the
// 40-byte GRH area (GRHLen) in front of the payload, as on rxe; the
// completion has WCGRH, SrcQP and ByteLen = 40 + payload, and
// AHAttrFromWC turns it into the address to answer.

type (
	// QPType is a QP's transport service (InitAttr.Type).
	QPType = transport.QPType
	// AH is an address handle (struct ibv_ah), made by PD.CreateAH:
	// the resolved path to one peer for UD sends (SendWR.AH). Destroy
	// releases it.
	AH = transport.AH
)

// Transport services (InitAttr.Type).
const (
	QPTypeRC = transport.QPTypeRC // reliable connected (the zero value)
	QPTypeUD = transport.QPTypeUD // unreliable datagram
	QPTypeUC = transport.QPTypeUC // unreliable connected (uc.go)
)

// GRHLen is the size of the GRH area at the start of every UD receive
// buffer: post receives of payload + GRHLen bytes.
const GRHLen = transport.GRHLen

// WCGRH marks a receive completion whose buffer starts with the GRH area
// (every UD receive; IBV_WC_GRH).
const WCGRH = transport.WCGRH

// UD counters (Counters[...]).
const (
	CntRcvdBadQKey    = transport.CntRcvdBadQKey    // datagrams with another Q_Key, dropped
	CntUDNoRecv       = transport.CntUDNoRecv       // datagrams dropped: no receive posted
	CntUDRecvTooShort = transport.CntUDRecvTooShort // datagrams dropped: receive buffer < 40 + payload
	CntUDSendOverMTU  = transport.CntUDSendOverMTU  // sends longer than the port MTU: completed, nothing sent
)

// AHAttr describes the path to a peer (struct ibv_ah_attr with its GRH).
type AHAttr struct {
	// GID is the peer's GID (its IP address, IPv4-mapped or plain).
	GID GID
	// SGIDIndex picks the source GID in the device's table; 0 means the
	// RoCEv2 GID of the device's address (Device.IPv4GIDIndex for an IPv4
	// device; index 0 itself is the link-local GID, not routable).
	SGIDIndex    uint8
	HopLimit     uint8 // IPv4 TTL / IPv6 hop limit; 0: 64. Config.RouteHopLimit replaces it, as the kernel does
	TrafficClass uint8
	FlowLabel    uint32
}

// CreateAH makes an address handle in pd (ibv_create_ah). The peer's MAC
// is resolved now, through the device's resolver within ctx, as QP.Modify
// does for an RC path.
func (pd *PD) CreateAH(ctx context.Context, a AHAttr) (*AH, error) {
	return pd.createAH(ctx, a, nil)
}

// createAH is CreateAH with the destination MAC known (mac non-nil: no
// resolution), as for an answer to the frame's source.
func (pd *PD) createAH(ctx context.Context, a AHAttr, mac net.HardwareAddr) (*AH, error) {
	d := pd.dev
	if d.isClosed() {
		return nil, ErrClosed
	}
	if !a.GID.IsValid() {
		return nil, fmt.Errorf("qp: create AH: no destination GID: %w", ErrInvalidArgument)
	}
	if a.SGIDIndex == 0 {
		a.SGIDIndex = 1
	}
	sgid, err := d.GID(int(a.SGIDIndex))
	if err != nil {
		return nil, fmt.Errorf("qp: create AH: %w: %w", err, ErrInvalidArgument)
	}
	if sgid.Unmap().Is6() && sgid.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("qp: create AH: GID index %d is the link-local GID: %w", a.SGIDIndex, ErrInvalidArgument)
	}
	if a.GID.Unmap().Is4() != sgid.Unmap().Is4() {
		return nil, fmt.Errorf("qp: create AH: destination GID %v and source GID %v are of different types: %w", a.GID, sgid, ErrInvalidArgument)
	}
	if a.FlowLabel > 0xFFFFF {
		return nil, fmt.Errorf("qp: create AH: flow label %#x is not 20 bits: %w", a.FlowLabel, ErrInvalidArgument)
	}
	av := AV{DGID: a.GID, SGID: sgid, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit, TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel}
	if av.HopLimit == 0 {
		av.HopLimit = 64
	}
	if d.cfg.RouteHopLimit != 0 {
		av.HopLimit = d.cfg.RouteHopLimit
	}
	if mac == nil && IsMulticastGID(a.GID) {
		// A group: its multicast MAC, no neighbour (ib_resolve_eth_dmac).
		mac = MulticastMAC(a.GID)
	}
	if mac == nil {
		var err error
		if mac, err = d.resolve(ctx, a.GID); err != nil {
			return nil, fmt.Errorf("qp: create AH: %w", err)
		}
	}
	copy(av.DMAC[:], mac)
	av.SMAC = d.mac
	return transport.NewAH(pd.pd, transport.AV(av)), nil
}

// AHAttrFromWC returns the path back to the sender of a UD receive, like
// ibv_init_ah_from_wc: grh is the first GRHLen bytes of the receive
// buffer. The GRH area holds an IPv6 header, or an IPv4 header in its last
// 20 bytes; like rdma-core, a version-6 first word is IPv6 unless the last
// 20 bytes are an IPv4 header with a valid checksum. The source GID index
// is 1, the device's RoCEv2 GID.
func AHAttrFromWC(wc *WC, grh []byte) (AHAttr, error) {
	if wc.Flags&WCGRH == 0 {
		return AHAttr{}, fmt.Errorf("qp: AH from WC: the completion has no GRH: %w", ErrInvalidArgument)
	}
	if len(grh) < GRHLen {
		return AHAttr{}, fmt.Errorf("qp: AH from WC: GRH area of %d bytes < %d: %w", len(grh), GRHLen, ErrInvalidArgument)
	}
	flow := binary.BigEndian.Uint32(grh)
	a := AHAttr{SGIDIndex: 1, FlowLabel: flow & 0xFFFFF}
	ip4 := wire.IPv4(grh[GRHLen-wire.IPv4Len : GRHLen])
	v4 := false
	switch {
	case flow>>28 != 6:
		v4 = ip4.Version() == 4
		if !v4 {
			return AHAttr{}, fmt.Errorf("qp: AH from WC: GRH area holds neither an IPv4 nor an IPv6 header: %w", ErrInvalidArgument)
		}
	case ip4.Version() == 4 && ip4.HeaderLen() == wire.IPv4Len:
		v4 = ip4.ChecksumValid()
	}
	if v4 {
		a.GID = netip.AddrFrom16(ip4.Src().As16())
		a.HopLimit, a.TrafficClass = ip4.TTL(), ip4.TOS()
		return a, nil
	}
	a.GID = netip.AddrFrom16([16]byte(grh[8:24]))
	a.HopLimit = grh[7]
	a.TrafficClass = uint8(flow >> 20)
	return a, nil
}

// PD returns the protection domain the QP was created in (ibv_qp.pd): the
// one its address handles must belong to.
func (q *QP) PD() *PD { return q.pd }
