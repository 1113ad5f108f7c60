package qp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afxdp"
)

// Backend names for InterfaceOptions.Backend.
const (
	// BackendAuto is AF_XDP, falling back (logged) to AF_PACKET when AF_XDP
	// is not supported here. Outside Linux it is the UDP backend (logged;
	// InterfaceInfo.Fallback says why).
	BackendAuto = "auto"
	// BackendAFXDP is an AF_XDP socket with an XDP steering program
	// (nic/afxdp): root, kernel >= 5.9, native mode where the driver has
	// it, generic otherwise. Linux only.
	BackendAFXDP = "afxdp"
	// BackendAFPacket is an AF_PACKET socket with a BPF filter
	// (nic/afpacket): root (CAP_NET_RAW); by default the TPACKET_V2
	// low-latency ring. Linux only.
	BackendAFPacket = "afpacket"
	// BackendUDP is an ordinary UDP socket on IP:4791 (nic/udp): no
	// privileges; the kernel builds the Ethernet/IP/UDP headers. Every
	// system.
	BackendUDP = "udp"
)

// Backends lists the concrete backends.
var Backends = []string{BackendAFXDP, BackendAFPacket, BackendUDP}

// DefaultUDPSocketBuffer is the UDP backend's default socket buffer size.
// Root gets it (SO_RCVBUFFORCE); others get at most net.core.rmem_max.
const DefaultUDPSocketBuffer = 8 << 20

// defaultHopLimit is the hop limit of the address vectors when the
// system's own default is not known: 64, the Linux kernel's default
// (net.ipv4.ip_default_ttl and net.ipv6.conf.default.hop_limit), which
// rxe and mlx5 peers send.
const defaultHopLimit = 64

// ErrNotSupported is wrapped by OpenInterface's error when the backend
// asked for does not exist on this operating system (AF_XDP and AF_PACKET
// outside Linux).
var ErrNotSupported = errors.New("not supported on this system")

// ErrNoInterface is wrapped by OpenInterface's error when the calling
// thread's network namespace has no interface of that name.
var ErrNoInterface = errors.New("no such network interface")

// ErrPermission is wrapped by OpenInterface's error when the process lacks
// a privilege the backend needs (the errno, EPERM or EACCES, is wrapped
// too, so errors.Is(err, os.ErrPermission) holds as well). The message
// names the capabilities: AF_XDP needs CAP_NET_RAW for its socket and
// CAP_BPF and CAP_NET_ADMIN to load and attach its XDP program, AF_PACKET
// needs CAP_NET_RAW; the udp backend needs none.
var ErrPermission = errors.New("permission denied")

// InterfaceOptions configure OpenInterface. The zero value opens the auto
// backend on the interface's first IPv4 address.
type InterfaceOptions struct {
	// Backend is BackendAuto (default, ""), BackendAFXDP, BackendAFPacket
	// or BackendUDP.
	Backend string
	// IP is the device's address; it must be one of the interface's
	// addresses. Zero: the first IPv4 address (rxe's GID index 1), else the
	// first non-link-local IPv6 address.
	IP netip.Addr
	// Name is the device name (default "goroce_" + ifname).
	Name string
	// Logger receives the backend choice, fallbacks and warnings, and is
	// the device's Config.Logger. Nil: nothing is logged (the library
	// never writes to slog.Default on its own; InterfaceInfo.Fallback says
	// why auto chose its backend).
	Logger *slog.Logger
	// RetryCnt7Infinite selects rxe's retry_cnt == 7 semantics.
	RetryCnt7Infinite bool
	// Seed makes memory keys deterministic and QP numbers start at 0x11
	// as rxe's (0: random keys and a random first QP number).
	Seed int64
	// ResolveTimeout bounds one neighbour resolution when the context
	// given to QP.Connect or QP.Modify has no deadline (Config.ResolveTimeout;
	// default DefaultResolveTimeout).
	ResolveTimeout time.Duration

	// CC turns RoCEv2 congestion control on (Config.CC). With the UDP
	// backend the kernel writes the IP header: CNPs still flow, but
	// packets carry no ECT(0) and a CE mark is not seen.
	CC *CCParams

	// AFXDP tunes the AF_XDP backend (its Logger defaults to Logger).
	AFXDP afxdp.Options
	// AFPacket tunes the AF_PACKET backend. LowLatency is forced on unless
	// AFPacketBlockRing is set: the TPACKET_V3 block ring hands a lone frame
	// over only after its block timeout (≥ 1 ms), which an RC ping-pong and
	// every ACK would pay.
	AFPacket          AFPacketOptions
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
	// Pcap, when set, records every frame the device receives or sends
	// (Config.Pcap): the way to capture an AF_XDP device's traffic, which
	// tcpdump on the interface does not see.
	Pcap *PcapWriter
	// WrapLink, when set, wraps the backend link before the device uses it
	// (fault injection, taps). The wrapper's Close must close the link it
	// wraps. In ModeBusyPoll the wrapper must have TryReadBatch too.
	WrapLink func(nic.Link) nic.Link
	// Mode is the device's mode (Config.Mode): ModeThreaded (the default)
	// or ModeBusyPoll: no receive or timer goroutine; the application's
	// CQ.Poll/Wait drive the device and spin instead of sleeping, burning a
	// core per polling thread, for the lowest round-trip latency. A device
	// nobody polls does not answer its peer: run Device.Progress in a
	// goroutine when the application only serves as an RDMA target. Every
	// backend supports it (the backends' non-blocking TryReadBatch).
	// ModeManual (the simulator's) is refused.
	Mode Mode
	// Queues is how many queues of the interface the device uses
	// (Config.Links; 0 means 1): one AF_XDP socket and one reader per
	// queue, QPs spread over them by their UDP source ports (queues.go).
	// The interface needs that many receive queues (a veth made with
	// numtxqueues N numrxqueues N; a NIC's combined channels, ethtool -L).
	// Only the AF_XDP backend has queues: with afpacket or udp, or auto
	// where AF_XDP cannot run, more than one is refused with
	// ErrNotSupported. At most MaxQueues.
	Queues int
}

// InterfaceInfo describes a device opened by OpenInterface.
type InterfaceInfo struct {
	Name      string
	Ifname    string
	Ifindex   int
	Backend   string // afxdp, afpacket or udp
	Mode      string // afxdp: native/generic; afpacket: tpacket_v2/tpacket_v3; udp: socket
	ZeroCopy  bool   // afxdp: zero-copy socket
	Fallback  string // why auto did not use afxdp ("" if it did; outside Linux: why udp)
	MAC       net.HardwareAddr
	IP        netip.Addr
	NetdevMTU int   // the interface's MTU
	LinkMTU   int   // the IP MTU the backend carries (AF_XDP: one UMEM chunk's unless MultiBuffer)
	PathMTU   int   // the port's active IB MTU in bytes (largest ≤ LinkMTU − 80, as rxe)
	GIDs      []GID // the device's GID table
	PortHeld  bool  // IP:4791 is held against ICMP port unreachable
	// Link is the backend link (under any WrapLink wrapper), for its Stats.
	Link nic.Link `json:"-"`
	// MultiBuffer: afxdp frames may span UMEM chunks (XDP_USE_SG), so the
	// backend carries the interface MTU; without it, one chunk's worth.
	MultiBuffer bool
	// Queues is the number of queues the device uses
	// (InterfaceOptions.Queues).
	Queues int
	// more are the backend links of queues 1..Queues-1.
	more []nic.Link
}

// String prints the device the way `ibv_devinfo -v` prints an rxe port,
// with goroce's backend lines added.
func (i *InterfaceInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hca_id:\t%s\n", i.Name)
	fmt.Fprintf(&b, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(&b, "\tnetdev:\t\t\t\t%s (ifindex %d)\n", i.Ifname, i.Ifindex)
	mode := i.Mode
	if i.ZeroCopy {
		mode += ", zero-copy"
	}
	if i.MultiBuffer {
		mode += ", multi-buffer"
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
	fmt.Fprintf(&b, "\t\t\tactive_mtu:\t\t%d (%d)\n", i.PathMTU, MTUFromBytes(i.PathMTU))
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

// defaults fills in the zero fields of o.
func (o *InterfaceOptions) defaults(ifname string) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Backend == "" {
		o.Backend = BackendAuto
	}
	if o.Name == "" {
		o.Name = "goroce_" + ifname
	}
	if o.Queues < 0 || o.Queues > MaxQueues {
		return fmt.Errorf("qp: open interface: %d queues: at most %d: %w", o.Queues, MaxQueues, ErrInvalidArgument)
	}
	if o.Queues > 1 && o.Backend != BackendAuto && o.Backend != BackendAFXDP {
		return fmt.Errorf("qp: open interface %s: %d queues: only the afxdp backend has queues (%s has one): %w",
			ifname, o.Queues, o.Backend, ErrNotSupported)
	}
	switch o.Backend {
	case BackendAuto, BackendAFXDP, BackendAFPacket, BackendUDP:
		return nil
	}
	return fmt.Errorf("qp: open interface: unknown backend %q (auto, afxdp, afpacket, udp)", o.Backend)
}
