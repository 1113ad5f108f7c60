//go:build linux

package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// The testing types satisfy TB, so tests pass their *testing.T or *testing.B.
var _ TB = testing.TB(nil)

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

// TestSweepStale creates namespaces named like a killed test process's
// (goroce-PID-N-a with a PID above the kernel's hard pid_max of 2^22, so no
// such process exists) and checks that the sweep deletes exactly those whose
// marker proves they are ours and dead: same PID namespace and a dead PID, or
// a live PID with another start time (a reused PID). An unmarked namespace
// and one marked by another PID namespace survive although their PIDs are
// dead too, and so does one marked by this live process.
func TestSweepStale(t *testing.T) {
	RequireRoot(t)
	me, err := self()
	if err != nil {
		t.Skipf("cannot identify this process: %v", err)
	}
	markers := t.TempDir()
	dead := 1<<22 + 1000 + os.Getpid()
	cases := []struct {
		name   string
		marker string // "" for none
		swept  bool
	}{
		{"dead", owner{pid: dead, start: 1, pidNS: me.pidNS}.String(), true},
		{"reused", owner{pid: me.pid, start: me.start + 1, pidNS: me.pidNS}.String(), true},
		{"live", me.String(), false},
		{"foreign", owner{pid: dead, start: 1, pidNS: me.pidNS + 1}.String(), false},
		{"unmarked", "", false},
		{"garbage", "not a marker\n", false},
	}
	for i, c := range cases {
		ns := fmt.Sprintf("goroce-%d-%d-a", dead, i)
		cases[i].name = ns
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		if c.marker != "" {
			if err := os.WriteFile(filepath.Join(markers, ns), []byte(c.marker), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	sweepStale(markers, nsDir)
	for _, c := range cases {
		_, err := os.Stat(filepath.Join(nsDir, c.name))
		_, merr := os.Stat(filepath.Join(markers, c.name))
		switch {
		case c.swept && !os.IsNotExist(err):
			t.Errorf("%s: stale namespace not removed (%v)", c.name, err)
		case c.swept && !os.IsNotExist(merr):
			t.Errorf("%s: marker of a removed namespace left (%v)", c.name, merr)
		case !c.swept && err != nil:
			t.Errorf("%s: namespace removed: %v", c.name, err)
		}
	}
}

// TestMarkers checks that New marks both namespaces with this process as the
// owner, and that Close removes the markers with the namespaces.
func TestMarkers(t *testing.T) {
	me, err := self()
	if err != nil {
		t.Skipf("cannot identify this process: %v", err)
	}
	p := NewPair(t, Options{})
	for _, e := range []End{p.A, p.B} {
		b, err := os.ReadFile(filepath.Join(markerDir, e.NS))
		if err != nil {
			t.Fatal(err)
		}
		if o, err := parseOwner(b); err != nil || o != me {
			t.Errorf("%s: marker %q (%v), want %q", e.NS, b, err, me)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, e := range []End{p.A, p.B} {
		for _, f := range []string{filepath.Join(markerDir, e.NS), filepath.Join(nsDir, e.NS)} {
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Errorf("%s left after Close (%v)", f, err)
			}
		}
	}
}

func TestStartTime(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	const stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 102 0 0 0 0 0 0 0 20 0 1 0 34922 3133440 388\n"
	if st, err := parseStartTime([]byte(stat)); err != nil || st != 34922 {
		t.Errorf("parseStartTime = %d, %v; want 34922", st, err)
	}
	if _, err := parseStartTime([]byte("4242 (a) S 1")); err == nil {
		t.Error("parseStartTime accepted a short line")
	}
	me, err := startTime(os.Getpid())
	if err != nil || me == 0 {
		t.Fatalf("startTime(self) = %d, %v", me, err)
	}
	if _, err := startTime(1<<22 + 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("startTime(no such pid): %v, want ErrNotExist", err)
	}
}
