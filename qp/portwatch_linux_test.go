//go:build linux

package qp_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/vishvananda/netlink"
)

func waitEvent(t *testing.T, d *qp.Device, want qp.AsyncEventType) qp.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.AsyncEvent(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		t.Fatalf("event %+v, want %v", ev, want)
	}
	return ev
}

func ipLink(t *testing.T, p *netns.Pair, s netns.Side, args ...string) {
	t.Helper()
	if out, err := p.Command(s, "ip", append([]string{"link"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip link %v: %v: %s", args, err, out)
	}
}

// TestPortEvents: `ip link set dev X down` on one end of a veth pair is
// PORT_ERR on the devices of both ends (the other end loses its carrier),
// with link_downed counted and the port attributes following; up again is
// PORT_ACTIVE. The UDP backend: the port events do not depend on it.
func TestPortEvents(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	a, _ := open(t, p, netns.A, qp.InterfaceOptions{Backend: qp.BackendUDP})
	defer a.Close()
	b, _ := open(t, p, netns.B, qp.InterfaceOptions{Backend: qp.BackendUDP})
	defer b.Close()
	if st := a.PortAttr().State; st != qp.PortActive {
		t.Fatalf("port state at open %v, want ACTIVE", st)
	}

	ipLink(t, p, netns.A, "set", "dev", p.End(netns.A).Ifname, "down")
	if ev := waitEvent(t, a, qp.EventPortErr); ev.Port != 1 {
		t.Fatalf("PORT_ERR for port %d", ev.Port)
	}
	waitEvent(t, b, qp.EventPortErr)
	pa := a.PortAttr()
	if pa.State != qp.PortDown || pa.PhysState != qp.PhysStateDisabled {
		t.Fatalf("A after down: state %v phys %v, want DOWN, DISABLED", pa.State, pa.PhysState)
	}
	if pb := b.PortAttr(); pb.State != qp.PortDown || pb.PhysState != qp.PhysStatePolling {
		t.Fatalf("B without carrier: state %v phys %v, want DOWN, POLLING", pb.State, pb.PhysState)
	}
	if c := a.Counters(); c[qp.CntLinkDowned] != 1 {
		t.Fatalf("link_downed %d, want 1", c[qp.CntLinkDowned])
	}

	ipLink(t, p, netns.A, "set", "dev", p.End(netns.A).Ifname, "up")
	waitEvent(t, a, qp.EventPortActive)
	waitEvent(t, b, qp.EventPortActive)
	if st := a.PortAttr().State; st != qp.PortActive {
		t.Fatalf("port state after up %v, want ACTIVE", st)
	}
}

// TestDeviceFatalOnDelete: deleting the interface is DEVICE_FATAL (rxe
// unregisters its device on NETDEV_UNREGISTER). A second veth pair inside
// namespace A, so that the pair's own veth stays.
func TestDeviceFatalOnDelete(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	h, err := p.Handle(netns.A)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "grgone0"}, PeerName: "grgone1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	l, err := h.LinkByName("grgone0")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := h.LinkByName("grgone1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		t.Fatal(err)
	}
	pfx := p.End(netns.A).Addr.Next().Next().Next() // same /24, unused
	addr, _ := netlink.ParseAddr(netip.PrefixFrom(pfx, 32).String())
	if err := h.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	var d *qp.Device
	if err := p.Do(netns.A, func() error {
		var err error
		d, _, err = qp.OpenInterface(context.Background(), "grgone0", qp.InterfaceOptions{Backend: qp.BackendUDP, Logger: quiet})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// An SRQ of the device fails with it: SRQ_ERR after DEVICE_FATAL.
	srq, err := d.AllocPD().CreateSRQ(qp.SRQInitAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	for {
		ev := waitEventAny(t, d)
		if ev.Type == qp.EventDeviceFatal {
			if ev.Err == nil {
				t.Fatal("DEVICE_FATAL without an error")
			}
			break
		}
		if ev.Type != qp.EventPortErr {
			t.Fatalf("event %+v before DEVICE_FATAL", ev)
		}
	}
	if ev := waitEventAny(t, d); ev.Type != qp.EventSRQErr || ev.SRQ != srq {
		t.Fatalf("event %+v after DEVICE_FATAL, want SRQ_ERR", ev)
	}
}

func waitEventAny(t *testing.T, d *qp.Device) qp.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.AsyncEvent(ctx)
	if err != nil && !errors.Is(err, qp.ErrClosed) {
		t.Fatal(err)
	}
	return ev
}
