// Package udp is the unprivileged nic.Link backend: it carries the RoCEv2
// part of each frame (BTH through ICRC) as the payload of an ordinary UDP
// datagram, and lets the kernel build the Ethernet, IP and UDP headers. It
// works wherever the operating system has UDP sockets.
//
// # The frame model
//
// The nic.Link contract is complete Ethernet frames. On WriteBatch a frame
// built by goroce (Ethernet [+802.1Q] + IPv4/IPv6 + UDP + BTH ... + ICRC) is
// parsed: the destination IP chooses where the datagram goes (to the peer
// port, Config.PeerPort, default 4791) and the bytes from the BTH on are the
// payload. MAC addresses, VLAN tag, TOS/traffic class, TTL/hop limit, IPv4
// ID and the UDP source port of the frame are not carried. On ReadBatch the
// backend writes a synthetic Ethernet + IP + UDP header in front of the
// received payload, so the caller sees a normal RoCEv2 frame.
//
// # The ICRC, and who can talk to whom
//
// The ICRC covers the IP header (IPv4: everything but TOS, TTL and checksum,
// so the ID is covered; IPv6: everything but traffic class, flow label and
// hop limit) and the UDP ports and length (PROTOCOL.md §2). A UDP socket
// neither sends the frame's header nor shows the received one, so both ends
// agree on a canonical header, the one this backend puts on received
// frames and the one an unconnected, DF-setting Linux UDP socket really
// sends:
//
//	IPv4: version/IHL 0x45, ID 0, flags DF, protocol 17, no options,
//	      the real source and destination addresses
//	IPv6: next header 17, the real addresses
//	UDP:  source port = the sending socket's port, destination port 4791,
//	      checksum masked
//
// Linux sends IPv4 ID 0 for a DF datagram from an unconnected socket
// (ip_select_ident_segs), so with IP_PMTUDISC_DO and datagrams to explicit
// destinations the wire header is the canonical one when the peer port is
// 4791.
//
// On transmit the ICRC is re-based, not recomputed: the trailer sent is
// ICRC(canonical) XOR ICRC(frame as built) XOR trailer-of-the-frame. For a
// correct frame the last two cancel and the peer gets the right ICRC for the
// canonical header; a frame whose ICRC was already wrong stays wrong by the
// same error bits. The two headers differ only in the IP and UDP headers,
// so the correction is computed from those alone (CRC arithmetic,
// rebase.go), without a pass over the payload. On receive nothing is recomputed: the synthesized header
// is canonical, and the receiver's own ICRC check covers the payload as it
// arrived. So this backend never hides corruption.
//
// Peers that work:
//   - goroce(udp) ↔ goroce(udp): IPv4 and IPv6, any ports, any operating
//     system (the canonical header is synthesized on both ends).
//   - goroce(udp) on Linux → rxe/mlx5 or goroce(afpacket/afxdp): IPv4 and
//     IPv6, when datagrams go to port 4791 (the wire header is canonical).
//     From other systems IPv6 works the same way; IPv4 works only if the
//     system sends ID 0 with DF, which is not promised (macOS and FreeBSD
//     choose their own IPv4 IDs).
//   - rxe/mlx5 → goroce(udp) on Linux, port 4791: IPv6 only (the socket
//     accepts rxe's zero IPv6 UDP checksum, UDP_NO_CHECK6_RX; other systems
//     drop such datagrams in the kernel). rxe puts a kernel chosen IPv4 ID
//     in every packet, which a UDP socket cannot see, so IPv4 packets from
//     rxe fail the ICRC check (the transport drops and counts them).
//   - goroce(afpacket/afxdp) → goroce(udp): IPv4 and IPv6. goroce's
//     transport sends every frame with IPv4 ID 0 and DF, the canonical
//     header's, so the trailer verifies against the synthesized header
//     (qp/netnstest's udp-afxdp and afpacket-udp pairs).
//
// # Segmentation and receive offload (Linux)
//
// A 64 KiB RDMA message is 16 frames at path MTU 4096, and a datagram per
// frame costs the kernel a trip through its stack for each; TCP on the
// same link moves 64 KiB per trip. So on Linux, when the kernel has them
// (UDP_SEGMENT and UDP_GRO, Linux 4.18 and 5.0; probed at Open,
// Config.NoOffload turns them off), the link uses UDP GSO and GRO:
//
//   - Send: consecutive frames of one WriteBatch to one destination whose
//     UDP payloads (BTH .. ICRC) have the same length, the last of the run
//     possibly shorter, go out as one datagram with a UDP_SEGMENT control
//     message (the segment size), at most 64 segments and 65507 bytes; the
//     datagrams of a batch still share one sendmmsg. A datagram's iovecs
//     are its frames' payloads and trailers, so nothing is copied. The
//     kernel (or a NIC with UDP segmentation offload) cuts it into one
//     datagram per frame. If the kernel refuses a segmented datagram with
//     EINVAL or EIO (no checksum offload on older kernels, IPsec, zero
//     IPv6 checksums; segments above the route MTU on kernels before
//     EMSGSIZE was returned for that) its frames go one by one, and the
//     link stops segmenting; EMSGSIZE drops the datagram's frames and
//     counts them, as it would each frame alone.
//   - Receive: the kernel may hand over several datagrams of one flow as
//     one, with their segment size in a UDP_GRO control message. Each
//     datagram lands in a 64 KiB slot of the link's, and its segments are
//     copied out, each behind its own synthesized (canonical) header;
//     segments beyond the caller's buffers wait in the slots and come with
//     the next ReadBatch, TryReadBatch or WaitReadBatch, before anything
//     new is received.
//   - OffloadStats counts both.
//
// The segments of a GSO datagram do not all carry the canonical header:
// inet_gso_segment numbers their IPv4 IDs from the datagram's, so they
// carry IDs 0, 1, 2 ... (the wire test pins this). A receiver that checks
// the ICRC over the real header (rxe, mlx5, goroce's raw backends) would
// need each segment's trailer re-based for its own ID; a goroce UDP link
// never sees the ID and checks every frame against ID 0, and may get the
// segments singly, re-coalesced along other boundaries, or as the datagram
// sent, so no other ID would work for it. And a virtual link may hand the
// unsegmented datagram to a packet socket (a veth does unless its peer has
// an XDP program), which a raw backend cannot take. So GSO datagrams go
// only to peers known to be goroce UDP links, with every trailer re-based
// for ID 0 as ever: a peer is known once a datagram came from its address
// and the peer port (a socket bound to the RoCE port: rxe, mlx5 and
// goroce's raw backends send from ports 0xC000 and up, so with a PeerPort
// there no peer is ever known), and unknown again when one comes from
// another port. The first frames to a peer, before it has answered, go one
// by one. IPv6 segments would carry the canonical header, but the
// packet-socket problem stays, so IPv6 follows the same rule. A capture on
// the wire (tcpdump, goroce dump) shows IPv4 GSO segments after the first
// with a bad ICRC.
//
// Two endpoints on one host: bind them to different loopback addresses
// (127.0.0.1:4791 and 127.0.0.2:4791), or to different ports with PeerPort
// naming the other's port; the canonical destination port stays 4791.
//
// # Two socket paths
//
// On Linux the link drives a non-blocking socket with recvmmsg/sendmmsg,
// BatchSize datagrams per system call, no allocation per packet. ReadBatch
// blocks in poll(2) on the socket and an eventfd, so Close wakes a blocked
// ReadBatch (ErrClosed); TryReadBatch is one recvmmsg with MSG_DONTWAIT
// (none while segments of a coalesced datagram are still waiting). UDP GSO
// and GRO are used as above.
//
// Elsewhere (macOS, FreeBSD, Windows, ...) it uses the standard library's
// net.UDPConn: one datagram per system call (WriteMsgUDPAddrPort,
// ReadMsgUDPAddrPort). A reader goroutine started by Open receives into a
// ring of MTU-sized slots, and ReadBatch and TryReadBatch copy frames out
// of that ring, so TryReadBatch never sleeps and never makes a system call,
// and Close wakes every blocked call. A datagram larger than the link's MTU
// is dropped and counted. Stats.RxDrops does not include the kernel's
// socket-buffer drops there (no SO_MEMINFO), and Stats.RingFull stays 0
// (the standard library waits for socket buffer space itself).
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkcore"
	"github.com/goroce/goroce/wire"
)

// RoCEv2Port is the canonical UDP destination port.
const RoCEv2Port = 4791

// Config configures Open.
type Config struct {
	// Local is the address to bind: a specific IPv4 or IPv6 address (not a
	// wildcard: it is the source address the peer checks); port 0 means 4791.
	// An IPv6 link-local address needs its zone (fe80::1%veth0); datagrams to
	// link-local peers then leave through that interface.
	Local netip.AddrPort
	// PeerPort is the UDP port datagrams are sent to (default 4791).
	PeerPort uint16
	// MTU is the IP MTU frames are limited to (default 1500; the largest
	// frame is MTU+18).
	MTU int
	// BatchSize is the number of datagrams per system call on Linux, and
	// the preferred number of frames per ReadBatch/WriteBatch (default 64).
	BatchSize int
	// SocketBuffer sets SO_RCVBUF/SO_SNDBUF (root may exceed the Linux
	// sysctl limits; others get what the kernel allows). 0 keeps the
	// defaults.
	SocketBuffer int
	// NoOffload turns off UDP GSO and GRO (Linux; see the package
	// comment), which Open otherwise turns on when the kernel has them.
	NoOffload bool

	// portable selects the net.UDPConn path on Linux too (tests: it is the
	// only path other systems have).
	portable bool
}

const (
	defaultBatch = 64
	ethLen       = 14
	hdrLen4      = ethLen + 20 + 8
	hdrLen6      = ethLen + 40 + 8
	ttl          = 64
)

// sock is one of the two socket paths (see the package comment). recv and
// send run under the Link's rxMu and txMu; stop may run concurrently with
// both and must wake them; release runs once, after stop, with both locks
// held.
type sock interface {
	// recv fills bufs with synthesized frames; with block it waits for at
	// least one (or the stop). It returns 0, nil when nothing is waiting.
	recv(bufs [][]byte, sizes []int, block bool) (int, error)
	// send transmits frames (dropped ones counted in l.c.TxDrops) and
	// returns how many it consumed.
	send(frames [][]byte) (int, error)
	// socketDrops is the kernel's count of datagrams dropped on receive.
	socketDrops() uint64
	stop()
	release()
}

// Link is a UDP-socket nic.Link.
type Link struct {
	local    netip.AddrPort
	zoneID   uint32 // IPv6 scope of a link-local Local (0 otherwise)
	zone     string // its interface name
	v6       bool
	peerPort uint16
	mtu      int
	batch    int
	hdrLen   int
	mac      net.HardwareAddr
	s        sock

	rxMu sync.Mutex

	txMu    sync.Mutex
	scratch []byte     // canonical l3 for the ICRC re-basing
	shifts  shiftCache // rebaseTrailer's CRC shifts, by payload length

	peers udpPeers // peers known to be goroce UDP links (GSO receivers)
	offloadCounters

	c linkcore.Core // counters, closed, Close's order
}

var _ nic.Link = (*Link)(nil)
var _ nic.Poller = (*Link)(nil)

// Open binds the socket.
func Open(cfg Config) (*Link, error) {
	ip := cfg.Local.Addr().Unmap()
	if !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("udp: local address %v must be a specific IP", cfg.Local.Addr())
	}
	var zoneID uint32
	if z := ip.Zone(); z != "" {
		ifc, err := net.InterfaceByName(z)
		if err != nil {
			return nil, fmt.Errorf("udp: zone of %v: %w", ip, err)
		}
		zoneID = uint32(ifc.Index)
	} else if ip.Is6() && ip.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("udp: link-local address %v needs a zone (%%ifname)", ip)
	}
	port := cfg.Local.Port()
	if port == 0 {
		port = RoCEv2Port
	}
	if cfg.PeerPort == 0 {
		cfg.PeerPort = RoCEv2Port
	}
	if cfg.MTU <= 0 {
		cfg.MTU = 1500
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = defaultBatch
	}
	l := &Link{
		local:    netip.AddrPortFrom(ip, port),
		zoneID:   zoneID,
		zone:     ip.Zone(),
		v6:       ip.Is6(),
		peerPort: cfg.PeerPort,
		mtu:      cfg.MTU,
		batch:    cfg.BatchSize,
		mac:      SyntheticMAC(ip),
		scratch:  make([]byte, cfg.MTU+64),
		shifts:   make(shiftCache, cfg.MTU+64),
		hdrLen:   hdrLen4,
	}
	if l.v6 {
		l.hdrLen = hdrLen6
	}
	var err error
	if cfg.portable || !haveMmsg {
		l.s, err = openConn(l, cfg)
	} else {
		l.s, err = openMmsg(l, cfg)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// SyntheticMAC is the MAC address the backend uses for ip in synthesized
// frames: 02 (locally administered) followed by the last five bytes of the
// 16-byte form of ip (02:ff:c6:12:00:01 for 198.18.0.1).
func SyntheticMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As16()
	return net.HardwareAddr{0x02, b[11], b[12], b[13], b[14], b[15]}
}

// BatchSize implements nic.Link.
func (l *Link) BatchSize() int { return l.batch }

// MTU implements nic.Link.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr implements nic.Link: SyntheticMAC of the local address.
func (l *Link) HardwareAddr() net.HardwareAddr { return append(net.HardwareAddr(nil), l.mac...) }

// LocalAddr returns the bound address and port.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// ReadBatch implements nic.Link.
func (l *Link) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.c.Closed() {
		return 0, nic.ErrClosed
	}
	return l.s.recv(bufs, sizes, true)
}

// TryReadBatch is ReadBatch without blocking, for callers that drive the
// link by polling (qp.ModeBusyPoll), returning 0 when no datagram is
// waiting. On Linux it is one recvmmsg(2) with MSG_DONTWAIT (a UDP socket
// has no ring to look at, so each call is one system call even when it finds
// nothing), or none while segments of a coalesced datagram still wait
// (GRO); elsewhere it looks at the reader goroutine's ring, without a
// system call. After Close it returns nic.ErrClosed.
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.c.Closed() {
		return 0, nic.ErrClosed
	}
	return l.s.recv(bufs, sizes, false)
}

// synthesize writes Ethernet + canonical IP + UDP headers in front of a
// plen-byte payload already at b[hdrLen:].
func (l *Link) synthesize(b []byte, src netip.AddrPort, plen int) {
	be := binary.BigEndian
	copy(b[0:6], l.mac)
	peer := src.Addr().As16()
	b[6], b[7], b[8], b[9], b[10], b[11] = 0x02, peer[11], peer[12], peer[13], peer[14], peer[15]
	if !l.v6 {
		be.PutUint16(b[12:], 0x0800)
		putCanonical4(b[ethLen:], src.Addr(), l.local.Addr(), src.Port(), plen)
		return
	}
	be.PutUint16(b[12:], 0x86DD)
	putCanonical6(b[ethLen:], src.Addr(), l.local.Addr(), src.Port(), plen)
}

// putCanonical4 writes the canonical IPv4 + UDP header (28 bytes) for a
// UDP payload of plen bytes.
func putCanonical4(h []byte, src, dst netip.Addr, sport uint16, plen int) {
	be := binary.BigEndian
	h = h[:28]
	h[0], h[1] = 0x45, 0
	be.PutUint16(h[2:], uint16(28+plen))
	be.PutUint16(h[4:], 0)      // ID
	be.PutUint16(h[6:], 0x4000) // DF
	h[8], h[9] = ttl, 17
	h[10], h[11] = 0, 0
	s, d := src.As4(), dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	be.PutUint16(h[10:], ipv4Checksum(h[:20]))
	be.PutUint16(h[20:], sport)
	be.PutUint16(h[22:], RoCEv2Port)
	be.PutUint16(h[24:], uint16(8+plen))
	be.PutUint16(h[26:], 0)
}

// putCanonical6 writes the canonical IPv6 + UDP header (48 bytes).
func putCanonical6(h []byte, src, dst netip.Addr, sport uint16, plen int) {
	be := binary.BigEndian
	h = h[:48]
	be.PutUint32(h[0:], 6<<28)
	be.PutUint16(h[4:], uint16(8+plen))
	h[6], h[7] = 17, ttl
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	be.PutUint16(h[40:], sport)
	be.PutUint16(h[42:], RoCEv2Port)
	be.PutUint16(h[44:], uint16(8+plen))
	be.PutUint16(h[46:], 0)
}

func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// errNotRoCE marks frames WriteBatch cannot carry (counted, not returned).
var errNotRoCE = errors.New("udp: not an IP/UDP frame of the link's family")

// parseFrame finds the IP header, the destination and the UDP payload
// (BTH .. ICRC) of a frame. l3 is IP header .. ICRC.
func (l *Link) parseFrame(f []byte) (l3 []byte, dst netip.Addr, payloadOff int, err error) {
	be := binary.BigEndian
	if len(f) < ethLen {
		return nil, dst, 0, errNotRoCE
	}
	off := 12
	et := be.Uint16(f[off:])
	if et == 0x8100 && len(f) >= ethLen+4 {
		off += 4
		et = be.Uint16(f[off:])
	}
	ip := f[off+2:]
	switch {
	case et == 0x0800 && !l.v6:
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
			return nil, dst, 0, errNotRoCE
		}
		ihl := int(ip[0]&0xf) * 4
		tot := int(be.Uint16(ip[2:]))
		if ihl < 20 || tot < ihl+8 || tot > len(ip) {
			return nil, dst, 0, errNotRoCE
		}
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		return ip[:tot], dst, ihl + 8, nil
	case et == 0x86DD && l.v6:
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != 17 {
			return nil, dst, 0, errNotRoCE
		}
		tot := 40 + int(be.Uint16(ip[4:]))
		if tot < 48 || tot > len(ip) {
			return nil, dst, 0, errNotRoCE
		}
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		return ip[:tot], dst, 48, nil
	}
	return nil, dst, 0, errNotRoCE
}

// rebase prepares frame f for sending: it returns the payload (BTH .. last
// pad byte, in f), the destination and the re-based ICRC trailer. The
// canonical IP + UDP header and a copy of the payload are left in
// l.scratch[:hl+len(body)], with at least 4 bytes of room behind them. ok is
// false for frames the link cannot carry.
func (l *Link) rebase(f []byte) (body []byte, dst netip.Addr, trailer uint32, hl int, ok bool) {
	if len(f) > l.mtu+18 {
		return nil, dst, 0, 0, false
	}
	l3, dst, poff, err := l.parseFrame(f)
	if err != nil || len(l3) < poff+wire.BTHLen+wire.ICRCLen {
		return nil, dst, 0, 0, false
	}
	body = l3[poff : len(l3)-wire.ICRCLen]
	frameICRC := binary.LittleEndian.Uint32(l3[len(l3)-wire.ICRCLen:])
	asBuilt := wire.ICRC(l3[:len(l3)-wire.ICRCLen])

	hl = 28
	if l.v6 {
		hl = 48
	}
	n := hl + len(body)
	if n+wire.ICRCLen > len(l.scratch) {
		return nil, dst, 0, 0, false
	}
	c := l.scratch[:n]
	if l.v6 {
		putCanonical6(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	} else {
		putCanonical4(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	}
	copy(c[hl:], body)
	canon := wire.ICRC(c)
	return body, dst, canon ^ asBuilt ^ frameICRC, hl, true
}

// WriteBatch implements nic.Link. Frames that are not IP/UDP of the link's
// family, or carry less than a BTH and an ICRC, are dropped and counted in
// Stats.TxDrops; the count returned includes them.
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if len(frames) > 0 && l.c.Closed() {
		return 0, nic.ErrClosed
	}
	return l.s.send(frames)
}

// Stats implements nic.Link. On Linux RxDrops includes the datagrams the
// kernel dropped because the socket's receive buffer was full (SO_MEMINFO).
func (l *Link) Stats() nic.Stats {
	return l.c.Stats(func() (uint64, uint64) {
		if l.c.Closed() {
			return 0, 0
		}
		return l.s.socketDrops(), 0
	})
}

// Close implements nic.Link: it wakes blocked calls (ErrClosed), waits for
// them, and closes the socket.
func (l *Link) Close() error {
	return l.c.Close(&l.rxMu, &l.txMu, l.s.stop, func() error {
		l.s.release()
		return nil
	})
}
