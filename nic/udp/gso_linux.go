//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/sockio"
	"golang.org/x/sys/unix"
)

// UDP GSO and GRO on the Linux socket path (see the package comment).
const (
	// maxGSOSegs is the kernel's UDP_MAX_SEGMENTS (64 since Linux 4.18).
	maxGSOSegs = 64
	// maxGSOBytes is the largest UDP payload of one IPv4 datagram.
	maxGSOBytes = 65535 - 20 - 8
	// groSlot is the receive slot of one datagram: a coalesced one is at
	// most 64 KiB (gro_max_size), UDP and IP headers included.
	groSlot = 1 << 16
	// maxGROSlots bounds the slots (and the datagrams per recvmmsg) of a
	// link with a larger BatchSize: 4 MiB.
	maxGROSlots = 64
)

// gsoTx is the send side: the messages of one sendmmsg, each one frame or
// a run of equal-sized frames (the last may be shorter) to one destination
// carried as one datagram with a UDP_SEGMENT control message. A message's
// iovecs are its frames' consecutive (payload, trailer) pairs in the
// socket's tx batch.
type gsoTx struct {
	msgs  []unix.Mmsghdr
	ctrl  []uint64 // cmsgWords per message: the UDP_SEGMENT control message
	first []int    // message m's first frame in the tx batch
	segs  []int    // and how many frames it carries
	plen  []int    // per frame: UDP payload length (payload + ICRC)
	gso   []bool   // per frame: its destination takes GSO datagrams
}

// cmsgWords is CmsgSpace(4) in 8-byte words (room for UDP_SEGMENT's
// uint16 and UDP_GRO's int).
const cmsgWords = 3

func newGSOTx(n int) *gsoTx {
	return &gsoTx{
		msgs:  make([]unix.Mmsghdr, n),
		ctrl:  make([]uint64, n*cmsgWords),
		first: make([]int, n),
		segs:  make([]int, n),
		plen:  make([]int, n),
		gso:   make([]bool, n),
	}
}

// groRx is the receive side when UDP_GRO is on: every datagram lands in a
// slot of its own (a coalesced one can be 64 KiB), then its segments are
// copied into the caller's buffers. What does not fit stays in the slots
// for the next read, which delivers it before receiving more.
type groRx struct {
	slots []byte // min(BatchSize, maxGROSlots) × groSlot
	ctrl  []uint64
	meta  []groMeta
	got   int // datagrams in the slots
	next  int // the next one to deliver from
	off   int // and the offset of its next segment
}

type groMeta struct {
	src  netip.AddrPort
	plen int
	seg  int // segment size (plen when not coalesced)
	ok   bool
}

// setupOffload probes and turns on UDP GSO and GRO (unless cfg.NoOffload):
// a kernel without them (before 4.18 and 5.0) refuses the option and the
// link works without.
func (s *mmsgSock) setupOffload(cfg Config) {
	if cfg.NoOffload {
		return
	}
	// UDP_SEGMENT 0 keeps the socket default (no segmentation) and is
	// accepted exactly when per-message UDP_SEGMENT is.
	if unix.SetsockoptInt(s.fd, unix.SOL_UDP, unix.UDP_SEGMENT, 0) == nil {
		s.gsoTx = newGSOTx(len(s.tx.Msgs))
		s.l.gsoOn.Store(true)
	}
	if unix.SetsockoptInt(s.fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil {
		n := min(len(s.rx.Msgs), maxGROSlots)
		g := &groRx{slots: make([]byte, n*groSlot), ctrl: make([]uint64, n*cmsgWords), meta: make([]groMeta, n)}
		for i := range n {
			s.rx.SetBuf(i, g.slots[i*groSlot:(i+1)*groSlot])
			s.rx.Msgs[i].Hdr.Control = (*byte)(unsafe.Pointer(&g.ctrl[i*cmsgWords]))
		}
		s.gro = g
		s.l.groOn.Store(true)
	}
}

// groupRuns builds messages from prepared frames from.. k-1 of the tx
// batch, starting at message m, and returns the message count.
func (s *mmsgSock) groupRuns(from, k, m int) int {
	g := s.gsoTx
	on := s.l.gsoOn.Load()
	for i := from; i < k; m++ {
		n, total := 1, g.plen[i]
		if on && g.gso[i] {
			for i+n < k && n < maxGSOSegs && g.plen[i+n] <= g.plen[i] &&
				total+g.plen[i+n] <= maxGSOBytes && s.tx.Names[i+n] == s.tx.Names[i] {
				total += g.plen[i+n]
				n++
				if g.plen[i+n-1] < g.plen[i] {
					break // a shorter one ends the run
				}
			}
		}
		h := &g.msgs[m].Hdr
		*h = s.tx.Msgs[i].Hdr
		h.SetIovlen(2 * n)
		if n > 1 {
			c := g.ctrl[m*cmsgWords : (m+1)*cmsgWords]
			cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			cm.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Add(unsafe.Pointer(&c[0]), unix.CmsgLen(0))) = uint16(g.plen[i])
			h.Control = (*byte)(unsafe.Pointer(&c[0]))
			h.SetControllen(unix.CmsgSpace(2))
		}
		g.first[m], g.segs[m] = i, n
		i += n
	}
	return m
}

// sendGSO is send with GSO: frames are prepared into the tx batch as
// without it, then grouped into messages.
func (s *mmsgSock) sendGSO(frames [][]byte) (int, error) {
	l := s.l
	g := s.gsoTx
	done := 0
	for done < len(frames) {
		if l.c.Closed() {
			return done, nic.ErrClosed
		}
		k := 0
		first := done
		var last netip.Addr
		lastGSO := false
		for done < len(frames) && k < len(s.tx.Msgs) {
			f := frames[done]
			done++
			plen, dst, ok := s.prepareLen(k, f)
			if !ok {
				l.c.TxDrops.Add(1)
				continue
			}
			if dst != last {
				last, lastGSO = dst, l.peers.known(dst)
			}
			g.plen[k], g.gso[k] = plen, lastGSO
			k++
		}
		msgs := s.groupRuns(0, k, 0)
		sentMsgs, sentFrames, lost := 0, 0, 0
		for sentMsgs < msgs {
			n, err := sockio.Sendmmsg(s.fd, g.msgs[sentMsgs:msgs], 0)
			if n > 0 {
				for _, c := range g.segs[sentMsgs : sentMsgs+n] {
					if c > 1 {
						l.gsoSends.Add(1)
						l.gsoSegs.Add(uint64(c))
					}
					sentFrames += c
				}
				sentMsgs += n
				continue
			}
			segs := g.segs[sentMsgs]
			switch {
			case sockio.IsAgain(err):
				l.c.RingFull.Add(1)
				if _, stopped, perr := s.wake.Wait(s.fd, unix.POLLOUT, -1); stopped {
					s.clearGSO()
					return first + sentFrames, nic.ErrClosed
				} else if perr != nil {
					s.clearGSO()
					return first + sentFrames, fmt.Errorf("udp: poll: %w", perr)
				}
			case segs > 1 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIO)):
				// The kernel refuses segmentation here (no checksum
				// offload on older kernels, IPsec, zero IPv6 checksums;
				// segments above the route MTU before kernels said
				// EMSGSIZE for it): send frame by frame from here on.
				l.gsoOn.Store(false)
				l.gsoFallbacks.Add(1)
				msgs = s.groupRuns(g.first[sentMsgs], k, sentMsgs)
			case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH),
				errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EMSGSIZE), errors.Is(err, unix.ENOBUFS):
				l.c.TxDrops.Add(uint64(segs))
				sentMsgs++
				sentFrames += segs
				lost += segs
			default:
				s.clearGSO()
				return first + sentFrames, fmt.Errorf("udp: sendmmsg: %w", err)
			}
		}
		l.c.TxFrames.Add(uint64(k - lost))
	}
	s.clearGSO()
	return done, nil
}

// clearGSO drops the batch's pointers to caller memory (the iovecs; the
// messages point at the batch's own iovec array).
func (s *mmsgSock) clearGSO() { s.tx.Clear() }

// recvGRO is recvOnce with UDP_GRO on: deliver what the slots still hold,
// then, if there is room left, receive.
func (s *mmsgSock) recvGRO(bufs [][]byte, sizes []int) (int, error) {
	g := s.gro
	room := min(len(bufs), len(sizes))
	n := s.deliverGRO(bufs[:room], sizes, 0)
	if n == room || g.next < g.got {
		return n, nil
	}
	l := s.l
	k := min(room-n, len(g.meta))
	for i := range k {
		h := &s.rx.Msgs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.Flags = 0
		h.SetControllen(cmsgWords * 8)
	}
	got, err := sockio.Recvmmsg(s.fd, s.rx.Msgs[:k], unix.MSG_DONTWAIT)
	if err != nil {
		if sockio.IsAgain(err) {
			return n, nil
		}
		if n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("udp: recvmmsg: %w", err)
	}
	for i := range got {
		m := &s.rx.Msgs[i]
		md := &g.meta[i]
		md.plen = int(m.Len)
		md.seg = md.plen
		src, ok := s.source(i)
		md.src, md.ok = src, ok && m.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0
		if !md.ok {
			l.c.RxDrops.Add(1)
			continue
		}
		l.noteSource(src)
		if seg := groSize(g.ctrl[i*cmsgWords:(i+1)*cmsgWords], int(m.Hdr.Controllen)); seg > 0 && seg < md.plen {
			md.seg = seg
			l.groRecvs.Add(1)
			l.groSegs.Add(uint64((md.plen + seg - 1) / seg))
		}
	}
	g.got, g.next, g.off = got, 0, 0
	return s.deliverGRO(bufs[:room], sizes, n), nil
}

// groSize returns the segment size of a UDP_GRO control message, 0 if
// there is none.
func groSize(c []uint64, controllen int) int {
	if controllen < unix.CmsgLen(4) {
		return 0
	}
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if cm.Level != unix.SOL_UDP || cm.Type != unix.UDP_GRO || int(cm.Len) < unix.CmsgLen(4) {
		return 0
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(&c[0]), unix.CmsgLen(0))))
}

// deliverGRO copies segments from the slots into bufs[n:], each behind a
// synthesized header, and returns the new count.
func (s *mmsgSock) deliverGRO(bufs [][]byte, sizes []int, n int) int {
	l := s.l
	g := s.gro
	start := n
	for n < len(bufs) && g.next < g.got {
		md := &g.meta[g.next]
		if !md.ok {
			g.next, g.off = g.next+1, 0
			continue
		}
		seg := min(md.seg, md.plen-g.off)
		if len(bufs[n]) < l.hdrLen+seg {
			l.c.RxDrops.Add(1)
		} else {
			slot := g.slots[g.next*groSlot:]
			copy(bufs[n][l.hdrLen:], slot[g.off:g.off+seg])
			l.synthesize(bufs[n], md.src, seg)
			sizes[n] = l.hdrLen + seg
			l.c.RxBytes.Add(uint64(sizes[n]))
			n++
		}
		g.off += seg
		if g.off >= md.plen {
			g.next, g.off = g.next+1, 0
		}
	}
	l.c.RxFrames.Add(uint64(n - start))
	return n
}

// prepareLen is prepare for the GSO path: it also returns the frame's UDP
// payload length and destination.
func (s *mmsgSock) prepareLen(k int, f []byte) (int, netip.Addr, bool) {
	l := s.l
	body, dst, trailer, ok := l.rebaseTrailer(f)
	if !ok {
		return 0, dst, false
	}
	binary.LittleEndian.PutUint32(s.trailer[k][:], trailer)
	s.tx.SetBufs(k, body, s.trailer[k][:])
	l.c.TxBytes.Add(uint64(len(f)))
	putSockaddr(&s.tx.Names[k], netip.AddrPortFrom(dst, l.peerPort), &s.tx.Msgs[k])
	if l.v6 && dst.IsLinkLocalUnicast() {
		s.tx.Names[k].Scope_id = l.zoneID
	}
	return len(body) + len(s.trailer[k]), dst, true
}
