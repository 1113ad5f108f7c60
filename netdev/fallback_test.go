package netdev

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestAutoFallbackInUserNamespace runs the auto backend where AF_XDP is
// really unavailable: inside a new user and network namespace (`unshare
// -Urn`), the process has CAP_NET_ADMIN and CAP_NET_RAW over its own network
// namespace — enough for a veth pair and AF_PACKET — but loading BPF
// programs needs CAP_BPF/CAP_SYS_ADMIN in the initial user namespace. The
// test re-executes its own binary there; the inner run must get AF_PACKET
// with the AF_XDP error recorded as Info.Fallback.
func TestAutoFallbackInUserNamespace(t *testing.T) {
	if os.Getenv("GOROCE_NETDEV_USERNS") == "1" {
		fallbackInner(t)
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skipOrFail(t, "needs util-linux unshare")
	}
	cmd := exec.Command(unshare, "-Urn", os.Args[0], "-test.run", "^TestAutoFallbackInUserNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), "GOROCE_NETDEV_USERNS=1")
	out, err := cmd.CombinedOutput()
	if err != nil && (strings.Contains(string(out), "unshare failed") || strings.Contains(string(out), "Operation not permitted")) &&
		!strings.Contains(string(out), "--- FAIL") {
		skipOrFail(t, "unprivileged user namespaces not available: "+strings.TrimSpace(string(out)))
	}
	t.Logf("inner run:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestAutoFallbackInUserNamespace") {
		t.Fatalf("inner run failed: %v", err)
	}
}

func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true forbids skipping", reason)
	}
	t.Skip(reason)
}

func fallbackInner(t *testing.T) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fbA"}, PeerName: "fbB"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("veth in the private namespace: %v", err)
	}
	for _, n := range []string{"fbA", "fbB"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if n == "fbA" {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 1, 1), Mask: net.CIDRMask(24, 32)}}
			if err := netlink.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	dev, info, err := Open("fbA", Options{Logger: quiet})
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	defer dev.Close()
	t.Logf("\n%s", info)
	if info.Backend != AFPacket || info.Fallback == "" || !strings.Contains(info.Fallback, "not supported") {
		t.Fatalf("backend %q, fallback %q: want afpacket after an AF_XDP NotSupportedError", info.Backend, info.Fallback)
	}
	if !strings.Contains(info.String(), "fallback:") {
		t.Errorf("Info.String does not show the fallback")
	}
}
