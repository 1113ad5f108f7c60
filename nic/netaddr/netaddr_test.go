package netaddr

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
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
}

// TestLookupAnyLoopback runs on every system: the loopback interface (lo,
// lo0, "Loopback Pseudo-Interface 1") has an index, an MTU and, when it has
// an address, a GID table; its neighbours are resolved without a network.
func TestLookupAnyLoopback(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skipf("no interface list here: %v", err)
	}
	var lo *net.Interface
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 {
			lo = &ifs[i]
			break
		}
	}
	if lo == nil {
		t.Skip("no loopback interface here")
	}
	ifc, err := Lookup(lo.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ifc.Name != lo.Name || ifc.Index != lo.Index || ifc.MTU != lo.MTU {
		t.Fatalf("Lookup(%q) = %+v, net says %+v", lo.Name, ifc, lo)
	}
	addrs, _ := lo.Addrs()
	if len(addrs) > 0 && len(ifc.GIDs) == 0 {
		t.Fatalf("addresses %v but no GIDs", addrs)
	}
	mac, err := ResolveMAC(context.Background(), lo.Name, netip.MustParseAddr("127.0.0.1"))
	if err != nil || len(mac) != 6 || !bytes.Equal(mac, make([]byte, 6)) {
		t.Fatalf("ResolveMAC on loopback = %v, %v", mac, err)
	}
	if _, err := Lookup("does-not-exist0"); err == nil {
		t.Fatal("no error for a missing interface")
	}
}
