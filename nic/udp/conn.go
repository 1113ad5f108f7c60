package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// connSock is the portable path (see the package comment): a net.UDPConn,
// one datagram per system call, and a reader goroutine that receives into
// a ring of slots which ReadBatch and TryReadBatch copy frames out of.
type connSock struct {
	l    *Link
	conn *net.UDPConn

	// The ring: slots[head], ..., slots[head+n-1] (mod len) hold received
	// datagrams. The reader owns the free slots and fills them without the
	// lock; the consumer (under l.rxMu) owns the n full ones until it gives
	// them back.
	mu    sync.Mutex
	slots []slot
	head  int
	n     int
	rerr  error // why the reader stopped (nil while it runs)

	avail chan struct{} // a datagram was added, or the reader stopped
	space chan struct{} // a slot was freed
	done  chan struct{} // closed by stop
	wg    sync.WaitGroup
}

type slot struct {
	buf  []byte // MTU+1 bytes: a datagram that fills it is too big for the link
	plen int
	src  netip.AddrPort
}

// Bounds of the reader's error handling: after this many failed reads in a
// row it pauses readErrPause before each further try, so that a socket
// that keeps failing costs no CPU.
const (
	readErrBurst = 16
	readErrPause = time.Millisecond
)

func openConn(l *Link, cfg Config) (sock, error) {
	network := "udp4"
	if l.v6 {
		network = "udp6"
	}
	laddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.local.Addr().WithZone(l.zone), l.local.Port()))
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("udp: bind %v: %w", l.local, err)
	}
	rc, err := conn.SyscallConn()
	if err == nil {
		var serr error
		if err = rc.Control(func(fd uintptr) { serr = setSocketOptions(fd, l.v6) }); err == nil {
			err = serr
		}
	}
	if err == nil && cfg.SocketBuffer > 0 {
		// Best effort, as on the Linux path: the kernel may cap it.
		conn.SetReadBuffer(cfg.SocketBuffer)
		conn.SetWriteBuffer(cfg.SocketBuffer)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &connSock{
		l:     l,
		conn:  conn,
		slots: make([]slot, 2*cfg.BatchSize),
		avail: make(chan struct{}, 1),
		space: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	for i := range s.slots {
		s.slots[i].buf = make([]byte, l.mtu+1)
	}
	s.wg.Add(1)
	go s.reader()
	return s, nil
}

// reader receives datagrams into free slots until the socket is closed.
func (s *connSock) reader() {
	defer s.wg.Done()
	errs := 0
	for {
		s.mu.Lock()
		full := s.n == len(s.slots)
		i := (s.head + s.n) % len(s.slots)
		s.mu.Unlock()
		if full {
			// Back-pressure: the kernel's socket buffer holds (and, when
			// that is full, drops) what comes next.
			select {
			case <-s.space:
				continue
			case <-s.done:
				return
			}
		}
		sl := &s.slots[i]
		n, _, _, src, err := s.conn.ReadMsgUDPAddrPort(sl.buf, nil)
		if err != nil {
			switch {
			case errors.Is(err, net.ErrClosed):
				s.finish(nic.ErrClosed)
				return
			case lostRead(err):
				// This datagram is gone (too big for the buffer, on the
				// systems that report that as an error).
				s.l.c.RxDrops.Add(1)
			case icmpFeedback(err):
				// An ICMP error for an earlier datagram we sent.
			default:
				errs++
				if errs > readErrBurst {
					select {
					case <-time.After(readErrPause):
					case <-s.done:
						return
					}
				}
				if errs > 1000*readErrBurst {
					s.finish(fmt.Errorf("udp: read: %w", err))
					return
				}
			}
			continue
		}
		errs = 0
		if n > s.l.mtu {
			s.l.c.RxDrops.Add(1) // larger than the link's MTU (or truncated)
			continue
		}
		sl.plen, sl.src = n, netip.AddrPortFrom(src.Addr().Unmap().WithZone(""), src.Port())
		s.mu.Lock()
		s.n++
		s.mu.Unlock()
		select {
		case s.avail <- struct{}{}:
		default:
		}
	}
}

// finish records why the reader stopped and wakes a waiting consumer.
func (s *connSock) finish(err error) {
	s.mu.Lock()
	s.rerr = err
	s.mu.Unlock()
	select {
	case s.avail <- struct{}{}:
	default:
	}
}

func (s *connSock) recv(bufs [][]byte, sizes []int, block bool) (int, error) {
	l := s.l
	k := min(len(bufs), len(sizes))
	if k == 0 {
		return 0, nil
	}
	for {
		s.mu.Lock()
		head, m, rerr := s.head, s.n, s.rerr
		s.mu.Unlock()
		if m == 0 {
			switch {
			case rerr != nil:
				return 0, rerr
			case !block:
				return 0, nil
			}
			select {
			case <-s.avail:
				l.c.Wakeups.Add(1)
				continue
			case <-s.done:
				return 0, nic.ErrClosed
			}
		}
		// The slots [head, head+m) are ours until handed back below.
		took, n := 0, 0
		for took < m && n < k {
			sl := &s.slots[(head+took)%len(s.slots)]
			took++
			if len(bufs[n]) < l.hdrLen+sl.plen {
				l.c.RxDrops.Add(1)
				continue
			}
			copy(bufs[n][l.hdrLen:], sl.buf[:sl.plen])
			l.synthesize(bufs[n], sl.src, sl.plen)
			sizes[n] = l.hdrLen + sl.plen
			l.c.RxBytes.Add(uint64(sizes[n]))
			n++
		}
		s.mu.Lock()
		s.head = (s.head + took) % len(s.slots)
		s.n -= took
		s.mu.Unlock()
		select {
		case s.space <- struct{}{}:
		default:
		}
		l.c.RxFrames.Add(uint64(n))
		if n > 0 || !block {
			return n, nil
		}
	}
}

func (s *connSock) send(frames [][]byte) (int, error) {
	l := s.l
	for i, f := range frames {
		if l.c.Closed() {
			return i, nic.ErrClosed
		}
		body, dst, trailer, hl, ok := l.rebase(f)
		if !ok {
			l.c.TxDrops.Add(1)
			continue
		}
		// The payload is already in the scratch behind the canonical
		// header (for the ICRC); the trailer goes right after it.
		d := l.scratch[hl : hl+len(body)+wire.ICRCLen]
		binary.LittleEndian.PutUint32(d[len(body):], trailer)
		if l.v6 && dst.IsLinkLocalUnicast() {
			dst = dst.WithZone(l.zone)
		}
		l.c.TxBytes.Add(uint64(len(f)))
		_, _, err := s.conn.WriteMsgUDPAddrPort(d, nil, netip.AddrPortFrom(dst, l.peerPort))
		switch {
		case err == nil:
			l.c.TxFrames.Add(1)
		case errors.Is(err, net.ErrClosed):
			return i, nic.ErrClosed
		case lostSend(err):
			// No route, a datagram too big, or a pending ICMP error from
			// an earlier datagram: lose this one datagram.
			l.c.TxDrops.Add(1)
		default:
			return i, fmt.Errorf("udp: send: %w", err)
		}
	}
	return len(frames), nil
}

func (s *connSock) socketDrops() uint64 { return 0 }

// stop closes the socket, which wakes the reader and a blocked send, and
// wakes a consumer waiting for the ring.
func (s *connSock) stop() {
	close(s.done)
	s.conn.Close()
}

func (s *connSock) release() { s.wg.Wait() }
