//go:build linux

package qp_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/vishvananda/netlink"
)

// TestInterfaceAutoFallbackInUserNamespace runs the auto backend where AF_XDP is
// really unavailable: inside a new user and network namespace (`unshare
// -Urn`), the process has CAP_NET_ADMIN and CAP_NET_RAW over its own network
// namespace — enough for a veth pair and AF_PACKET — but loading BPF
// programs needs CAP_BPF/CAP_SYS_ADMIN in the initial user namespace. The
// test re-executes its own binary there; the inner run must get AF_PACKET
// with the AF_XDP error recorded as Info.Fallback. It then runs an RDMA
// WRITE and READ between two UDP-backend devices there, which need no
// privileges at all.
func TestInterfaceAutoFallbackInUserNamespace(t *testing.T) {
	if os.Getenv("GOROCE_QP_USERNS") == "1" {
		fallbackInner(t)
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skipOrFail(t, "needs util-linux unshare")
	}
	cmd := exec.Command(unshare, "-Urn", os.Args[0], "-test.run", "^TestInterfaceAutoFallbackInUserNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), "GOROCE_QP_USERNS=1")
	out, err := cmd.CombinedOutput()
	if err != nil && (strings.Contains(string(out), "unshare failed") || strings.Contains(string(out), "Operation not permitted")) &&
		!strings.Contains(string(out), "--- FAIL") {
		skipOrFail(t, "unprivileged user namespaces not available: "+strings.TrimSpace(string(out)))
	}
	t.Logf("inner run:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestInterfaceAutoFallbackInUserNamespace") {
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
	// Loopback carries the datagrams between the two addresses of this
	// namespace (UDP part); a new namespace starts with it down.
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fbA"}, PeerName: "fbB"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("veth in the private namespace: %v", err)
	}
	for _, n := range []string{"fbA", "fbB"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		last := byte(1)
		if n == "fbB" {
			last = 2
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 1, last), Mask: net.CIDRMask(24, 32)}}
		if err := netlink.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	dev, info, err := qp.OpenInterface(context.Background(), "fbA", qp.InterfaceOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	defer dev.Close()
	t.Logf("\n%s", info)
	if info.Backend != qp.BackendAFPacket || info.Fallback == "" || !strings.Contains(info.Fallback, "not supported") {
		t.Fatalf("backend %q, fallback %q: want afpacket after an AF_XDP NotSupportedError", info.Backend, info.Fallback)
	}
	if !strings.Contains(info.String(), "fallback:") {
		t.Errorf("Info.String does not show the fallback")
	}
	dev.Close()
	udpWithoutPrivileges(t)
}

// udpWithoutPrivileges runs an RDMA WRITE and READ between two UDP-backend
// devices in the private namespace (no capability in the initial user
// namespace is involved: the UDP backend needs none).
func udpWithoutPrivileges(t *testing.T) {
	var infoA, infoB *qp.InterfaceInfo
	mk := func(ifname string, info **qp.InterfaceInfo) *qp.Device {
		dev, i, err := qp.OpenInterface(context.Background(), ifname, qp.InterfaceOptions{Backend: qp.BackendUDP, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		*info = i
		return dev
	}
	a, b := connectEnds(t, mk("fbA", &infoA), mk("fbB", &infoB), sim.QPOptions{BufSize: 64 << 10, CQSize: 16, SharedCQ: true,
		Access: qp.LocalWrite | qp.RemoteWrite | qp.RemoteRead, Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}, 9, 7)
	for i := range a.buf {
		a.buf[i] = byte(i*13 + 1)
	}
	const n = 20000
	for _, op := range []qp.WROpcode{qp.WRRDMAWrite, qp.WRRDMARead} {
		off := uint64(0)
		if op == qp.WRRDMARead {
			off = n // read back into the second part of a.buf
		}
		err := a.q.PostSend(&qp.SendWR{Opcode: op, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: a.mr.IOVA() + off, Length: n, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var wc [1]qp.WC
		k, err := a.cq.Wait(ctx, wc[:])
		cancel()
		if k != 1 || err != nil || wc[0].Status != qp.WCSuccess {
			t.Fatalf("%v: completion %v, %v; rx A %+v B %+v; link A %+v B %+v", op, wc[0], err,
				a.dev.RxStats(), b.dev.RxStats(), infoA.Link.Stats(), infoB.Link.Stats())
		}
	}
	b.dev.Counters() // order with b's receive goroutine (placement happened before the ACK)
	if !bytes.Equal(b.buf[:n], a.buf[:n]) || !bytes.Equal(a.buf[n:2*n], a.buf[:n]) {
		t.Fatalf("data differs after the unprivileged WRITE/READ")
	}
	t.Logf("UDP backend: %d-byte WRITE and READ between 198.18.1.1 and 198.18.1.2 without privileges", n)
}
