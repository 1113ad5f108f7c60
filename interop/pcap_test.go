//go:build linux

package interop

import (
	"encoding/binary"
	"path/filepath"
	"testing"
)

// TestSummarizePcapFixtures checks the pcap classifier against the rxe
// fixtures (no root or VM needed).
func TestSummarizePcapFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		roce int
		ops  map[byte]int
	}{
		{"rc_pingpong.pcap", 516, nil},
		{"write_bw_4k.pcap", 100, map[byte]int{0x06: 20, 0x07: 40, 0x08: 20, 0x11: 20}},
		{"read_bw_4k.pcap", 100, map[byte]int{0x0c: 20, 0x0d: 20, 0x0e: 40, 0x0f: 20}},
		{"ud_pingpong.pcap", 100, map[byte]int{0x64: 100}},
		{"uc_pingpong.pcap", 160, map[byte]int{0x20: 40, 0x21: 80, 0x22: 40}},
		{"write_bw_uc.pcap", 80, map[byte]int{0x26: 20, 0x27: 40, 0x28: 20}},
	} {
		s, err := SummarizePcap(filepath.Join("..", "testdata", "rxe", tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if s.RoCE != tc.roce {
			t.Errorf("%s: %d RoCEv2 packets, want %d (%s)", tc.file, s.RoCE, tc.roce, s)
		}
		for op, n := range tc.ops {
			if s.Opcodes[op] != n {
				t.Errorf("%s: %d %s, want %d (%s)", tc.file, s.Opcodes[op], OpcodeName(op), n, s)
			}
		}
	}
}

// TestL4PayloadTruncated feeds every prefix of a RoCEv2 frame (IPv4, VLAN and
// IPv6 forms) and a frame with a bad IHL to the classifier: no panic, and the
// payload is only returned when the IP header is whole.
func TestL4PayloadTruncated(t *testing.T) {
	ipv4 := make([]byte, 14+20+8+12)
	binary.BigEndian.PutUint16(ipv4[12:], etherIPv4)
	ipv4[14] = 0x45
	ipv4[14+9] = 17
	binary.BigEndian.PutUint16(ipv4[14+20+2:], rocePort)

	vlan := append(append(append([]byte(nil), ipv4[:12]...), 0x81, 0x00, 0x00, 0x05), ipv4[12:]...)

	ipv6 := make([]byte, 14+40+8+12)
	binary.BigEndian.PutUint16(ipv6[12:], etherIPv6)
	ipv6[14] = 0x60
	ipv6[14+6] = 17

	for _, f := range []struct {
		name  string
		frame []byte
		hdr   int
	}{{"ipv4", ipv4, 14 + 20}, {"vlan", vlan, 18 + 20}, {"ipv6", ipv6, 14 + 40}} {
		for n := 0; n <= len(f.frame); n++ {
			proto, l4 := l4Payload(f.frame[:n])
			if n < f.hdr && (proto != 0 || l4 != nil) {
				t.Errorf("%s: %d-byte prefix gave proto %d", f.name, n, proto)
			}
			if n >= f.hdr && (proto != 17 || len(l4) != n-f.hdr) {
				t.Errorf("%s: %d-byte prefix gave proto %d, %d payload bytes", f.name, n, proto, len(l4))
			}
		}
	}
	bad := append([]byte(nil), ipv4...)
	for _, b := range []byte{0x40, 0x41, 0x4f} {
		bad[14] = b
		// IHL 0 and 1 are below the minimum; IHL 15 (60 bytes) overruns the frame.
		if proto, l4 := l4Payload(bad[:14+20]); proto != 0 || l4 != nil {
			t.Errorf("IHL byte %#x accepted", b)
		}
	}
}

func TestListensOn(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 011200C6:4857 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 011200C6:1B59 0B1200C6:8001 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	for _, tc := range []struct {
		port int
		want bool
	}{{18519, true}, {7001, false}, {4791, false}} {
		if got := listensOn(table, tc.port); got != tc.want {
			t.Errorf("listensOn(%d) = %v, want %v", tc.port, got, tc.want)
		}
	}
	if listensOn("", 1) || listensOn("header only", 1) {
		t.Error("empty table listens")
	}
}
