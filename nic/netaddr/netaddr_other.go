//go:build !linux

package netaddr

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Lookup reads ifname's attributes and addresses through the standard
// library (net.InterfaceByName and its Addrs).
func Lookup(ifname string) (*Interface, error) { return lookupNet(ifname) }

// ResolveMAC answers the zero MAC for a loopback interface (its frames
// carry zero MACs); anything else needs the Linux neighbour table and
// returns an error wrapping ErrNotSupported.
func ResolveMAC(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	if !ip.IsValid() {
		return nil, fmt.Errorf("netaddr: ResolveMAC: invalid IP")
	}
	ni, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	if ni.Flags&net.FlagLoopback != 0 {
		return make(net.HardwareAddr, 6), nil
	}
	return nil, fmt.Errorf("netaddr: resolving %s on %s: %w", ip, ifname, ErrNotSupported)
}

// setDropFilter: socket filters are Linux's; the held socket just queues.
func setDropFilter(*net.UDPConn) error { return nil }
