package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scapyUCFrame is the UC SEND_ONLY example of scapy test/contrib/roce.uts
// (PROTOCOL §2 vector 1), with its ICRC 0xF353F378 (wire bytes 78 f3 53 f3).
func scapyUCFrame(t testing.TB) []byte {
	payload := []byte("F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00")
	f := Frame{
		DstMAC:       [6]byte{0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22},
		SrcMAC:       [6]byte{0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22},
		SrcIP:        netip.MustParseAddr("192.168.0.7"),
		DstIP:        netip.MustParseAddr("192.168.0.7"),
		TrafficClass: 0x01,
		HopLimit:     64,
		IPID:         1144,
		SrcPort:      49152,
		BTH:          BTHFields{Opcode: UCSendOnly, M: true, PKey: 0xFFFF, DestQP: 211, PSN: 13571856},
	}
	// scapy's 20 payload bytes include the 2 pad bytes, so the payload is 18.
	buf := make([]byte, 128)
	n, err := BuildPayload(buf, &f, payload[:18])
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func TestICRCScapyUCSendOnly(t *testing.T) {
	fr := scapyUCFrame(t)
	if len(fr) != 14+64 {
		t.Fatalf("frame length %d, want 78", len(fr))
	}
	l3 := fr[EthernetLen:]
	if got := IPv4(l3).Checksum(); got != 0xb4d5 {
		t.Errorf("IPv4 checksum %#x, want 0xb4d5 (scapy)", got)
	}
	if got := ICRC(l3[:len(l3)-4]); got != 0xF353F378 {
		t.Errorf("ICRC %#08x, want 0xF353F378", got)
	}
	if got := hex.EncodeToString(fr[len(fr)-4:]); got != "78f353f3" {
		t.Errorf("trailer %s, want 78f353f3", got)
	}
	var p Packet
	if err := Parse(fr, &p); err != nil {
		t.Fatal(err)
	}
	if p.Pad != 2 || len(p.Payload) != 18 || !p.BTH.MigReq() || p.BTH.DestQP() != 211 || p.BTH.PSN() != 13571856 {
		t.Errorf("parsed %+v", p.BTH.Fields())
	}
}

// cx4CNP is a ConnectX-4 Lx CNP frame, verbatim (PROTOCOL §2 vector 2).
const cx4CNP = "e41d2dab2bc2 7cfe90643b32 0800 | 45c2 003c 718c 4000 4011 9161 0a001101 0a001201 | 0000 12b7 0028 0000 | 81 00 ffff 40 000118 00 000000 | 00000000000000000000000000000000 | 82fd002a"

func TestICRCConnectX4CNP(t *testing.T) {
	fr := mustHex(t, cx4CNP)
	l3 := fr[EthernetLen:]
	if got := ICRC(l3[:len(l3)-4]); got != 0x2A00FD82 {
		t.Errorf("ICRC %#08x, want 0x2A00FD82", got)
	}
	if !VerifyICRC(l3) {
		t.Error("VerifyICRC false")
	}
	var p Packet
	if err := Parse(fr, &p); err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != CNP || !p.BTH.BECN() || p.BTH.FECN() || p.BTH.DestQP() != 0x118 || p.BTH.PSN() != 0 ||
		len(p.CNPPad) != 16 || len(p.Payload) != 0 || p.IPv4.TOS() != CNPTOS || p.UDP.SrcPort() != 0 {
		t.Errorf("parsed CNP wrong: %+v", p.BTH.Fields())
	}
	if !p.IPv4.ChecksumValid() {
		t.Error("IPv4 checksum of the capture does not verify")
	}
	// Rebuild it with CNPFrame.
	f := CNPFrame(p.Eth.Dst(), p.Eth.Src(), p.SrcIP(), p.DstIP(), 0x118)
	f.IPID = p.IPv4.ID()
	buf := make([]byte, 128)
	n, err := Build(buf, &f, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(buf[:n]), hex.EncodeToString(fr); got != want {
		t.Errorf("CNPFrame rebuild\n got %s\nwant %s", got, want)
	}
	// The IP ID is covered: changing it breaks the ICRC.
	fr[EthernetLen+4] ^= 1
	if VerifyICRC(l3) {
		t.Error("ICRC still valid after changing the IP ID")
	}
	if err := Parse(fr, &p); !errors.Is(err, ErrBadICRC) {
		t.Errorf("Parse after ID change: %v, want ErrBadICRC", err)
	}
}

func TestICRCPrefixConstant(t *testing.T) {
	ff := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if got := crc32.ChecksumIEEE(ff); got != crcPrefix {
		t.Fatalf("crc of 8×0xFF = %#x, want %#x", got, uint32(crcPrefix))
	}
}

// refICRC is a direct transcription of PROTOCOL §2: copy, mask, prefix, CRC.
func refICRC(l3 []byte) uint32 {
	m := append(bytes.Repeat([]byte{0xFF}, 8), l3...)
	ip := m[8:]
	var bth int
	if ip[0]>>4 == 4 {
		ihl := int(ip[0]&0xF) * 4
		ip[1], ip[8], ip[10], ip[11] = 0xFF, 0xFF, 0xFF, 0xFF
		bth = ihl + 8
	} else {
		ip[0] |= 0x0F
		ip[1], ip[2], ip[3], ip[7] = 0xFF, 0xFF, 0xFF, 0xFF
		bth = 48
	}
	ip[bth-2], ip[bth-1] = 0xFF, 0xFF
	ip[bth+4] = 0xFF
	return crc32.ChecksumIEEE(m)
}

// TestICRCReference compares ICRC with refICRC on random packets: IPv4 with
// and without options, IPv6, every valid opcode, random contents (the masked
// fields included), so that the word-wise fast paths are checked bit by bit.
func TestICRCReference(t *testing.T) {
	r := rand.New(rand.NewPCG(testSeed(t), 9))
	var ops []Opcode
	for i := range 256 {
		if Opcode(i).Valid() {
			ops = append(ops, Opcode(i))
		}
	}
	for i := range 3000 {
		o := ops[r.IntN(len(ops))]
		hdr, v6 := 40, true
		switch i % 3 {
		case 0:
			hdr, v6 = 20, false
		case 1:
			hdr, v6 = 20+4*(1+r.IntN(10)), false // IPv4 with options (IHL 6..15)
		}
		n := hdr + UDPLen + o.HeaderLen() + r.IntN(300)
		l3 := make([]byte, n)
		for j := range l3 {
			l3[j] = byte(r.Uint32())
		}
		if v6 {
			l3[0] = 0x60 | l3[0]&0x0F
		} else {
			l3[0] = 0x40 | byte(hdr/4)
		}
		if got, want := ICRC(l3), refICRC(l3); got != want {
			t.Fatalf("case %d (ip header %d, %d bytes): ICRC %#x, reference %#x", i, hdr, n, got, want)
		}
	}
	// Too short or not IP: 0, and VerifyICRC is false.
	for _, b := range [][]byte{nil, {0x45}, make([]byte, 39), {0x55, 0, 0, 0}, append([]byte{0x60}, make([]byte, 58)...)} {
		if ICRC(b) != 0 || VerifyICRC(append(b, 0, 0, 0, 0)) && len(b) < 40 {
			t.Errorf("short/non-IP input %x", b)
		}
	}
	if ICRC(append([]byte{0x44}, make([]byte, 60)...)) != 0 {
		t.Error("IHL 4 accepted")
	}
}
