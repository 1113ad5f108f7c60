package netaddr

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/vishvananda/netlink"
)

func TestDefaultGID(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	if g := DefaultGID(mac).String(); g != "fe80::ff:fe00:a" {
		t.Fatalf("got %s", g)
	}
	mac, _ = net.ParseMAC("e4:1d:2d:ab:2b:c2")
	if g := DefaultGID(mac).String(); g != "fe80::e61d:2dff:feab:2bc2" {
		t.Fatalf("got %s", g)
	}
	if !DefaultGID(net.HardwareAddr{1, 2}).IsZero() {
		t.Fatal("short MAC gave a GID")
	}
}

func TestGIDFromIP(t *testing.T) {
	g := GIDFromIP(netip.MustParseAddr("198.18.0.1"))
	if g.String() != "::ffff:198.18.0.1" || !g.IsIPv4() || g.Addr() != netip.MustParseAddr("198.18.0.1") {
		t.Fatalf("got %s %v %v", g, g.IsIPv4(), g.Addr())
	}
	// The wire bytes as rxe's captures show them (00 x10, ff ff, 198.18.0.17).
	want := GID{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 17}
	if GIDFromIP(netip.MustParseAddr("198.18.0.17")) != want {
		t.Fatal("wire bytes differ")
	}
}

func TestGIDTableOrder(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	addrs := []netip.Addr{
		netip.MustParseAddr("fe80::ff:fe00:a"), // equals the default GID: not repeated
		netip.MustParseAddr("198.18.0.1"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("198.18.1.1"),
	}
	tab := GIDTable(mac, addrs)
	want := []string{"fe80::ff:fe00:a", "::ffff:198.18.0.1", "::ffff:198.18.1.1", "2001:db8::1"}
	if len(tab) != len(want) {
		t.Fatalf("table %v", tab)
	}
	for i := range want {
		if tab[i].String() != want[i] {
			t.Fatalf("GID[%d] = %s, want %s", i, tab[i], want[i])
		}
	}
	ifc := &Interface{GIDs: tab}
	out := ifc.FormatGIDs()
	if !strings.Contains(out, "\t\t\tGID[  1]:\t\t::ffff:198.18.0.1, RoCE v2\n") {
		t.Fatalf("format:\n%s", out)
	}
	if i, ok := ifc.GIDIndex(netip.MustParseAddr("198.18.1.1")); !ok || i != 2 {
		t.Fatalf("GIDIndex = %d %v", i, ok)
	}
}

func TestPathMTU(t *testing.T) {
	for _, c := range []struct{ netdev, rxe, iboe int }{
		{1500, 1024, 1024},
		{9000, 4096, 4096},
		{3000, 2048, 2048},
		{1104, 1024, 512}, // 1104-80 = 1024 fits rxe; 1104-96 = 1008 does not
		{1120, 1024, 1024},
		{336, 256, 0},
		{335, 0, 0},
		{4176, 4096, 2048}, // 4176-96 = 4080
		{4175, 2048, 2048},
		{0, 0, 0},
	} {
		if got := PathMTU(c.netdev); got != c.rxe {
			t.Errorf("PathMTU(%d) = %d, want %d", c.netdev, got, c.rxe)
		}
		if got := PathMTUIBoE(c.netdev); got != c.iboe {
			t.Errorf("PathMTUIBoE(%d) = %d, want %d", c.netdev, got, c.iboe)
		}
	}
	for e := 1; e <= 5; e++ {
		if MTUEnum(MTUFromEnum(e)) != e {
			t.Errorf("enum %d does not round-trip", e)
		}
	}
	if MTUEnum(1500) != 0 || MTUFromEnum(6) != 0 {
		t.Error("invalid values accepted")
	}
}

func TestLookupLoopback(t *testing.T) {
	// No privileges needed to read.
	ifc, err := Lookup("lo")
	if err != nil {
		t.Skipf("no lo here: %v", err)
	}
	if ifc.MTU <= 0 || ifc.Index <= 0 {
		t.Fatalf("%+v", ifc)
	}
	if _, err := Lookup("does-not-exist0"); err == nil {
		t.Fatal("no error for a missing interface")
	}
}

func TestNetnsAddressing(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 9000, NoDAD: true})
	err := p.Do(netns.A, func() error {
		ifc, err := Lookup(p.A.Ifname)
		if err != nil {
			return err
		}
		t.Logf("%s:\n%s", ifc.Name, ifc.FormatGIDs())
		if ifc.MAC.String() != p.A.MAC.String() || ifc.MTU != 9000 || ifc.PathMTU() != 4096 {
			t.Errorf("interface %+v", ifc)
		}
		if len(ifc.GIDs) < 2 || ifc.GIDs[0] != DefaultGID(p.A.MAC) || ifc.GIDs[1] != GIDFromIP(p.A.Addr) {
			t.Errorf("GID table %v", ifc.GIDs)
		}
		// The kernel's own link-local address (EUI-64 by default) is the
		// default GID and must not appear twice.
		for i, g := range ifc.GIDs[1:] {
			if g == ifc.GIDs[0] {
				t.Errorf("default GID repeated at %d", i+1)
			}
		}

		// The NTF_USE trigger itself is accepted by this kernel (no fallback).
		l, err := netlink.LinkByName(p.A.Ifname)
		if err != nil {
			return err
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4,
			Flags: netlink.NTF_USE, IP: p.A.Prefix.Addr().Next().Next().Next().AsSlice()}); err != nil {
			t.Errorf("NTF_USE request: %v", err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mac, err := ResolveMAC(ctx, p.A.Ifname, p.B.Addr)
		if err != nil {
			return err
		}
		if mac.String() != p.B.MAC.String() {
			t.Errorf("ResolveMAC = %v, want %v", mac, p.B.MAC)
		}
		// IPv6 link-local of B via NDP.
		ll := DefaultGID(p.B.MAC).Addr()
		mac, err = ResolveMAC(ctx, p.A.Ifname, ll)
		if err != nil {
			return err
		}
		if mac.String() != p.B.MAC.String() {
			t.Errorf("ResolveMAC(%v) = %v, want %v", ll, mac, p.B.MAC)
		}

		// Nobody has .3: a clear, typed error when ctx ends.
		nobody := p.A.Prefix.Addr().Next().Next()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel2()
		_, err = ResolveMAC(ctx2, p.A.Ifname, nobody)
		var ne *NeighbourError
		if !errors.Is(err, ErrUnresolved) || !errors.As(err, &ne) || !strings.Contains(err.Error(), "neighbour "+nobody.String()+" on "+p.A.Ifname+" unresolved after") {
			t.Errorf("unresolved error = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHoldPortNoICMP(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	// A sends to B:4791. Without a socket there, B answers with ICMP port
	// unreachable, which a connected UDP socket on A reports as
	// ECONNREFUSED on a later read. With HoldPort on B, it does not.
	// send reports whether B refused a datagram from A (an ICMP error
	// surfaces on the connected socket as ECONNREFUSED on the next call).
	send := func(wait time.Duration) bool {
		refused := false
		err := p.Do(netns.A, func() error {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.B.Addr, RoCEv2Port)))
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.Write(make([]byte, 64)); isRefused(err) {
				refused = true
			}
			c.SetReadDeadline(time.Now().Add(wait))
			if _, err := c.Read(make([]byte, 64)); isRefused(err) {
				refused = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return refused
	}
	// Positive control: returns as soon as the ICMP error arrives.
	if !send(10 * time.Second) {
		t.Fatal("without HoldPort: no ICMP port unreachable")
	}
	var hold interface{ Close() error }
	if err := p.Do(netns.B, func() (err error) {
		hold, err = HoldPort(p.B.Addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if send(300 * time.Millisecond) {
		t.Fatal("with HoldPort: ICMP port unreachable")
	}
	// The port is really held: a second bind fails.
	if err := p.Do(netns.B, func() error {
		_, err := HoldPort(p.B.Addr)
		return err
	}); err == nil {
		t.Fatal("second HoldPort on the same address succeeded")
	}
	hold.Close()
}

func isRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection refused")
}
