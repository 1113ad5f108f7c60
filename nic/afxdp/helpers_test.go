//go:build linux

package afxdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// requireRoot skips a privileged test with a reason, or fails it under CI.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Getenv("GOROCE_UNPRIVILEGED") == "1" {
		t.Skip("GOROCE_UNPRIVILEGED=1 (make test): the privileged suites run in make check")
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("ip"); err == nil {
			return
		}
		skipOrFail(t, "needs iproute2's ip command")
	}
	skipOrFail(t, "needs root (AF_XDP, BPF, network namespaces)")
}

func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("privileged test skipped under CI=true: %s", reason)
	}
	t.Skip(reason)
}

var nsSeq atomic.Uint32

// run runs a command and fails the test if it fails.
func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newNetNS creates a named network namespace, deleted at cleanup.
func newNetNS(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("goroce-afxdp-%d-%d", os.Getpid(), nsSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// inNS runs fn on an OS thread switched into the namespace ns. Sockets,
// BPF links and netlink sockets created by fn belong to ns and may be used
// from any goroutine afterwards.
func inNS(ns string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it is discarded when the goroutine ends.
		return fmt.Errorf("restoring namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// vethPair is two namespaces joined by a veth pair, 198.18.20.1/24 (a) and
// 198.18.20.2/24 (b), no routes out.
type vethPair struct {
	nsA, nsB   string
	ifA, ifB   string
	macA, macB net.HardwareAddr
	ipA, ipB   net.IP
}

func newVethPair(t testing.TB, mtu int) *vethPair {
	t.Helper()
	requireRoot(t)
	p := &vethPair{
		nsA: newNetNS(t), nsB: newNetNS(t),
		ifA: "veth-a", ifB: "veth-b",
		macA: net.HardwareAddr{0x02, 0, 0, 0, 0x20, 0x01},
		macB: net.HardwareAddr{0x02, 0, 0, 0, 0x20, 0x02},
		ipA:  net.IPv4(198, 18, 20, 1).To4(),
		ipB:  net.IPv4(198, 18, 20, 2).To4(),
	}
	m := fmt.Sprint(mtu)
	run(t, "ip", "-n", p.nsA, "link", "add", p.ifA, "address", p.macA.String(), "mtu", m, "type", "veth",
		"peer", "name", p.ifB, "address", p.macB.String(), "mtu", m, "netns", p.nsB)
	for _, s := range []struct{ ns, ifn, addr string }{{p.nsA, p.ifA, "198.18.20.1/24"}, {p.nsB, p.ifB, "198.18.20.2/24"}} {
		run(t, "ip", "-n", s.ns, "addr", "add", s.addr, "dev", s.ifn)
		run(t, "ip", "-n", s.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", s.ns, "link", "set", s.ifn, "up")
	}
	return p
}

// open opens AF_XDP on one end of the pair and closes it at cleanup.
func (p *vethPair) open(t testing.TB, ns, ifname string, opts Options) *Link {
	t.Helper()
	var l *Link
	err := inNS(ns, func() (err error) {
		l, err = Open(ifname, 0, opts)
		return err
	})
	if err != nil {
		if _, ok := err.(*NotSupportedError); ok {
			skipOrFail(t, err.Error())
		}
		t.Fatalf("Open(%s): %v", ifname, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// xdpShown reports whether `ip link show` lists an XDP program on ifname.
func xdpShown(t testing.TB, ns, ifname string) bool {
	out := run(t, "ip", "-n", ns, "link", "show", "dev", ifname)
	return strings.Contains(out, "prog/xdp")
}

// buildFrame writes an Ethernet + IPv4 + UDP frame of exactly size bytes
// into b (which must be large enough) and returns it. The payload starts
// with seq (big endian), then bytes derived from seq, so a receiver can
// check order and integrity. UDP checksum 0, as RoCEv2 sends it.
func buildFrame(b []byte, size int, dst, src net.HardwareAddr, sip, dip net.IP, dport uint16, seq uint32) []byte {
	const hdr = 14 + 20 + 8
	b = b[:size]
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	binary.BigEndian.PutUint16(ip[4:], uint16(seq))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[10:], 0)
	copy(ip[12:16], sip.To4())
	copy(ip[16:20], dip.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 49152)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	binary.BigEndian.PutUint16(udp[6:], 0)
	pl := b[hdr:]
	binary.BigEndian.PutUint32(pl, seq)
	for i := 4; i < len(pl); i++ {
		pl[i] = byte(seq) + byte(i)
	}
	return b
}

// checkFrame verifies a frame built by buildFrame and returns its seq.
func checkFrame(f []byte) (uint32, error) {
	const hdr = 14 + 20 + 8
	if len(f) < hdr+4 {
		return 0, fmt.Errorf("short frame: %d bytes", len(f))
	}
	if ipChecksum(f[14:34]) != 0 {
		return 0, fmt.Errorf("bad IPv4 checksum")
	}
	if n := int(binary.BigEndian.Uint16(f[16:])) + 14; n != len(f) {
		return 0, fmt.Errorf("length %d, IPv4 says %d", len(f), n)
	}
	pl := f[hdr:]
	seq := binary.BigEndian.Uint32(pl)
	for i := 4; i < len(pl); i++ {
		if pl[i] != byte(seq)+byte(i) {
			return seq, fmt.Errorf("seq %d: payload byte %d corrupt", seq, i)
		}
	}
	return seq, nil
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
