package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
)

type capture struct {
	name string
	recs []pcapfile.Record
}

func loadCaptures(t testing.TB) []capture {
	t.Helper()
	files, err := filepath.Glob("../testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in ../testdata/rxe: %v", err)
	}
	var out []capture
	for _, fn := range files {
		f, err := os.Open(fn)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := pcapfile.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		out = append(out, capture{filepath.Base(fn), recs})
	}
	return out
}

// TestGoldenCaptures parses every frame of every rxe capture, checks its
// ICRC, rebuilds it from the parsed fields and compares the bytes.
func TestGoldenCaptures(t *testing.T) {
	total := map[Opcode]int{}
	buf := make([]byte, 9000)
	for _, c := range loadCaptures(t) {
		roce, other := 0, 0
		for i, r := range c.recs {
			if r.OrigLen != len(r.Data) {
				t.Fatalf("%s #%d: capture truncated (%d of %d)", c.name, i, len(r.Data), r.OrigLen)
			}
			var p Packet
			err := Parse(r.Data, &p)
			if errors.Is(err, ErrNotRoCE) || errors.Is(err, ErrNotIP) {
				// The captures hold the tools' TCP exchange besides RoCE.
				if isRoCE(r.Data) {
					t.Errorf("%s #%d: %v for a UDP/4791 frame", c.name, i, err)
				}
				other++
				continue
			}
			if err != nil {
				t.Errorf("%s #%d: %v", c.name, i, err)
				continue
			}
			roce++
			total[p.Opcode()]++
			if !VerifyICRC(p.L3) {
				t.Errorf("%s #%d: VerifyICRC false", c.name, i)
			}
			if !p.IPv4.ChecksumValid() {
				t.Errorf("%s #%d: IPv4 header checksum wrong", c.name, i)
			}
			if !p.IPv4.DF() {
				t.Errorf("%s #%d: DF not set", c.name, i)
			}
			wantLen := len(p.Eth) + len(p.L3)
			var f Frame
			p.FillFrame(&f)
			if got := f.Len(len(p.Payload)); got != wantLen {
				t.Errorf("%s #%d: Frame.Len %d, want %d", c.name, i, got, wantLen)
			}
			n, err := BuildPayload(buf, &f, p.Payload)
			if err != nil {
				t.Errorf("%s #%d: Build: %v", c.name, i, err)
				continue
			}
			if n != wantLen || !bytes.Equal(buf[:n], r.Data[:wantLen]) {
				t.Errorf("%s #%d (%s): rebuilt frame differs\n got % x\nwant % x", c.name, i, p.Opcode(), buf[:n], r.Data[:wantLen])
			}
		}
		if roce == 0 {
			t.Errorf("%s: no RoCE frames", c.name)
		}
		t.Logf("%-26s %4d RoCEv2 frames, %3d others (TCP)", c.name, roce, other)
	}
	ops := make([]int, 0, len(total))
	for o := range total {
		ops = append(ops, int(o))
	}
	sort.Ints(ops)
	for _, o := range ops {
		t.Logf("  %-32s %5d", Opcode(o), total[Opcode(o)])
	}
}

// isRoCE is an independent, simple check of "IPv4 or IPv6 UDP to port 4791"
// (untagged frames, no IPv4 options or IPv6 extension headers).
func isRoCE(fr []byte) bool {
	if len(fr) < EthernetLen+IPv6Len+UDPLen {
		return false
	}
	switch binary.BigEndian.Uint16(fr[12:]) {
	case EtherTypeIPv4:
		return fr[EthernetLen+9] == ProtocolUDP && binary.BigEndian.Uint16(fr[EthernetLen+IPv4Len+2:]) == UDPPort
	case EtherTypeIPv6:
		return fr[EthernetLen+6] == ProtocolUDP && binary.BigEndian.Uint16(fr[EthernetLen+IPv6Len+2:]) == UDPPort
	}
	return false
}

// cmREQFlowLabel returns the Primary Flow Label of an IB CM REQ MAD carried
// by a UD packet to QP1, if p is one. Layout: 24-byte MAD header (attribute
// ID 0x0010 at offset 16), then the REQ (IBTA 12.6.5), whose primary flow
// label is the top 20 bits of the word at REQ offset 88.
func cmREQFlowLabel(p *Packet) (uint32, bool) {
	m := p.Payload
	if p.Opcode() != UDSendOnly || p.BTH.DestQP() != 1 || len(m) < 24+92 {
		return 0, false
	}
	if m[1] != 0x07 || binary.BigEndian.Uint16(m[16:]) != 0x0010 { // CM class, REQ
		return 0, false
	}
	return binary.BigEndian.Uint32(m[24+88:]) >> 12, true
}

// TestCaptureSourcePorts checks the UDP source-port formulas against rxe:
// UD packets use UDSourcePort(own QPN); RC packets use RCSourcePort of the
// QPN pair, or the flow label the CM REQ carried (rdma_cm hashes its port
// numbers into one, cma_get_roce_udp_flow_label). A capture with several
// connections (ucmatose) has several REQs: one of their labels must give
// the port.
func TestCaptureSourcePorts(t *testing.T) {
	type dir struct{ src, dst netip.Addr }
	for _, c := range loadCaptures(t) {
		// QPNs addressed in each direction.
		dests := map[dir]map[uint32]bool{}
		reqFLs := map[uint32]bool{}
		var pkts []Packet
		for _, r := range c.recs {
			var p Packet
			if Parse(r.Data, &p) != nil {
				continue
			}
			pkts = append(pkts, p)
			if fl, ok := cmREQFlowLabel(&p); ok {
				reqFLs[fl] = true
			}
			if p.Opcode().Transport() == TransportRC {
				d := dir{p.SrcIP(), p.DstIP()}
				if dests[d] == nil {
					dests[d] = map[uint32]bool{}
				}
				dests[d][p.BTH.DestQP()] = true
			}
		}
		checked := 0
		for i := range pkts {
			p := &pkts[i]
			sport := p.UDP.SrcPort()
			switch p.Opcode().Transport() {
			case TransportUD:
				if want := UDSourcePort(p.DETH.SrcQP()); sport != want {
					t.Errorf("%s: UD from QP %#x: sport %#x, want %#x", c.name, p.DETH.SrcQP(), sport, want)
				}
				checked++
			case TransportRC:
				// The local QPN is one the peer addresses. Most captures
				// hold one connection, so there is one candidate; with more,
				// one of them must give the port.
				rev := dests[dir{p.DstIP(), p.SrcIP()}]
				ok := false
				for lqpn := range rev {
					ok = ok || (len(reqFLs) == 0 && RCSourcePortFL(0, lqpn, p.BTH.DestQP()) == sport)
					for fl := range reqFLs {
						ok = ok || RCSourcePortFL(fl, lqpn, p.BTH.DestQP()) == sport
					}
				}
				if !ok {
					t.Errorf("%s: RC to QP %#x (peer QPNs %v, CM flow labels %v): sport %#x matches none", c.name, p.BTH.DestQP(), rev, reqFLs, sport)
				}
				checked++
			}
		}
		t.Logf("%-26s %4d source ports match (%d CM REQ flow labels)", c.name, checked, len(reqFLs))
	}
}
