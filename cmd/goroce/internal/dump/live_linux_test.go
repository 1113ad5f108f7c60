//go:build linux

package dump

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/wire"
)

// liveSetup creates the namespace pair, opens the capture on B's veth and
// a packet socket on A's, and returns a function sending a frame from A.
func liveSetup(t *testing.T, opts LiveOptions) (*netns.Pair, *Capture, func([]byte)) {
	pair := netns.NewPair(t, netns.Options{NoDAD: true})
	var c *Capture
	if err := pair.Do(netns.B, func() (err error) {
		c, err = OpenLive(pair.B.Ifname, opts)
		return err
	}); err != nil {
		t.Fatalf("OpenLive: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var fd int
	if err := pair.Do(netns.A, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	waitOperUp(t, pair)
	to := &unix.SockaddrLinklayer{Ifindex: pair.A.Ifindex, Halen: 6}
	copy(to.Addr[:], pair.B.MAC)
	send := func(frame []byte) {
		if err := unix.Sendto(fd, frame, 0, to); err != nil {
			t.Fatalf("sendto: %v", err)
		}
	}
	return pair, c, send
}

// waitOperUp waits (at most 10 s) until both veth ends are operationally
// up: until linkwatch has run, A's qdisc is noop and drops what we send.
func waitOperUp(t *testing.T, pair *netns.Pair) {
	t.Helper()
	for _, side := range []netns.Side{netns.A, netns.B} {
		name := pair.End(side).Ifname
		deadline := time.Now().Add(10 * time.Second)
		for {
			var state netlink.LinkOperState
			if err := pair.Do(side, func() error {
				l, err := netlink.LinkByName(name)
				if err == nil {
					state = l.Attrs().OperState
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if state == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: operstate %v after 10 s", name, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func liveFrame(t *testing.T, pair *netns.Pair, op wire.Opcode, psn uint32) []byte {
	f := wire.Frame{
		SrcIP: pair.A.Addr, DstIP: pair.B.Addr, SrcPort: 49152, HopLimit: 64,
		BTH:  wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(psn), AckReq: true},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 1},
	}
	copy(f.SrcMAC[:], pair.A.MAC)
	copy(f.DstMAC[:], pair.B.MAC)
	n := 0
	if op.Info().Payload {
		n = 100
	}
	buf := make([]byte, f.Len(n))
	if _, err := wire.Build(buf, &f, n); err != nil {
		t.Fatal(err)
	}
	return buf
}

// TestLive sends RoCEv2 frames (one with a bad ICRC) and a UDP datagram to
// another port through a veth pair, and captures them on the far end: the
// kernel filter drops the other datagram, the RoCEv2 frames are decoded.
func TestLive(t *testing.T) {
	pair, c, send := liveSetup(t, LiveOptions{})
	other := liveFrame(t, pair, wire.RCSendOnly, 99)
	wire.UDP(other[wire.EthernetLen+wire.IPv4Len:]).SetDstPort(53)
	send(other)
	for psn := uint32(1); psn <= 4; psn++ {
		send(liveFrame(t, pair, wire.RCSendOnly, psn))
	}
	bad := liveFrame(t, pair, wire.RCAcknowledge, 1)
	bad[len(bad)-1] ^= 0xFF
	send(bad)
	// 802.1Q-tagged: the receiving kernel moves the tag into metadata, Run
	// puts it back.
	f := wire.Frame{
		SrcIP: pair.A.Addr, DstIP: pair.B.Addr, SrcPort: 49152, HopLimit: 64, HasVLAN: true, VLAN: 5,
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 5, AckReq: true},
	}
	copy(f.SrcMAC[:], pair.A.MAC)
	copy(f.DstMAC[:], pair.B.MAC)
	tagged := make([]byte, f.Len(100))
	if _, err := wire.Build(tagged, &f, 100); err != nil {
		t.Fatal(err)
	}
	send(tagged)
	// IPv6, to 4791 and to another port.
	f.HasVLAN = false
	f.SrcIP, f.DstIP = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	f.BTH.PSN = 6
	v6 := make([]byte, f.Len(100))
	if _, err := wire.Build(v6, &f, 100); err != nil {
		t.Fatal(err)
	}
	v6other := append([]byte(nil), v6...)
	wire.UDP(v6other[wire.EthernetLen+wire.IPv6Len:]).SetDstPort(53)
	send(v6other)
	send(v6)

	var out bytes.Buffer
	graphs := t.TempDir()
	d := New(&out, Options{Count: 7, Location: time.UTC, Flush: true, GraphDir: graphs})
	// The bound is a safety net: the frames are already queued on the socket.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Run(ctx, d); err != nil {
		t.Fatal(err)
	}
	s, err := d.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if s.RoCE != 7 || s.ICRCFailures != 1 || s.NonRoCE != 0 || s.Opcodes["RC_SEND_ONLY"] != 6 {
		t.Fatalf("summary %+v\n%s", s, out.String())
	}
	// The source column is padded to 17 characters, which a 198.18.X.1:49152
	// with a one-digit X does not fill.
	src := fmt.Sprintf("%-17s > %s", pair.A.Addr.String()+":49152", pair.B.Addr)
	if !strings.Contains(out.String(), src) || !strings.Contains(out.String(), "RC_SEND_ONLY               dqpn=0x11 psn=4 ackreq payload=100 icrc=ok") {
		t.Fatalf("output:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "psn=5 ackreq payload=100 vlan=5 icrc=ok") ||
		!strings.Contains(out.String(), "[2001:db8::1]:49152 > 2001:db8::2 RC_SEND_ONLY               dqpn=0x11 psn=6 ackreq payload=100 icrc=ok") {
		t.Fatalf("tagged frame:\n%s", out.String())
	}
	if r := s.Flows[0].Requests; r.Packets != 5 || r.Gaps != 0 {
		t.Fatalf("flow %+v", *r)
	}
	// --graph on a live capture: the IPv4 flow (5 packets and a corrupted
	// one) gets its graph, the one-packet IPv6 flow none.
	want := filepath.Join(graphs, pair.A.Addr.String()+"_to_"+pair.B.Addr.String()+"_qp0x11.svg")
	if len(s.Graphs) != 1 || s.Graphs[0] != want {
		t.Fatalf("graphs %v, want [%s]", s.Graphs, want)
	}
}

// TestLiveUnfiltered: with All, other packets reach the dumper and are
// counted as non-RoCE; cancelling the context ends Run with no error.
func TestLiveUnfiltered(t *testing.T) {
	pair, c, send := liveSetup(t, LiveOptions{All: true, Snaplen: 60})
	other := liveFrame(t, pair, wire.RCSendOnly, 99)
	wire.UDP(other[wire.EthernetLen+wire.IPv4Len:]).SetDstPort(53)
	send(other)
	send(liveFrame(t, pair, wire.RCSendOnly, 1))

	var out bytes.Buffer
	d := New(&out, Options{Count: 1, Location: time.UTC})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Run(ctx, d); err != nil {
		t.Fatal(err)
	}
	s, _ := d.Finish()
	if s.RoCE != 1 || s.NonRoCE < 1 || s.Truncated != 1 || !strings.Contains(out.String(), "truncated in payload (6 of 100 bytes captured): RC_SEND_ONLY") {
		t.Fatalf("summary %+v\n%s", s, out.String())
	}

	// No count: only the context ends it.
	d = New(&out, Options{})
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx2, d) }()
	time.Sleep(50 * time.Millisecond) // most likely blocked in recvmsg by now; either way Run must end
	cancel2()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
