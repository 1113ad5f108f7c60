//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
	"golang.org/x/sys/unix"
)

// haveMmsg: Linux has sendmmsg/recvmmsg, the fast path.
const haveMmsg = true

// mmsgSock is the Linux path: a non-blocking socket, recvmmsg/sendmmsg
// batches preallocated at Open (no allocation per packet), an eventfd that
// wakes blocked polls on Close.
type mmsgSock struct {
	l    *Link
	fd   int
	wake *sockio.Stopper

	rx *sockio.Batch // under l.rxMu

	tx      *sockio.Batch // under l.txMu
	trailer [][4]byte
	gsoTx   *gsoTx // UDP GSO (gso_linux.go), nil when off; under l.txMu
	gro     *groRx // UDP GRO, nil when off; under l.rxMu

	w sockio.BatchWait // wait_linux.go
}

func openMmsg(l *Link, cfg Config) (_ sock, err error) {
	s := &mmsgSock{
		l:       l,
		fd:      -1,
		rx:      sockio.NewBatch(cfg.BatchSize, true),
		tx:      sockio.NewBatchIov(cfg.BatchSize, 2, true),
		trailer: make([][4]byte, cfg.BatchSize),
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	fam := unix.AF_INET
	if l.v6 {
		fam = unix.AF_INET6
	}
	s.fd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udp: socket: %w", err)
	}
	if l.v6 {
		if err := unix.SetsockoptInt(s.fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return nil, fmt.Errorf("udp: IPV6_V6ONLY: %w", err)
		}
	}
	if err := setSocketOptions(uintptr(s.fd), l.v6); err != nil {
		return nil, err
	}
	s.setupOffload(cfg)
	if cfg.SocketBuffer > 0 {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o[0], cfg.SocketBuffer) != nil {
				unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, o[1], cfg.SocketBuffer)
			}
		}
	}
	if err := unix.Bind(s.fd, sockaddr(l.local, l.zoneID)); err != nil {
		return nil, fmt.Errorf("udp: bind %v: %w", l.local, err)
	}
	if s.wake, err = sockio.NewStopper(); err != nil {
		return nil, fmt.Errorf("udp: eventfd: %w", err)
	}
	if err := s.initWait(); err != nil {
		return nil, err
	}
	return s, nil
}

// setSocketOptions sets what makes the wire header canonical and lets rxe's
// IPv6 datagrams in; both Linux paths use it.
func setSocketOptions(fd uintptr, v6 bool) error {
	var err error
	// DF on every datagram (and IPv4 ID 0 from an unconnected socket, see
	// the package comment); never fragment.
	if v6 {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
		if err == nil {
			// rxe sends IPv6 UDP with checksum 0 (its tunnel socket turns
			// the RFC 8200 checksum off; the ICRC protects the data), which
			// the kernel drops unless the socket accepts it. Sending keeps
			// real checksums, which every receiver accepts.
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
		}
	} else {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err != nil {
		return fmt.Errorf("udp: path MTU discovery option: %w", err)
	}
	return nil
}

func sockaddr(ap netip.AddrPort, zoneID uint32) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port()), ZoneId: zoneID}
}

func (s *mmsgSock) release() {
	s.w.Close()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.wake != nil {
		s.wake.Close()
	}
}

func (s *mmsgSock) stop() {
	s.wake.Stop()
	s.w.Close() // wakes a parked WaitReadBatch
}

func (s *mmsgSock) socketDrops() uint64 { return uint64(sockio.SocketDrops(s.fd)) }

func (s *mmsgSock) recv(bufs [][]byte, sizes []int, block bool) (int, error) {
	l := s.l
	for {
		if l.c.Closed() {
			return 0, nic.ErrClosed
		}
		n, err := s.recvOnce(bufs, sizes)
		if n > 0 || err != nil || !block {
			return n, err
		}
		_, stopped, perr := s.wake.Wait(s.fd, unix.POLLIN, -1)
		l.c.Wakeups.Add(1)
		if stopped {
			return 0, nic.ErrClosed
		}
		if perr != nil {
			return 0, fmt.Errorf("udp: poll: %w", perr)
		}
	}
}

// recvOnce does one non-blocking recvmmsg into bufs (behind the header
// room) and writes the synthesized headers. Returns 0, nil when nothing is
// waiting.
func (s *mmsgSock) recvOnce(bufs [][]byte, sizes []int) (int, error) {
	if s.gro != nil {
		return s.recvGRO(bufs, sizes)
	}
	l := s.l
	k := min(len(bufs), len(sizes), len(s.rx.Msgs))
	for i := 0; i < k; i++ {
		if len(bufs[i]) > l.hdrLen {
			s.rx.SetBuf(i, bufs[i][l.hdrLen:])
		} else {
			s.rx.SetBuf(i, nil) // arrives truncated: dropped below
		}
		s.rx.Msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		s.rx.Msgs[i].Hdr.Flags = 0
	}
	got, err := sockio.Recvmmsg(s.fd, s.rx.Msgs[:k], unix.MSG_DONTWAIT)
	s.rx.Clear()
	if err != nil {
		if sockio.IsAgain(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("udp: recvmmsg: %w", err)
	}
	n := 0
	for i := 0; i < got; i++ {
		m := &s.rx.Msgs[i]
		plen := int(m.Len)
		src, ok := s.source(i)
		if !ok || m.Hdr.Flags&unix.MSG_TRUNC != 0 || len(bufs[i]) < l.hdrLen+plen {
			l.c.RxDrops.Add(1)
			continue
		}
		if s.gsoTx != nil {
			l.noteSource(src)
		}
		if n != i {
			// Compact after a drop: move the payload into slot n (rare).
			if len(bufs[n]) < l.hdrLen+plen {
				l.c.RxDrops.Add(1)
				continue
			}
			copy(bufs[n][l.hdrLen:], bufs[i][l.hdrLen:l.hdrLen+plen])
		}
		l.synthesize(bufs[n], src, plen)
		sizes[n] = l.hdrLen + plen
		l.c.RxBytes.Add(uint64(sizes[n]))
		n++
	}
	l.c.RxFrames.Add(uint64(n))
	return n, nil
}

// source decodes message i's source address.
func (s *mmsgSock) source(i int) (netip.AddrPort, bool) {
	raw := &s.rx.Names[i]
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

func (s *mmsgSock) send(frames [][]byte) (int, error) {
	if s.gsoTx != nil {
		return s.sendGSO(frames)
	}
	l := s.l
	done := 0
	for done < len(frames) {
		if l.c.Closed() {
			return done, nic.ErrClosed
		}
		// Prepare up to one batch; dropped frames are skipped.
		k := 0
		first := done
		for done < len(frames) && k < len(s.tx.Msgs) {
			f := frames[done]
			done++
			if !s.prepare(k, f) {
				l.c.TxDrops.Add(1)
				continue
			}
			k++
		}
		sent, lost := 0, 0
		for sent < k {
			n, err := sockio.Sendmmsg(s.fd, s.tx.Msgs[sent:k], 0)
			if n > 0 {
				sent += n
				continue
			}
			switch {
			case sockio.IsAgain(err):
				l.c.RingFull.Add(1)
				if _, stopped, perr := s.wake.Wait(s.fd, unix.POLLOUT, -1); stopped {
					s.tx.Clear()
					return first + sent, nic.ErrClosed
				} else if perr != nil {
					s.tx.Clear()
					return first + sent, fmt.Errorf("udp: poll: %w", perr)
				}
			case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH),
				errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EMSGSIZE), errors.Is(err, unix.ENOBUFS):
				// A pending ICMP error from an earlier datagram, no route,
				// or a datagram too big: lose this one datagram.
				l.c.TxDrops.Add(1)
				sent++
				lost++
			default:
				s.tx.Clear()
				return first + sent, fmt.Errorf("udp: sendmmsg: %w", err)
			}
		}
		l.c.TxFrames.Add(uint64(k - lost))
	}
	s.tx.Clear()
	return done, nil
}

// prepare fills message k for frame f: destination, payload iovec (BTH ..
// last pad byte, in the caller's frame) and the re-based ICRC trailer.
func (s *mmsgSock) prepare(k int, f []byte) bool {
	l := s.l
	body, dst, trailer, ok := l.rebaseTrailer(f)
	if !ok {
		return false
	}
	binary.LittleEndian.PutUint32(s.trailer[k][:], trailer)
	s.tx.SetBufs(k, body, s.trailer[k][:])
	l.c.TxBytes.Add(uint64(len(f)))
	putSockaddr(&s.tx.Names[k], netip.AddrPortFrom(dst, l.peerPort), &s.tx.Msgs[k])
	if l.v6 && dst.IsLinkLocalUnicast() {
		s.tx.Names[k].Scope_id = l.zoneID
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
