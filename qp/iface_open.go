package qp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/nic/udp"
)

// OpenInterface binds a goroce device to the network interface ifname, the
// way the rxe driver binds a soft-RoCE device to a netdev (`rdma link add
// rxe0 type rxe netdev eth0`): it opens a frame backend (InterfaceOptions.Backend;
// see BackendAuto and the others), reads the interface's MAC, MTU and
// addresses, builds the GID table and the neighbour resolver, and keeps the
// kernel from answering RoCEv2 traffic with ICMP errors. ctx bounds the
// opening (it is checked between the steps; a step itself does not block
// for long). Close the device to release everything OpenInterface took.
//
// Addresses. InterfaceOptions.IP chooses the device's address; by default
// it is the interface's first IPv4 address, which is what rxe has at GID
// index 1, or the first non-link-local IPv6 address when there is no IPv4
// one. The GID table is {fe80::EUI-64, ::ffff:IP}, so peers connect with
// GID index 1 as they do with rxe.
//
// Neighbours. The raw backends (AF_XDP, AF_PACKET) resolve a peer's MAC from the kernel's
// neighbour table when QP.Connect (or QP.Modify to RTR) runs, bounded by
// that call's context (ARP/NDP triggered through the kernel; an error
// naming the address on failure). The resolver runs in the network
// namespace the device was opened in, whatever thread calls Connect. The
// UDP backend needs no MAC: frames carry the synthetic MAC nic/udp puts on
// received frames.
//
// The UDP port hold. With a raw backend, RoCEv2 datagrams for our IP also
// reach the kernel's UDP layer (AF_PACKET receives a copy; an AF_XDP
// program that falls back to XDP_PASS lets a frame through). With no socket
// on port 4791 the kernel would answer each with ICMP port unreachable.
// OpenInterface therefore holds IP:4791 (a UDP socket with a
// drop-everything BPF filter) while the device lives. When the port is
// already taken (rxe on the same address, another goroce), the hold is
// skipped with a log line: a socket exists, so the kernel is silent anyway.
//
// Closing. Device.Close closes the backend link (for AF_XDP this detaches
// the XDP program: it is held by a bpf_link of this process), the port
// hold, any pass program, and the namespace handle of the resolver. It
// deletes no interface, address or namespace.
//
// Namespaces (Linux). OpenInterface acts in the network namespace of the
// calling OS thread (lock it and setns(2) into the namespace first).
// Sockets, XDP links and the resolver keep that namespace; the Device's
// goroutines then work from any thread.
//
// Other systems. AF_XDP and AF_PACKET exist only on Linux; elsewhere
// OpenInterface returns an error wrapping ErrNotSupported for them, and
// auto opens the UDP backend (logged; InterfaceInfo.Fallback says why).
// The UDP backend works the same everywhere.
func OpenInterface(ctx context.Context, ifname string, o InterfaceOptions) (*Device, *InterfaceInfo, error) {
	if o.Mode != ModeThreaded && o.Mode != ModeBusyPoll {
		return nil, nil, fmt.Errorf("qp: open interface %s: mode %v: %w", ifname, o.Mode, ErrInvalidArgument)
	}
	pr, err := prepare(ctx, ifname, &o)
	if err != nil {
		return nil, nil, err
	}
	// The device closes its links; queue 0's closes the backend link
	// first, then everything else OpenInterface took.
	pr.cfg.Pcap = o.Pcap
	if o.Mode == ModeBusyPoll {
		pr.cfg.Mode = ModeBusyPoll
	}
	var links []nic.Link
	var owned0 *ownedLink // queue 0's: it owns what OpenInterface took
	closeLinks := func() {
		for _, l := range links {
			l.Close()
		}
	}
	for i, bl := range append([]nic.Link{pr.link}, pr.info.more...) {
		var closers []io.Closer
		if i == 0 {
			closers = pr.closers
		}
		l, owned, err := deviceLink(bl, closers, &o)
		if err != nil {
			closeLinks()
			for _, bl := range pr.info.more[i:] {
				bl.Close()
			}
			return nil, nil, err
		}
		if i == 0 {
			owned0 = owned
		}
		links = append(links, l)
	}
	pr.info.more = nil // the links' owners close them now
	pr.cfg.Link = links[0]
	if len(links) > 1 {
		pr.cfg.Links = links
	}
	if err := ctx.Err(); err != nil {
		closeLinks()
		return nil, nil, fmt.Errorf("qp: open interface %s: %w", ifname, err)
	}
	dev, err := Open(pr.cfg)
	if err != nil {
		closeLinks()
		return nil, nil, err
	}
	pw, err := watchPort(dev, pr.info.Ifindex)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	owned0.closers = append(owned0.closers, pw)
	info := pr.info
	info.PathMTU = dev.ActiveMTU().Bytes()
	info.GIDs = dev.GIDs()
	o.Logger.Info("qp: device open", "name", o.Name, "ifname", ifname, "backend", info.Backend, "queues", info.Queues,
		"mode", info.Mode, "ip", info.IP, "netdev_mtu", info.NetdevMTU, "link_mtu", info.LinkMTU, "path_mtu", info.PathMTU,
		"port_held", info.PortHeld, "device_mode", o.Mode)
	return dev, info, nil
}

// OpenInterfaceLink opens the backend link exactly as OpenInterface would
// (same backend choice, fallback, options and UDP port hold) but without a
// device, for raw frame measurements on the same interface. Closing the
// link releases the port hold too. InterfaceInfo.GIDs is nil;
// InterfaceInfo.PathMTU is what a device on this link would use. WrapLink
// and Mode are ignored.
func OpenInterfaceLink(ctx context.Context, ifname string, o InterfaceOptions) (nic.Link, *InterfaceInfo, error) {
	o.Queues = 0 // one link: queue 0's
	pr, err := prepare(ctx, ifname, &o)
	if err != nil {
		return nil, nil, err
	}
	pr.info.PathMTU = PathMTU(pr.link.MTU()).Bytes()
	return &ownedLink{Link: pr.link, closers: pr.closers}, pr.info, nil
}

type prepared struct {
	link    nic.Link
	closers []io.Closer // what to release after the link, in reverse order
	info    *InterfaceInfo
	cfg     Config // without Link
}

// prepare opens the backend link and everything around it.
func prepare(ctx context.Context, ifname string, o *InterfaceOptions) (_ *prepared, err error) {
	if err := o.defaults(ifname); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("qp: open interface %s: %w", ifname, err)
	}
	ifc, err := netaddr.Lookup(ifname)
	if err != nil {
		if errors.Is(err, netaddr.ErrNoInterface) {
			return nil, fmt.Errorf("qp: open interface %s: %w", ifname, ErrNoInterface)
		}
		return nil, fmt.Errorf("qp: open interface: %w", err)
	}
	ip, err := chooseIP(ifc, o.IP)
	if err != nil {
		return nil, err
	}
	info := &InterfaceInfo{Name: o.Name, Ifname: ifname, Ifindex: ifc.Index, IP: ip, NetdevMTU: ifc.MTU}
	pr := &prepared{info: info}
	defer func() {
		if err != nil {
			if pr.link != nil {
				pr.link.Close()
			}
			for _, l := range info.more {
				l.Close()
			}
			closeAll(pr.closers)
		}
	}()

	if pr.link, err = openLink(ifname, ip, ifc, o, info); err != nil {
		return nil, err
	}
	info.Link = pr.link
	info.MAC = pr.link.HardwareAddr()
	info.LinkMTU = pr.link.MTU()

	pr.cfg = Config{Name: o.Name, IP: ip, Seed: o.Seed, Logger: o.Logger, RetryCnt7Infinite: o.RetryCnt7Infinite,
		RouteHopLimit: routeHopLimit(ip), ResolveTimeout: o.ResolveTimeout, CC: o.CC}
	if info.Backend == BackendUDP {
		// nic/udp ignores destination MACs and labels a peer's frames with
		// udp.SyntheticMAC; the device only needs some MAC.
		pr.cfg.Resolve = func(_ context.Context, peer netip.Addr) (net.HardwareAddr, error) {
			return udp.SyntheticMAC(peer), nil
		}
		pr.cfg.JoinGroup = func(netip.Addr) (func(), error) {
			// Its socket is bound to the device's unicast address: the
			// kernel would deliver it no group's datagrams.
			return nil, errors.New("the UDP backend cannot receive multicast (use AF_XDP or AF_PACKET)")
		}
	} else {
		r, err := newResolver(ifname)
		if err != nil {
			return nil, err
		}
		pr.closers = append(pr.closers, r)
		pr.cfg.Resolve = r.resolve
		ifindex := ifc.Index
		pr.cfg.JoinGroup = func(ip netip.Addr) (func(), error) { return r.joinGroup(ifindex, ip) }
		hold, err := netaddr.HoldPort(ip)
		switch {
		case err == nil:
			pr.closers = append(pr.closers, hold)
			info.PortHeld = true
		case errors.Is(err, syscall.EADDRINUSE):
			o.Logger.Warn("qp: UDP port 4791 already bound; not holding it (the kernel will not answer with ICMP while that socket exists)",
				"ip", ip, "err", err)
		default:
			return nil, fmt.Errorf("qp: open interface: %w", err)
		}
	}
	if o.PassProgram && info.Backend != BackendAFXDP {
		pp, err := afxdp.AttachPassProgram(ifname)
		if err != nil {
			return nil, fmt.Errorf("qp: open interface: XDP pass program on %s: %w", ifname, err)
		}
		pr.closers = append(pr.closers, pp)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("qp: open interface %s: %w", ifname, err)
	}
	return pr, nil
}

// chooseIP returns want if it is an address of ifc, or the default.
func chooseIP(ifc *netaddr.Interface, want netip.Addr) (netip.Addr, error) {
	if want.IsValid() {
		want = want.Unmap()
		if _, ok := ifc.GIDIndex(want); !ok {
			return netip.Addr{}, fmt.Errorf("qp: open interface: %v is not an address of %s", want, ifc.Name)
		}
		return want, nil
	}
	for _, g := range ifc.GIDs {
		if g.IsIPv4() {
			return g.Addr(), nil
		}
	}
	for _, g := range ifc.GIDs {
		if a := g.Addr(); !a.IsLinkLocalUnicast() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("qp: open interface: %s has no IPv4 or global IPv6 address to use as GID index 1", ifc.Name)
}

// openRaw opens the raw backend o.Backend names (auto, afxdp, afpacket),
// or returns a nil link and no error to have the UDP backend opened
// instead. It is openRawLink of this system; tests on Linux swap in
// withoutRawBackends to run the path every other system takes.
var openRaw = openRawLink

// openLink opens the backend link and records it in info.
func openLink(ifname string, ip netip.Addr, ifc *netaddr.Interface, o *InterfaceOptions, info *InterfaceInfo) (nic.Link, error) {
	if o.Backend != BackendUDP {
		l, err := openRaw(ifname, o, info)
		if err != nil || l != nil {
			return l, err
		}
	}
	sb := o.UDPSocketBuffer
	if sb == 0 {
		sb = DefaultUDPSocketBuffer
	}
	l, err := udp.Open(udp.Config{Local: netip.AddrPortFrom(ip, udp.RoCEv2Port), MTU: ifc.MTU,
		SocketBuffer: max(sb, 0)})
	if err != nil {
		return nil, fmt.Errorf("qp: open interface: %w", err)
	}
	info.Backend, info.Mode = BackendUDP, "socket"
	return l, nil
}

// backendNeeds is the privilege each backend needs that an ordinary user
// lacks.
var backendNeeds = map[string]string{
	BackendAFXDP:    "CAP_NET_RAW (the AF_XDP socket), CAP_BPF and CAP_NET_ADMIN (loading and attaching its XDP program; CAP_SYS_ADMIN before Linux 5.8) and CAP_IPC_LOCK or a RLIMIT_MEMLOCK above its UMEM",
	BackendAFPacket: "CAP_NET_RAW (the packet socket)",
	BackendAuto:     "AF_XDP's CAP_NET_RAW, CAP_BPF and CAP_NET_ADMIN, or at least AF_PACKET's CAP_NET_RAW",
}

// rawOpenError is the error of opening the raw backend: ErrPermission
// with the capabilities it needs and the unprivileged alternative when
// the cause is EPERM or EACCES.
func rawOpenError(ifname, backend string, err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("qp: open interface %s: %w: the %s backend needs %s (root has them); "+
			"the udp backend works unprivileged (GOROCE_BACKEND=udp, InterfaceOptions.Backend: qp.BackendUDP): %w",
			ifname, ErrPermission, backend, backendNeeds[backend], err)
	}
	return fmt.Errorf("qp: open interface: %w", err)
}

// withoutRawBackends is openRawLink on systems without AF_XDP and
// AF_PACKET: auto becomes the UDP backend (logged, and said in
// info.Fallback); afxdp and afpacket are refused with ErrNotSupported.
func withoutRawBackends(ifname string, o *InterfaceOptions, info *InterfaceInfo) (nic.Link, error) {
	if o.Backend == BackendAuto {
		info.Fallback = fmt.Sprintf("AF_XDP and AF_PACKET are Linux only (%s); using the udp backend", runtime.GOOS)
		o.Logger.Info("qp: AF_XDP and AF_PACKET are Linux only; auto uses the udp backend", "ifname", ifname, "goos", runtime.GOOS)
		return nil, nil
	}
	what := "AF_XDP"
	if o.Backend == BackendAFPacket {
		what = "AF_PACKET"
	}
	return nil, fmt.Errorf("qp: open interface %s: backend %s: %s is Linux only (%s): %w", ifname, o.Backend, what, runtime.GOOS, ErrNotSupported)
}

// deviceLink is the link the device gets for one queue's backend link bl:
// under the WrapLink wrapper, owning closers, with the non-blocking read
// (busy-poll) or the runtime poller's wait (threaded) exposed.
func deviceLink(bl nic.Link, closers []io.Closer, o *InterfaceOptions) (nic.Link, *ownedLink, error) {
	dlink := bl
	if o.WrapLink != nil {
		dlink = o.WrapLink(bl)
	}
	owned := &ownedLink{Link: dlink, closers: closers}
	if o.Mode == ModeBusyPoll {
		pl, err := newPolledLink(owned)
		if err != nil {
			owned.Close()
			return nil, nil, err
		}
		return pl, owned, nil
	}
	if w, ok := dlink.(nic.Waiter); ok {
		return &waitedLink{ownedLink: owned, w: w}, owned, nil
	}
	return owned, owned, nil
}

// ownedLink is the link the device gets: closing it closes the backend
// link, then what OpenInterface took along with it (port hold, resolver
// namespace, pass program), in reverse order.
type ownedLink struct {
	nic.Link
	closers []io.Closer
}

func (l *ownedLink) Close() error {
	err := l.Link.Close()
	if err2 := closeAll(l.closers); err == nil {
		err = err2
	}
	return err
}

// Unwrap returns the link under the ownership wrapper.
func (l *ownedLink) Unwrap() nic.Link { return l.Link }

// polledLink is the device's link in busy-poll mode: the owned link plus
// the non-blocking read of the link under it (the backend's, or the
// WrapLink wrapper's), which ownedLink's embedding does not expose.
type polledLink struct {
	*ownedLink
	try func(bufs [][]byte, sizes []int) (int, error)
}

func newPolledLink(l *ownedLink) (*polledLink, error) {
	if t, ok := l.Link.(nic.Poller); ok {
		return &polledLink{ownedLink: l, try: t.TryReadBatch}, nil
	}
	return nil, fmt.Errorf("qp: open interface: busy-poll needs a link with a non-blocking TryReadBatch; %T has none (a WrapLink wrapper must forward it)", l.Link)
}

// TryReadBatch reads the frames already waiting, without blocking.
func (l *polledLink) TryReadBatch(bufs [][]byte, sizes []int) (int, error) { return l.try(bufs, sizes) }

// waitedLink is the device's link in the normal mode when the link under
// the ownership wrapper can wait in the runtime poller (nic.Waiter): the
// device's driver goroutine parks there (driver.go).
type waitedLink struct {
	*ownedLink
	w nic.Waiter
}

// TryReadBatch implements nic.Poller.
func (l *waitedLink) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return l.w.TryReadBatch(bufs, sizes)
}

// WaitReadBatch implements nic.Waiter.
func (l *waitedLink) WaitReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return l.w.WaitReadBatch(bufs, sizes)
}

// SetWaitDeadline implements nic.Waiter.
func (l *waitedLink) SetWaitDeadline(t time.Time) error { return l.w.SetWaitDeadline(t) }

func closeAll(cs []io.Closer) error {
	var first error
	for i := len(cs) - 1; i >= 0; i-- {
		if err := cs[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
