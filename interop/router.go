//go:build linux

package interop

import (
	"net"
	"net/netip"
)

// Config.Router: VM 0's second NIC on a second bridge with a second host
// namespace.
//
//	netns goroce-ix-<pid>-h  ix0 198.18.0.1 ══ br0 ── tap0 ── VM 0 eth0 198.18.0.11
//	netns goroce-ix-<pid>-h2 ix1 198.18.0.2 ══ br1 ── tap0b ─ VM 0 eth1 (52:54:00:12:01:11)

const (
	bridge2Iface = "br1"
	host2Iface   = "ix1"
)

var routerMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x01, 0x11}

// routerLinks are the ip(8) commands that build the second segment.
func (h *Harness) routerLinks(mtu string) [][]string {
	return [][]string{
		{"-n", h.hostNS2, "link", "set", "lo", "up"},
		{"-n", h.ns, "link", "add", bridge2Iface, "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		{"-n", h.ns, "link", "add", "vbr1", "mtu", mtu, "type", "veth", "peer", "name", host2Iface, "netns", h.hostNS2},
		{"-n", h.ns, "link", "set", "vbr1", "master", bridge2Iface, "up"},
		{"-n", h.hostNS2, "link", "set", host2Iface, "address", host2MAC.String(), "mtu", mtu},
		{"-n", h.hostNS2, "addr", "add", host2IP.String() + "/24", "dev", host2Iface},
		{"-n", h.hostNS2, "link", "set", host2Iface, "up"},
		{"-n", h.ns, "tuntap", "add", "dev", "tap0b", "mode", "tap"},
		{"-n", h.ns, "link", "set", "tap0b", "mtu", mtu, "master", bridge2Iface, "up"},
		{"-n", h.ns, "link", "set", bridge2Iface, "up"},
	}
}

// HostNS2 is the second host namespace (Config.Router), HostIface2 its
// interface, HostIP2 and HostMAC2 its address.
func (h *Harness) HostNS2() string               { return h.hostNS2 }
func (h *Harness) HostIface2() string            { return host2Iface }
func (h *Harness) HostIP2() netip.Addr           { return host2IP }
func (h *Harness) HostMAC2() net.HardwareAddr    { return append(net.HardwareAddr(nil), host2MAC...) }
func (h *Harness) Host2Do(fn func() error) error { return nsDo(h.hostNS2, fn) }
