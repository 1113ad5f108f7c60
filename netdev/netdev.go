// Package netdev opens a goroce RoCE device (qp.Device) on a real network
// interface, the way the rxe driver binds a soft-RoCE device to a netdev
// (`rdma link add rxe0 type rxe netdev eth0`): it picks a frame backend,
// reads the interface's MAC, MTU and addresses, builds the GID table and
// the neighbour resolver, and keeps the kernel from answering RoCEv2
// traffic with ICMP errors.
//
// # Backends
//
//	afxdp     AF_XDP socket + XDP steering program (nic/afxdp): root, kernel
//	          >= 5.9, native mode where the driver has it, generic otherwise.
//	afpacket  AF_PACKET socket with a BPF filter (nic/afpacket): root
//	          (CAP_NET_RAW); by default the TPACKET_V2 low-latency ring.
//	udp       an ordinary UDP socket on IP:4791 (nic/udp): no privileges;
//	          the kernel builds the Ethernet/IP/UDP headers.
//	auto      afxdp, falling back (logged) to afpacket when AF_XDP is not
//	          supported here (*afxdp.NotSupportedError).
//
// # Addresses
//
// Options.IP chooses the device's address; by default it is the
// interface's first IPv4 address, which is what rxe has at GID index 1
// (netaddr's package comment explains the kernel's GID table order), or the
// first non-link-local IPv6 address when there is no IPv4 one. The Device's
// GID table is {fe80::EUI-64, ::ffff:IP}, so peers connect with GID index 1
// as they do with rxe.
//
// The raw backends resolve a peer's MAC from the kernel's neighbour table
// (netaddr.ResolveMAC: ARP/NDP triggered through the kernel, bounded by
// Options.ResolveTimeout, an error naming the address on failure). The
// resolver runs in the network namespace the device was opened in, whatever
// thread calls QP.Connect. The UDP backend needs no MAC: frames carry the
// synthetic MAC nic/udp puts on received frames.
//
// # The UDP port hold
//
// With a raw backend, RoCEv2 datagrams for our IP also reach the kernel's
// UDP layer (AF_PACKET receives a copy; an AF_XDP program that falls back to
// XDP_PASS lets a frame through). With no socket on port 4791 the kernel
// would answer each with ICMP port unreachable. Open therefore holds
// IP:4791 with netaddr.HoldPort (a UDP socket with a drop-everything BPF
// filter) while the device lives; Device.Close releases it. When the port
// is already taken (rxe on the same address, another goroce), the hold is
// skipped with a log line: a socket exists, so the kernel is silent anyway.
//
// # Closing
//
// Device.Close closes the backend link (for AF_XDP this detaches the XDP
// program: it is held by a bpf_link of this process), the port hold, any
// pass program, and the namespace handle of the resolver. It deletes no
// interface, address or namespace.
//
// # Busy-poll
//
// With Options.BusyPoll the device runs no goroutine: the application's
// CQ.Poll and CQ.Wait read the backend without blocking (TryReadBatch) and
// run the RC timers, spinning instead of sleeping (qp.Config.BusyPoll).
// That trades a core per polling thread for round trips without a
// goroutine wake-up (docs/performance.md).
//
// # Namespaces
//
// Open acts in the network namespace of the calling OS thread (lock it and
// setns(2) into the namespace first, e.g. with internal/netns Pair.Do or
// netns.Pair.Do). Sockets, XDP links and the resolver keep that namespace;
// the Device's goroutines then work from any thread.
package netdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/qp"
	"github.com/vishvananda/netns"
)

// Backend names.
const (
	Auto     = "auto"
	AFXDP    = "afxdp"
	AFPacket = "afpacket"
	UDP      = "udp"
)

// DefaultUDPSocketBuffer is the UDP backend's default socket buffer size.
// Root gets it (SO_RCVBUFFORCE); others get at most net.core.rmem_max.
const DefaultUDPSocketBuffer = 8 << 20

// Backends lists the concrete backends.
var Backends = []string{AFXDP, AFPacket, UDP}

// Options configure Open. The zero value opens the auto backend on the
// interface's first IPv4 address.
type Options struct {
	// Backend is "auto" (default), "afxdp", "afpacket" or "udp".
	Backend string
	// IP is the device's address; it must be one of the interface's
	// addresses. Zero: the first IPv4 address (rxe's GID index 1), else the
	// first non-link-local IPv6 address.
	IP netip.Addr
	// Name is the device name (default "goroce_" + ifname).
	Name string
	// Logger receives the backend choice, fallbacks and warnings (default
	// slog.Default()).
	Logger *slog.Logger
	// RetryCnt7Infinite selects rxe's retry_cnt == 7 semantics.
	RetryCnt7Infinite bool
	// Seed makes memory keys deterministic (0: random).
	Seed int64
	// ResolveTimeout bounds one neighbour resolution (default
	// netaddr.DefaultResolveTimeout, 3 s).
	ResolveTimeout time.Duration

	// AFXDP tunes the AF_XDP backend (its Logger defaults to Logger).
	AFXDP afxdp.Options
	// AFPacket tunes the AF_PACKET backend. LowLatency is forced on unless
	// AFPacketBlockRing is set: the TPACKET_V3 block ring hands a lone frame
	// over only after its block timeout (≥ 1 ms), which an RC ping-pong and
	// every ACK would pay.
	AFPacket          afpacket.Options
	AFPacketBlockRing bool
	// UDPSocketBuffer sets SO_RCVBUF/SO_SNDBUF of the UDP backend (default
	// DefaultUDPSocketBuffer; negative keeps the kernel's defaults). The
	// kernel's default receive buffer (net.core.rmem_default, 208 KiB)
	// holds about 100 full-size datagrams: a few 64 KiB messages in flight
	// overflow it, and every overflow costs an RC go-back-N retransmission
	// (bench/: 58 Mbit/s instead of Gbit/s for 64 KiB WRITEs at MTU 9000).
	UDPSocketBuffer int
	// PassProgram attaches a trivial XDP_PASS program to the interface when
	// the backend is afpacket or udp. On a veth whose other end runs AF_XDP
	// in native mode, some kernels deliver redirected frames only when this
	// end has an XDP program too (nic/afxdp's package comment).
	PassProgram bool
	// WrapLink, when set, wraps the backend link before the device uses it
	// (fault injection, taps). The wrapper's Close must close the link it
	// wraps. With BusyPoll the wrapper must have TryReadBatch too.
	WrapLink func(nic.Link) nic.Link
	// BusyPoll opens the device in busy-poll mode (qp.Config.BusyPoll): no
	// receive or timer goroutine; the application's CQ.Poll/Wait drive the
	// device and spin instead of sleeping, burning a core per polling
	// thread, for the lowest round-trip latency. A device nobody polls does
	// not answer its peer: run Device.Progress in a goroutine when the
	// application only serves as an RDMA target. Every backend supports it
	// (the backends' non-blocking TryReadBatch).
	BusyPoll bool
}

// Info describes an opened device.
type Info struct {
	Name      string
	Ifname    string
	Ifindex   int
	Backend   string // afxdp, afpacket or udp
	Mode      string // afxdp: native/generic; afpacket: tpacket_v2/tpacket_v3; udp: socket
	ZeroCopy  bool   // afxdp: zero-copy socket
	Fallback  string // why auto did not use afxdp ("" if it did)
	MAC       net.HardwareAddr
	IP        netip.Addr
	NetdevMTU int      // the interface's MTU
	LinkMTU   int      // the IP MTU the backend carries (AF_XDP: capped by its UMEM chunk)
	PathMTU   int      // the port's active IB MTU in bytes (largest ≤ LinkMTU − 80, as rxe)
	GIDs      []qp.GID // the device's GID table
	PortHeld  bool     // IP:4791 is held against ICMP port unreachable
	// Link is the backend link (under any WrapLink wrapper), for its Stats.
	Link nic.Link `json:"-"`
}

// String prints the device the way `ibv_devinfo -v` prints an rxe port,
// with goroce's backend lines added.
func (i *Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hca_id:\t%s\n", i.Name)
	fmt.Fprintf(&b, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(&b, "\tnetdev:\t\t\t\t%s (ifindex %d)\n", i.Ifname, i.Ifindex)
	mode := i.Mode
	if i.ZeroCopy {
		mode += ", zero-copy"
	}
	fmt.Fprintf(&b, "\tbackend:\t\t\t%s (%s)\n", i.Backend, mode)
	if i.Fallback != "" {
		fmt.Fprintf(&b, "\tfallback:\t\t\t%s\n", i.Fallback)
	}
	fmt.Fprintf(&b, "\tnode_guid:\t\t\t%s\n", nodeGUID(i.MAC))
	fmt.Fprintf(&b, "\tphys_port_cnt:\t\t\t1\n")
	fmt.Fprintf(&b, "\t\tport:\t1\n")
	fmt.Fprintf(&b, "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n")
	fmt.Fprintf(&b, "\t\t\tmax_mtu:\t\t4096 (5)\n")
	fmt.Fprintf(&b, "\t\t\tactive_mtu:\t\t%d (%d)\n", i.PathMTU, netaddr.MTUEnum(i.PathMTU))
	fmt.Fprintf(&b, "\t\t\tnetdev_mtu:\t\t%d (backend carries %d)\n", i.NetdevMTU, i.LinkMTU)
	fmt.Fprintf(&b, "\t\t\tlink_layer:\t\tEthernet\n")
	held := "no"
	if i.PortHeld {
		held = "yes"
	}
	fmt.Fprintf(&b, "\t\t\tudp_4791_held:\t\t%s\n", held)
	for k, g := range i.GIDs {
		fmt.Fprintf(&b, "\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", k, g)
	}
	return b.String()
}

// nodeGUID formats the EUI-64 of a MAC as ibv_devinfo prints node_guid
// (rxe: addrconf_addr_eui48, so 5254:00ff:fe12:3456 for 52:54:00:12:34:56
// with the U/L bit flipped).
func nodeGUID(mac net.HardwareAddr) string {
	if len(mac) != 6 {
		return "0000:0000:0000:0000"
	}
	return fmt.Sprintf("%02x%02x:%02xff:fe%02x:%02x%02x", mac[0]^2, mac[1], mac[2], mac[3], mac[4], mac[5])
}

// Open binds a goroce device to ifname in the calling thread's network
// namespace. Close the device to release everything Open took.
func Open(ifname string, o Options) (*qp.Device, *Info, error) {
	pr, err := prepare(ifname, &o)
	if err != nil {
		return nil, nil, err
	}
	var dlink nic.Link = pr.link
	if o.WrapLink != nil {
		dlink = o.WrapLink(pr.link)
	}
	// The device closes its link; the wrapper closes the link first, then
	// everything else Open took.
	owned := &ownedLink{Link: dlink, closers: pr.closers}
	pr.cfg.Link = owned
	if o.BusyPoll {
		pl, err := newPolledLink(owned)
		if err != nil {
			owned.Close()
			return nil, nil, err
		}
		pr.cfg.Link = pl
		pr.cfg.BusyPoll = true
	}
	dev, err := qp.Open(pr.cfg)
	if err != nil {
		pr.cfg.Link.Close()
		return nil, nil, fmt.Errorf("netdev: %w", err)
	}
	info := pr.info
	info.PathMTU = dev.ActiveMTU().Bytes()
	info.GIDs = dev.GIDs()
	o.Logger.Info("netdev: device open", "name", o.Name, "ifname", ifname, "backend", info.Backend,
		"mode", info.Mode, "ip", info.IP, "netdev_mtu", info.NetdevMTU, "link_mtu", info.LinkMTU, "path_mtu", info.PathMTU,
		"port_held", info.PortHeld, "busy_poll", o.BusyPoll)
	return dev, info, nil
}

// OpenLink opens the backend link exactly as Open would (same backend
// choice, fallback, options and UDP port hold) but without a device, for
// raw frame measurements on the same interface. Closing the link releases
// the port hold too. Info.GIDs is nil; Info.PathMTU is what a device on
// this link would use. WrapLink is ignored.
func OpenLink(ifname string, o Options) (nic.Link, *Info, error) {
	pr, err := prepare(ifname, &o)
	if err != nil {
		return nil, nil, err
	}
	pr.info.PathMTU = qp.PathMTU(pr.link.MTU()).Bytes()
	return &ownedLink{Link: pr.link, closers: pr.closers}, pr.info, nil
}

type prepared struct {
	link    nic.Link
	closers []io.Closer // what to release after the link, in reverse order
	info    *Info
	cfg     qp.Config // without Link
}

// prepare opens the backend link and everything around it.
func prepare(ifname string, o *Options) (_ *prepared, err error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Backend == "" {
		o.Backend = Auto
	}
	if o.Name == "" {
		o.Name = "goroce_" + ifname
	}
	if o.ResolveTimeout <= 0 {
		o.ResolveTimeout = netaddr.DefaultResolveTimeout
	}
	switch o.Backend {
	case Auto, AFXDP, AFPacket, UDP:
	default:
		return nil, fmt.Errorf("netdev: unknown backend %q (auto, afxdp, afpacket, udp)", o.Backend)
	}
	ifc, err := netaddr.Lookup(ifname)
	if err != nil {
		return nil, fmt.Errorf("netdev: %w", err)
	}
	ip, err := chooseIP(ifc, o.IP)
	if err != nil {
		return nil, err
	}
	info := &Info{Name: o.Name, Ifname: ifname, Ifindex: ifc.Index, IP: ip, NetdevMTU: ifc.MTU}
	pr := &prepared{info: info}
	defer func() {
		if err != nil {
			if pr.link != nil {
				pr.link.Close()
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

	pr.cfg = qp.Config{Name: o.Name, IP: ip, Seed: o.Seed, RetryCnt7Infinite: o.RetryCnt7Infinite,
		RouteHopLimit: routeHopLimit(ip)}
	if info.Backend == UDP {
		// nic/udp ignores destination MACs and labels a peer's frames with
		// udp.SyntheticMAC; the device only needs some MAC.
		pr.cfg.Resolve = func(_ context.Context, peer netip.Addr) (net.HardwareAddr, error) {
			return udp.SyntheticMAC(peer), nil
		}
	} else {
		r, err := newResolver(ifname, o.ResolveTimeout)
		if err != nil {
			return nil, err
		}
		pr.closers = append(pr.closers, r)
		pr.cfg.Resolve = r.resolve
		hold, err := netaddr.HoldPort(ip)
		switch {
		case err == nil:
			pr.closers = append(pr.closers, hold)
			info.PortHeld = true
		case errors.Is(err, syscall.EADDRINUSE):
			o.Logger.Warn("netdev: UDP port 4791 already bound; not holding it (the kernel will not answer with ICMP while that socket exists)",
				"ip", ip, "err", err)
		default:
			return nil, fmt.Errorf("netdev: %w", err)
		}
	}
	if o.PassProgram && info.Backend != AFXDP {
		pp, err := afxdp.AttachPassProgram(ifname)
		if err != nil {
			return nil, fmt.Errorf("netdev: XDP pass program on %s: %w", ifname, err)
		}
		pr.closers = append(pr.closers, pp)
	}
	return pr, nil
}

// chooseIP returns want if it is an address of ifc, or the default.
func chooseIP(ifc *netaddr.Interface, want netip.Addr) (netip.Addr, error) {
	if want.IsValid() {
		want = want.Unmap()
		if _, ok := ifc.GIDIndex(want); !ok {
			return netip.Addr{}, fmt.Errorf("netdev: %v is not an address of %s", want, ifc.Name)
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
	return netip.Addr{}, fmt.Errorf("netdev: %s has no IPv4 or global IPv6 address to use as GID index 1", ifc.Name)
}

func openLink(ifname string, ip netip.Addr, ifc *netaddr.Interface, o *Options, info *Info) (nic.Link, error) {
	backend := o.Backend
	if backend == Auto || backend == AFXDP {
		xo := o.AFXDP
		if xo.Logger == nil {
			xo.Logger = o.Logger
		}
		l, err := afxdp.Open(ifname, 0, xo)
		if err == nil {
			info.Backend, info.Mode, info.ZeroCopy = AFXDP, l.Mode(), l.ZeroCopy()
			return l, nil
		}
		if backend == AFXDP || !errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("netdev: %w", err)
		}
		info.Fallback = err.Error()
		o.Logger.Warn("netdev: AF_XDP not supported here; falling back to AF_PACKET", "ifname", ifname, "err", err)
		backend = AFPacket
	}
	switch backend {
	case AFPacket:
		po := o.AFPacket
		if !o.AFPacketBlockRing {
			po.LowLatency = true
		}
		l, err := afpacket.Open(ifname, po)
		if err != nil {
			return nil, fmt.Errorf("netdev: %w", err)
		}
		info.Backend, info.Mode = AFPacket, "tpacket_v3"
		if po.LowLatency {
			info.Mode = "tpacket_v2"
		}
		return l, nil
	case UDP:
		sb := o.UDPSocketBuffer
		if sb == 0 {
			sb = DefaultUDPSocketBuffer
		}
		l, err := udp.Open(udp.Config{Local: netip.AddrPortFrom(ip, udp.RoCEv2Port), MTU: ifc.MTU,
			SocketBuffer: max(sb, 0)})
		if err != nil {
			return nil, fmt.Errorf("netdev: %w", err)
		}
		info.Backend, info.Mode = UDP, "socket"
		return l, nil
	}
	return nil, fmt.Errorf("netdev: unknown backend %q", backend)
}

// ownedLink is the link the device gets: closing it closes the backend
// link, then what Open took along with it (port hold, resolver namespace,
// pass program), in reverse order.
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
	return nil, fmt.Errorf("netdev: busy-poll needs a link with a non-blocking TryReadBatch; %T has none (a WrapLink wrapper must forward it)", l.Link)
}

// TryReadBatch reads the frames already waiting, without blocking.
func (l *polledLink) TryReadBatch(bufs [][]byte, sizes []int) (int, error) { return l.try(bufs, sizes) }

func closeAll(cs []io.Closer) error {
	var first error
	for i := len(cs) - 1; i >= 0; i-- {
		if err := cs[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// resolver runs netaddr.ResolveMAC in the namespace the device was opened
// in: QP.Connect may be called from any goroutine, whose thread may be in
// another namespace.
type resolver struct {
	ifname  string
	timeout time.Duration
	ns      netns.NsHandle
}

func newResolver(ifname string, timeout time.Duration) (*resolver, error) {
	h, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netdev: network namespace handle: %w", err)
	}
	return &resolver{ifname: ifname, timeout: timeout, ns: h}, nil
}

func (r *resolver) Close() error { return r.ns.Close() }

func (r *resolver) resolve(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var mac net.HardwareAddr
	err := inNamespace(r.ns, func() error {
		var err error
		mac, err = netaddr.ResolveMAC(ctx, r.ifname, ip)
		return err
	})
	return mac, err
}

// inNamespace runs fn on this goroutine's thread, locked and switched into
// ns when it is elsewhere. If switching back fails the thread stays locked,
// so the runtime discards it when the goroutine ends.
func inNamespace(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netdev: current namespace: %w", err)
	}
	defer cur.Close()
	if cur.Equal(ns) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netdev: entering the device's namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(cur); err != nil {
		return fmt.Errorf("netdev: leaving the device's namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
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
		return 64
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v <= 0 || v > 255 {
		return 64
	}
	return uint8(v)
}
