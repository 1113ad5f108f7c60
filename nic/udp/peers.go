package udp

import (
	"net/netip"
	"sync"
)

// maxKnownPeers bounds the table of peers known to be goroce(udp) links;
// beyond it no more are learnt (they are sent to without GSO).
const maxKnownPeers = 4096

// udpPeers remembers which peer addresses are goroce UDP-backend links,
// the only receivers that get UDP GSO datagrams (see the package comment):
// a datagram from address:PeerPort comes from a socket bound to the RoCE
// port, which rxe, mlx5 and goroce's raw backends never send from (their
// source ports are 0xC000 and up, wire.RCSourcePort). A datagram from the
// same address on another port unlearns it.
//
// The receive path writes it (rarely: only when an address changes kind),
// the send path reads it once per run of frames.
type udpPeers struct {
	mu  sync.RWMutex
	set map[netip.Addr]struct{}

	// last is the receive path's last noted (address, kind), so that a
	// stream from one peer costs one comparison per datagram (rxMu).
	last     netip.Addr
	lastKind bool
}

func (p *udpPeers) known(a netip.Addr) bool {
	p.mu.RLock()
	_, ok := p.set[a]
	p.mu.RUnlock()
	return ok
}

func (p *udpPeers) count() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.set)
}

// note records that a datagram from a came from the peer port (isUDP) or
// from another port. Called by the receive path, under rxMu.
func (p *udpPeers) note(a netip.Addr, isUDP bool) {
	if a == p.last && isUDP == p.lastKind {
		return
	}
	p.last, p.lastKind = a, isUDP
	if p.known(a) == isUDP {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !isUDP:
		delete(p.set, a)
	case len(p.set) < maxKnownPeers:
		if p.set == nil {
			p.set = make(map[netip.Addr]struct{})
		}
		p.set[a] = struct{}{}
	}
}

// noteSource tells the peer table where a datagram came from. A peer port
// in the range rxe and the raw backends send from (0xC000 and up) could
// not tell them apart: then nobody is learnt.
func (l *Link) noteSource(src netip.AddrPort) {
	if l.peerPort < 0xC000 {
		l.peers.note(src.Addr(), src.Port() == l.peerPort)
	}
}
