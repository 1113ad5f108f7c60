//go:build linux

package interop

import (
	"bufio"
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
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// Config selects what New builds.
type Config struct {
	// VMs is the number of rxe VMs, 1 to 4 (default 1).
	VMs int
	// MTU of every link and of the VMs' eth0 (default 1500). rxe's active
	// path MTU follows it: 1500 gives 1024, 9000 gives 4096.
	MTU int
	// MemMB is each VM's memory (default 1024).
	MemMB int
	// NoRXE boots the VMs without creating rxe0.
	NoRXE bool
	// BootTimeout bounds the boot of all VMs to a ready job daemon (default
	// 300 s: TCG on a busy 2-core machine is slow).
	BootTimeout time.Duration
	// Router gives VM 0 a second NIC, eth1 (52:54:00:12:01:11, not
	// configured), on a second bridge whose other port is a second host
	// namespace (HostNS2: ix1 198.18.0.2/24, 02:00:c6:12:00:02), so that
	// VM 0 can route between the two host namespaces (cc_test.go puts a
	// marking qdisc on its eth1).
	Router bool
	// HostQueues gives the host namespace's veth (ix0, and its bridge end)
	// that many transmit and receive queues (numtxqueues/numrxqueues), for
	// a multi-queue goroce device (GOROCE_QUEUES; queues_test.go). 0: one.
	HostQueues int
	// Image is a directory holding `kernel` and `initrd`. Default: the
	// environment variable GOROCE_INTEROP_IMAGE, else what build-vm.sh builds
	// (or finds in its cache).
	Image string
}

// Addresses of the harness network (all in 198.18.0.0/24, benchmark range).
var (
	hostIP   = netip.MustParseAddr("198.18.0.1")
	hostMAC  = net.HardwareAddr{0x02, 0x00, 0xc6, 0x12, 0x00, 0x01}
	host2IP  = netip.MustParseAddr("198.18.0.2")
	host2MAC = net.HardwareAddr{0x02, 0x00, 0xc6, 0x12, 0x00, 0x02}
)

const (
	hostIface   = "ix0"
	bridgeIface = "br0"
	maxVMs      = 4
)

// Harness is a running set of rxe VMs on a bridge. Its methods may be called
// from any goroutine (and from subtests); New and Close belong to the test
// that created it.
type Harness struct {
	t       testing.TB
	cfg     Config
	ns      string // bridge namespace
	hostNS  string
	hostNS2 string // Config.Router only
	dir     string // per-harness scratch directory (shares, logs)
	// created lists the namespaces this harness marked and created, the
	// only ones Close deletes.
	created []string
	vms     []*vm

	mu       sync.Mutex
	captures []*Capture
	procs    []*HostProc
	closed   bool
}

type vm struct {
	idx     int
	ip      netip.Addr
	mac     net.HardwareAddr
	share   string
	boot    int // 0 for the first boot, n for the n-th reboot (Revive)
	console string
	qlog    string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when qemu has exited
	waitErr error
	nextJob atomic.Uint32
}

var harnessCounter atomic.Uint32

// New creates the namespaces and the bridge and boots cfg.VMs VMs in parallel,
// waiting until each has rxe0 ACTIVE with its IPv4-mapped GID and a running
// job daemon. It skips the test when not root or when qemu or the VM image
// cannot be had, and fails it instead when CI=true.
func New(t testing.TB, cfg Config) *Harness {
	t.Helper()
	if cfg.VMs == 0 {
		cfg.VMs = 1
	}
	if cfg.VMs < 1 || cfg.VMs > maxVMs {
		t.Fatalf("interop: Config.VMs = %d, want 1..%d", cfg.VMs, maxVMs)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 1280 || cfg.MTU > 9000 {
		t.Fatalf("interop: Config.MTU = %d, want 1280..9000", cfg.MTU)
	}
	if cfg.MemMB == 0 {
		cfg.MemMB = 1024
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 300 * time.Second
	}
	RequireRoot(t)
	for _, tool := range []string{"qemu-system-x86_64", "ip", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "interop: %s not found (run interop/setup.sh): %v", tool, err)
		}
	}
	if cfg.Image == "" {
		img, err := Image()
		if err != nil {
			skipOrFail(t, "interop: no VM image: %v", err)
		}
		cfg.Image = img
	}
	cleanStale(markerDir, "/run/netns")

	n := harnessCounter.Add(1)
	h := &Harness{t: t, cfg: cfg}
	h.ns = fmt.Sprintf("goroce-ix-%d", os.Getpid())
	if n > 1 {
		h.ns = fmt.Sprintf("goroce-ix-%d-%d", os.Getpid(), n)
	}
	h.hostNS = h.ns + "-h"
	if cfg.Router {
		h.hostNS2 = h.ns + "-h2"
	}
	h.dir = t.TempDir()
	t.Cleanup(h.Close)

	if err := h.setupNetwork(); err != nil {
		t.Fatalf("interop: network: %v", err)
	}
	t0 := time.Now()
	for i := 0; i < cfg.VMs; i++ {
		v, err := h.startVM(i, 0)
		if err != nil {
			t.Fatalf("interop: VM %d: %v", i, err)
		}
		h.vms = append(h.vms, v)
	}
	deadline := time.Now().Add(cfg.BootTimeout)
	for _, v := range h.vms {
		if err := h.waitReady(v, deadline); err != nil {
			t.Fatalf("interop: VM %d: %v\n%s", v.idx, err, h.consoleTail(v, 30))
		}
	}
	t.Logf("interop: %d VM(s) ready in %.1fs (netns %s, host netns %s, MTU %d, image %s)",
		cfg.VMs, time.Since(t0).Seconds(), h.ns, h.hostNS, cfg.MTU, cfg.Image)
	return h
}

// RequireRoot skips the test when not running as root, and fails it when the
// environment variable CI is "true" (privileged tests must not vanish in CI).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "interop: needs root (network namespaces, tap devices, qemu)")
	}
}

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+" (CI=true: not skipping)", args...)
	}
	t.Skipf(format, args...)
}

var (
	imageOnce sync.Once
	imageDir  string
	imageErr  error
)

// Image returns the directory holding the VM's kernel and initrd:
// $GOROCE_INTEROP_IMAGE if set, else the output of build-vm.sh (run once per
// process; it takes seconds when its cache is warm, about 20 s cold).
func Image() (string, error) {
	imageOnce.Do(func() {
		if d := os.Getenv("GOROCE_INTEROP_IMAGE"); d != "" {
			imageDir = d
		} else {
			imageDir, imageErr = buildImage()
		}
		if imageErr == nil {
			for _, f := range []string{"kernel", "initrd"} {
				if _, err := os.Stat(filepath.Join(imageDir, f)); err != nil {
					imageErr = err
				}
			}
		}
	})
	return imageDir, imageErr
}

func buildImage() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate build-vm.sh")
	}
	script := filepath.Join(filepath.Dir(file), "build-vm.sh")
	if _, err := os.Stat(script); err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	c := exec.Command("bash", script)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", script, err, tail(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// ip runs the ip(8) command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// vethCmd is the `ip` command that creates the bridge's veth to the host
// namespace, with queues transmit and receive queues on both ends when
// queues > 1.
func vethCmd(ns, mtu, hostNS string, queues int) []string {
	var q []string
	if queues > 1 {
		n := strconv.Itoa(queues)
		q = []string{"numtxqueues", n, "numrxqueues", n}
	}
	c := append([]string{"-n", ns, "link", "add", "vbr", "mtu", mtu}, q...)
	c = append(c, "type", "veth", "peer", "name", hostIface)
	c = append(c, q...)
	return append(c, "netns", hostNS)
}

func (h *Harness) setupNetwork() error {
	mtu := strconv.Itoa(h.cfg.MTU)
	namespaces := []string{h.ns, h.hostNS}
	if h.cfg.Router {
		namespaces = append(namespaces, h.hostNS2)
	}
	for _, ns := range namespaces {
		if err := netns.MarkOwned(markerDir, ns); err != nil {
			return fmt.Errorf("marking namespace %s as ours: %w", ns, err)
		}
		if err := ip("netns", "add", ns); err != nil {
			os.Remove(filepath.Join(markerDir, ns))
			return err
		}
		h.created = append(h.created, ns)
	}
	// The bridge namespace needs no IPv6 at all (no addresses there); in the
	// host namespace link-local IPv6 stays usable, without DAD delay.
	if err := nsDo(h.ns, func() error {
		return writeSysctls(map[string]string{
			"net/ipv6/conf/all/disable_ipv6":     "1",
			"net/ipv6/conf/default/disable_ipv6": "1",
		})
	}); err != nil {
		return err
	}
	if err := nsDo(h.hostNS, func() error {
		return writeSysctls(map[string]string{
			"net/ipv6/conf/all/accept_dad":     "0",
			"net/ipv6/conf/default/accept_dad": "0",
		})
	}); err != nil {
		return err
	}
	cmds := [][]string{
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.hostNS, "link", "set", "lo", "up"},
		{"-n", h.ns, "link", "add", bridgeIface, "mtu", mtu, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		vethCmd(h.ns, mtu, h.hostNS, h.cfg.HostQueues),
		{"-n", h.ns, "link", "set", "vbr", "master", bridgeIface, "up"},
		{"-n", h.hostNS, "link", "set", hostIface, "address", hostMAC.String(), "mtu", mtu},
		{"-n", h.hostNS, "addr", "add", hostIP.String() + "/24", "dev", hostIface},
		{"-n", h.hostNS, "link", "set", hostIface, "up"},
	}
	for i := 0; i < h.cfg.VMs; i++ {
		tap := fmt.Sprintf("tap%d", i)
		cmds = append(cmds,
			[]string{"-n", h.ns, "tuntap", "add", "dev", tap, "mode", "tap"},
			[]string{"-n", h.ns, "link", "set", tap, "mtu", mtu, "master", bridgeIface, "up"})
	}
	cmds = append(cmds, []string{"-n", h.ns, "link", "set", bridgeIface, "up"})
	if h.cfg.Router {
		cmds = append(cmds, h.routerLinks(mtu)...)
	}
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			return err
		}
	}
	return nil
}

func (h *Harness) startVM(i, boot int) (*vm, error) {
	// A reboot (Revive) gets a fresh share directory, so that the new VM's
	// job daemon finds neither the old "ready" file nor the dead VM's
	// jobs, and files of its own for the console and qemu's log, so that
	// the dead VM's stay readable.
	suffix := ""
	if boot > 0 {
		suffix = fmt.Sprintf("-boot%d", boot)
	}
	v := &vm{
		idx:    i,
		boot:   boot,
		ip:     h.VMIP(i),
		mac:    net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x00, byte(0x11 + i)},
		share:  filepath.Join(h.dir, fmt.Sprintf("vm%d-share%s", i, suffix)),
		exited: make(chan struct{}),
	}
	v.console = filepath.Join(h.dir, fmt.Sprintf("vm%d-console%s.log", i, suffix))
	v.qlog = filepath.Join(h.dir, fmt.Sprintf("vm%d-qemu%s.log", i, suffix))
	for _, d := range []string{filepath.Join(v.share, "new"), filepath.Join(v.share, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The options after quiet make the TCG boot cheaper: no crypto self-tests, no
	// speculation mitigations, no clocksource watchdog or timer checks.
	appendLine := fmt.Sprintf("console=ttyS0 panic=-1 quiet mitigations=off cryptomgr.notests tsc=reliable "+
		"no_timer_check audit=0 random.trust_cpu=on goroce.ip=%s/24 goroce.mtu=%d", v.ip, h.cfg.MTU)
	if h.cfg.NoRXE {
		appendLine += " goroce.norxe"
	}
	args := []string{"netns", "exec", h.ns, "qemu-system-x86_64",
		"-machine", "q35", "-cpu", "qemu64", "-smp", "1", "-m", strconv.Itoa(h.cfg.MemMB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:" + v.console,
		"-kernel", filepath.Join(h.cfg.Image, "kernel"),
		"-initrd", filepath.Join(h.cfg.Image, "initrd"),
		"-append", appendLine,
		"-netdev", fmt.Sprintf("tap,id=n0,ifname=tap%d,script=no,downscript=no", i),
		"-device", "virtio-net-pci,netdev=n0,mac=" + v.mac.String(),
		"-fsdev", "local,id=f0,path=" + v.share + ",security_model=none",
		"-device", "virtio-9p-pci,fsdev=f0,mount_tag=jobs",
	}
	if h.cfg.Router && i == 0 {
		args = append(args, "-netdev", "tap,id=n1,ifname=tap0b,script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n1,mac="+routerMAC.String())
	}
	qlog, err := os.Create(v.qlog)
	if err != nil {
		return nil, err
	}
	// `ip netns exec` execs qemu, so the PID below is qemu's.
	v.cmd = exec.Command("ip", args...)
	v.cmd.Stdout, v.cmd.Stderr = qlog, qlog
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := v.cmd.Start(); err != nil {
		qlog.Close()
		return nil, err
	}
	go func() {
		v.waitErr = v.cmd.Wait()
		qlog.Close()
		close(v.exited)
	}()
	return v, nil
}

func (h *Harness) waitReady(v *vm, deadline time.Time) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(v.share, "ready")); err == nil {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(v.share, "failed")); err == nil {
			return fmt.Errorf("VM init failed: %s", bytes.TrimSpace(b))
		}
		select {
		case <-v.exited:
			q, _ := os.ReadFile(v.qlog)
			return fmt.Errorf("qemu exited during boot: %v: %s", v.waitErr, bytes.TrimSpace(q))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", h.cfg.BootTimeout)
		}
	}
}

func (h *Harness) consoleTail(v *vm, n int) string {
	b, _ := os.ReadFile(v.console)
	return fmt.Sprintf("--- VM %d console (last %d lines) ---\n%s", v.idx, n, tail(string(b), n))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// NumVMs is the number of VMs.
func (h *Harness) NumVMs() int { return len(h.vms) }

// MTU is the MTU of every link.
func (h *Harness) MTU() int { return h.cfg.MTU }

// BridgeNS is the namespace holding the bridge, the taps, qemu and tcpdump.
func (h *Harness) BridgeNS() string { return h.ns }

// Bridge is the bridge's interface name in BridgeNS.
func (h *Harness) Bridge() string { return bridgeIface }

// HostNS is the namespace where a goroce endpoint runs (`ip netns exec`).
func (h *Harness) HostNS() string { return h.hostNS }

// HostIface is the interface in HostNS that reaches the VMs.
func (h *Harness) HostIface() string { return hostIface }

// HostIP is HostIface's address (198.18.0.1/24).
func (h *Harness) HostIP() netip.Addr { return hostIP }

// HostMAC is HostIface's MAC address.
func (h *Harness) HostMAC() net.HardwareAddr { return append(net.HardwareAddr(nil), hostMAC...) }

// VMIP is VM i's eth0 address: 198.18.0.11 + i. rxe0's GID index 1 is its
// IPv4-mapped form ::ffff:198.18.0.(11+i).
func (h *Harness) VMIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)}) }

// VMMAC is VM i's eth0 MAC address, 52:54:00:12:00:(11+i) in hex.
func (h *Harness) VMMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x00, byte(0x11 + i)}
}

// ShareDir is the host directory that VM i sees as /jobs (9p): a place to
// hand files to the VM or fetch them.
func (h *Harness) ShareDir(i int) string { return h.vm(i).share }

// vm returns VM i's current boot (Revive replaces it).
func (h *Harness) vm(i int) *vm {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vms[i]
}

// Alive reports, with the reason when not, whether VM i still runs jobs:
// its qemu has not exited and a trivial job ends within timeout. Under TCG
// on a loaded machine a healthy VM answers in well under a second.
func (h *Harness) Alive(i int, timeout time.Duration) error {
	v := h.vm(i)
	select {
	case <-v.exited:
		return fmt.Errorf("%w: %v", ErrVMExited, v.waitErr)
	default:
	}
	if r := h.Run(i, "true", timeout); !r.OK() {
		if r.Err != nil {
			return fmt.Errorf("a trivial job did not end: %w", r.Err)
		}
		return fmt.Errorf("a trivial job exited %d", r.ExitCode)
	}
	return nil
}

// Revive checks every VM with Alive and boots a new one in place of each
// that is dead (same index, address, MAC and tap; a fresh share directory,
// console and qemu log), waiting until it is ready as New does. It returns
// a description per VM it replaced: why, and the last lines of the dead
// VM's console (an oops or panic there is the first thing to read). A
// test that reuses one harness for many cells calls it after a failed
// cell, so that one dead VM does not fail every cell after it.
func (h *Harness) Revive(timeout time.Duration) ([]string, error) {
	var report []string
	for i := range h.vms {
		err := h.Alive(i, timeout)
		if err == nil {
			continue
		}
		old := h.vm(i)
		if old.cmd != nil && old.cmd.Process != nil {
			old.cmd.Process.Kill()
			select {
			case <-old.exited:
			case <-time.After(10 * time.Second):
				return report, fmt.Errorf("interop: VM %d: qemu (pid %d) did not exit after SIGKILL", i, old.cmd.Process.Pid)
			}
		}
		report = append(report, fmt.Sprintf("VM %d (boot %d) was dead: %v\n%s", i, old.boot, err, h.consoleTail(old, 60)))
		t0 := time.Now()
		v, err := h.startVM(i, old.boot+1)
		if err != nil {
			return report, fmt.Errorf("interop: VM %d: reboot: %w", i, err)
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			v.cmd.Process.Kill()
			<-v.exited
			return report, errors.New("interop: harness closed during Revive")
		}
		h.vms[i] = v
		h.mu.Unlock()
		if err := h.waitReady(v, time.Now().Add(h.cfg.BootTimeout)); err != nil {
			return report, fmt.Errorf("interop: VM %d: reboot: %w\n%s", i, err, h.consoleTail(v, 30))
		}
		report = append(report, fmt.Sprintf("VM %d rebooted (boot %d) in %.1fs", i, v.boot, time.Since(t0).Seconds()))
	}
	return report, nil
}

// HostExec returns a command that runs name with args inside HostNS.
func (h *Harness) HostExec(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.hostNS, name}, args...)...)
}

// HostDo runs fn on an OS thread switched into HostNS. Sockets that fn opens
// belong to HostNS for their whole life and may be used from any goroutine
// afterwards; goroutines that fn starts do not run in HostNS.
func (h *Harness) HostDo(fn func() error) error { return nsDo(h.hostNS, fn) }

// nsDo runs fn on a locked OS thread inside the named network namespace.
func nsDo(name string, fn func() error) error {
	target, err := os.Open(filepath.Join("/run/netns", name))
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	origin, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer origin.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is stuck in the namespace: leave it locked so that the
		// runtime discards it when this goroutine ends.
		return errors.Join(ferr, fmt.Errorf("setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// writeSysctls writes /proc/sys entries of the calling thread's namespace.
func writeSysctls(kv map[string]string) error {
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}

// Close stops captures, qemu (by PID) and deletes the namespaces. It is safe
// to call more than once; New registers it with t.Cleanup.
func (h *Harness) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	caps := h.captures
	procs := h.procs
	h.mu.Unlock()
	t0 := time.Now()
	defer func() {
		if debugJobs {
			h.t.Logf("interop: Close took %.2fs", time.Since(t0).Seconds())
		}
	}()
	for _, c := range caps {
		c.stopProcess()
	}
	for _, p := range procs {
		p.Kill()
	}
	for _, v := range h.vms {
		if v.cmd == nil || v.cmd.Process == nil {
			continue
		}
		v.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-v.exited:
		case <-time.After(5 * time.Second):
			v.cmd.Process.Kill()
			<-v.exited
		}
	}
	if h.t.Failed() {
		for _, v := range h.vms {
			h.t.Log(h.consoleTail(v, 40))
		}
	}
	for _, ns := range h.created {
		if err := ip("netns", "del", ns); err != nil {
			h.t.Errorf("interop: %v", err)
			continue // the marker lets a later harness retry
		}
		os.Remove(filepath.Join(markerDir, ns))
	}
}

// markerDir holds the ownership markers of the harnesses' namespaces
// (internal/netns MarkOwned): a subdirectory of internal/netns's own, which
// its sweep leaves alone.
const markerDir = "/run/goroce-netns/interop"

// cleanStale removes the namespaces left by interop harnesses of processes
// that have exited (a test binary killed before its cleanup ran), stopping
// the processes still inside them by PID. Only namespaces whose marker in
// markers proves them ours and stale are touched (netns.StaleOwned): never
// one of a live harness, of another PID namespace, or without a marker.
func cleanStale(markers, namespaces string) {
	for _, name := range netns.StaleOwned(markers) {
		if _, err := os.Stat(filepath.Join(namespaces, name)); err == nil {
			out, _ := exec.Command("ip", "netns", "pids", name).Output()
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if p, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && p > 1 {
					syscall.Kill(p, syscall.SIGKILL)
				}
			}
			if ip("netns", "del", name) != nil {
				continue
			}
		}
		os.Remove(filepath.Join(markers, name))
	}
}
