//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/wire"
	"golang.org/x/sys/unix"
)

// capture is an AF_PACKET socket on one veth end that returns the RoCEv2
// frames (UDP to 4791) arriving there, at the length the kernel hands
// them to packet sockets.
type capture struct{ fd int }

func openCapture(t *testing.T, p *netns.Pair, side netns.Side) *capture {
	t.Helper()
	c := &capture{fd: -1}
	proto := int(htons(unix.ETH_P_ALL))
	if err := p.Do(side, func() (err error) {
		c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, proto)
		if err != nil {
			return err
		}
		return unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: p.End(side).Ifindex})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// frames returns the incoming RoCEv2 frames seen until want arrived or
// 10 s passed (liveness only).
func (c *capture) frames(t *testing.T, want int) [][]byte {
	t.Helper()
	buf := make([]byte, 1<<17)
	var out [][]byte
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := buf[:n]
		if dport(f) == RoCEv2Port {
			out = append(out, append([]byte(nil), f...))
		}
	}
	return out
}

// dport is the UDP destination port of an untagged IPv4/IPv6 frame, 0 if
// it is not UDP.
func dport(f []byte) uint16 {
	be := binary.BigEndian
	switch {
	case len(f) >= 14+20+8 && be.Uint16(f[12:]) == 0x0800 && f[14+9] == 17:
		ihl := int(f[14]&0xF) * 4
		if len(f) >= 14+ihl+8 {
			return be.Uint16(f[14+ihl+2:])
		}
	case len(f) >= 14+40+8 && be.Uint16(f[12:]) == 0x86DD && f[14+6] == 17:
		return be.Uint16(f[14+40+2:])
	}
	return 0
}

func ethtoolOff(t *testing.T, p *netns.Pair, side netns.Side, feature string) {
	t.Helper()
	if _, err := exec.LookPath("ethtool"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ethtool not installed, and CI=true forbids skipping")
		}
		t.Skip("ethtool not installed")
	}
	if out, err := p.Command(side, "ethtool", "-K", p.End(side).Ifname, feature, "off").CombinedOutput(); err != nil {
		t.Fatalf("ethtool -K %s %s off: %v: %s", p.End(side).Ifname, feature, err, out)
	}
}

func openPair(t *testing.T, p *netns.Pair, la, lb netip.Addr) (a, b *Link) {
	t.Helper()
	for _, s := range []struct {
		side netns.Side
		l    **Link
		ip   netip.Addr
	}{{netns.A, &a, la}, {netns.B, &b, lb}} {
		if err := p.Do(s.side, func() (err error) {
			*s.l, err = Open(Config{Local: netip.AddrPortFrom(s.ip, RoCEv2Port), MTU: p.MTU})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*s.l).Close() })
	}
	if !a.OffloadStats().GSO {
		t.Skip("this kernel has no UDP GSO")
	}
	return a, b
}

// TestGSOOnTheWire pins what the package comment says GSO datagrams look
// like between two namespaces (MTU 9000, path-MTU-sized frames). With the
// veth's default features the kernel hands the unsegmented datagram over
// the veth (tx-udp-segmentation on): a packet socket on the receiving end
// sees one frame of all the segments, and the receiving UDP link splits
// it (GRO) into frames that verify. With segmentation in software
// (tx-udp-segmentation off, as before a NIC without USO), the wire carries
// one frame per segment with IPv4 IDs 0, 1, 2 … (inet_gso_segment numbers
// them from the datagram's ID, 0 for an unconnected DF socket): segment i
// verifies with the canonical header's ID 0, not with its own ID i. That is
// why the link sends GSO datagrams only to goroce UDP links, which never
// see the ID.
func TestGSOOnTheWire(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 9000})
	a, b := openPair(t, p, p.A.Addr, p.B.Addr)
	learn(t, a, b)
	const N = 10
	var frames [][]byte
	for i := range N {
		frames = append(frames, buildFrame(t, p.A.Addr, p.B.Addr, uint32(i), 4096))
	}
	capB := openCapture(t, p, netns.B)
	recvB := func() {
		t.Helper()
		got := readNBuf(t, b, N, 16)
		for i := range got {
			checkDelivered(t, got[i], frames[i], a.LocalAddr(), b.LocalAddr())
		}
	}

	// Default features: one frame on the veth.
	if n, err := a.WriteBatch(frames); n != N || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	recvB()
	wire1 := capB.frames(t, 1)
	if len(wire1) != 1 || len(wire1[0]) != 14+28+N*(12+4096+4) {
		t.Fatalf("default veth: the packet socket saw %d frames (first %d bytes), want one of %d", len(wire1), len(wire1[0]), 14+28+N*(12+4096+4))
	}
	if s := b.OffloadStats(); s.GROReceives != 1 || s.GROSegments != N {
		t.Fatalf("receiver %+v", s)
	}

	// Software segmentation: N frames, IDs 0..N-1.
	ethtoolOff(t, p, netns.A, "tx-udp-segmentation")
	if n, err := a.WriteBatch(frames); n != N || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	recvB()
	segs := capB.frames(t, N)
	if len(segs) != N {
		t.Fatalf("segmented: the packet socket saw %d frames, want %d", len(segs), N)
	}
	var pk wire.Packet
	for i, f := range segs {
		ip := f[14:]
		id := binary.BigEndian.Uint16(ip[4:])
		if id != uint16(i) || ip[6]&0x40 == 0 || len(f) != 14+28+12+4096+4 {
			t.Fatalf("segment %d: ID %d, flags %#x, %d bytes; want ID %d with DF", i, id, ip[6], len(f), i)
		}
		err := wire.Parse(f, &pk)
		if i == 0 && err != nil || i > 0 && !errors.Is(err, wire.ErrBadICRC) {
			t.Fatalf("segment %d with its own ID: Parse = %v", i, err)
		}
		binary.BigEndian.PutUint16(ip[4:], 0)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip[:20]))
		if err := wire.Parse(f, &pk); err != nil || pk.BTH.PSN() != wire.PSN(i) {
			t.Fatalf("segment %d with ID 0: Parse = %v, PSN %d", i, err, pk.BTH.PSN())
		}
	}
}

// IPv6 has no ID: every segment on the wire verifies as it is.
func TestGSOOnTheWireIPv6(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 9000, NoDAD: true})
	a, b := openPair(t, p, p.A.LinkLocal.WithZone(p.A.Ifname), p.B.LinkLocal.WithZone(p.B.Ifname))
	learn(t, a, b)
	const N = 8
	var frames [][]byte
	for i := range N {
		frames = append(frames, buildFrame(t, p.A.LinkLocal, p.B.LinkLocal, uint32(i), 4096))
	}
	ethtoolOff(t, p, netns.A, "tx-udp-segmentation")
	capB := openCapture(t, p, netns.B)
	if n, err := a.WriteBatch(frames); n != N || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readNBuf(t, b, N, 16)
	src, dst := netip.AddrPortFrom(p.A.LinkLocal, RoCEv2Port), netip.AddrPortFrom(p.B.LinkLocal, RoCEv2Port)
	for i := range got {
		checkDelivered(t, got[i], frames[i], src, dst)
	}
	segs := capB.frames(t, N)
	if len(segs) != N {
		t.Fatalf("the packet socket saw %d frames, want %d", len(segs), N)
	}
	var pk wire.Packet
	for i, f := range segs {
		if err := wire.Parse(f, &pk); err != nil || pk.BTH.PSN() != wire.PSN(i) {
			t.Fatalf("segment %d: Parse = %v, PSN %d", i, err, pk.BTH.PSN())
		}
	}
	if s := a.OffloadStats(); s.GSOSends != 1 || s.GSOSegments != N {
		t.Fatalf("sender %+v", s)
	}
}

// A segmented datagram the kernel refuses with EINVAL (here: an IPv6
// socket with UDP_NO_CHECK6_TX, which GSO cannot honour) is sent frame by
// frame instead, and the link stops segmenting; one whose segments exceed
// the route MTU is dropped and counted (EMSGSIZE), as its frames alone
// would be.
func TestGSOFallback(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true})
	a, b := openPair(t, p, p.A.LinkLocal.WithZone(p.A.Ifname), p.B.LinkLocal.WithZone(p.B.Ifname))
	a.mtu = 9000 // frames larger than the veth's MTU pass WriteBatch's size check
	a.scratch, a.shifts = make([]byte, 9064), make(shiftCache, 9064)
	learn(t, a, b)
	var big, small [][]byte
	for i := range 4 {
		big = append(big, buildFrame(t, p.A.LinkLocal, p.B.LinkLocal, uint32(i), 2000))
		small = append(small, buildFrame(t, p.A.LinkLocal, p.B.LinkLocal, uint32(10+i), 500))
	}
	if n, err := a.WriteBatch(big); n != 4 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if s, o := a.Stats(), a.OffloadStats(); !o.GSO || o.GSOSends != 0 || s.TxDrops != 4 {
		t.Fatalf("segments above the route MTU: %+v %+v", s, o)
	}

	fd := a.s.(*mmsgSock).fd
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1); err != nil {
		t.Fatal(err)
	}
	src, dst := netip.AddrPortFrom(p.A.LinkLocal, RoCEv2Port), netip.AddrPortFrom(p.B.LinkLocal, RoCEv2Port)
	if n, err := a.WriteBatch(small); n != 4 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readNBuf(t, b, 4, 8)
	for i := range got {
		checkDelivered(t, got[i], small[i], src, dst)
	}
	if o := a.OffloadStats(); o.GSO || o.GSOFallbacks != 1 || o.GSOSends != 0 {
		t.Fatalf("after the refused datagram: %+v", o)
	}
}
