//go:build linux

package qp_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/qp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An interface that does not exist matches qp.ErrNoInterface, whatever
// the backend (no privilege needed to find that out).
func TestOpenInterfaceNoInterface(t *testing.T) {
	for _, b := range []string{qp.BackendAuto, qp.BackendUDP, qp.BackendAFPacket} {
		_, _, err := qp.OpenInterface(context.Background(), "goroce-nosuch9", qp.InterfaceOptions{Backend: b, Logger: quiet})
		if !errors.Is(err, qp.ErrNoInterface) || errors.Is(err, qp.ErrPermission) {
			t.Errorf("backend %q: %v, want qp.ErrNoInterface", b, err)
		}
	}
}

// TestOpenInterfacePermission opens each backend as a process without
// capabilities: the test re-executes itself in a new network namespace
// (unshare -n, as root), where the inner run brings lo up and drops to
// uid 65534 (setuid drops every capability) before opening. The raw
// backends must fail with qp.ErrPermission (and os.ErrPermission) naming
// the capabilities and the udp backend; the udp backend must open.
func TestOpenInterfacePermission(t *testing.T) {
	if os.Getenv("GOROCE_QP_NOPRIV") == "1" {
		permissionInner(t)
		return
	}
	netns.RequireRoot(t) // to create the namespace the unprivileged run happens in
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skipOrFail(t, "needs util-linux unshare")
	}
	cmd := exec.Command(unshare, "-n", os.Args[0], "-test.run", "^TestOpenInterfacePermission$", "-test.v")
	cmd.Env = append(os.Environ(), "GOROCE_QP_NOPRIV=1")
	out, err := cmd.CombinedOutput()
	t.Logf("inner run:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOpenInterfacePermission") {
		t.Fatalf("inner run failed: %v", err)
	}
}

func permissionInner(t *testing.T) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	// Go's Setuid changes every thread of the process; a non-zero uid
	// clears the effective capabilities.
	if err := syscall.Setgid(65534); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(65534); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ backend, needs string }{
		{qp.BackendAFPacket, "CAP_NET_RAW"},
		{qp.BackendAFXDP, "CAP_BPF"},
		{qp.BackendAuto, "CAP_NET_RAW"},
	} {
		_, _, err := qp.OpenInterface(context.Background(), "lo", qp.InterfaceOptions{Backend: c.backend, Logger: quiet})
		t.Logf("%s: %v", c.backend, err)
		if !errors.Is(err, qp.ErrPermission) || !errors.Is(err, os.ErrPermission) {
			t.Errorf("backend %q without privileges: %v, want qp.ErrPermission", c.backend, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.needs) || !strings.Contains(msg, "GOROCE_BACKEND=udp") {
			t.Errorf("backend %q: message %q names neither %s nor GOROCE_BACKEND=udp", c.backend, msg, c.needs)
		}
	}
	dev, info, err := qp.OpenInterface(context.Background(), "lo", qp.InterfaceOptions{Backend: qp.BackendUDP, Logger: quiet})
	if err != nil {
		t.Fatalf("udp backend without privileges: %v", err)
	}
	t.Logf("udp: %s on %v", info.Backend, info.IP)
	dev.Close()
}

// TestOpenInterfaceBusy: a second open of an interface this process
// already holds through AF_XDP (as another goroce would) fails with
// afxdp.ErrBusy and afxdp.ErrHeldByGoroce and says what to do, on the
// afxdp backend and on auto too: goroce's XDP program takes every RoCEv2
// frame, so an AF_PACKET fallback there would open and receive nothing.
// On an interface that a foreign XDP program holds, auto falls back to
// AF_PACKET (which sees what that program passes).
func TestOpenInterfaceBusy(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	dev, info := open(t, p, netns.A, qp.InterfaceOptions{Backend: qp.BackendAFXDP})
	defer dev.Close()
	if info.Backend != qp.BackendAFXDP {
		t.Fatalf("first open: %s", info.Backend)
	}
	for _, b := range []string{qp.BackendAFXDP, qp.BackendAuto} {
		err := p.Do(netns.A, func() error {
			d, _, err := qp.OpenInterface(context.Background(), p.A.Ifname, qp.InterfaceOptions{Backend: b, Logger: quiet})
			if err == nil {
				d.Close()
			}
			return err
		})
		t.Logf("second %s open: %v", b, err)
		if !errors.Is(err, afxdp.ErrBusy) || !errors.Is(err, afxdp.ErrHeldByGoroce) || !strings.Contains(err.Error(), "receive nothing") {
			t.Fatalf("second %s open: %v, want afxdp.ErrHeldByGoroce saying a second device would receive nothing", b, err)
		}
	}

	// A foreign XDP program (XDP_PASS, not goroce's) on B's interface.
	err := p.Do(netns.B, func() error {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "foreign_pass", Type: ebpf.XDP, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()},
		})
		if err != nil {
			return err
		}
		defer prog.Close()
		nl, err := netlink.LinkByName(p.B.Ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetXdpFdWithFlags(nl, prog.FD(), unix.XDP_FLAGS_SKB_MODE)
	})
	if err != nil {
		t.Fatalf("attach a foreign XDP program: %v", err)
	}
	dev2, info2 := open(t, p, netns.B, qp.InterfaceOptions{})
	defer dev2.Close()
	if info2.Backend != qp.BackendAFPacket || !strings.Contains(info2.Fallback, "not goroce's") {
		t.Fatalf("auto beside a foreign XDP program: backend %s, fallback %q; want afpacket after AF_XDP's busy error", info2.Backend, info2.Fallback)
	}
}

// TestOpenInterfaceQuietByDefault: with a nil Logger, opening (and
// closing) a device on every backend writes nothing to slog.Default — the
// library logs only to the logger it is given.
func TestOpenInterfaceQuietByDefault(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	for _, b := range []string{qp.BackendAuto, qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		err := p.Do(netns.A, func() error {
			dev, _, err := qp.OpenInterface(context.Background(), p.A.Ifname, qp.InterfaceOptions{Backend: b})
			if err != nil {
				return err
			}
			return dev.Close()
		})
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	if buf.Len() != 0 {
		t.Fatalf("opening with a nil Logger wrote to slog.Default:\n%s", buf.String())
	}
}
