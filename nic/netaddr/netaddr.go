// Package netaddr answers the addressing questions a RoCEv2 endpoint asks
// the host network stack, the way the Linux RDMA core answers them for rxe:
//
//   - Lookup: an interface's MAC, MTU and RoCEv2 GID table (read over
//     netlink on Linux, with the standard library's net.Interface
//     elsewhere; no privileges needed).
//   - PathMTU / PathMTUIBoE: which IB MTU (256..4096) a netdev MTU allows.
//   - ResolveMAC: the neighbour (ARP/NDP) entry for a peer's IP, triggering
//     resolution when there is none (Linux only: elsewhere it answers
//     loopback and otherwise ErrNotSupported; the udp backend needs no
//     neighbour).
//   - HoldPort: a UDP socket on ip:4791 that keeps the kernel from answering
//     a raw backend's peers with ICMP port-unreachable.
//
// The GID table model (drivers/infiniband/core/roce_gid_mgmt.c, cache.c):
// index 0 is the port's reserved "default GID", fe80::/64 plus the EUI-64
// interface ID made from the MAC (make_default_gid → addrconf_ifid_eui48).
// After it come the interface's addresses as the RDMA core enumerates them
// when the device registers (add_netdev_ips): first every IPv4 address as an
// IPv4-mapped GID ::ffff:a.b.c.d (rdma_ip2gid), then every IPv6 address in
// the kernel's list order. An address equal to an existing entry (the
// EUI-64 link-local address equals the default GID) is not added twice
// (__ib_cache_gid_add finds it). rxe supports RoCEv2 only, so there is one
// entry per address. This is why a Linux rxe peer has its IPv4 GID at index
// 1 ("-g 1" / "-x 1" in the tools). Addresses added later are appended by the
// kernel in event order, which this package cannot reproduce; the table is
// exact for addresses configured before the device appears.
//
// Everything here acts on the network namespace of the calling OS thread;
// run it inside internal/netns Pair.Do in tests.
//
// Outside Linux the GID table is built from the addresses net.Interface
// reports, in the order the system lists them; ResolveMAC answers only for
// loopback and otherwise returns an error wrapping ErrNotSupported, and
// HoldPort holds the port without the drop filter.
package netaddr

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"
)

// RoCEv2Port is the IANA UDP port of RoCEv2.
const RoCEv2Port = 4791

// GID is a 16-byte InfiniBand global identifier; for RoCEv2 it is an IPv6
// address or an IPv4-mapped one.
type GID [16]byte

// GIDFromIP returns the GID of an IP address (IPv4 as ::ffff:a.b.c.d, as
// rdma_ip2gid does).
func GIDFromIP(ip netip.Addr) GID { return GID(ip.As16()) }

// DefaultGID returns the default GID of an interface with this 6-byte MAC:
// fe80::/64 and the modified EUI-64 interface ID (RFC 4291 §2.5.1, the
// kernel's addrconf_ifid_eui48): MAC bytes 0-2, ff:fe, bytes 3-5, with the
// universal/local bit of byte 0 inverted. Other MAC lengths give the zero GID.
func DefaultGID(mac net.HardwareAddr) GID {
	var g GID
	if len(mac) != 6 {
		return g
	}
	g[0], g[1] = 0xfe, 0x80
	copy(g[8:11], mac[0:3])
	g[11], g[12] = 0xff, 0xfe
	copy(g[13:16], mac[3:6])
	g[8] ^= 0x02
	return g
}

// Addr returns the GID as an address, IPv4-mapped GIDs unmapped to IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4 reports whether g is an IPv4-mapped GID.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// IsZero reports whether g is all zeros (an empty GID table slot).
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as inet_ntop(AF_INET6) does, as ibv_devinfo prints it:
// "::ffff:198.18.0.1", "fe80::ff:fe00:a".
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Interface is what a RoCEv2 endpoint needs to know about a network
// interface.
type Interface struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	MTU   int   // netdev (IP) MTU
	GIDs  []GID // RoCEv2 GID table, see the package comment
}

// lookupNet is Lookup through the standard library (net.InterfaceByName
// and its Addrs): the implementation outside Linux.
func lookupNet(ifname string) (*Interface, error) {
	ni, err := net.InterfaceByName(ifname)
	if err != nil {
		if all, lerr := net.Interfaces(); lerr == nil && !slices.ContainsFunc(all, func(i net.Interface) bool { return i.Name == ifname }) {
			err = ErrNoInterface
		}
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	ifc := &Interface{Name: ni.Name, Index: ni.Index, MAC: ni.HardwareAddr, MTU: ni.MTU}
	list, err := ni.Addrs()
	if err != nil {
		return nil, fmt.Errorf("netaddr: addresses of %s: %w", ifname, err)
	}
	var addrs []netip.Addr
	for _, a := range list {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if ip, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, ip.Unmap())
		}
	}
	ifc.GIDs = GIDTable(ifc.MAC, addrs)
	return ifc, nil
}

// GIDTable builds a RoCEv2 GID table from a MAC and the interface's
// addresses (IPv4 first, then IPv6, each in kernel order; GIDTable sorts
// IPv4 before IPv6 itself but keeps the order within a family).
func GIDTable(mac net.HardwareAddr, addrs []netip.Addr) []GID {
	var t []GID
	add := func(g GID) {
		if g.IsZero() {
			return
		}
		for _, x := range t {
			if x == g {
				return
			}
		}
		t = append(t, g)
	}
	add(DefaultGID(mac))
	for _, ip := range addrs {
		if ip.Unmap().Is4() {
			add(GIDFromIP(ip.Unmap()))
		}
	}
	for _, ip := range addrs {
		if !ip.Unmap().Is4() {
			add(GIDFromIP(ip))
		}
	}
	return t
}

// GIDIndex returns the index of ip's GID in the table.
func (ifc *Interface) GIDIndex(ip netip.Addr) (int, bool) {
	g := GIDFromIP(ip.Unmap())
	for i, x := range ifc.GIDs {
		if x == g {
			return i, true
		}
	}
	return 0, false
}

// PathMTU returns the rxe port MTU for ifc (see PathMTU).
func (ifc *Interface) PathMTU() int { return PathMTU(ifc.MTU) }

// FormatGIDs prints the GID table the way `ibv_devinfo -v` does for an rxe
// port, one line per entry:
//
//	GID[  1]:		::ffff:198.18.0.1, RoCE v2
func (ifc *Interface) FormatGIDs() string {
	var b strings.Builder
	for i, g := range ifc.GIDs {
		fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, g)
	}
	return b.String()
}

// IB MTUs (bytes of payload per packet) and their ibv_mtu enum values.
var ibMTUs = [...]int{4096, 2048, 1024, 512, 256}

// rxeMaxHdrLength is RXE_MAX_HDR_LENGTH (rxe_param.h).
const rxeMaxHdrLength = 80

// iboeHdrLength is what iboe_get_mtu (include/rdma/ib_addr.h, used by mlx5
// and rdma_cm) subtracts: GRH 40 + UDP 8 + BTH 12 + XRC ETH 4 + AtomicETH 28
// + ICRC 4.
const iboeHdrLength = 40 + 8 + 12 + 4 + 28 + 4

// PathMTU returns the largest IB MTU in {256, 512, 1024, 2048, 4096} not
// above netdevMTU − 80, as rxe computes its port's max/active MTU
// (rxe_param.h eth_mtu_int_to_enum with RXE_MAX_HDR_LENGTH 80): 1500 gives
// 1024, 9000 gives 4096. It returns 0 when even 256 does not fit.
func PathMTU(netdevMTU int) int { return largestIBMTU(netdevMTU - rxeMaxHdrLength) }

// PathMTUIBoE is the mlx5 / rdma_cm flavour (iboe_get_mtu): the largest IB
// MTU not above netdevMTU − 96. It differs from PathMTU only for netdev MTUs
// within 16 bytes above a boundary (e.g. 1110..1119 gives 512, rxe 1024).
func PathMTUIBoE(netdevMTU int) int { return largestIBMTU(netdevMTU - iboeHdrLength) }

func largestIBMTU(room int) int {
	for _, m := range ibMTUs {
		if m <= room {
			return m
		}
	}
	return 0
}

// ErrNotSupported is wrapped by the errors of what this system cannot do
// (neighbour resolution outside Linux). It matches errors.ErrUnsupported.
var ErrNotSupported = fmt.Errorf("netaddr: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)

// ErrUnresolved is wrapped by ResolveMAC's error when the neighbour could
// not be resolved in time.
var ErrUnresolved = errors.New("neighbour unresolved")

// ErrNoInterface is wrapped by Lookup's error when no interface of this
// network namespace has the name.
var ErrNoInterface = errors.New("no such network interface")

// NeighbourError is returned by ResolveMAC.
type NeighbourError struct {
	IP      netip.Addr
	Ifname  string
	Waited  time.Duration
	LastErr error // the last netlink error, if any
}

func (e *NeighbourError) Error() string {
	s := fmt.Sprintf("neighbour %s on %s unresolved after %s (wrong GID index or peer down?)", e.IP, e.Ifname, e.Waited.Round(time.Millisecond))
	if e.LastErr != nil {
		s += ": " + e.LastErr.Error()
	}
	return s
}

func (e *NeighbourError) Unwrap() error { return ErrUnresolved }

// DefaultResolveTimeout bounds ResolveMAC when ctx has no deadline.
const DefaultResolveTimeout = 3 * time.Second

// HoldPort binds a UDP socket to ip:4791 so that, while a raw backend
// (AF_PACKET, AF_XDP) handles RoCEv2 for ip, the kernel finds a socket for
// the peer's datagrams and does not answer them with ICMP port-unreachable.
// A classic BPF filter that drops everything is attached to the socket, so
// the kernel frees each datagram at once instead of queueing copies until
// the receive buffer is full (Linux; elsewhere the datagrams queue until the
// buffer is full and the kernel drops the rest). Close releases the port.
func HoldPort(ip netip.Addr) (io.Closer, error) {
	return holdPort(ip, RoCEv2Port)
}

func holdPort(ip netip.Addr, port uint16) (io.Closer, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip.Unmap(), port)))
	if err != nil {
		return nil, fmt.Errorf("netaddr: holding %s port %d: %w", ip, port, err)
	}
	if err := setDropFilter(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("netaddr: drop filter on %s port %d: %w", ip, port, err)
	}
	return c, nil
}
