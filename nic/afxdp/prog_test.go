//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/cilium/ebpf"
)

// loadTestProgram loads the steering program over an empty XSKMAP with
// XDP_DROP as the miss action, so BPF_PROG_TEST_RUN answers DROP for a frame
// the program would redirect and PASS for one it leaves to the kernel.
// With frags it is loaded frags-aware (BPF_F_XDP_HAS_FRAGS), as Open loads
// it for a multi-buffer socket.
func loadTestProgram(t *testing.T, frags bool) *ebpf.Program {
	t.Helper()
	requireRoot(t)
	m, err := newXSKMap(4)
	if err != nil {
		var ns *NotSupportedError
		if errors.As(err, &ns) {
			skipOrFail(t, err.Error())
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := loadRedirectProgram(m, xdpDrop, frags)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func verdict(t *testing.T, p *ebpf.Program, frame []byte) uint32 {
	t.Helper()
	ret, err := p.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret
}

var (
	tMacA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	tMacB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	tIPA  = net.IPv4(198, 18, 20, 1)
	tIPB  = net.IPv4(198, 18, 20, 2)
)

func v4Frame(dport uint16) []byte {
	return buildFrame(make([]byte, 128), 128, tMacB, tMacA, tIPA, tIPB, dport, 7)
}

// withVLAN inserts a tag with TPID tpid after the MAC addresses.
func withVLAN(f []byte, tpid uint16) []byte {
	out := append([]byte(nil), f[:12]...)
	out = binary.BigEndian.AppendUint16(out, tpid)
	out = binary.BigEndian.AppendUint16(out, 100)
	return append(out, f[12:]...)
}

func v6Frame(next byte, dport uint16) []byte {
	f := make([]byte, 14+40+8+32)
	copy(f, tMacB)
	copy(f[6:], tMacA)
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 8+32)
	ip[6], ip[7] = next, 64
	ip[8+15], ip[24+15] = 1, 2 // ::1 → ::2 style addresses (never sent)
	binary.BigEndian.PutUint16(ip[40+2:], dport)
	binary.BigEndian.PutUint16(ip[40+4:], 8+32)
	return f
}

func TestProgramVerdicts(t *testing.T) {
	for _, frags := range []bool{false, true} {
		t.Run(fmt.Sprintf("frags=%v", frags), func(t *testing.T) { testVerdicts(t, loadTestProgram(t, frags)) })
	}
}

func testVerdicts(t *testing.T, p *ebpf.Program) {
	const redirect, pass = xdpDrop, xdpPass

	withIHL := func(words int) []byte {
		f := v4Frame(roceUDPPort)
		opt := make([]byte, (words-5)*4)
		f = append(append(append([]byte(nil), f[:34]...), opt...), f[34:]...)
		f[14] = 0x40 | byte(words)
		return f
	}
	mod := func(f []byte, fn func([]byte)) []byte { fn(f); return f }

	cases := []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"ipv4 udp 4791", v4Frame(roceUDPPort), redirect},
		{"ipv4 udp 4792", v4Frame(4792), pass},
		{"ipv4 udp 53", v4Frame(53), pass},
		{"ipv4 IHL 6 (options) udp 4791", withIHL(6), redirect},
		{"ipv4 IHL 15 udp 4791", withIHL(15), redirect},
		{"ipv4 IHL 4 (invalid)", mod(v4Frame(roceUDPPort), func(f []byte) { f[14] = 0x44 }), pass},
		{"ipv4 tcp to 4791", mod(v4Frame(roceUDPPort), func(f []byte) { f[14+9] = 6 }), pass},
		{"ipv4 first fragment (MF)", mod(v4Frame(roceUDPPort), func(f []byte) { f[14+6] = 0x20 }), pass},
		{"ipv4 later fragment", mod(v4Frame(roceUDPPort), func(f []byte) { f[14+7] = 0x10 }), pass},
		{"802.1Q ipv4 udp 4791", withVLAN(v4Frame(roceUDPPort), 0x8100), redirect},
		{"802.1ad ipv4 udp 4791", withVLAN(v4Frame(roceUDPPort), 0x88a8), redirect},
		{"802.1Q ipv4 udp 4792", withVLAN(v4Frame(4792), 0x8100), pass},
		{"two VLAN tags", withVLAN(withVLAN(v4Frame(roceUDPPort), 0x8100), 0x88a8), pass},
		{"ipv6 udp 4791", v6Frame(17, roceUDPPort), redirect},
		{"ipv6 udp 4792", v6Frame(17, 4792), pass},
		{"ipv6 hop-by-hop first", v6Frame(0, roceUDPPort), pass},
		{"802.1Q ipv6 udp 4791", withVLAN(v6Frame(17, roceUDPPort), 0x8100), redirect},
		{"arp", mod(v4Frame(roceUDPPort), func(f []byte) { binary.BigEndian.PutUint16(f[12:], 0x0806) }), pass},
	}
	for _, c := range cases {
		if got := verdict(t, p, c.frame); got != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, c.want)
		}
	}
}

// TestProgramTruncated feeds every prefix of steerable frames: a frame cut
// inside its headers (before the end of the UDP header) must pass, the rest
// redirect.
func TestProgramTruncated(t *testing.T) {
	p := loadTestProgram(t, false)
	frames := map[string]struct {
		f      []byte
		udpEnd int // end of the UDP header
	}{
		"ipv4":      {v4Frame(roceUDPPort), 14 + 20 + 8},
		"vlan ipv4": {withVLAN(v4Frame(roceUDPPort), 0x8100), 18 + 20 + 8},
		"ipv6":      {v6Frame(17, roceUDPPort), 14 + 40 + 8},
	}
	for name, c := range frames {
		for n := 14; n <= len(c.f); n++ {
			want := uint32(xdpPass)
			if n >= c.udpEnd {
				want = xdpDrop
			}
			if got := verdict(t, p, c.f[:n]); got != want {
				t.Errorf("%s cut to %d bytes: verdict %d, want %d", name, n, got, want)
			}
		}
	}
}
