package dump

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const rxeDir = "../../../../testdata/rxe/"

// readRecords reads a capture file into memory (copies of the data).
func readRecords(t testing.TB, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next, _, err := openCapture(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var recs []Record
	for {
		rec, err := next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rec.Data = append([]byte(nil), rec.Data...)
		recs = append(recs, rec)
	}
}

// run dumps recs (with the MTU first pass, like DumpFile) and returns the
// output and the summary.
func run(t testing.TB, recs []Record, opts Options) (string, Summary) {
	t.Helper()
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	var out bytes.Buffer
	d := New(&out, opts)
	i := 0
	d.SetInferredMTU(InferMTU(func() (Record, bool) {
		if i == len(recs) {
			return Record{}, false
		}
		i++
		return recs[i-1], true
	}))
	for _, r := range recs {
		d.Packet(r)
	}
	s, err := d.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), s
}

// writePcap writes recs as a classic pcap file.
func writePcap(t testing.TB, path string, recs []Record, snaplen uint32) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(snaplen, recs[0].LinkType); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Data), Length: r.OrigLen}
		if err := w.WritePacket(ci, r.Data); err != nil {
			t.Fatal(err)
		}
	}
}

func goldenCheck(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("%s: line %d differs\n got: %s\nwant: %s", name, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%s: %d lines, want %d", name, len(gl), len(wl))
	}
}

func dumpFileUTC(t *testing.T, path string, opts Options) (string, Summary) {
	t.Helper()
	opts.Location = time.UTC
	var out bytes.Buffer
	s, err := DumpFile(path, &out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), s
}

func TestGoldenRCPingpongSmall(t *testing.T) {
	out, s := dumpFileUTC(t, rxeDir+"rc_pingpong_small.pcap", Options{})
	goldenCheck(t, "rc_pingpong_small", out)

	if s.Packets != 213 || s.RoCE != 202 || s.NonRoCE != 11 || s.ICRCFailures != 0 || s.Malformed != 0 {
		t.Fatalf("summary %+v", s)
	}
	if s.Opcodes["RC_SEND_ONLY"] != 101 || s.Opcodes["RC_ACKNOWLEDGE"] != 101 || len(s.Opcodes) != 2 {
		t.Fatalf("opcodes %v", s.Opcodes)
	}
	// ibv_rc_pingpong -s 512 -n 50: client QPN 0x12 PSN 0xc76afa, server
	// QPN 0x12 PSN 0xfce7b7 (rc_pingpong_small.log). The server resent PSN
	// 0xfce7b7+27 once (the capture holds it twice, both ACKed).
	if len(s.Flows) != 2 {
		t.Fatalf("flows %+v", s.Flows)
	}
	c2s, s2c := s.Flows[0], s.Flows[1]
	if c2s.Src != "198.18.0.12" || c2s.DQPN != 0x12 || c2s.Requests.FirstPSN != 0xc76afa || c2s.Requests.Packets != 50 ||
		c2s.Requests.LastPSN != 0xc76afa+49 || c2s.Requests.Gaps != 0 || c2s.Requests.Retransmitted != 0 {
		t.Fatalf("client flow %+v %+v", c2s, *c2s.Requests)
	}
	if s2c.Requests.FirstPSN != 0xfce7b7 || s2c.Requests.Packets != 51 || s2c.Requests.Retransmitted != 1 || s2c.Requests.Gaps != 0 {
		t.Fatalf("server flow %+v", *s2c.Requests)
	}
	if c2s.Responses.ACKs != 51 || s2c.Responses.ACKs != 50 || len(c2s.Responses.NAKs) != 0 || c2s.Responses.RNRNAKs != 0 {
		t.Fatalf("responses %+v %+v", *c2s.Responses, *s2c.Responses)
	}
	// Key fields of the first lines.
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"07:49:50.585033 198.18.0.12:49476 > 198.18.0.11 RC_SEND_ONLY ",
		"dqpn=0x12 psn=13069050 ackreq payload=512 icrc=ok",
	} {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("line 1 %q lacks %q", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], "RC_ACKNOWLEDGE") || !strings.Contains(lines[1], "aeth=ACK msn=1 icrc=ok") {
		t.Fatalf("line 2: %q", lines[1])
	}
	if !strings.Contains(out, "202 RoCEv2 (0 ICRC failures, 0 malformed), 11 other") {
		t.Fatalf("summary line missing:\n%s", out)
	}
}

func TestGoldenAtomicFAdd(t *testing.T) {
	out, s := dumpFileUTC(t, rxeDir+"atomic_fadd.pcap", Options{})
	goldenCheck(t, "atomic_fadd", out)
	if s.RoCE != 200 || s.ICRCFailures != 0 || s.Opcodes["RC_FETCH_ADD"] != 100 || s.Opcodes["RC_ATOMIC_ACKNOWLEDGE"] != 100 {
		t.Fatalf("summary %+v", s)
	}
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "RC_FETCH_ADD") || !strings.Contains(lines[0], "va=0x5578de60b000 rkey=") || !strings.Contains(lines[0], "add=0x1 icrc=ok") {
		t.Fatalf("line 1: %q", lines[0])
	}
	var ack string
	for _, l := range lines {
		if strings.Contains(l, "RC_ATOMIC_ACKNOWLEDGE") {
			ack = l
			break
		}
	}
	if !strings.Contains(ack, "aeth=ACK msn=") || !strings.Contains(ack, "orig=0x") {
		t.Fatalf("atomic ack line: %q", ack)
	}
	req := s.Flows[0].Requests
	if req.Packets != 100 || req.Gaps != 0 || req.Retransmitted != 0 || req.LastPSN-req.FirstPSN != 99 {
		t.Fatalf("requests %+v", *req)
	}
	if r := s.Flows[1].Responses; r.Packets != 100 || len(r.NAKs) != 0 {
		t.Fatalf("responses %+v", *r)
	}
}

// TestAllCaptures checks every rxe capture against its README numbers.
func TestAllCaptures(t *testing.T) {
	want := map[string]int{
		"rc_pingpong": 516, "rc_pingpong_small": 202, "read_bw_small": 200, "send_bw_small": 200,
		"atomic_fadd": 200, "atomic_cas": 200, "ud_pingpong": 100, "rping": 65, "write_lat": 406,
		"write_bw_gbits_small": 400,
	}
	for name, n := range want {
		_, s := dumpFileUTC(t, rxeDir+name+".pcap", Options{Quiet: true})
		if s.RoCE != n || s.ICRCFailures != 0 || s.Malformed != 0 {
			t.Errorf("%s: %d RoCEv2, %d ICRC failures, %d malformed; want %d, 0, 0", name, s.RoCE, s.ICRCFailures, s.Malformed, n)
		}
		for _, f := range s.Flows {
			if r := f.Requests; r != nil && (r.Gaps != 0 || r.Late != 0) {
				t.Errorf("%s: flow %s>%s %#x: %+v", name, f.Src, f.Dst, f.DQPN, *r)
			}
		}
		if name == "rc_pingpong" && (s.MTU != 1024 || s.MTUSource != "inferred") {
			t.Errorf("rc_pingpong: MTU %d (%s), want 1024 inferred", s.MTU, s.MTUSource)
		}
	}
}

// truncate returns recs cut to snaplen bytes (OrigLen kept).
func truncate(recs []Record, snaplen int) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = r
		if len(r.Data) > snaplen {
			out[i].Data = r.Data[:snaplen]
		}
	}
	return out
}

// TestTruncatedSnaplen rewrites captures with every record cut at 60 bytes:
// every RoCEv2 packet is reported as truncated with what was decoded, and
// the flow analysis still works from the BTHs.
func TestTruncatedSnaplen(t *testing.T) {
	dir := t.TempDir()
	full := readRecords(t, rxeDir+"rc_pingpong.pcap")
	path := filepath.Join(dir, "cut.pcap")
	writePcap(t, path, truncate(full, 60), 60)
	out, s := dumpFileUTC(t, path, Options{})
	_, fs := run(t, full, Options{Quiet: true})
	if s.RoCE != 516 || s.Truncated != 516 || s.Malformed != 516 || s.ICRCFailures != 0 || s.NonRoCE != fs.NonRoCE {
		t.Fatalf("summary %+v", s)
	}
	for _, want := range []string{
		"truncated in payload (6 of 1024 bytes captured): RC_SEND_FIRST dqpn=0x11 psn=",
		"(60 of 1082 bytes captured)",
		"truncated in ICRC: RC_ACKNOWLEDGE dqpn=0x11 psn=",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out[:2000])
		}
	}
	if strings.Contains(out, "icrc=") {
		t.Fatal("an ICRC verdict on a truncated packet")
	}
	// The PSN analysis is the same as on the full capture (4 retransmitted
	// packets each way), except that the MTU cannot be inferred.
	if len(s.Flows) != len(fs.Flows) {
		t.Fatalf("%d flows, full capture %d", len(s.Flows), len(fs.Flows))
	}
	for i := range s.Flows {
		if *s.Flows[i].Requests != *fs.Flows[i].Requests || s.Flows[i].Responses.ACKs != fs.Flows[i].Responses.ACKs {
			t.Fatalf("flow %d: %+v, full %+v", i, *s.Flows[i].Requests, *fs.Flows[i].Requests)
		}
	}
	if fs.Flows[0].Requests.Retransmitted != 4 {
		t.Fatalf("full capture: %+v", *fs.Flows[0].Requests)
	}

	// READ requests cut inside the RETH.
	reads := truncate(readRecords(t, rxeDir+"read_bw_small.pcap"), 60)
	out, s = run(t, reads, Options{})
	if !strings.Contains(out, "truncated after BTH: RC_RDMA_READ_REQUEST dqpn=0x16 psn=14105216 ackreq (60 of 74 bytes captured)") {
		t.Fatalf("no truncated READ line:\n%s", out[:1500])
	}
	if r := s.Flows[0].Requests; r.Packets != 100 || r.Gaps != 0 || r.Retransmitted != 0 || r.Late != 0 {
		t.Fatalf("READ flow with unknown lengths: %+v", *r)
	}

	// Cut in the IP and UDP headers: still no panic, still counted.
	for _, n := range []int{0, 10, 14, 20, 34, 40, 42, 50, 54} {
		out, s = run(t, truncate(full, n), Options{})
		if s.Packets != len(full) || s.RoCE+s.NonRoCE != s.Packets {
			t.Fatalf("cut at %d: %+v", n, s)
		}
		if n >= 42 && (s.RoCE != 516 || s.Truncated != 516) {
			t.Fatalf("cut at %d: %+v", n, s)
		}
		if n == 50 && !strings.Contains(out, "truncated in BTH") {
			t.Fatalf("cut at 50:\n%s", out[:500])
		}
	}
}

// TestCorruptedByte flips one payload byte: icrc=BAD, counted, and left out
// of the flow analysis.
func TestCorruptedByte(t *testing.T) {
	recs := readRecords(t, rxeDir+"rc_pingpong_small.pcap")
	bad := -1
	for i, r := range recs {
		var p wire.Packet
		if wire.Parse(r.Data, &p) == nil && p.Opcode() == wire.RCSendOnly {
			p.Payload[100] ^= 0x01
			bad = i
			break
		}
	}
	out, s := run(t, recs, Options{})
	if s.ICRCFailures != 1 || s.RoCE != 202 || s.Malformed != 0 {
		t.Fatalf("summary %+v", s)
	}
	line := strings.Split(out, "\n")[bad-countNonRoCEBefore(recs, bad)]
	if !strings.Contains(line, "RC_SEND_ONLY") || !strings.Contains(line, "icrc=BAD got=0x") || !strings.Contains(line, " want=0x") {
		t.Fatalf("corrupted packet line: %q", line)
	}
	if strings.Count(out, "icrc=BAD") != 1 || !strings.Contains(out, "(1 ICRC failure, 0 malformed)") {
		t.Fatalf("output:\n%s", out)
	}
	if n := s.Flows[0].Requests.Packets + s.Flows[1].Requests.Packets; n != 100 {
		t.Fatalf("%d requests in flows, want 100 (one excluded)", n)
	}
	// JSON says the same.
	out, _ = run(t, recs, Options{JSON: true})
	if !strings.Contains(out, `"icrc_ok":false`) || strings.Count(out, `"icrc_ok":false`) != 1 {
		t.Fatal("JSON: no single icrc_ok false")
	}
}

func countNonRoCEBefore(recs []Record, i int) int {
	n := 0
	for _, r := range recs[:i] {
		var x decoded
		decode(&x, r)
		if x.kind == kindNonRoCE {
			n++
		}
	}
	return n
}

// TestJSON checks that every line parses and has the documented keys.
func TestJSON(t *testing.T) {
	keys := []string{"time", "src", "dst", "sport", "opcode", "opcode_num", "dqpn", "psn", "ackreq", "payload_len", "icrc_ok"}
	ext := map[string]string{ // a capture holding each extension header
		"reth": "read_bw_small", "aeth": "rc_pingpong_small", "atomiceth": "atomic_cas",
		"atomicacketh": "atomic_fadd", "deth": "ud_pingpong",
	}
	seen := map[string]bool{}
	for _, name := range []string{"rc_pingpong_small", "read_bw_small", "atomic_cas", "atomic_fadd", "ud_pingpong"} {
		var out bytes.Buffer
		s, err := DumpFile(rxeDir+name+".pcap", &out, Options{JSON: true})
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(&out)
		sc.Buffer(nil, 1<<20)
		var objs []map[string]any
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: %v: %s", name, err, sc.Text())
			}
			objs = append(objs, m)
		}
		if len(objs) != s.RoCE+1 {
			t.Fatalf("%s: %d objects, want %d packets + summary", name, len(objs), s.RoCE)
		}
		for _, m := range objs[:len(objs)-1] {
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Fatalf("%s: key %q missing in %v", name, k, m)
				}
			}
			if m["icrc_ok"] != true {
				t.Fatalf("%s: %v", name, m)
			}
			for k := range ext {
				if _, ok := m[k].(map[string]any); ok {
					seen[k] = true
				}
			}
		}
		sum := objs[len(objs)-1]
		if sum["summary"] != true || sum["roce"] != float64(s.RoCE) || sum["icrc_failures"] != 0.0 {
			t.Fatalf("%s: summary object %v", name, sum)
		}
		if _, ok := sum["flows"].([]any); !ok {
			t.Fatalf("%s: summary flows %v", name, sum["flows"])
		}
	}
	for k, c := range ext {
		if !seen[k] {
			t.Errorf("no %q object in %s", k, c)
		}
	}
	// Decoded values of a FETCH_ADD and its ACK.
	var out bytes.Buffer
	if _, err := DumpFile(rxeDir+"atomic_fadd.pcap", &out, Options{JSON: true, Count: 1}); err != nil {
		t.Fatal(err)
	}
	var first struct {
		Opcode    string `json:"opcode"`
		OpcodeNum int    `json:"opcode_num"`
		AtomicETH struct {
			VA      string `json:"va"`
			SwapAdd string `json:"swap_add"`
		} `json:"atomiceth"`
	}
	if err := json.Unmarshal(bytes.SplitN(out.Bytes(), []byte("\n"), 2)[0], &first); err != nil {
		t.Fatal(err)
	}
	if first.Opcode != "RC_FETCH_ADD" || first.OpcodeNum != 0x14 || first.AtomicETH.VA != "0x5578de60b000" || first.AtomicETH.SwapAdd != "0x1" {
		t.Fatalf("first packet %+v", first)
	}
}

// TestPcapng writes a capture as pcapng: same output as from the pcap.
func TestPcapng(t *testing.T) {
	recs := readRecords(t, rxeDir+"rc_pingpong_small.pcap")
	path := filepath.Join(t.TempDir(), "x.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Data), Length: r.OrigLen}, r.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, s := dumpFileUTC(t, path, Options{})
	want, _ := dumpFileUTC(t, rxeDir+"rc_pingpong_small.pcap", Options{})
	if s.RoCE != 202 || got != want {
		t.Fatalf("pcapng output differs from pcap (%d RoCEv2)", s.RoCE)
	}
}

// TestLinkTypes feeds the same packets as raw IP and Linux cooked captures.
func TestLinkTypes(t *testing.T) {
	recs := readRecords(t, rxeDir+"rping.pcap")
	want, _ := run(t, recs, Options{})
	for _, lt := range []layers.LinkType{layers.LinkTypeRaw, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2} {
		conv := make([]Record, len(recs))
		for i, r := range recs {
			l3 := r.Data[wire.EthernetLen:]
			var hdr []byte
			switch lt {
			case layers.LinkTypeLinuxSLL:
				hdr = make([]byte, 16)
				copy(hdr[14:], r.Data[12:14])
			case layers.LinkTypeLinuxSLL2:
				hdr = make([]byte, 20)
				copy(hdr[0:], r.Data[12:14])
			}
			conv[i] = Record{Time: r.Time, Data: append(hdr, l3...), OrigLen: r.OrigLen - 14 + len(hdr), LinkType: lt}
		}
		got, s := run(t, conv, Options{})
		if got != want || s.RoCE != 65 {
			t.Fatalf("link type %v: output differs", lt)
		}
	}
	_, s := run(t, []Record{{Data: recs[0].Data, LinkType: 9999}}, Options{})
	if s.NonRoCE != 1 {
		t.Fatalf("unknown link type: %+v", s)
	}
}

// TestReadErrors: not a capture, a missing file, a file cut mid-record.
func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := DumpFile(filepath.Join(dir, "missing.pcap"), io.Discard, Options{}); err == nil {
		t.Fatal("missing file: no error")
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("hello world, not a capture"), 0o644)
	if _, err := DumpFile(junk, io.Discard, Options{}); err == nil || !strings.Contains(err.Error(), "not a pcap or pcapng") {
		t.Fatalf("junk: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if _, err := DumpFile(empty, io.Discard, Options{}); err == nil {
		t.Fatal("empty file: no error")
	}
	if _, err := DumpFile(dir, io.Discard, Options{}); err == nil {
		t.Fatal("directory: no error")
	}
	whole, err := os.ReadFile(rxeDir + "rc_pingpong_small.pcap")
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.pcap")
	os.WriteFile(cut, whole[:len(whole)-10], 0o644) // inside the last record
	out, s := dumpFileUTC(t, cut, Options{})
	if s.Packets != 212 || len(s.Warnings) != 1 || !strings.Contains(out, "warning: capture ends in the middle of a record") {
		t.Fatalf("cut file: %+v\n%s", s, out[len(out)-600:])
	}
	// Header only: readable, nothing in it.
	hdr := filepath.Join(dir, "hdr.pcap")
	os.WriteFile(hdr, whole[:24], 0o644)
	if out, s := dumpFileUTC(t, hdr, Options{}); s.Packets != 0 || !strings.HasPrefix(out, "0 packets: 0 RoCEv2") {
		t.Fatalf("header-only file: %q", out)
	}
}

// TestRandomRecords feeds random and mutated frames, with every link type:
// nothing panics, every record is classified, JSON stays valid.
func TestRandomRecords(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	base := readRecords(t, rxeDir+"rping.pcap")
	linkTypes := []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeEthernet, layers.LinkTypeRaw, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2, 9999}
	var recs []Record
	for range 8000 {
		var data []byte
		lt := layers.LinkTypeEthernet
		switch rng.IntN(3) {
		case 0: // random bytes
			data = make([]byte, rng.IntN(200))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			lt = linkTypes[rng.IntN(len(linkTypes))]
		default: // a real frame, mutated and/or cut
			data = append([]byte(nil), base[rng.IntN(len(base))].Data...)
			for range rng.IntN(4) {
				data[rng.IntN(len(data))] = byte(rng.Uint32())
			}
			if rng.IntN(2) == 0 {
				data = data[:rng.IntN(len(data)+1)]
			}
		}
		recs = append(recs, Record{Time: time.Unix(int64(len(recs)), 0), Data: data, OrigLen: len(data) + rng.IntN(2)*10, LinkType: lt})
	}
	_, s := run(t, recs, Options{})
	if s.Packets != len(recs) || s.RoCE+s.NonRoCE != s.Packets || s.Malformed+s.ICRCFailures > s.RoCE || s.Truncated > s.Malformed {
		t.Fatalf("seed %d: inconsistent summary %+v", seed, s)
	}
	if s.Malformed == 0 || s.ICRCFailures == 0 || s.RoCE-s.Malformed-s.ICRCFailures == 0 {
		t.Fatalf("seed %d: the mix lacks a class: %+v", seed, s)
	}
	out, _ := run(t, recs, Options{JSON: true})
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("seed %d: line %d not JSON: %s", seed, i+1, l)
		}
	}
}

// FuzzPacket: any bytes, any link type.
func FuzzPacket(f *testing.F) {
	for _, r := range readRecords(f, rxeDir+"rping.pcap")[:10] {
		f.Add(r.Data, uint16(layers.LinkTypeEthernet))
	}
	f.Fuzz(func(t *testing.T, data []byte, lt uint16) {
		for _, js := range []bool{false, true} {
			d := New(io.Discard, Options{JSON: js, Location: time.UTC})
			d.Packet(Record{Data: data, LinkType: layers.LinkType(lt)})
			s, _ := d.Finish()
			if s.Packets != 1 || s.RoCE+s.NonRoCE != 1 {
				t.Fatalf("%+v", s)
			}
		}
	})
}

// Synthetic traffic for the flow analysis.

var (
	ipA = netip.MustParseAddr("198.18.0.1")
	ipB = netip.MustParseAddr("198.18.0.2")
)

type pkt struct {
	op      wire.Opcode
	psn     uint32
	payload int
	dmaLen  uint32
	syn     wire.Syndrome
	reverse bool // B → A
	v6      bool
}

func frames(t testing.TB, ps []pkt) []Record {
	t.Helper()
	var recs []Record
	for i, p := range ps {
		f := wire.Frame{
			SrcIP: ipA, DstIP: ipB, SrcPort: 50000, HopLimit: 64,
			BTH:  wire.BTHFields{Opcode: p.op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(p.psn), AckReq: true},
			RETH: wire.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: p.dmaLen},
			AETH: wire.AETHFields{Syndrome: p.syn, MSN: uint32(i)},
		}
		if p.reverse {
			f.SrcIP, f.DstIP, f.BTH.DestQP = ipB, ipA, 0x22
		}
		if p.v6 {
			f.SrcIP, f.DstIP = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
		}
		buf := make([]byte, f.Len(p.payload))
		n, err := wire.Build(buf, &f, p.payload)
		if err != nil {
			t.Fatalf("packet %d %v: %v", i, p.op, err)
		}
		recs = append(recs, Record{Time: time.Unix(1e9, int64(i)*1000), Data: buf[:n], LinkType: layers.LinkTypeEthernet})
	}
	return recs
}

func sends(psns ...uint32) []pkt {
	var ps []pkt
	for _, p := range psns {
		ps = append(ps, pkt{op: wire.RCSendOnly, psn: p, payload: 8})
	}
	return ps
}

func TestFlowRequests(t *testing.T) {
	cases := []struct {
		name string
		ps   []pkt
		mtu  int
		want RequestStats // Packets, FirstPSN, LastPSN filled from ps
	}{
		{"in order", sends(10, 11, 12, 13), 0, RequestStats{}},
		{"gap", sends(10, 11, 14, 15), 0, RequestStats{Gaps: 1, MissingPSNs: 2}},
		{"go-back-N", sends(10, 11, 12, 13, 11, 12, 13, 14), 0, RequestStats{Retransmitted: 3}},
		{"duplicate", sends(10, 10, 11), 0, RequestStats{Retransmitted: 1}},
		{"late fill", sends(10, 11, 13, 12, 14), 0, RequestStats{Gaps: 1, MissingPSNs: 1, Late: 1}},
		{"late then resent", sends(10, 12, 11, 11, 13), 0, RequestStats{Gaps: 1, MissingPSNs: 1, Late: 1, Retransmitted: 1}},
		{"wrap", sends(0xFFFFFE, 0xFFFFFF, 0, 1, 2), 0, RequestStats{}},
		{"wrap gap", sends(0xFFFFFF, 1), 0, RequestStats{Gaps: 1, MissingPSNs: 1}},
		{"READ with --mtu", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4096}}, sends(104, 105)...), 1024,
			RequestStats{Reads: 1}},
		{"READ of 4097 bytes", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4097}}, sends(105)...), 1024,
			RequestStats{Reads: 1}},
		{"READ, next inside its PSNs", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4096}}, sends(103)...), 1024,
			RequestStats{Reads: 1, Retransmitted: 1}},
		{"zero-length READ uses one PSN", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 0}}, sends(101)...), 1024,
			RequestStats{Reads: 1}},
		{"READ gap", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 2048}}, sends(104)...), 1024,
			RequestStats{Reads: 1, Gaps: 1, MissingPSNs: 2}},
		{"READ retried from the middle", []pkt{
			{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4096},
			{op: wire.RCRDMAReadRequest, psn: 102, dmaLen: 2048},
			{op: wire.RCSendOnly, psn: 104, payload: 1}}, 1024,
			RequestStats{Reads: 2, Retransmitted: 1}},
		{"READ, MTU unknown: anything in [P+1, P+16] fits 4096 bytes", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4096}}, sends(110, 111)...), 0,
			RequestStats{Reads: 1}},
		{"READ, MTU unknown, beyond", append([]pkt{{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 4096}}, sends(120)...), 0,
			RequestStats{Reads: 1, Gaps: 1, MissingPSNs: 19}},
		{"UC too", []pkt{{op: wire.UCSendOnly, psn: 5}, {op: wire.UCSendOnly, psn: 7}}, 0, RequestStats{Gaps: 1, MissingPSNs: 1}},
		{"UD not analysed", []pkt{{op: wire.UDSendOnly, psn: 5}, {op: wire.UDSendOnly, psn: 9}}, 0, RequestStats{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, s := run(t, frames(t, c.ps), Options{MTU: c.mtu, Quiet: true})
			if len(s.Flows) != 1 || s.Flows[0].Requests == nil {
				t.Fatalf("flows %+v", s.Flows)
			}
			want := c.want
			want.Packets, want.FirstPSN, want.LastPSN = len(c.ps), c.ps[0].psn, c.ps[len(c.ps)-1].psn
			if got := *s.Flows[0].Requests; got != want {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestFlowMTUInferred: the MTU comes from a SEND_FIRST elsewhere in the
// capture, even one after the READ (the first pass).
func TestFlowMTUInferred(t *testing.T) {
	ps := []pkt{
		{op: wire.RCRDMAReadRequest, psn: 100, dmaLen: 3000}, // 3 PSNs at MTU 1024
		{op: wire.RCSendOnly, psn: 103, payload: 1},
		{op: wire.RCSendFirst, psn: 7, payload: 1024, reverse: true},
	}
	_, s := run(t, frames(t, ps), Options{Quiet: true})
	if s.MTU != 1024 || s.MTUSource != "inferred" {
		t.Fatalf("MTU %d %s", s.MTU, s.MTUSource)
	}
	if r := s.Flows[0].Requests; r.Gaps != 0 || r.Late != 0 {
		t.Fatalf("%+v", *r)
	}
	_, s = run(t, frames(t, ps), Options{Quiet: true, MTU: 256})
	if r := s.Flows[0].Requests; s.MTUSource != "flag" || r.Retransmitted != 1 { // 103 is inside the READ's 12 PSNs
		t.Fatalf("with --mtu 256: %s %+v", s.MTUSource, *r)
	}
}

func TestFlowResponses(t *testing.T) {
	ps := []pkt{
		{op: wire.RCSendOnly, psn: 1, payload: 4},
		{op: wire.RCAcknowledge, psn: 1, syn: wire.SyndromeACKNoCredit, reverse: true},
		{op: wire.RCSendOnly, psn: 2, payload: 4},
		{op: wire.RCAcknowledge, psn: 2, syn: wire.RNRNAKSyndrome(12), reverse: true},
		{op: wire.RCSendOnly, psn: 2, payload: 4},
		{op: wire.RCAcknowledge, psn: 2, syn: wire.NAKSyndrome(wire.NAKPSNSequenceError), reverse: true},
		{op: wire.RCAcknowledge, psn: 2, syn: wire.NAKSyndrome(wire.NAKPSNSequenceError), reverse: true},
		{op: wire.RCAcknowledge, psn: 3, syn: wire.NAKSyndrome(wire.NAKRemoteAccessError), reverse: true},
		{op: wire.RCRDMAReadResponseOnly, psn: 4, payload: 8, syn: wire.SyndromeACKNoCredit, reverse: true},
	}
	out, s := run(t, frames(t, ps), Options{})
	if len(s.Flows) != 2 {
		t.Fatalf("flows %+v", s.Flows)
	}
	if r := s.Flows[0].Requests; r.Retransmitted != 1 || r.Packets != 3 {
		t.Fatalf("requests %+v", *r)
	}
	r := s.Flows[1].Responses
	if r.Packets != 6 || r.ACKs != 2 || r.RNRNAKs != 1 || *r.RNRTimer != 12 ||
		r.NAKs["PSN_SEQUENCE_ERROR"] != 2 || r.NAKs["REMOTE_ACCESS_ERROR"] != 1 || len(r.NAKs) != 2 || r.FirstPSN != 1 || r.LastPSN != 4 {
		t.Fatalf("responses %+v", *r)
	}
	for _, want := range []string{
		"aeth=RNR_NAK(timer 12 = 640µs) msn=3",
		"aeth=NAK(PSN_SEQUENCE_ERROR) msn=5",
		"aeth=NAK(REMOTE_ACCESS_ERROR)",
		"naks 3 (PSN_SEQUENCE_ERROR 2, REMOTE_ACCESS_ERROR 1)  rnr_naks 1 (timer 12 = 640µs)",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestEveryOpcodeLine prints every valid opcode (all extension headers).
func TestEveryOpcodeLine(t *testing.T) {
	var ps []pkt
	for op := range 256 {
		o := wire.Opcode(op)
		if !o.Valid() {
			continue
		}
		p := pkt{op: o, psn: uint32(op), dmaLen: 64}
		if o.Info().Payload {
			p.payload = 3
			if pos := o.Info().Pos; pos == wire.PosFirst || pos == wire.PosMiddle {
				p.payload = 256
			}
		}
		ps = append(ps, p)
	}
	out, s := run(t, frames(t, ps), Options{})
	if s.RoCE != len(ps) || s.ICRCFailures != 0 || s.Malformed != 0 {
		t.Fatalf("%+v", s)
	}
	for _, want := range []string{
		"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE dqpn=0x11 psn=11 ackreq va=0x1000 rkey=0x77 len=64 imm=0x0 payload=3 icrc=ok",
		"RC_SEND_LAST_WITH_INVALIDATE",
		"inv_rkey=0x0",
		"RC_COMPARE_SWAP", "compare=0x0 swap=0x0",
		"UD_SEND_ONLY_WITH_IMMEDIATE", "qkey=0x0 srcqp=0x0",
		"CNP ",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestIPv6 prints and analyses IPv6 traffic, including a truncated packet.
func TestIPv6(t *testing.T) {
	recs := frames(t, []pkt{
		{op: wire.RCRDMAWriteFirst, psn: 1, payload: 1024, dmaLen: 2000, v6: true},
		{op: wire.RCRDMAWriteLast, psn: 2, payload: 976, v6: true},
		{op: wire.RCRDMAWriteOnly, psn: 4, payload: 8, dmaLen: 8, v6: true},
	})
	recs[2].OrigLen = len(recs[2].Data)
	recs[2].Data = recs[2].Data[:wire.EthernetLen+wire.IPv6Len+wire.UDPLen+wire.BTHLen+4]
	out, s := run(t, recs, Options{})
	for _, want := range []string{
		"[2001:db8::1]:50000 > 2001:db8::2 RC_RDMA_WRITE_FIRST        dqpn=0x11 psn=1 ackreq va=0x1000 rkey=0x77 len=2000 payload=1024 icrc=ok",
		"[2001:db8::1]:50000 > 2001:db8::2 truncated after BTH: RC_RDMA_WRITE_ONLY dqpn=0x11 psn=4 ackreq (78 of 102 bytes captured)",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if s.MTU != 1024 || s.Flows[0].Src != "2001:db8::1" {
		t.Fatalf("%+v", s)
	}
	if r := s.Flows[0].Requests; r.Packets != 3 || r.Gaps != 1 || r.MissingPSNs != 1 {
		t.Fatalf("%+v", *r)
	}
}

// TestStdin reads the capture from standard input ("-").
func TestStdin(t *testing.T) {
	f, err := os.Open(rxeDir + "atomic_cas.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	_, s := dumpFileUTC(t, "-", Options{Quiet: true})
	if s.RoCE != 200 || s.Opcodes["RC_COMPARE_SWAP"] != 100 {
		t.Fatalf("%+v", s)
	}
}

func BenchmarkPacket(b *testing.B) {
	recs := readRecords(b, rxeDir+"rc_pingpong_small.pcap")
	d := New(io.Discard, Options{Location: time.UTC})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Packet(recs[i%len(recs)])
		i++
	}
}
