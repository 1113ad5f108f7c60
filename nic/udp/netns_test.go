//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/wire"
)

// TestWireHeaderIsCanonical checks the claim the ICRC scheme rests on: what
// an unconnected DF UDP socket really puts on the wire (IPv4 ID 0, DF, our
// port, 4791) is the canonical header, so a raw receiver (rxe, goroce's
// afpacket backend) verifies the re-based ICRC over the real frame. And the
// other way: a raw sender using IPv4 ID 0 + DF reaches the UDP backend with
// a verifiable ICRC.
func TestWireHeaderIsCanonical(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	var u *Link
	var raw *afpacket.Link
	if err := p.Do(netns.A, func() (err error) {
		u, err = Open(Config{Local: netip.AddrPortFrom(p.A.Addr, 4791)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := p.Do(netns.B, func() (err error) {
		raw, err = afpacket.Open(p.B.Ifname, afpacket.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	// UDP → raw.
	f := buildFrame(t, p.A.Addr, p.B.Addr, 42, 512)
	if _, err := u.WriteBatch([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	got := readWithin(t, func() (int, error) { return raw.ReadBatch(bufs, sizes) })
	if got != 1 {
		t.Fatalf("raw side got %d frames", got)
	}
	var pk wire.Packet
	if err := wire.Parse(bufs[0][:sizes[0]], &pk); err != nil {
		t.Fatalf("wire frame from the UDP socket: %v", err)
	}
	if id := binary.BigEndian.Uint16(pk.IPv4[4:]); id != 0 || pk.IPv4[6]&0x40 == 0 {
		t.Fatalf("kernel sent IPv4 ID %#x flags %#x, want ID 0 with DF", id, pk.IPv4[6])
	}
	if pk.UDP.SrcPort() != 4791 || pk.UDP.DstPort() != 4791 || pk.BTH.PSN() != 42 {
		t.Fatalf("ports %d→%d PSN %d", pk.UDP.SrcPort(), pk.UDP.DstPort(), pk.BTH.PSN())
	}

	// Raw → UDP, with ID 0 and DF as the canonical header says.
	fr := &wire.Frame{
		DstMAC: [6]byte(p.A.MAC), SrcMAC: [6]byte(p.B.MAC),
		SrcIP: p.B.Addr, DstIP: p.A.Addr, HopLimit: 64, IPID: 0, SrcPort: 4791,
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 7},
	}
	buf := make([]byte, fr.Len(100))
	n, err := wire.BuildPayload(buf, fr, make([]byte, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.WriteBatch([][]byte{buf[:n]}); err != nil {
		t.Fatal(err)
	}
	if readWithin(t, func() (int, error) { return u.ReadBatch(bufs, sizes) }) != 1 {
		t.Fatal("UDP side got nothing")
	}
	if err := wire.Parse(bufs[0][:sizes[0]], &pk); err != nil {
		t.Fatalf("raw → UDP: %v", err)
	}
	if pk.BTH.PSN() != 7 || pk.SrcIP() != p.B.Addr {
		t.Fatalf("raw → UDP: PSN %d from %v", pk.BTH.PSN(), pk.SrcIP())
	}
}

func readWithin(t *testing.T, read func() (int, error)) int {
	t.Helper()
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := read()
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.n
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10 s")
		return 0
	}
}

// IPv6 link-local endpoints (the GID at index 0) work with a zone.
func TestLinkLocal(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	ll := func(e netns.End) netip.Addr {
		if e.LinkLocal != netaddr.DefaultGID(e.MAC).Addr() {
			t.Fatalf("link-local %v is not the EUI-64 default GID", e.LinkLocal)
		}
		return e.LinkLocal.WithZone(e.Ifname)
	}
	var a, b *Link
	for _, s := range []netns.Side{netns.A, netns.B} {
		e := p.End(s)
		var l *Link
		if err := p.Do(s, func() (err error) {
			l, err = Open(Config{Local: netip.AddrPortFrom(ll(e), 4791)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if s == netns.A {
			a = l
		} else {
			b = l
		}
	}
	src, dst := ll(p.A).WithZone(""), ll(p.B).WithZone("")
	f := buildFrame(t, src, dst, 5, 64)
	if _, err := a.WriteBatch([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if readWithin(t, func() (int, error) { return b.ReadBatch(bufs, sizes) }) != 1 {
		t.Fatal("nothing received")
	}
	var pk wire.Packet
	if err := wire.Parse(bufs[0][:sizes[0]], &pk); err != nil || pk.SrcIP() != src || pk.DstIP() != dst {
		t.Fatalf("link-local frame: %v, %v → %v", err, pk.SrcIP(), pk.DstIP())
	}
	if _, err := Open(Config{Local: netip.AddrPortFrom(src, 4791)}); err == nil {
		t.Fatal("link-local address without zone accepted")
	}
}

// TestRxeLikeSenders pins the peer matrix of the package comment with a raw
// sender that builds frames the way rxe does: per-QP UDP source port, TTL 1,
// a traffic class, and for IPv4 a non-zero kernel-style ID, for IPv6 a flow
// label. IPv6 frames verify at the UDP backend; IPv4 ones cannot (the ID is
// covered by the ICRC and a UDP socket never sees it) and fail the check
// instead of being silently accepted.
func TestRxeLikeSenders(t *testing.T) {
	p := netns.NewPair(t, netns.Options{NoDAD: true})
	llA, llB := p.A.LinkLocal, p.B.LinkLocal
	var u4, u6 *Link
	var raw *afpacket.Link
	if err := p.Do(netns.A, func() (err error) {
		if u4, err = Open(Config{Local: netip.AddrPortFrom(p.A.Addr, 4791)}); err != nil {
			return err
		}
		u6, err = Open(Config{Local: netip.AddrPortFrom(llA.WithZone(p.A.Ifname), 4791)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer u4.Close()
	defer u6.Close()
	if err := p.Do(netns.B, func() (err error) {
		raw, err = afpacket.Open(p.B.Ifname, afpacket.Options{LowLatency: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	send := func(src, dst netip.Addr) {
		fr := &wire.Frame{
			DstMAC: [6]byte(p.A.MAC), SrcMAC: [6]byte(p.B.MAC),
			SrcIP: src, DstIP: dst, HopLimit: 1, TrafficClass: 0x02, IPID: 0x5a5a, FlowLabel: 0x12345,
			SrcPort: 0xC132,
			BTH:     wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 3},
		}
		buf := make([]byte, fr.Len(64))
		n, err := wire.BuildPayload(buf, fr, make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.WriteBatch([][]byte{buf[:n]}); err != nil {
			t.Fatal(err)
		}
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	var pk wire.Packet

	send(llB, llA)
	if readWithin(t, func() (int, error) { return u6.ReadBatch(bufs, sizes) }) != 1 {
		t.Fatal("IPv6: nothing")
	}
	if err := wire.Parse(bufs[0][:sizes[0]], &pk); err != nil {
		t.Fatalf("IPv6 rxe-like frame: %v", err)
	}
	if pk.UDP.SrcPort() != 0xC132 {
		t.Fatalf("IPv6: source port %#x, want the sender's 0xc132", pk.UDP.SrcPort())
	}

	send(p.B.Addr, p.A.Addr)
	if readWithin(t, func() (int, error) { return u4.ReadBatch(bufs, sizes) }) != 1 {
		t.Fatal("IPv4: nothing")
	}
	if err := wire.Parse(bufs[0][:sizes[0]], &pk); !errors.Is(err, wire.ErrBadICRC) {
		t.Fatalf("IPv4 frame with ID 0x5a5a: Parse = %v, want ErrBadICRC", err)
	}
}
