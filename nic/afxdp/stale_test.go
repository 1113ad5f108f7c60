//go:build linux

package afxdp

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// attachLegacy attaches an XDP_PASS program named name to ifname through
// netlink (IFLA_XDP, generic mode) and closes its fd: like a program left by
// a crashed run or by `ip link set dev X xdp ...`, it stays attached.
func attachLegacy(t *testing.T, ns, ifname, name string) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.XDP, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	err = inNS(ns, func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(l, prog.FD(), unix.XDP_FLAGS_SKB_MODE)
	})
	if err != nil {
		t.Fatalf("legacy attach: %v", err)
	}
}

func TestStaleProgramReplaced(t *testing.T) {
	p := newVethPair(t, 1500)
	attachLegacy(t, p.nsB, p.ifB, redirectProgName)
	if !xdpShown(t, p.nsB, p.ifB) {
		t.Fatal("legacy program not attached")
	}
	b := p.open(t, p.nsB, p.ifB, Options{})
	a := p.open(t, p.nsA, p.ifA, Options{})
	const N = 100
	wait := readAsync(b, 0, N)
	sendFrames(t, a, p, p.macB, 0, N, roceUDPPort)
	if err := wait(); err != nil {
		t.Fatalf("after replacing the stale program: %v", err)
	}
	b.Close()
	if xdpShown(t, p.nsB, p.ifB) {
		t.Error("an XDP program is still attached after Close")
	}
}

func TestForeignProgramKept(t *testing.T) {
	p := newVethPair(t, 1500)
	attachLegacy(t, p.nsB, p.ifB, "someone_else")
	err := inNS(p.nsB, func() error {
		l, err := Open(p.ifB, 0, Options{})
		if err == nil {
			l.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "someone_else") {
		t.Fatalf("Open over a foreign program: %v, want an error naming it", err)
	}
	if !xdpShown(t, p.nsB, p.ifB) {
		t.Error("the foreign program was removed")
	}
}

// TestSecondOpenRefused: a program held by a live bpf_link (another Link,
// here in the same process) is not taken over.
func TestSecondOpenRefused(t *testing.T) {
	p := newVethPair(t, 1500)
	b := p.open(t, p.nsB, p.ifB, Options{})
	err := inNS(p.nsB, func() error {
		l, err := Open(p.ifB, 0, Options{})
		if err == nil {
			l.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "live bpf_link") {
		t.Fatalf("second Open: %v, want a live bpf_link error", err)
	}
	if !xdpShown(t, p.nsB, p.ifB) || b.Mode() == "" {
		t.Error("the first Link lost its program")
	}
}
