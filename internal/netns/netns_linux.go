//go:build linux

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
	if opts.Queues > 1 {
		veth.NumTxQueues, veth.NumRxQueues = opts.Queues, opts.Queues
		veth.PeerNumTxQueues, veth.PeerNumRxQueues = uint32(opts.Queues), uint32(opts.Queues)
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
