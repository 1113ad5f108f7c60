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
// destroys the veth pair.
//
// Each namespace gets an ownership marker, /run/goroce-netns/NAME, holding
// the creating process's PID, its start time and its PID namespace. The
// first pair of a process deletes the namespaces whose marker names a dead
// process of its own PID namespace (test binaries killed before their
// cleanup ran). Namespaces without a marker, or marked by another PID
// namespace (containers sharing /run), are never deleted.
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
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Side selects one end of a Pair.
type Side int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Side

const (
	A Side = iota
	B
)

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

	handle  netns.NsHandle
	marked  bool // New wrote markerDir/NS
	created bool // New created the namespace NS
}

// Pair is two namespaces joined by a veth pair. A test's pair (NewPair) is
// torn down by t.Cleanup; a program's (New) by Close.
type Pair struct {
	A, B End
	MTU  int

	vethAdded bool
	closeOnce sync.Once
}

var (
	counter    atomic.Uint32
	staleSweep sync.Once
)

const (
	// nsDir is where named namespaces are bind-mounted (ip netns,
	// vishvananda/netns).
	nsDir = "/var/run/netns"
	// markerDir holds one ownership marker per namespace New creates.
	markerDir = "/run/goroce-netns"
)

// owner identifies the process that created a namespace: its PID, that
// process's start time (field 22 of /proc/PID/stat, in clock ticks since
// boot; it tells a reused PID from the original) and the inode of its PID
// namespace (PIDs mean something only inside one PID namespace). /run is
// often shared by containers with different PID namespaces, so a PID alone
// does not say whose a namespace is.
type owner struct {
	pid   int
	start uint64
	pidNS uint64
}

func (o owner) String() string { return fmt.Sprintf("%d %d %d\n", o.pid, o.start, o.pidNS) }

func parseOwner(b []byte) (owner, error) {
	var o owner
	if n, err := fmt.Sscanf(string(b), "%d %d %d\n", &o.pid, &o.start, &o.pidNS); n != 3 || o.pid <= 0 || o.pidNS == 0 {
		return owner{}, fmt.Errorf("netns: bad ownership marker %q: %v", b, err)
	}
	return o, nil
}

// startTime returns the start time of process pid (see parseStartTime).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStartTime(b)
}

// parseStartTime returns field 22 (starttime) of a /proc/PID/stat line. The
// command name (field 2) is in parentheses and may contain spaces and ')',
// so the fields are counted from the last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	var f []string
	if i >= 0 {
		f = strings.Fields(string(stat[i+1:]))
	}
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("netns: malformed /proc/PID/stat %q", stat)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// pidNamespace returns the inode of the calling process's PID namespace.
func pidNamespace() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// self describes this process, or fails when /proc is not this process's
// PID namespace's (its /proc/self is then not this process), in which case
// no PID read from /proc can be trusted.
func self() (owner, error) {
	pid := os.Getpid()
	if l, err := os.Readlink("/proc/self"); err != nil || l != strconv.Itoa(pid) {
		return owner{}, fmt.Errorf("netns: /proc does not belong to this PID namespace (/proc/self is %q, %v)", l, err)
	}
	start, err := startTime(pid)
	if err != nil {
		return owner{}, err
	}
	ns, err := pidNamespace()
	if err != nil {
		return owner{}, err
	}
	return owner{pid: pid, start: start, pidNS: ns}, nil
}

// mark records that this process owns namespace name. It is written before
// the namespace exists, so every namespace New creates has a marker even if
// the process dies right after creating it.
func mark(dir, name string, o owner) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// O_EXCL: a marker that exists belongs to a namespace of that name
	// which is not ours (another PID namespace's process with our PID).
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(o.String())
	return errors.Join(err, f.Close())
}

// MarkOwned writes dir/name, the ownership marker of namespace name, for
// this process, so that StaleOwned(dir) reports name once this process has
// exited. Call it before creating the namespace, and remove the marker after
// deleting it. It fails if the marker exists (a namespace of that name is
// someone else's) or this process cannot be identified through /proc.
// Pair's namespaces are marked in /run/goroce-netns; other harnesses (e.g.
// interop/) use a directory of their own, so that each sweeps only its own.
func MarkOwned(dir, name string) error {
	me, err := self()
	if err != nil {
		return err
	}
	return mark(dir, name, me)
}

// StaleOwned returns the names marked in dir (MarkOwned) by a process of
// this PID namespace that has exited: its PID is gone, or belongs to a
// process with another start time. A marker of another PID namespace (a
// container sharing /run) is never reported: its owner cannot be checked
// from here. Nothing is reported when /proc is not this PID namespace's.
func StaleOwned(dir string) []string {
	me, err := self()
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var stale []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		o, err := parseOwner(b)
		if err != nil || o.pidNS != me.pidNS {
			continue
		}
		if start, err := startTime(o.pid); err == nil && start == o.start {
			continue // the owner is alive
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue // cannot tell
		}
		stale = append(stale, e.Name())
	}
	return stale
}

// sweepStale deletes the namespaces StaleOwned(markers) reports (those of
// killed test processes whose cleanup never ran) and their markers.
func sweepStale(markers, namespaces string) {
	for _, name := range StaleOwned(markers) {
		if deleteNamed(namespaces, name) == nil {
			os.Remove(filepath.Join(markers, name))
		}
	}
}

// deleteNamed deletes the named namespace dir/name (a bind mount of the
// namespace on an empty file); one that does not exist is already deleted.
func deleteNamed(dir, name string) error {
	p := filepath.Join(dir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		// EINVAL: not a mount point (creation failed between creating the
		// file and mounting on it).
		return fmt.Errorf("netns: unmounting %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns: %w", err)
	}
	return nil
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
	staleSweep.Do(func() { sweepStale(markerDir, nsDir) })
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
	me, selfErr := self()
	for _, e := range []*End{&p.A, &p.B} {
		// Without a trustworthy owner (a /proc of another PID namespace)
		// the namespace gets no marker, and no sweep will ever delete it.
		if selfErr == nil {
			if err := mark(markerDir, e.NS, me); err != nil {
				return fmt.Errorf("marking namespace %s as ours: %w", e.NS, err)
			}
			e.marked = true
		}
		// NewNamed switches this thread into the new namespace.
		h, err := netns.NewNamed(e.NS)
		if err != nil {
			netns.Set(origin)
			return fmt.Errorf("creating namespace %s: %w", e.NS, err)
		}
		e.handle, e.created = h, true
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
	p.vethAdded = true
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
			if e.created {
				if err := deleteNamed(nsDir, e.NS); err != nil {
					errs = append(errs, err)
					continue // the marker lets a later sweep retry
				}
			}
			if e.marked {
				os.Remove(filepath.Join(markerDir, e.NS))
			}
		}
		// If moving into a namespace failed, a veth end may be left behind in
		// the original namespace.
		for _, name := range []string{p.A.Ifname, p.B.Ifname} {
			if !p.vethAdded {
				break
			}
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
