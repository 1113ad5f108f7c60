//go:build linux

package qp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// AFPacketOptions tune the AF_PACKET backend (InterfaceOptions.AFPacket).
type AFPacketOptions = afpacket.Options

// openRawLink opens AF_XDP (auto, afxdp) or AF_PACKET (afpacket, and auto
// when AF_XDP cannot run here or another process holds the interface).
func openRawLink(ifname string, o *InterfaceOptions, info *InterfaceInfo) (nic.Link, error) {
	backend := o.Backend
	if backend == BackendAuto || backend == BackendAFXDP {
		xo := o.AFXDP
		if xo.Logger == nil {
			xo.Logger = o.Logger
		}
		l, err := openAFXDP(ifname, o, xo, info)
		if err == nil {
			info.Backend, info.Mode, info.ZeroCopy = BackendAFXDP, l.Mode(), l.ZeroCopy()
			info.MultiBuffer = l.MultiBuffer()
			return l, nil
		}
		if o.Queues > 1 {
			// AF_PACKET has one queue: no fallback.
			return nil, rawOpenError(ifname, BackendAFXDP, err)
		}
		// auto falls back to AF_PACKET when AF_XDP cannot run here (this
		// kernel, driver or process's privileges) or a foreign XDP program
		// holds the interface's hook (AF_PACKET sees what it passes). Not
		// when another goroce device holds it: its program takes every
		// RoCEv2 frame, so an AF_PACKET device would open and stay deaf.
		fallback := errors.Is(err, errors.ErrUnsupported) || errors.Is(err, afxdp.ErrBusy) && !errors.Is(err, afxdp.ErrHeldByGoroce)
		if backend == BackendAFXDP || !fallback {
			return nil, rawOpenError(ifname, backend, err)
		}
		info.Fallback = err.Error()
		o.Logger.Warn("qp: AF_XDP not usable here; falling back to AF_PACKET", "ifname", ifname, "err", err)
	} else if backend != BackendAFPacket {
		return nil, fmt.Errorf("qp: open interface: unknown backend %q", backend)
	}
	po := o.AFPacket
	if !o.AFPacketBlockRing {
		po.LowLatency = true
	}
	l, err := afpacket.Open(ifname, po)
	if err != nil {
		return nil, rawOpenError(ifname, backend, err)
	}
	info.Backend, info.Mode = BackendAFPacket, "tpacket_v3"
	if po.LowLatency {
		info.Mode = "tpacket_v2"
	}
	return l, nil
}

// openAFXDP opens the AF_XDP socket of queue 0, and with
// InterfaceOptions.Queues those of the other queues (info.more).
func openAFXDP(ifname string, o *InterfaceOptions, xo afxdp.Options, info *InterfaceInfo) (*afxdp.Link, error) {
	if o.Queues <= 1 {
		info.Queues = 1
		return afxdp.Open(ifname, 0, xo)
	}
	ls, err := afxdp.OpenQueues(ifname, o.Queues, xo)
	if err != nil {
		return nil, err
	}
	info.Queues = len(ls)
	for _, l := range ls[1:] {
		info.more = append(info.more, l)
	}
	return ls[0], nil
}

// resolver resolves neighbours in the namespace the device was opened in
// (QP.Connect may be called from any goroutine, whose thread may be in
// another namespace) through a netaddr.Resolver: its netlink sockets live
// in that namespace, so no resolution locks or switches an OS thread, and
// it waits for the kernel's neighbour events instead of polling.
type resolver struct {
	ns netns.NsHandle
	r  *netaddr.Resolver
}

func newResolver(ifname string) (*resolver, error) {
	h, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("qp: open interface: network namespace handle: %w", err)
	}
	r, err := netaddr.NewResolver(ifname, h)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("qp: open interface: %w", err)
	}
	return &resolver{ns: h, r: r}, nil
}

func (r *resolver) Close() error {
	r.r.Close()
	return r.ns.Close()
}

func (r *resolver) resolve(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	return r.r.Resolve(ctx, ip)
}

// routeHopLimit is the hop limit the kernel would put in a RoCE address
// vector for traffic from ip: the namespace's default TTL (IPv4) or hop
// limit (IPv6), 64 unless configured otherwise. The kernel takes it from
// the route (ib_resolve_unicast_gid_dmac), so rxe and mlx5 send it whatever
// the application asked for.
func routeHopLimit(ip netip.Addr) uint8 {
	path := "/proc/sys/net/ipv4/ip_default_ttl"
	if ip.Unmap().Is6() {
		path = "/proc/sys/net/ipv6/conf/default/hop_limit"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return defaultHopLimit
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v <= 0 || v > 255 {
		return defaultHopLimit
	}
	return uint8(v)
}

// joinGroup joins multicast group ip on interface ifindex, in the
// device's namespace, the way rdma_cm's cma_igmp_send does for rxe
// (ip_mc_inc_group on the netdev): a UDP socket's IP_ADD_MEMBERSHIP
// (IPV6_JOIN_GROUP for IPv6) makes the kernel send IGMP (MLD) reports, so
// that switches and bridges that snoop them forward the group's frames
// here, and put the group's MAC in the NIC's filter. The socket is kept
// until leave; closing it leaves the group. It is bound to no port and
// receives nothing (the frames reach the device through its own link).
func (r *resolver) joinGroup(ifindex int, ip netip.Addr) (leave func(), err error) {
	var fd int
	err = inNS(r.ns, func() error {
		ip = ip.Unmap()
		family := unix.AF_INET
		if ip.Is6() {
			family = unix.AF_INET6
		}
		var err error
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return err
		}
		if ip.Is4() {
			err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
				&unix.IPMreqn{Multiaddr: ip.As4(), Ifindex: int32(ifindex)})
		} else {
			err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
				&unix.IPv6Mreq{Multiaddr: ip.As16(), Interface: uint32(ifindex)})
		}
		if err != nil {
			unix.Close(fd)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("join %v on interface %d: %w", ip, ifindex, err)
	}
	return func() { unix.Close(fd) }, nil
}

// inNS runs fn on this goroutine's thread, locked and switched into ns
// when it is elsewhere (a socket is created in its thread's namespace).
// If switching back fails the thread stays locked, so the runtime
// discards it when the goroutine ends.
func inNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("qp: current namespace: %w", err)
	}
	defer cur.Close()
	if cur.Equal(ns) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("qp: entering the device's namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(cur); err != nil {
		return fmt.Errorf("qp: leaving the device's namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
