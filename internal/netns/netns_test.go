//go:build linux

package netns

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

func TestPairUDP(t *testing.T) {
	var p *Pair
	var names []string
	t.Run("pair", func(t *testing.T) {
		p = NewPair(t, Options{MTU: 3000, NoDAD: true})
		names = []string{p.A.NS, p.B.NS}
		if !p.A.Prefix.Contains(p.B.Addr) || !netip.MustParsePrefix("198.18.0.0/15").Contains(p.A.Addr) {
			t.Fatalf("addresses %v %v", p.A.Prefix, p.B.Prefix)
		}
		// B listens, A sends; the socket opened inside Do lives in B.
		var rx *net.UDPConn
		if err := p.Do(B, func() (err error) {
			rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.B.Addr.AsSlice(), Port: 4791})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		var tx *net.UDPConn
		if err := p.Do(A, func() (err error) {
			tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.B.Addr.AsSlice(), Port: 4791})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		if _, err := tx.Write(make([]byte, 2900)); err != nil {
			t.Fatal(err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4000)
		n, from, err := rx.ReadFromUDP(buf)
		if err != nil || n != 2900 || !from.IP.Equal(p.A.Addr.AsSlice()) {
			t.Fatalf("read %d from %v: %v", n, from, err)
		}

		// Each side: only the connected /24, no default route, MTU applied.
		for _, s := range []Side{A, B} {
			h, err := p.Handle(s)
			if err != nil {
				t.Fatal(err)
			}
			routes, err := h.RouteList(nil, netlink.FAMILY_V4)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.String() != p.End(s).Prefix.Masked().String() {
					t.Errorf("%v: unexpected route %v", s, r)
				}
			}
			l, err := h.LinkByName(p.End(s).Ifname)
			if err != nil || l.Attrs().MTU != 3000 {
				t.Errorf("%v: link %v, %v", s, l, err)
			}
			h.Close()
		}
		// Nothing of the pair is visible in the test's own namespace.
		if _, err := netlink.LinkByName(p.A.Ifname); err == nil {
			t.Errorf("%s visible in the root namespace", p.A.Ifname)
		}
	})
	// Cleanup of the subtest removed both namespaces.
	for _, n := range names {
		if _, err := os.Stat(filepath.Join("/var/run/netns", n)); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists (%v)", n, err)
		}
	}
}

func TestPairsDistinct(t *testing.T) {
	p1 := NewPair(t, Options{})
	p2 := NewPair(t, Options{})
	if p1.A.Prefix.Masked() == p2.A.Prefix.Masked() || p1.A.NS == p2.A.NS || p1.A.Ifname == p2.A.Ifname {
		t.Fatalf("pairs clash: %+v %+v", p1.A, p2.A)
	}
}

func TestSweepStale(t *testing.T) {
	RequireRoot(t)
	// A namespace named like ours, for a PID that cannot exist (above
	// pid_max's hard limit of 2^22), and one that is not ours.
	dead := "goroce-4194999-1-a"
	other := "goroce-keepme-1-a"
	for _, n := range []string{dead, other} {
		if err := exec.Command("ip", "netns", "add", n).Run(); err != nil {
			t.Skipf("ip netns add: %v", err)
		}
	}
	defer exec.Command("ip", "netns", "del", other).Run()
	defer exec.Command("ip", "netns", "del", dead).Run()
	sweepStale()
	if _, err := os.Stat(filepath.Join("/var/run/netns", dead)); !os.IsNotExist(err) {
		t.Errorf("stale %s not removed (%v)", dead, err)
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", other)); err != nil {
		t.Errorf("%s removed: %v", other, err)
	}
}
