//go:build linux

package netaddr

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Lookup reads ifname's attributes and addresses over netlink.
func Lookup(ifname string) (*Interface, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	a := l.Attrs()
	ifc := &Interface{Name: a.Name, Index: a.Index, MAC: a.HardwareAddr, MTU: a.MTU}
	var addrs []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := netlink.AddrList(l, fam)
		if err != nil {
			return nil, fmt.Errorf("netaddr: addresses of %s: %w", ifname, err)
		}
		for _, ad := range list {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	ifc.GIDs = GIDTable(ifc.MAC, addrs)
	return ifc, nil
}

// resolvePoll is how often ResolveMAC re-reads the neighbour table.
const resolvePoll = 5 * time.Millisecond

// usable neighbour states: the kernel has a link-layer address it uses.
const neighUsable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT

// ResolveMAC returns the MAC address of ip on ifname from the kernel's
// neighbour table (ARP for IPv4, NDP for IPv6). When there is no usable
// entry it asks the kernel to resolve it — an RTM_NEWNEIGH request with the
// NTF_USE flag, which makes the kernel send its normal ARP request or
// neighbour solicitation (neigh_event_send) without any datagram of ours on
// the wire — and polls the table until the entry is REACHABLE, STALE, DELAY,
// PROBE or PERMANENT, re-triggering after a FAILED state. It gives up when
// ctx ends or, if ctx has no deadline, after DefaultResolveTimeout, with a
// *NeighbourError (errors.Is(err, ErrUnresolved)).
func ResolveMAC(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap().WithZone("") // the neighbour table has no zones; ifname is the scope
	if !ip.IsValid() {
		return nil, fmt.Errorf("netaddr: ResolveMAC: invalid IP")
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	if l.Attrs().Flags&net.FlagLoopback != 0 {
		return make(net.HardwareAddr, 6), nil // loopback: frames carry zero MACs
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultResolveTimeout)
		defer cancel()
	}
	start := time.Now()
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	idx := l.Attrs().Index
	var lastErr error
	triggered := false
	tick := time.NewTicker(resolvePoll)
	defer tick.Stop()
	for {
		state, mac, err := lookupNeigh(idx, fam, ip)
		if err != nil {
			lastErr = err
		}
		if state&neighUsable != 0 && len(mac) > 0 {
			return mac, nil
		}
		if !triggered || state&netlink.NUD_FAILED != 0 || state == netlink.NUD_NONE {
			// No entry, or the kernel gave up: (re)start resolution.
			if err := trigger(idx, fam, ip); err != nil {
				lastErr = err
			}
			triggered = true
		}
		select {
		case <-ctx.Done():
			return nil, &NeighbourError{IP: ip, Ifname: ifname, Waited: time.Since(start), LastErr: lastErr}
		case <-tick.C:
		}
	}
}

func lookupNeigh(idx, fam int, ip netip.Addr) (int, net.HardwareAddr, error) {
	list, err := netlink.NeighList(idx, fam)
	if err != nil {
		return 0, nil, err
	}
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if ok && a.Unmap() == ip {
			return n.State, n.HardwareAddr, nil
		}
	}
	return netlink.NUD_NONE, nil, nil
}

// trigger asks the kernel to resolve ip (RTM_NEWNEIGH, NLM_F_CREATE,
// NTF_USE: neigh_add calls neigh_event_send instead of updating the entry).
// If the kernel refuses, it falls back to an empty UDP datagram to ip:4791
// from an ordinary socket, whose transmission needs the neighbour; a RoCEv2
// receiver drops it as too short for a BTH.
func trigger(idx, fam int, ip netip.Addr) error {
	err := netlink.NeighSet(&netlink.Neigh{
		LinkIndex: idx,
		Family:    fam,
		Flags:     netlink.NTF_USE,
		IP:        ip.AsSlice(),
	})
	if err == nil {
		return nil
	}
	c, derr := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, RoCEv2Port)))
	if derr != nil {
		return fmt.Errorf("NTF_USE: %v; UDP fallback: %w", err, derr)
	}
	defer c.Close()
	if _, werr := c.Write(nil); werr != nil {
		return fmt.Errorf("NTF_USE: %v; UDP fallback: %w", err, werr)
	}
	return nil
}

// setDropFilter attaches a classic BPF program that drops every datagram.
func setDropFilter(c *net.UDPConn) error {
	prog, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return err
	}
	return setFilter(c, prog)
}

func setFilter(c *net.UDPConn, prog []bpf.RawInstruction) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog)
	}); err != nil {
		return err
	}
	return serr
}
