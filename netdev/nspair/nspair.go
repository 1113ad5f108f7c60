// Package nspair gives programs (goroce demo --netns, bench/) a private
// two-host network, like internal/netns does for tests: two fresh network
// namespaces joined by a veth pair, 198.18.X.1/24 and 198.18.X.2/24 (RFC
// 2544 benchmark range), loopback up, no default route and no route out.
// Nothing sent there can leave the machine.
//
// Unlike internal/netns it does not need a testing.TB: New returns an error
// and Close tears everything down (deleting the namespaces destroys the
// veth pair). Close is idempotent and safe to call from a signal handler
// goroutine while the namespaces are in use: sockets keep a namespace alive
// until they are closed, then the kernel frees it.
//
// Creating namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).
package nspair

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Side selects one end.
type Side int

const (
	A Side = iota
	B
)

func (s Side) String() string {
	if s == A {
		return "A"
	}
	return "B"
}

// Options configure New.
type Options struct {
	MTU    int    // veth MTU (default 1500)
	Prefix string // namespace name prefix (default "goroce")
	Subnet int    // X in 198.18.X.0/24, 0..255 (default: from the PID)
}

// End is one side of the pair.
type End struct {
	NS     string // namespace name (`ip netns exec NS ...` works while it lives)
	Ifname string
	MAC    net.HardwareAddr
	Addr   netip.Addr
	handle netns.NsHandle
}

// Pair is two namespaces joined by veth.
type Pair struct {
	A, B End
	MTU  int

	once sync.Once
}

var counter atomic.Uint32

// New creates the namespaces and the veth pair.
func New(o Options) (_ *Pair, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("nspair: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces")
	}
	if o.MTU <= 0 {
		o.MTU = 1500
	}
	if o.Prefix == "" {
		o.Prefix = "goroce"
	}
	n := counter.Add(1)
	pid := os.Getpid()
	x := o.Subnet
	if x <= 0 || x > 255 {
		x = int((uint32(pid)*13 + n) % 256)
	}
	p := &Pair{MTU: o.MTU}
	tag := fmt.Sprintf("%d%d", pid%100000, n%100)
	p.A = End{NS: fmt.Sprintf("%s-%d-%d-a", o.Prefix, pid, n), Ifname: "gp" + tag + "a",
		Addr: netip.AddrFrom4([4]byte{198, 18, byte(x), 1})}
	p.B = End{NS: fmt.Sprintf("%s-%d-%d-b", o.Prefix, pid, n), Ifname: "gp" + tag + "b",
		Addr: netip.AddrFrom4([4]byte{198, 18, byte(x), 2})}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := p.create(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pair) end(s Side) *End {
	if s == A {
		return &p.A
	}
	return &p.B
}

func (p *Pair) create() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	if err != nil {
		return err
	}
	defer origin.Close()
	for _, e := range []*End{&p.A, &p.B} {
		h, err := netns.NewNamed(e.NS) // switches this thread into it
		if err != nil {
			netns.Set(origin)
			return fmt.Errorf("nspair: creating namespace %s: %w", e.NS, err)
		}
		e.handle = h
		if err := netns.Set(origin); err != nil {
			runtime.LockOSThread() // never reuse this thread
			return fmt.Errorf("nspair: returning to the original namespace: %w", err)
		}
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.A.Ifname, MTU: p.MTU}, PeerName: p.B.Ifname}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("nspair: creating veth %s/%s: %w", p.A.Ifname, p.B.Ifname, err)
	}
	for _, e := range []*End{&p.A, &p.B} {
		l, err := netlink.LinkByName(e.Ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, p.MTU); err != nil {
			return fmt.Errorf("nspair: MTU %d on %s: %w", p.MTU, e.Ifname, err)
		}
		if err := netlink.LinkSetNsFd(l, int(e.handle)); err != nil {
			return fmt.Errorf("nspair: moving %s into %s: %w", e.Ifname, e.NS, err)
		}
	}
	for _, e := range []*End{&p.A, &p.B} {
		if err := e.configure(); err != nil {
			return fmt.Errorf("nspair: configuring %s in %s: %w", e.Ifname, e.NS, err)
		}
	}
	return nil
}

func (e *End) configure() error {
	h, err := netlink.NewHandleAt(e.handle)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	l, err := h.LinkByName(e.Ifname)
	if err != nil {
		return err
	}
	e.MAC = l.Attrs().HardwareAddr
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: e.Addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(l, addr); err != nil {
		return err
	}
	return h.LinkSetUp(l)
}

// End returns one side's description.
func (p *Pair) End(s Side) End { return *p.end(s) }

// Do runs fn on a locked OS thread switched into side's namespace and
// switches back. Sockets fn opens stay in that namespace; goroutines fn
// starts do not run in it.
func (p *Pair) Do(s Side, fn func() error) error {
	target := p.end(s).handle
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("nspair: entering %s: %w", p.end(s).NS, err)
	}
	ferr := fn()
	if err := netns.Set(origin); err != nil {
		return fmt.Errorf("nspair: leaving %s: %w", p.end(s).NS, err) // thread stays locked: discarded
	}
	runtime.UnlockOSThread()
	return ferr
}

// Close deletes both namespaces (and with them the veth pair). It deletes
// only what New created.
func (p *Pair) Close() error {
	var errs []error
	p.once.Do(func() {
		for _, e := range []*End{&p.A, &p.B} {
			if e.handle.IsOpen() {
				e.handle.Close()
			}
			if _, err := os.Stat(filepath.Join("/var/run/netns", e.NS)); err == nil {
				if err := netns.DeleteNamed(e.NS); err != nil {
					errs = append(errs, err)
				}
			}
		}
		// A veth end left in the original namespace by a failed move.
		for _, name := range []string{p.A.Ifname, p.B.Ifname} {
			if l, err := netlink.LinkByName(name); err == nil {
				netlink.LinkDel(l)
			}
		}
	})
	return errors.Join(errs...)
}
