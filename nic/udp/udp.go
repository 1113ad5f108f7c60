//go:build linux

// Package udp is the unprivileged nic.Link backend: it carries the RoCEv2
// part of each frame (BTH through ICRC) as the payload of an ordinary UDP
// datagram, and lets the kernel build the Ethernet, IP and UDP headers.
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
// received payload (directly in the caller's buffer; recvmmsg fills the
// payload behind the header room), so the caller sees a normal RoCEv2 frame.
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
// (ip_select_ident_segs), so with IP_PMTUDISC_DO and sendmmsg to explicit
// destinations the wire header is the canonical one when the peer port is
// 4791.
//
// On transmit the ICRC is re-based, not recomputed: the trailer sent is
// ICRC(canonical) XOR ICRC(frame as built) XOR trailer-of-the-frame. For a
// correct frame the last two cancel and the peer gets the right ICRC for the
// canonical header; a frame whose ICRC was already wrong stays wrong by the
// same error bits. On receive nothing is recomputed: the synthesized header
// is canonical, and the receiver's own ICRC check covers the payload as it
// arrived. So this backend never hides corruption.
//
// Peers that work:
//   - goroce(udp) ↔ goroce(udp): IPv4 and IPv6, any ports.
//   - goroce(udp) → rxe/mlx5 or goroce(afpacket/afxdp): IPv4 and IPv6, when
//     datagrams go to port 4791 (the wire header is canonical).
//   - rxe/mlx5 → goroce(udp) on port 4791: IPv6 only (the socket accepts
//     rxe's zero IPv6 UDP checksum, UDP_NO_CHECK6_RX). rxe puts a kernel
//     chosen IPv4 ID in every packet, which a UDP socket cannot see, so IPv4
//     packets from rxe fail the ICRC check (the transport drops and counts
//     them). A goroce raw backend sender interoperates if its transport uses
//     IPv4 ID 0 with DF.
//
// Two endpoints on one host: bind them to different loopback addresses
// (127.0.0.1:4791 and 127.0.0.2:4791), or to different ports with PeerPort
// naming the other's port; the canonical destination port stays 4791.
//
// Receive blocks in poll(2) on the socket and an eventfd, so Close wakes a
// blocked ReadBatch (ErrClosed); TryReadBatch is the non-blocking read for
// polling callers (one recvmmsg with MSG_DONTWAIT). recvmmsg/sendmmsg move BatchSize datagrams
// per system call.
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
	"github.com/goroce/goroce/wire"
	"golang.org/x/sys/unix"
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
	// BatchSize is the number of datagrams per system call (default 64).
	BatchSize int
	// SocketBuffer sets SO_RCVBUF/SO_SNDBUF (root may exceed the sysctl
	// limits; others get what the kernel allows). 0 keeps the defaults.
	SocketBuffer int
}

const (
	defaultBatch = 64
	ethLen       = 14
	hdrLen4      = ethLen + 20 + 8
	hdrLen6      = ethLen + 40 + 8
	ttl          = 64
)

// Link is a UDP-socket nic.Link.
type Link struct {
	local    netip.AddrPort
	zoneID   uint32 // IPv6 scope of a link-local Local (0 otherwise)
	v6       bool
	peerPort uint16
	mtu      int
	batch    int
	hdrLen   int
	mac      net.HardwareAddr
	fd       int
	stop     *sockio.Stopper

	rxMu sync.Mutex
	rx   *sockio.Batch

	txMu    sync.Mutex
	tx      *sockio.Batch
	trailer [][4]byte
	scratch []byte // canonical l3 for the ICRC re-basing

	closeOnce sync.Once
	closed    atomic.Bool

	rxFrames, rxBytes, rxDrops, wakeups  atomic.Uint64
	statsMu                              sync.Mutex
	txFrames, txBytes, txDrops, ringFull atomic.Uint64
}

var _ nic.Link = (*Link)(nil)

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
		v6:       ip.Is6(),
		peerPort: cfg.PeerPort,
		mtu:      cfg.MTU,
		batch:    cfg.BatchSize,
		mac:      SyntheticMAC(ip),
		rx:       sockio.NewBatch(cfg.BatchSize, true),
		tx:       sockio.NewBatchIov(cfg.BatchSize, 2, true),
		trailer:  make([][4]byte, cfg.BatchSize),
		scratch:  make([]byte, cfg.MTU+64),
		fd:       -1,
	}
	l.hdrLen = hdrLen4
	fam := unix.AF_INET
	if l.v6 {
		l.hdrLen, fam = hdrLen6, unix.AF_INET6
	}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()
	var err error
	l.fd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udp: socket: %w", err)
	}
	// DF on every datagram (and IPv4 ID 0 from an unconnected socket, see
	// the package comment); never fragment.
	if l.v6 {
		err = unix.SetsockoptInt(l.fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
		if err == nil {
			err = unix.SetsockoptInt(l.fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		}
		if err == nil {
			// rxe sends IPv6 UDP with checksum 0 (its tunnel socket turns
			// the RFC 8200 checksum off; the ICRC protects the data), which
			// the kernel drops unless the socket accepts it. Sending keeps
			// real checksums, which every receiver accepts.
			err = unix.SetsockoptInt(l.fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
		}
	} else {
		err = unix.SetsockoptInt(l.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err != nil {
		return nil, fmt.Errorf("udp: path MTU discovery option: %w", err)
	}
	if cfg.SocketBuffer > 0 {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, o[0], cfg.SocketBuffer) != nil {
				unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, o[1], cfg.SocketBuffer)
			}
		}
	}
	if err := unix.Bind(l.fd, sockaddr(l.local, zoneID)); err != nil {
		return nil, fmt.Errorf("udp: bind %v: %w", l.local, err)
	}
	if l.stop, err = sockio.NewStopper(); err != nil {
		return nil, fmt.Errorf("udp: eventfd: %w", err)
	}
	ok = true
	return l, nil
}

func sockaddr(ap netip.AddrPort, zoneID uint32) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port()), ZoneId: zoneID}
}

// SyntheticMAC is the MAC address the backend uses for ip in synthesized
// frames: 02 (locally administered) followed by the last five bytes of the
// 16-byte form of ip (02:ff:c6:12:00:01 for 198.18.0.1).
func SyntheticMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As16()
	return net.HardwareAddr{0x02, b[11], b[12], b[13], b[14], b[15]}
}

func (l *Link) release() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
	if l.stop != nil {
		l.stop.Close()
	}
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
	for {
		if l.closed.Load() {
			return 0, nic.ErrClosed
		}
		n, err := l.recv(bufs, sizes)
		if n > 0 || err != nil {
			return n, err
		}
		_, stopped, perr := l.stop.Wait(l.fd, unix.POLLIN, -1)
		l.wakeups.Add(1)
		if stopped {
			return 0, nic.ErrClosed
		}
		if perr != nil {
			return 0, fmt.Errorf("udp: poll: %w", perr)
		}
	}
}

// TryReadBatch is ReadBatch without blocking, for callers that drive the
// link by polling (qp.Config.BusyPoll): one recvmmsg(2) with MSG_DONTWAIT,
// returning 0 when no datagram is waiting. A UDP socket has no ring to look
// at, so each call is one system call even when it finds nothing. After
// Close it returns nic.ErrClosed.
func (l *Link) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.closed.Load() {
		return 0, nic.ErrClosed
	}
	return l.recv(bufs, sizes)
}

// recv does one non-blocking recvmmsg into bufs (behind the header room) and
// writes the synthesized headers. Returns 0, nil when nothing is waiting.
func (l *Link) recv(bufs [][]byte, sizes []int) (int, error) {
	k := min(len(bufs), len(sizes), len(l.rx.Msgs))
	for i := 0; i < k; i++ {
		if len(bufs[i]) > l.hdrLen {
			l.rx.SetBuf(i, bufs[i][l.hdrLen:])
		} else {
			l.rx.SetBuf(i, nil) // arrives truncated: dropped below
		}
		l.rx.Msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		l.rx.Msgs[i].Hdr.Flags = 0
	}
	got, err := sockio.Recvmmsg(l.fd, l.rx.Msgs[:k], unix.MSG_DONTWAIT)
	l.rx.Clear()
	if err != nil {
		if sockio.IsAgain(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("udp: recvmmsg: %w", err)
	}
	n := 0
	for i := 0; i < got; i++ {
		m := &l.rx.Msgs[i]
		plen := int(m.Len)
		src, ok := l.source(i)
		if !ok || m.Hdr.Flags&unix.MSG_TRUNC != 0 || len(bufs[i]) < l.hdrLen+plen {
			l.rxDrops.Add(1)
			continue
		}
		if n != i {
			// Compact after a drop: move the payload into slot n (rare).
			if len(bufs[n]) < l.hdrLen+plen {
				l.rxDrops.Add(1)
				continue
			}
			copy(bufs[n][l.hdrLen:], bufs[i][l.hdrLen:l.hdrLen+plen])
		}
		l.synthesize(bufs[n], src, plen)
		sizes[n] = l.hdrLen + plen
		l.rxBytes.Add(uint64(sizes[n]))
		n++
	}
	l.rxFrames.Add(uint64(n))
	return n, nil
}

// source decodes message i's source address.
func (l *Link) source(i int) (netip.AddrPort, bool) {
	raw := &l.rx.Names[i]
	switch raw.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(rawPointer(raw))
		port := binary.BigEndian.Uint16((*[2]byte)(rawPointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), true
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(rawPointer(&raw.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(raw.Addr).Unmap(), port), true
	}
	return netip.AddrPort{}, false
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

// WriteBatch implements nic.Link. Frames that are not IP/UDP of the link's
// family, or carry less than a BTH and an ICRC, are dropped and counted in
// Stats.TxDrops; the count returned includes them.
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	done := 0
	for done < len(frames) {
		if l.closed.Load() {
			return done, nic.ErrClosed
		}
		// Prepare up to one batch; dropped frames are skipped.
		k := 0
		first := done
		for done < len(frames) && k < len(l.tx.Msgs) {
			f := frames[done]
			done++
			if !l.prepare(k, f) {
				l.txDrops.Add(1)
				continue
			}
			k++
		}
		sent, lost := 0, 0
		for sent < k {
			n, err := sockio.Sendmmsg(l.fd, l.tx.Msgs[sent:k], 0)
			if n > 0 {
				sent += n
				continue
			}
			switch {
			case sockio.IsAgain(err):
				l.ringFull.Add(1)
				if _, stopped, perr := l.stop.Wait(l.fd, unix.POLLOUT, -1); stopped {
					l.tx.Clear()
					return first + sent, nic.ErrClosed
				} else if perr != nil {
					l.tx.Clear()
					return first + sent, fmt.Errorf("udp: poll: %w", perr)
				}
			case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH),
				errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EMSGSIZE), errors.Is(err, unix.ENOBUFS):
				// A pending ICMP error from an earlier datagram, no route,
				// or a datagram too big: lose this one datagram.
				l.txDrops.Add(1)
				sent++
				lost++
			default:
				l.tx.Clear()
				return first + sent, fmt.Errorf("udp: sendmmsg: %w", err)
			}
		}
		l.txFrames.Add(uint64(k - lost))
	}
	l.tx.Clear()
	return done, nil
}

// prepare fills message k for frame f: destination, payload iovec (BTH ..
// last pad byte, in the caller's frame) and the re-based ICRC trailer.
func (l *Link) prepare(k int, f []byte) bool {
	if len(f) > l.mtu+18 {
		return false
	}
	l3, dst, poff, err := l.parseFrame(f)
	if err != nil || len(l3) < poff+wire.BTHLen+wire.ICRCLen {
		return false
	}
	body := l3[poff : len(l3)-wire.ICRCLen] // BTH .. last pad byte
	frameICRC := binary.LittleEndian.Uint32(l3[len(l3)-wire.ICRCLen:])
	asBuilt := wire.ICRC(l3[:len(l3)-wire.ICRCLen])

	// The canonical l3 in scratch: header + a copy of the body.
	hl := 28
	if l.v6 {
		hl = 48
	}
	n := hl + len(body)
	if n > len(l.scratch) {
		return false
	}
	c := l.scratch[:n]
	if l.v6 {
		putCanonical6(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	} else {
		putCanonical4(c, l.local.Addr(), dst, l.local.Port(), len(body)+wire.ICRCLen)
	}
	copy(c[hl:], body)
	canon := wire.ICRC(c)
	binary.LittleEndian.PutUint32(l.trailer[k][:], canon^asBuilt^frameICRC)

	l.tx.SetBufs(k, body, l.trailer[k][:])
	l.txBytes.Add(uint64(len(f)))
	putSockaddr(&l.tx.Names[k], netip.AddrPortFrom(dst, l.peerPort), &l.tx.Msgs[k])
	if l.v6 && dst.IsLinkLocalUnicast() {
		l.tx.Names[k].Scope_id = l.zoneID
	}
	return true
}

// putSockaddr writes a raw socket address for ap and sets the message's
// name length.
func putSockaddr(raw *unix.RawSockaddrInet6, ap netip.AddrPort, m *unix.Mmsghdr) {
	port := ap.Port()
	if ap.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(rawPointer(raw))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().As4()}
		p := (*[2]byte)(rawPointer(&sa.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		m.Hdr.Namelen = unix.SizeofSockaddrInet4
		return
	}
	*raw = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
	p := (*[2]byte)(rawPointer(&raw.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	m.Hdr.Namelen = unix.SizeofSockaddrInet6
}

// Stats implements nic.Link. RxDrops includes the datagrams the kernel
// dropped because the socket's receive buffer was full (SO_MEMINFO).
func (l *Link) Stats() nic.Stats {
	var sockDrops uint64
	l.statsMu.Lock()
	if !l.closed.Load() {
		sockDrops = uint64(sockio.SocketDrops(l.fd))
	}
	l.statsMu.Unlock()
	return nic.Stats{
		RxFrames: l.rxFrames.Load(),
		RxBytes:  l.rxBytes.Load(),
		TxFrames: l.txFrames.Load(),
		TxBytes:  l.txBytes.Load(),
		RxDrops:  l.rxDrops.Load() + sockDrops,
		TxDrops:  l.txDrops.Load(),
		RingFull: l.ringFull.Load(),
		Wakeups:  l.wakeups.Load(),
	}
}

// Close implements nic.Link: it wakes blocked calls (ErrClosed), waits for
// them, and closes the socket.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.stop.Stop()
		l.rxMu.Lock()
		l.txMu.Lock()
		l.statsMu.Lock()
		l.release()
		l.statsMu.Unlock()
		l.txMu.Unlock()
		l.rxMu.Unlock()
	})
	return nil
}
