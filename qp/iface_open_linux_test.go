//go:build linux

package qp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/qp"
	"github.com/vishvananda/netlink"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t *testing.T, p *netns.Pair, s netns.Side, o qp.InterfaceOptions) (*qp.Device, *qp.InterfaceInfo) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	var dev *qp.Device
	var info *qp.InterfaceInfo
	err := p.Do(s, func() error {
		var err error
		dev, info, err = qp.OpenInterface(context.Background(), p.End(s).Ifname, o)
		return err
	})
	if err != nil {
		t.Fatalf("qp.OpenInterface(context.Background(), %s, %s): %v", p.End(s).Ifname, o.Backend, err)
	}
	return dev, info
}

// portFree reports whether ip:4791 can be bound in side's namespace.
func portFree(t *testing.T, p *netns.Pair, s netns.Side, ip netip.Addr) bool {
	t.Helper()
	free := false
	err := p.Do(s, func() error {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 4791)))
		if err == nil {
			free = true
			return c.Close()
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return free
}

func xdpAttached(t *testing.T, p *netns.Pair, s netns.Side) bool {
	t.Helper()
	h, err := p.Handle(s)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(p.End(s).Ifname)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && (x.Attached || x.ProgId != 0)
}

// addrCount is the number of addresses on side's veth (Close must delete
// nothing).
func addrCount(t *testing.T, p *netns.Pair, s netns.Side) int {
	t.Helper()
	h, err := p.Handle(s)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(p.End(s).Ifname)
	if err != nil {
		t.Fatalf("interface gone: %v", err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	return len(as)
}

func TestOpenInterfaceEachBackend(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		p := netns.NewPair(t, netns.Options{MTU: mtu, NoDAD: true})
		for _, backend := range []string{qp.BackendAuto, qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
			t.Run(backend+"/"+itoa(mtu), func(t *testing.T) {
				before := addrCount(t, p, netns.A)
				dev, info := open(t, p, netns.A, qp.InterfaceOptions{Backend: backend})
				t.Logf("\n%s", info)
				want := backend
				if backend == qp.BackendAuto {
					want = qp.BackendAFXDP
				}
				if info.Backend != want {
					t.Errorf("backend %q, want %q (fallback: %s)", info.Backend, want, info.Fallback)
				}
				if info.IP != p.A.Addr {
					t.Errorf("IP %v, want the interface's IPv4 %v", info.IP, p.A.Addr)
				}
				if g, _ := dev.GID(dev.IPv4GIDIndex()); g != netip.AddrFrom16(p.A.Addr.As16()) {
					t.Errorf("GID[1] %v", g)
				}
				wantPMTU := map[int]int{1500: 1024, 9000: 4096}[mtu]
				if want == qp.BackendAFXDP && mtu == 9000 {
					// Multi-buffer AF_XDP: frames span 4096-byte UMEM
					// chunks, and the frags-aware program attaches natively.
					if info.Mode != "native" || !info.MultiBuffer || info.LinkMTU != 9000 {
						t.Errorf("mode %q multi-buffer %v link MTU %d at MTU 9000, want native multi-buffer 9000",
							info.Mode, info.MultiBuffer, info.LinkMTU)
					}
					if !strings.Contains(info.String(), "(native, multi-buffer)") {
						t.Errorf("Info.String does not say multi-buffer:\n%s", info)
					}
				}
				if info.PathMTU != wantPMTU || int(dev.ActiveMTU().Bytes()) != wantPMTU {
					t.Errorf("path MTU %d, want %d (link MTU %d)", info.PathMTU, wantPMTU, info.LinkMTU)
				}
				if !strings.Contains(info.String(), "GID[  1]:\t\t::ffff:"+p.A.Addr.String()+", RoCE v2") {
					t.Errorf("Info.String lacks the GID line:\n%s", info)
				}
				raw := want != qp.BackendUDP
				if info.PortHeld != raw {
					t.Errorf("PortHeld %v with backend %s", info.PortHeld, want)
				}
				if portFree(t, p, netns.A, p.A.Addr) {
					t.Errorf("UDP %v:4791 is free while the device is open", p.A.Addr)
				}
				if got := xdpAttached(t, p, netns.A); got != (want == qp.BackendAFXDP) {
					t.Errorf("XDP program attached: %v with backend %s", got, want)
				}
				if err := dev.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				if xdpAttached(t, p, netns.A) {
					t.Errorf("XDP program still attached after Close")
				}
				if !portFree(t, p, netns.A, p.A.Addr) {
					t.Errorf("UDP %v:4791 still bound after Close", p.A.Addr)
				}
				if after := addrCount(t, p, netns.A); after != before {
					t.Errorf("addresses %d after Close, %d before", after, before)
				}
			})
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestOpenInterfaceErrors(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	foreign := p.A.Addr.As4()
	foreign[3] = 77 // in the pair's /24 but on neither end
	cases := []struct {
		name, ifname string
		o            qp.InterfaceOptions
		want         string
	}{
		{"unknown backend", p.A.Ifname, qp.InterfaceOptions{Backend: "dpdk"}, "unknown backend"},
		{"no interface", "nonexistent0", qp.InterfaceOptions{Backend: qp.BackendAFPacket}, "nonexistent0"},
		{"foreign IP", p.A.Ifname, qp.InterfaceOptions{Backend: qp.BackendAFPacket, IP: netip.AddrFrom4(foreign)}, "not an address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.o.Logger = quiet
			err := p.Do(netns.A, func() error {
				dev, _, err := qp.OpenInterface(context.Background(), c.ifname, c.o)
				if dev != nil {
					dev.Close()
				}
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	// A failed Open released what it took: the port is free.
	if !portFree(t, p, netns.A, p.A.Addr) {
		t.Errorf("port held after failed Opens")
	}
}

// TestResolveUnreachable connects to an address nobody has: the error says
// the neighbour is unresolved, after the configured timeout, and is raised
// from a goroutine whose thread is not in the device's namespace.
func TestInterfaceResolveUnreachable(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	dev, _ := open(t, p, netns.A, qp.InterfaceOptions{Backend: qp.BackendAFPacket, ResolveTimeout: 300 * time.Millisecond})
	defer dev.Close()
	pd := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	q, err := pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	nobody := p.A.Addr.As4()
	nobody[3] = 99
	err = q.Connect(context.Background(), qp.Remote{QPN: 0x11, GID: netip.AddrFrom4(nobody)}, qp.ConnectOptions{})
	if !errors.Is(err, netaddr.ErrUnresolved) {
		t.Fatalf("Connect to %v: %v, want ErrUnresolved", netip.AddrFrom4(nobody), err)
	}
	t.Logf("error: %v", err)
	// The peer that exists resolves (from this goroutine, outside the namespace).
	if err := q.Connect(context.Background(), qp.Remote{QPN: 0x11, GID: p.B.Addr}, qp.ConnectOptions{}); err != nil {
		t.Fatalf("Connect to %v: %v", p.B.Addr, err)
	}
}

// TestOpenLinkAndPassProgram: OpenLink holds the port and (AF_XDP) the
// program until the link is closed; PassProgram puts an XDP program on an
// AF_PACKET end and Close removes it.
func TestOpenInterfaceLinkAndPassProgram(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	var l interface{ Close() error }
	var info *qp.InterfaceInfo
	if err := p.Do(netns.A, func() error {
		var err error
		l, info, err = qp.OpenInterfaceLink(context.Background(), p.A.Ifname, qp.InterfaceOptions{Backend: qp.BackendAFXDP, Logger: quiet})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if info.PathMTU != 1024 || !info.PortHeld || !xdpAttached(t, p, netns.A) || portFree(t, p, netns.A, p.A.Addr) {
		t.Errorf("OpenLink: path MTU %d, held %v, XDP %v", info.PathMTU, info.PortHeld, xdpAttached(t, p, netns.A))
	}
	l.Close()
	if xdpAttached(t, p, netns.A) || !portFree(t, p, netns.A, p.A.Addr) {
		t.Errorf("after Close: XDP attached %v, port free %v", xdpAttached(t, p, netns.A), portFree(t, p, netns.A, p.A.Addr))
	}

	dev, _ := open(t, p, netns.B, qp.InterfaceOptions{Backend: qp.BackendAFPacket, PassProgram: true})
	if !xdpAttached(t, p, netns.B) {
		t.Errorf("PassProgram: no XDP program on %s", p.B.Ifname)
	}
	dev.Close()
	if xdpAttached(t, p, netns.B) {
		t.Errorf("PassProgram: XDP program left after Close")
	}
}
