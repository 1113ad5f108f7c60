//go:build linux

package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var (
	counter    atomic.Uint32
	staleSweep sync.Once
)

// sweepStale deletes namespaces this helper created in test processes that
// no longer exist (killed before their cleanup ran): names
// goroce-<pid>-<n>-a|b whose <pid> is gone. Other namespaces are left alone.
func sweepStale() {
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		var pid, n int
		var side string
		name := e.Name()
		if c, _ := fmt.Sscanf(name, "goroce-%d-%d-%s", &pid, &n, &side); c != 3 || (side != "a" && side != "b") {
			continue
		}
		if name != fmt.Sprintf("goroce-%d-%d-%s", pid, n, side) || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
			continue // still running (or cannot tell)
		}
		netns.DeleteNamed(name)
	}
}

// New creates the namespaces and the veth pair for a program (goroce demo
// --netns, bench/): the caller must Close it. Needs root.
func New(opts Options) (_ *Pair, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("netns: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces: %w", os.ErrPermission)
	}
	staleSweep.Do(sweepStale)
	if opts.MTU <= 0 {
		opts.MTU = 1500
	}
	if opts.Prefix == "" {
		opts.Prefix = "goroce"
	}
	n := counter.Add(1)
	pid := os.Getpid()
	// The subnet: 198.18.0.0/15 has 512 /24s.
	x := (uint32(pid)*7 + n) % 512
	base := [4]byte{198, 18 + byte(x>>8), byte(x), 0}
	// Interface names are limited to 15 bytes; the PID keeps them unique
	// across concurrent processes (they are created in the root namespace
	// before being moved).
	tag := fmt.Sprintf("%d%d", pid%100000, n%1000)
	p := &Pair{MTU: opts.MTU}
	p.A = End{NS: fmt.Sprintf("%s-%d-%d-a", opts.Prefix, pid, n), Ifname: "gr" + tag + "a"}
	p.B = End{NS: fmt.Sprintf("%s-%d-%d-b", opts.Prefix, pid, n), Ifname: "gr" + tag + "b"}
	base[3] = 1
	p.A.Addr = netip.AddrFrom4(base)
	base[3] = 2
	p.B.Addr = netip.AddrFrom4(base)
	p.A.Prefix = netip.PrefixFrom(p.A.Addr, 24)
	p.B.Prefix = netip.PrefixFrom(p.B.Addr, 24)
	if err := p.create(opts); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pair) create(opts Options) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	if err != nil {
		return err
	}
	defer origin.Close()
	for _, e := range []*End{&p.A, &p.B} {
		// NewNamed switches this thread into the new namespace.
		h, err := netns.NewNamed(e.NS)
		if err != nil {
			netns.Set(origin)
			return fmt.Errorf("creating namespace %s: %w", e.NS, err)
		}
		e.handle = h
		if opts.NoDAD {
			err = writeSysctls(map[string]string{
				"net/ipv6/conf/default/accept_dad": "0",
				"net/ipv6/conf/all/accept_dad":     "0",
			})
		}
		if err2 := netns.Set(origin); err2 != nil {
			// This thread is now in an unknown namespace: keep it locked so
			// that the runtime discards it (no UnlockOSThread).
			runtime.LockOSThread()
			return fmt.Errorf("returning to the original namespace: %w", err2)
		}
		if err != nil {
			return err
		}
	}

	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: p.A.Ifname, MTU: opts.MTU},
		PeerName:  p.B.Ifname,
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s/%s: %w", p.A.Ifname, p.B.Ifname, err)
	}
	for _, e := range []*End{&p.A, &p.B} {
		l, err := netlink.LinkByName(e.Ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, opts.MTU); err != nil {
			return fmt.Errorf("MTU %d on %s: %w", opts.MTU, e.Ifname, err)
		}
		if err := netlink.LinkSetNsFd(l, int(e.handle)); err != nil {
			netlink.LinkDel(l)
			return fmt.Errorf("moving %s into %s: %w", e.Ifname, e.NS, err)
		}
	}
	for _, e := range []*End{&p.A, &p.B} {
		if err := e.configure(opts); err != nil {
			return fmt.Errorf("configuring %s in %s: %w", e.Ifname, e.NS, err)
		}
	}
	if opts.NoDAD {
		for _, e := range []*End{&p.A, &p.B} {
			if err := e.waitLinkLocal(); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitLinkLocal waits (at most 5 s) for the kernel to configure the IPv6
// link-local address, which happens shortly after the link comes up.
func (e *End) waitLinkLocal() error {
	h, err := netlink.NewHandleAt(e.handle)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByIndex(e.Ifindex)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		addrs, err := h.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if ok && ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				e.LinkLocal = ip
				return nil
			}
		}
	}
	return fmt.Errorf("no IPv6 link-local address on %s after 5 s", e.Ifname)
}

func (e *End) configure(opts Options) error {
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
	e.Ifindex = l.Attrs().Index
	e.MAC = l.Attrs().HardwareAddr
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: e.Addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(l, addr); err != nil {
		return err
	}
	return h.LinkSetUp(l)
}

// writeSysctls writes /proc/sys entries for the calling thread's network
// namespace (/proc/sys/net resolves to the namespace of the opener).
func writeSysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}

// Close deletes both namespaces (and with them the veth pair): only what
// New created. It is idempotent and safe from a signal handler's goroutine
// while the namespaces are in use (open sockets keep a namespace alive until
// they close).
func (p *Pair) Close() error {
	var errs []error
	p.closeOnce.Do(func() {
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
		// If moving into a namespace failed, a veth end may be left behind in
		// the original namespace.
		for _, name := range []string{p.A.Ifname, p.B.Ifname} {
			if l, err := netlink.LinkByName(name); err == nil {
				netlink.LinkDel(l)
			}
		}
	})
	return errors.Join(errs...)
}

// Do runs fn on a locked OS thread switched into side's namespace, and
// switches back afterwards. Sockets fn opens belong to the namespace;
// goroutines fn starts do not run in it.
func (p *Pair) Do(side Side, fn func() error) error {
	return do(p.end(side).handle, fn)
}

func do(target netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: entering namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(origin); err != nil {
		// Leave the thread locked: the runtime will terminate it when this
		// goroutine exits rather than reuse a thread in the wrong namespace.
		return fmt.Errorf("netns: leaving namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Command returns an exec.Cmd that runs name inside side's namespace (via
// `ip netns exec`), e.g. for tcpdump or ping in tests.
func (p *Pair) Command(side Side, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", p.end(side).NS, name}, args...)...)
}

// Handle returns a netlink handle for side's namespace; the caller closes it.
func (p *Pair) Handle(side Side) (*netlink.Handle, error) {
	return netlink.NewHandleAt(p.end(side).handle)
}
