//go:build linux

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

// TestLookupNetMatchesNetlink: the standard-library Lookup that other
// systems use reads the same interface, MTU, MAC and GID table as the
// netlink one, on a veth with IPv4 and IPv6 addresses.
func TestLookupNetMatchesNetlink(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 4000, NoDAD: true})
	if err := p.Do(netns.A, func() error {
		for _, name := range []string{"lo", p.A.Ifname} {
			want, err := Lookup(name)
			if err != nil {
				return err
			}
			got, err := lookupNet(name)
			if err != nil {
				return err
			}
			if got.Name != want.Name || got.Index != want.Index || got.MTU != want.MTU || got.MAC.String() != want.MAC.String() ||
				got.FormatGIDs() != want.FormatGIDs() {
				t.Errorf("%s: net %+v\n%s, netlink %+v\n%s", name, got, got.FormatGIDs(), want, want.FormatGIDs())
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
