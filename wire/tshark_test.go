package wire

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// tsharkFields are the fields the cross-check asks tshark for, in order.
var tsharkFields = []string{
	"frame.number",
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
	"infiniband.bth.a", "infiniband.bth.p_key", "infiniband.bth.se", "infiniband.bth.m",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn",
	"infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt",
	"infiniband.invariant.crc", "ip.checksum.status", "udp.dstport", "udp.length",
}

// TestTsharkCrossCheck writes frames built by wire for every valid opcode
// (IPv4/IPv6, with and without VLAN) to a pcap and checks that Wireshark's
// independent InfiniBand dissector decodes the same header values and finds
// the IPv4 header checksums good. Skipped when tshark is not installed
// (Debian package "tshark").
func TestTsharkCrossCheck(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark): independent decode not checked")
	}
	r := rand.New(rand.NewPCG(testSeed(t), 10))
	var frames []Frame
	var plens []int
	path := filepath.Join(t.TempDir(), "built.pcap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewWriter(out, pcapfile.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for i := range 256 {
		o := Opcode(i)
		if !o.Valid() || o == RCFlush || o == RCAtomicWrite {
			// Wireshark 4.0 (Debian 12) names FLUSH and ATOMIC_WRITE
			// but decodes neither's headers (TestFETHGolden checks them
			// against rxe's own layout instead).
			continue
		}
		for rep := range 2 {
			f := randFrame(r, o, rep == 1, i%2 == 1)
			n := randPayloadLen(r, o)
			m, err := BuildPayload(buf, &f, bytes.Repeat([]byte{0xA5}, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WritePacket(time.Unix(1, 0), buf[:m]); err != nil {
				t.Fatal(err)
			}
			frames = append(frames, f)
			plens = append(plens, n)
		}
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	args := []string{"-r", path, "-o", "ip.check_checksum:TRUE", "-T", "fields", "-E", "separator=;", "-E", "occurrence=f"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	res, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames", len(lines), len(frames))
	}
	for i, line := range lines {
		f := &frames[i]
		col := strings.Split(line, ";")
		get := func(name string) string {
			for j, n := range tsharkFields {
				if n == name && j < len(col) {
					return col[j]
				}
			}
			return ""
		}
		num := func(name string) uint64 {
			s := get(name)
			switch s {
			case "True":
				return 1
			case "False":
				return 0
			}
			v, err := strconv.ParseUint(s, 0, 64)
			if err != nil {
				t.Errorf("frame %d (%s): field %s = %q", i+1, f.BTH.Opcode, name, s)
			}
			return v
		}
		b2u := func(b bool) uint64 {
			if b {
				return 1
			}
			return 0
		}
		o := f.BTH.Opcode
		h := o.Info().Headers
		check := func(name string, want uint64) {
			if got := num(name); got != want {
				t.Errorf("frame %d (%s): tshark %s = %#x, wire built %#x", i+1, o, name, got, want)
			}
		}
		check("infiniband.bth.opcode", uint64(o))
		check("infiniband.bth.destqp", uint64(f.BTH.DestQP))
		check("infiniband.bth.psn", uint64(f.BTH.PSN))
		check("infiniband.bth.padcnt", uint64((-plens[i])&3))
		check("infiniband.bth.a", b2u(f.BTH.AckReq))
		check("infiniband.bth.se", b2u(f.BTH.SE))
		check("infiniband.bth.m", b2u(f.BTH.M))
		check("infiniband.bth.p_key", uint64(f.BTH.PKey))
		check("udp.dstport", UDPPort)
		if is4(f.SrcIP) && get("ip.checksum.status") != "1" && get("ip.checksum.status") != "Good" { // 1 = PROTO_CHECKSUM_E_GOOD
			t.Errorf("frame %d: ip.checksum.status %q", i+1, get("ip.checksum.status"))
		}
		if h&HasRETH != 0 {
			check("infiniband.reth.va", f.RETH.VA)
			check("infiniband.reth.r_key", uint64(f.RETH.RKey))
			check("infiniband.reth.dmalen", uint64(f.RETH.DMALen))
		}
		if h&HasAETH != 0 {
			check("infiniband.aeth.syndrome", uint64(f.AETH.Syndrome))
			check("infiniband.aeth.msn", uint64(f.AETH.MSN))
		}
		if h&HasDETH != 0 {
			check("infiniband.deth.q_key", uint64(f.DETH.QKey))
			check("infiniband.deth.srcqp", uint64(f.DETH.SrcQP))
		}
		if h&HasAtomicETH != 0 {
			check("infiniband.atomiceth.swapdt", f.AtomicETH.SwapAdd)
			check("infiniband.atomiceth.cmpdt", f.AtomicETH.Compare)
		}
		if h&HasAtomicAckETH != 0 {
			check("infiniband.atomicacketh.origremdt", f.AtomicAckETH)
		}
	}
	t.Logf("tshark agreed on %d frames; first line: %s", len(lines), lines[0])
}
