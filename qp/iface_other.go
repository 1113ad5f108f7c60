//go:build !linux

package qp

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/netaddr"
)

// AFPacketOptions tune the AF_PACKET backend, which exists only on Linux.
type AFPacketOptions struct{}

// openRawLink: AF_XDP and AF_PACKET exist only on Linux.
func openRawLink(ifname string, o *InterfaceOptions, info *InterfaceInfo) (nic.Link, error) {
	return withoutRawBackends(ifname, o, info)
}

// resolver asks netaddr.ResolveMAC directly: there are no network
// namespaces to return to here.
type resolver struct{ ifname string }

func newResolver(ifname string) (*resolver, error) { return &resolver{ifname: ifname}, nil }

func (r *resolver) Close() error { return nil }

// joinGroup: multicast groups are joined on Linux only.
func (r *resolver) joinGroup(ifindex int, ip netip.Addr) (func(), error) {
	return nil, errors.New("joining a multicast group on the interface is implemented on Linux only")
}

func (r *resolver) resolve(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	return netaddr.ResolveMAC(ctx, r.ifname, ip)
}

// routeHopLimit is defaultHopLimit: the Linux default peers use, which the
// UDP backend's kernel does not have to match (it sets the IP TTL itself).
func routeHopLimit(netip.Addr) uint8 { return defaultHopLimit }
