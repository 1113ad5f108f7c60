//go:build linux

package netaddr

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Lookup reads ifname's attributes and addresses over netlink.
func Lookup(ifname string) (*Interface, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		if _, ok := err.(netlink.LinkNotFoundError); ok {
			err = ErrNoInterface
		}
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	a := l.Attrs()
	ifc := &Interface{Name: a.Name, Index: a.Index, MAC: a.HardwareAddr, MTU: a.MTU}
	var addrs []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := netlink.AddrList(l, fam)
		if err != nil {
			return nil, fmt.Errorf("netaddr: addresses of %s: %w", ifname, err)
		}
		for _, ad := range list {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	ifc.GIDs = GIDTable(ifc.MAC, addrs)
	return ifc, nil
}

// usable neighbour states: the kernel has a link-layer address it uses.
const neighUsable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT

// A Resolver's timing. The neighbour events wake a resolution; the table
// is also re-read every resolveFallback (every resolvePoll when the
// subscription to the events could not be made), in case an event was
// lost, and a FAILED or absent entry is re-triggered at most every
// retriggerEvery, the kernel's own ARP retransmission interval
// (retrans_time_ms, 1 s).
const (
	resolveFallback = 500 * time.Millisecond
	resolvePoll     = 50 * time.Millisecond
	retriggerEvery  = time.Second
)

// ResolveMAC returns the MAC address of ip on ifname from the kernel's
// neighbour table (ARP for IPv4, NDP for IPv6). When there is no usable
// entry it asks the kernel to resolve it — an RTM_NEWNEIGH request with the
// NTF_USE flag, which makes the kernel send its normal ARP request or
// neighbour solicitation (neigh_event_send) without any datagram of ours on
// the wire — and waits, woken by the kernel's neighbour events, until the
// entry is REACHABLE, STALE, DELAY, PROBE or PERMANENT, re-triggering after
// a FAILED state. It gives up when ctx ends or, if ctx has no deadline,
// after DefaultResolveTimeout, with a *NeighbourError (errors.Is(err,
// ErrUnresolved)). It acts in the calling thread's namespace; a Resolver
// serves many resolutions in a namespace of its own.
func ResolveMAC(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	r, err := NewResolver(ifname, netns.None())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Resolve(ctx, ip)
}

// Resolver resolves the neighbours of one interface in one network
// namespace, as ResolveMAC does, for any number of goroutines at once
// without locking OS threads and without polling: its netlink sockets are
// opened in the namespace (so every thread may use them), and one
// subscription to the namespace's neighbour events (RTNLGRP_NEIGH, one
// reader for the Resolver) wakes the resolutions waiting for an address.
type Resolver struct {
	ifname   string
	ns       netns.NsHandle // not owned; netns.None(): the caller's
	h        *netlink.Handle
	idx      int
	loopback bool

	mu       sync.Mutex
	waiters  map[netip.Addr]map[chan struct{}]struct{}
	subDone  chan struct{} // closes the subscription; nil: none
	subOK    bool          // the subscription is delivering
	closed   bool
	lookups  atomic.Int64 // neighbour table reads, for tests
	triggers atomic.Int64
}

// NewResolver returns a Resolver for ifname in ns (netns.None(): the
// calling thread's namespace, which the Resolver keeps using from any
// thread). Close it when done; it does not close ns.
func NewResolver(ifname string, ns netns.NsHandle) (*Resolver, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netaddr: netlink handle: %w", err)
	}
	l, err := h.LinkByName(ifname)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("netaddr: interface %q: %w", ifname, err)
	}
	return &Resolver{ifname: ifname, ns: ns, h: h, idx: l.Attrs().Index,
		loopback: l.Attrs().Flags&net.FlagLoopback != 0, waiters: map[netip.Addr]map[chan struct{}]struct{}{}}, nil
}

// Close ends the event subscription and the netlink handle.
func (r *Resolver) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		if r.subDone != nil {
			close(r.subDone)
			r.subDone = nil
		}
		r.h.Close()
	}
	r.mu.Unlock()
	return nil
}

// Resolve is ResolveMAC for the Resolver's interface and namespace.
func (r *Resolver) Resolve(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap().WithZone("") // the neighbour table has no zones; the interface is the scope
	if !ip.IsValid() {
		return nil, fmt.Errorf("netaddr: ResolveMAC: invalid IP")
	}
	if r.loopback {
		return make(net.HardwareAddr, 6), nil // loopback: frames carry zero MACs
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultResolveTimeout)
		defer cancel()
	}
	start := time.Now()
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	wake := make(chan struct{}, 1)
	events := r.watch(ip, wake)
	defer r.unwatch(ip, wake)
	every := resolveFallback
	if !events {
		every = resolvePoll
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastErr error
	var triggered time.Time
	for {
		state, mac, err := r.lookup(fam, ip)
		if err != nil {
			lastErr = err
		}
		if state&neighUsable != 0 && len(mac) > 0 {
			return mac, nil
		}
		if triggered.IsZero() || (state&netlink.NUD_FAILED != 0 || state == netlink.NUD_NONE) &&
			time.Since(triggered) >= retriggerEvery {
			if err := r.trigger(fam, ip); err != nil {
				lastErr = err
			}
			triggered = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, &NeighbourError{IP: ip, Ifname: r.ifname, Waited: time.Since(start), LastErr: lastErr}
		case <-wake:
		case <-tick.C:
		}
	}
}

// watch registers wake for events about ip, subscribing to the neighbour
// events first if needed; it reports whether they are being delivered.
func (r *Resolver) watch(ip netip.Addr, wake chan struct{}) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.subDone == nil {
		ch := make(chan netlink.NeighUpdate, 64)
		done := make(chan struct{})
		ns := r.ns
		err := netlink.NeighSubscribeWithOptions(ch, done, netlink.NeighSubscribeOptions{Namespace: &ns,
			ErrorCallback: func(error) {}})
		if err == nil {
			r.subDone, r.subOK = done, true
			go r.dispatch(ch, done)
		}
	}
	w := r.waiters[ip]
	if w == nil {
		w = map[chan struct{}]struct{}{}
		r.waiters[ip] = w
	}
	w[wake] = struct{}{}
	return r.subOK
}

func (r *Resolver) unwatch(ip netip.Addr, wake chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.waiters[ip]; w != nil {
		delete(w, wake)
		if len(w) == 0 {
			delete(r.waiters, ip)
		}
	}
}

// dispatch wakes the resolutions of the addresses the events name. When
// the subscription ends (its socket failed: ENOBUFS under an event storm),
// everyone is woken and the next resolution subscribes again.
func (r *Resolver) dispatch(ch <-chan netlink.NeighUpdate, done chan struct{}) {
	for u := range ch {
		if u.LinkIndex != r.idx {
			continue
		}
		ip, ok := netip.AddrFromSlice(u.IP)
		if !ok {
			continue
		}
		r.mu.Lock()
		for w := range r.waiters[ip.Unmap()] {
			select {
			case w <- struct{}{}:
			default:
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	if r.subDone == done {
		close(done)
		r.subDone, r.subOK = nil, false
	}
	for _, ws := range r.waiters {
		for w := range ws {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
	r.mu.Unlock()
}

func (r *Resolver) lookup(fam int, ip netip.Addr) (int, net.HardwareAddr, error) {
	r.lookups.Add(1)
	list, err := r.h.NeighList(r.idx, fam)
	if err != nil {
		return 0, nil, err
	}
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if ok && a.Unmap() == ip {
			return n.State, n.HardwareAddr, nil
		}
	}
	return netlink.NUD_NONE, nil, nil
}

// trigger asks the kernel to resolve ip (RTM_NEWNEIGH, NLM_F_CREATE,
// NTF_USE: neigh_add calls neigh_event_send instead of updating the entry),
// through the Resolver's handle, in its namespace; udpTrigger if refused.
func (r *Resolver) trigger(fam int, ip netip.Addr) error {
	r.triggers.Add(1)
	err := r.h.NeighSet(&netlink.Neigh{LinkIndex: r.idx, Family: fam, Flags: netlink.NTF_USE, IP: ip.AsSlice()})
	if err == nil {
		return nil
	}
	return inNamespace(r.ns, func() error { return udpTrigger(ip, err) })
}

// udpTrigger is the fallback when the kernel refuses the NTF_USE request
// (err): an empty UDP datagram to ip:4791 from an ordinary socket, whose
// transmission needs the neighbour; a RoCEv2 receiver drops it as too short
// for a BTH.
func udpTrigger(ip netip.Addr, err error) error {
	c, derr := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, RoCEv2Port)))
	if derr != nil {
		return fmt.Errorf("NTF_USE: %v; UDP fallback: %w", err, derr)
	}
	defer c.Close()
	if _, werr := c.Write(nil); werr != nil {
		return fmt.Errorf("NTF_USE: %v; UDP fallback: %w", err, werr)
	}
	return nil
}

// inNamespace runs fn on this goroutine's thread switched into ns (as
// briefly as fn takes), or directly for netns.None().
func inNamespace(ns netns.NsHandle, fn func() error) error {
	if !ns.IsOpen() {
		return fn()
	}
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer cur.Close()
	if cur.Equal(ns) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(cur); err != nil {
		return err // the thread stays locked: the runtime discards it
	}
	runtime.UnlockOSThread()
	return ferr
}

// setDropFilter attaches a classic BPF program that drops every datagram.
func setDropFilter(c *net.UDPConn) error {
	prog, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return err
	}
	return setFilter(c, prog)
}

func setFilter(c *net.UDPConn, prog []bpf.RawInstruction) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog)
	}); err != nil {
		return err
	}
	return serr
}
