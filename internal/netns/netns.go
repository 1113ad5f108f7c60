// Package netns gives tests (NewPair) and programs (New: goroce demo --netns,
// bench/) a private two-host network: two fresh network
// namespaces joined by a veth pair, each end with one address from the
// benchmark range 198.18.0.0/15 (RFC 2544) on a /24, and nothing else — no
// default route, no route out, only the connected /24 and loopback. Nothing a
// test sends there can leave the machine.
//
//	namespace A (goroce-<pid>-<n>-a)        namespace B (goroce-<pid>-<n>-b)
//	  veth "gr<n>a" 198.18.X.1/24  <-------->  veth "gr<n>b" 198.18.X.2/24
//
// X is taken from a per-process counter and the PID so that concurrent test
// binaries use different subnets (not strictly needed, the namespaces are
// isolated, but it keeps captures unambiguous). The namespaces are named (bind
// mounted in /var/run/netns, so `ip netns exec NAME ...` works while the test
// runs) and deleted by t.Cleanup (NewPair) or Close (New), which also
// destroys the veth pair. The first pair of a process also deletes namespaces left behind by test
// processes that were killed (their PID no longer exists).
//
// Code runs inside a namespace through Pair.Do, which switches one locked OS
// thread into it. A socket opened inside Do stays in that namespace for its
// whole life and may be used from any goroutine afterwards; goroutines
// started inside Do do NOT inherit the namespace.
//
// Creating namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Tests
// call RequireRoot first: it skips with a reason when not root, and fails
// when CI=true so that privileged tests never vanish silently in CI (the
// cilium/ebpf internal/testutils model).
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

// Side selects one end of a Pair.
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

// Options configure NewPair and New. The zero value gives MTU 1500 and IPv6
// DAD on.
type Options struct {
	// MTU of both veth ends (default 1500).
	MTU int
	// NoDAD turns off IPv6 duplicate address detection in both namespaces,
	// so the fe80:: link-local addresses are usable at once instead of after
	// about a second.
	NoDAD bool
	// Prefix of the namespace names (default "goroce"): PREFIX-PID-N-a|b.
	Prefix string
}

// End describes one end of the pair.
type End struct {
	NS      string           // namespace name (usable with `ip netns exec`)
	Ifname  string           // veth name inside the namespace
	Ifindex int              // veth ifindex inside the namespace
	MAC     net.HardwareAddr // veth MAC
	Addr    netip.Addr       // IPv4 address
	Prefix  netip.Prefix     // Addr with its /24
	// LinkLocal is the IPv6 link-local address (with Options.NoDAD only:
	// NewPair waits until it is usable; otherwise the zero Addr).
	LinkLocal netip.Addr

	handle netns.NsHandle
}

// Pair is two namespaces joined by a veth pair. A test's pair (NewPair) is
// torn down by t.Cleanup; a program's (New) by Close.
type Pair struct {
	A, B End
	MTU  int

	closeOnce sync.Once
}

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

// TB is the part of testing.TB that RequireRoot and NewPair use. It is
// declared here so that programs linking this package (goroce demo --netns,
// bench/) do not link the testing package; a *testing.T or *testing.B
// satisfies it.
type TB interface {
	Helper()
	Cleanup(func())
	Skip(args ...any)
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// RequireRoot skips the test when the process is not root, or fails it when
// the environment variable CI is "true" (privileged tests must run in CI).
func RequireRoot(t TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const reason = "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true forbids skipping", reason)
	}
	t.Skip(reason)
}

// NewPair creates the namespaces and the veth pair, or ends the test: skip
// (not root, or namespaces not permitted here) or fail (any other error, or
// CI=true).
func NewPair(t TB, opts Options) *Pair {
	t.Helper()
	RequireRoot(t)
	p, err := New(opts)
	if err != nil {
		if errors.Is(err, os.ErrPermission) && os.Getenv("CI") != "true" {
			t.Skipf("netns: not permitted here: %v", err)
		}
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
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

func (p *Pair) end(s Side) *End {
	if s == A {
		return &p.A
	}
	return &p.B
}

// End returns the description of one side.
func (p *Pair) End(s Side) End { return *p.end(s) }

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
