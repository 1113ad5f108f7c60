package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// fakeNet is an in-memory GSI network: every device gets a fakePort that
// delivers MADs to the port owning the destination GID, on that port's own
// dispatch goroutine (as the real GSI runs its handlers). A fault hook sees
// every MAD and may drop or duplicate it.
type fakeNet struct {
	mu     sync.Mutex
	ports  map[netip.Addr]*fakePort
	fault  func(from, to netip.Addr, h mad.Header, m mad.Message) (drop bool, dup bool)
	log    []string // "A>B REQ" lines, for failure messages
	at     []fakeEvent
	closed bool
}

type fakeEvent struct {
	name    string
	at      time.Time // the bubble's clock
	dropped bool
}

// times returns when each MAD named name was sent.
func (n *fakeNet) times(name string) []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	var r []time.Time
	for _, e := range n.at {
		if e.name == name {
			r = append(r, e.at)
		}
	}
	return r
}

// inject delivers b to the port of to as if from had sent it.
func (n *fakeNet) inject(from, to netip.Addr, b []byte) {
	n.mu.Lock()
	dst := n.ports[to]
	src := n.ports[from]
	n.mu.Unlock()
	mac := fakeMAC(from)
	if src != nil {
		mac = src.mac // a replay from a real device's address: its MAC
	}
	if dst != nil {
		dst.q <- fakeMAD{madAddr{GID: from, QPN: mad.GSIQPN, QKey: mad.GSIQKey, HopLimit: 64, MAC: mac},
			append([]byte(nil), b...)}
	}
}

type fakePort struct {
	n   *fakeNet
	gid netip.Addr
	mac net.HardwareAddr // the device's: the source of its MADs
	mu  sync.Mutex
	h   func(from madAddr, mad []byte)
	q   chan fakeMAD
}

type fakeMAD struct {
	from madAddr
	b    []byte
}

// install makes openGSI use n for the test's duration.
func (n *fakeNet) install(t testing.TB) {
	old := openGSI
	openGSI = func(dev *qp.Device) (gsiPort, error) {
		ip, err := dev.GID(dev.IPv4GIDIndex())
		if err != nil {
			return nil, err
		}
		ip = ip.Unmap()
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.ports == nil {
			n.ports = map[netip.Addr]*fakePort{}
		}
		p := &fakePort{n: n, gid: ip, mac: dev.MAC(), q: make(chan fakeMAD, 1024)}
		n.ports[ip] = p
		return p, nil
	}
	t.Cleanup(func() { openGSI = old })
}

func (p *fakePort) handle(h func(from madAddr, mad []byte)) (func(), error) {
	p.mu.Lock()
	p.h = h
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case m := <-p.q:
				p.mu.Lock()
				h := p.h
				p.mu.Unlock()
				if h != nil {
					h(m.from, m.b)
				}
			case <-done:
				return
			}
		}
	}()
	// As qp.GSI's, unregister does not wait for a handler that is
	// running: the agent may drop its last reference, and unregister, from
	// inside one (a REJ that ends the last ID). Once it returns no handler
	// starts.
	return func() {
		p.mu.Lock()
		p.h = nil
		p.mu.Unlock()
		close(done)
		p.n.mu.Lock()
		if p.n.ports[p.gid] == p {
			delete(p.n.ports, p.gid)
		}
		p.n.mu.Unlock()
	}, nil
}

func (p *fakePort) send(ctx context.Context, to madAddr, b []byte) error {
	if len(b) != mad.MADLen {
		return fmt.Errorf("fake GSI: %d-byte MAD", len(b))
	}
	n := p.n
	h, m, err := mad.Parse(b)
	if err != nil {
		return err
	}
	n.mu.Lock()
	dst := n.ports[to.GID.Unmap()]
	drop, dup := false, false
	if n.fault != nil {
		drop, dup = n.fault(p.gid, to.GID.Unmap(), h, m)
	}
	what := m.Name()
	if drop {
		what += " (dropped)"
	}
	n.log = append(n.log, fmt.Sprintf("%v>%v %s", p.gid, to.GID.Unmap(), what))
	n.at = append(n.at, fakeEvent{m.Name(), time.Now(), drop})
	n.mu.Unlock()
	if dst == nil {
		if to.MAC == nil {
			// Nobody answers ARP for the address: the resolution takes
			// all the time ctx gives it, as qp.GSI.Send's does.
			<-ctx.Done()
			return ctx.Err()
		}
		return nil // nobody there: lost, as on a real network
	}
	if drop {
		return nil
	}
	from := madAddr{GID: p.gid, QPN: mad.GSIQPN, QKey: mad.GSIQKey, HopLimit: 64, MAC: p.mac}
	for range 1 + btoi(dup) {
		select {
		case dst.q <- fakeMAD{from, append([]byte(nil), b...)}:
		default:
			return errors.New("fake GSI: queue full")
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (n *fakeNet) trace() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.log...)
}

// count returns how many MADs named name crossed the network (dropped ones
// included).
func (n *fakeNet) count(name string) int {
	k := 0
	for _, l := range n.trace() {
		var a, w string
		fmt.Sscanf(l, "%s %s", &a, &w)
		if w == name {
			k++
		}
	}
	return k
}

// fakeMAC is the Ethernet source the fake network gives a MAD from an
// address no device has (a spoofed one).
func fakeMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.Unmap().As16()
	return net.HardwareAddr{0x02, 0, b[12], b[13], b[14], b[15]}
}
