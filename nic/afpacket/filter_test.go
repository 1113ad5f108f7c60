package afpacket

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

// testFrame builds Ethernet [+VLAN] + IPv4/IPv6 + UDP + 16 payload bytes.
func testFrame(v6, vlan bool, proto uint8, dport uint16, ihl int, frag uint16) []byte {
	f := make([]byte, 12, 128)
	if vlan {
		f = binary.BigEndian.AppendUint16(f, 0x8100)
		f = binary.BigEndian.AppendUint16(f, 7)
	}
	if v6 {
		f = binary.BigEndian.AppendUint16(f, 0x86DD)
		ip := make([]byte, 40)
		ip[0] = 0x60
		ip[6] = proto
		ip[7] = 64
		f = append(f, ip...)
	} else {
		f = binary.BigEndian.AppendUint16(f, 0x0800)
		ip := make([]byte, ihl*4)
		ip[0] = 0x40 | byte(ihl)
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[8] = 64
		ip[9] = proto
		f = append(f, ip...)
	}
	udp := make([]byte, 8+16)
	binary.BigEndian.PutUint16(udp[0:], 0xC000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	return append(f, udp...)
}

func TestFilter(t *testing.T) {
	prog, err := roceProgram(4791)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 42)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	cases := []struct {
		name  string
		frame []byte
		pass  bool
	}{
		{"v4", testFrame(false, false, 17, 4791, 5, 0x4000), true},
		{"v4 vlan", testFrame(false, true, 17, 4791, 5, 0x4000), true},
		{"v4 options", testFrame(false, false, 17, 4791, 7, 0), true},
		{"v4 vlan options", testFrame(false, true, 17, 4791, 6, 0), true},
		{"v6", testFrame(true, false, 17, 4791, 0, 0), true},
		{"v6 vlan", testFrame(true, true, 17, 4791, 0, 0), true},
		{"v4 other port", testFrame(false, false, 17, 4792, 5, 0), false},
		{"v4 options other port", testFrame(false, false, 17, 53, 7, 0), false},
		{"v6 other port", testFrame(true, true, 17, 9, 0, 0), false},
		{"v4 tcp", testFrame(false, false, 6, 4791, 5, 0), false},
		{"v6 tcp", testFrame(true, false, 6, 4791, 0, 0), false},
		{"v4 later fragment", testFrame(false, false, 17, 4791, 5, 0x2001), false},
		{"v4 first fragment (MF)", testFrame(false, false, 17, 4791, 5, 0x2000), true},
		{"arp", arp, false},
		{"short", []byte{1, 2, 3}, false},
		{"truncated v4", testFrame(false, false, 17, 4791, 5, 0)[:30], false},
	}
	for _, c := range cases {
		n, err := vm.Run(c.frame)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (n > 0) != c.pass {
			t.Errorf("%s: filter returned %d, want pass=%v", c.name, n, c.pass)
		}
		if c.pass && n < len(c.frame) {
			t.Errorf("%s: snap length %d < frame %d", c.name, n, len(c.frame))
		}
	}
	plain, err := roceFilter(4791, false)
	if err != nil {
		t.Fatal(err)
	}
	// The outgoing-drop prefix jumps to the program's final "ret 0".
	pre, err := roceFilter(4791, true)
	if err != nil {
		t.Fatal(err)
	}
	last := len(pre) - 1
	if len(pre) != len(plain)+2 || 2+int(pre[1].Jt) != last || pre[last].Op != 0x06 || pre[last].K != 0 {
		t.Fatalf("prefix: %d vs %d instructions, jt %d, last %+v", len(pre), len(plain), pre[1].Jt, pre[last])
	}
}
