//go:build linux

package netaddr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
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

// threads is the process's OS thread count.
func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// A Resolver works in its namespace from a thread that stays in another,
// waits for the kernel's neighbour events instead of polling (an entry
// added while a resolution waits ends it after a handful of table reads),
// and 64 resolutions of addresses nobody answers for hold no OS thread
// each (issue 20: a SIDR flood grew a server from 7 to 592 threads, each
// resolution polling every 5 ms on a locked thread).
func TestResolverEventsAndThreads(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	nsA, err := vnetns.GetFromName(p.A.NS)
	if err != nil {
		t.Fatal(err)
	}
	defer nsA.Close()
	r, err := NewResolver(p.A.Ifname, nsA)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mac, err := r.Resolve(ctx, p.B.Addr)
	if err != nil || mac.String() != p.B.MAC.String() {
		t.Fatalf("Resolve(%v) = %v, %v; want %v", p.B.Addr, mac, err, p.B.MAC)
	}

	// An entry that appears while a resolution waits (as an ARP reply
	// would make it).
	late := p.A.Prefix.Addr().Next().Next().Next().Next() // .4: nobody
	lateMAC := net.HardwareAddr{0x02, 0, 0, 0, 0x12, 0x34}
	r2, err := NewResolver(p.A.Ifname, nsA)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	got := make(chan error, 1)
	go func() {
		m, err := r2.Resolve(ctx, late)
		if err == nil && m.String() != lateMAC.String() {
			err = fmt.Errorf("MAC %v", m)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	h, err := p.Handle(netns.A)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.NeighSet(&netlink.Neigh{LinkIndex: p.A.Ifindex, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: late.AsSlice(), HardwareAddr: lateMAC}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("late entry: %v", err)
	}
	// Polling every 5 ms would have read the table about 40 times.
	if n := r2.lookups.Load(); n > 10 {
		t.Errorf("%d neighbour table reads for one resolution woken by its event", n)
	}

	before := threads(t)
	var wg sync.WaitGroup
	peak := 0
	sctx, scancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer scancel()
	base := p.A.Prefix.Addr()
	for i := range 64 {
		ip := base
		for range 10 + i {
			ip = ip.Next()
		}
		wg.Go(func() {
			if _, err := r.Resolve(sctx, ip); !errors.Is(err, ErrUnresolved) {
				t.Errorf("Resolve(%v): %v", ip, err)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	peak = threads(t)
	wg.Wait()
	t.Logf("threads: %d before 64 unanswered resolutions, %d during; %d table reads, %d triggers",
		before, peak, r.lookups.Load(), r.triggers.Load())
	if peak-before > 8 {
		t.Errorf("64 resolutions took %d more OS threads", peak-before)
	}
}
