package dump

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime/metrics"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/wire"
)

// allocatedBytes is the process's cumulative heap allocation.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// allocs returns what fn allocates. The counter is the process's, so a
// result above limit is measured again: only allocation that repeats is fn's
// (the first metrics.Read of a fuzz worker, for one, allocates too).
func allocs(limit uint64, fn func()) uint64 {
	var a uint64
	for range 2 {
		before := allocatedBytes()
		fn()
		if a = allocatedBytes() - before; a <= limit {
			break
		}
	}
	return a
}

// dumpBytes is DumpFile on a file's contents: the MTU first pass, then the
// dump proper.
func dumpBytes(data []byte, opts Options) (string, Summary, error) {
	var out bytes.Buffer
	d := New(&out, opts)
	if next, _, err := openCapture(bytes.NewReader(data)); err == nil {
		d.SetInferredMTU(InferMTU(func() (Record, bool) {
			rec, err := next()
			return rec, err == nil
		}))
	}
	if err := d.Feed(bytes.NewReader(data)); err != nil {
		return "", Summary{}, err
	}
	s, err := d.Finish()
	return out.String(), s, err
}

// Memory a dump of n input bytes may allocate: the readers' and writers'
// buffers (a quarter MiB each), then per record its output and the flow it
// may open (a 74-byte record can; TestManyFlowsMemory measures about 33
// bytes per input byte for a file of one-packet flows).
func allocBound(n int) uint64 { return 16<<20 + 64*uint64(n) }

// FuzzCapture feeds arbitrary bytes as a whole capture file through the
// pcap/pcapng reader, the flow analysis and both formatters, as DumpFile
// does. It checks that nothing panics, that a file claiming huge snap or
// record lengths does not make the reader allocate them, that the summary
// is self-consistent and the same in both formats, and that the JSON output
// is one valid object per RoCEv2 packet plus the summary. The seed corpus in
// testdata/fuzz/FuzzCapture is cut from the rxe captures (regenerate with
// DUMP_WRITE_CORPUS=1 go test -run TestWriteCaptureCorpus).
func FuzzCapture(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var text, js string
		var st, sj Summary
		var errText, errJSON error
		limit := 2 * allocBound(len(data))
		if a := allocs(limit, func() {
			text, st, errText = dumpBytes(data, Options{Location: time.UTC})
			js, sj, errJSON = dumpBytes(data, Options{JSON: true, Location: time.UTC})
		}); a > limit {
			t.Fatalf("%d input bytes: %d bytes allocated", len(data), a)
		}
		if (errText == nil) != (errJSON == nil) {
			t.Fatalf("text error %v, JSON error %v", errText, errJSON)
		}
		if errText != nil {
			if Format(data) == "" && !errors.Is(errText, ErrNotCapture) {
				t.Fatalf("not a capture: %v", errText)
			}
			return
		}
		if Format(data) == "" {
			t.Fatal("accepted a file without a capture magic")
		}
		if !reflect.DeepEqual(st, sj) {
			t.Fatalf("summaries differ:\ntext %+v\njson %+v", st, sj)
		}
		checkSummary(t, &st)
		if !strings.Contains(text, plural(st.Packets, "packet", "packets")+": ") {
			t.Fatalf("text summary missing:\n%s", text)
		}
		sc := bufio.NewScanner(strings.NewReader(js))
		sc.Buffer(nil, 1<<20)
		lines := 0
		var last []byte
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("line %d is not JSON: %q", lines+1, sc.Bytes())
			}
			last = append(last[:0], sc.Bytes()...)
			lines++
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if lines != st.RoCE+1 {
			t.Fatalf("%d JSON lines for %d RoCEv2 packets", lines, st.RoCE)
		}
		var back Summary
		if err := json.Unmarshal(last, &back); err != nil || !back.Summary || back.Packets != st.Packets || len(back.Flows) != len(st.Flows) {
			t.Fatalf("summary object %s: %v", last, err)
		}
	})
}

func checkSummary(t *testing.T, s *Summary) {
	t.Helper()
	if s.Packets < 0 || s.RoCE+s.NonRoCE != s.Packets || s.Malformed+s.ICRCFailures > s.RoCE || s.Truncated > s.Malformed {
		t.Fatalf("inconsistent counts %+v", s)
	}
	ops := 0
	for _, n := range s.Opcodes {
		ops += n
	}
	if ops > s.RoCE {
		t.Fatalf("%d opcodes counted for %d RoCEv2 packets", ops, s.RoCE)
	}
	flowPackets := 0
	for _, f := range s.Flows {
		flowPackets += f.Packets
		n := 0
		if r := f.Requests; r != nil {
			n += r.Packets
			if r.Reads > r.Packets || r.Gaps > r.MissingPSNs || r.Retransmitted+r.Late > r.Packets {
				t.Fatalf("flow %+v: requests %+v", f, r)
			}
		}
		if r := f.Responses; r != nil {
			n += r.Packets
			naks := 0
			for _, k := range r.NAKs {
				naks += k
			}
			if r.ACKs+naks+r.RNRNAKs > r.Packets {
				t.Fatalf("flow %+v: responses %+v", f, r)
			}
		}
		if n > f.Packets {
			t.Fatalf("flow %+v: %d requests and responses", f, n)
		}
	}
	if flowPackets > s.RoCE-s.ICRCFailures {
		t.Fatalf("%d packets in flows, %d RoCEv2 with a good ICRC", flowPackets, s.RoCE-s.ICRCFailures)
	}
}

// TestHugeLengths: capture headers that claim 4 GiB snap lengths and
// records that claim gigabytes are read without allocating what they claim.
func TestHugeLengths(t *testing.T) {
	for name, data := range hugeLengthFiles() {
		var s Summary
		var err error
		if a := allocs(allocBound(len(data)), func() { _, s, err = dumpBytes(data, Options{Location: time.UTC}) }); a > allocBound(len(data)) {
			t.Errorf("%s: %d bytes allocated for a %d-byte file", name, a, len(data))
		}
		if err != nil || s.Packets != 0 || len(s.Warnings) != 1 {
			t.Errorf("%s: %+v, %v", name, s, err)
		}
	}
}

func pcapHeader(order binary.ByteOrder, magic, snaplen uint32, link layers.LinkType) []byte {
	h := make([]byte, 24)
	order.PutUint32(h[0:], magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], snaplen)
	order.PutUint32(h[20:], uint32(link))
	return h
}

func pcapRecord(order binary.ByteOrder, sec, frac uint32, data []byte, incl, orig uint32) []byte {
	h := make([]byte, 16, 16+len(data))
	order.PutUint32(h[0:], sec)
	order.PutUint32(h[4:], frac)
	order.PutUint32(h[8:], incl)
	order.PutUint32(h[12:], orig)
	return append(h, data...)
}

// pcapng blocks, little-endian.
func ngBlock(typ uint32, body []byte) []byte {
	body = append(body, make([]byte, -len(body)&3)...)
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(12+len(body)))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, uint32(12+len(body)))
}

func ngSHB() []byte {
	body := binary.LittleEndian.AppendUint32(nil, 0x1a2b3c4d)
	body = binary.LittleEndian.AppendUint16(body, 1)
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint64(body, ^uint64(0))
	return ngBlock(0x0a0d0d0a, body)
}

func ngIDB(link layers.LinkType, snaplen uint32) []byte {
	body := binary.LittleEndian.AppendUint16(nil, uint16(link))
	body = binary.LittleEndian.AppendUint16(body, 0)
	body = binary.LittleEndian.AppendUint32(body, snaplen)
	return ngBlock(1, body)
}

func ngEPB(data []byte, capLen, origLen uint32) []byte {
	body := binary.LittleEndian.AppendUint32(nil, 0) // interface
	body = binary.LittleEndian.AppendUint64(body, 0) // timestamp
	body = binary.LittleEndian.AppendUint32(body, capLen)
	body = binary.LittleEndian.AppendUint32(body, origLen)
	return ngBlock(6, append(body, data...))
}

// hugeLengthFiles are small files whose headers claim huge sizes.
func hugeLengthFiles() map[string][]byte {
	le, be := binary.LittleEndian, binary.BigEndian
	small := []byte("0123456789abcdef")
	out := map[string][]byte{
		"pcap_snaplen_4GiB_record_4GiB": append(pcapHeader(le, pcapMagicMicro, 0xffffffff, layers.LinkTypeEthernet),
			pcapRecord(le, 1, 0, small, 0xfffffff0, 0xfffffff0)...),
		"pcap_snaplen_4GiB_record_2GiB": append(pcapHeader(be, pcapMagicNano, 0xffffffff, layers.LinkTypeEthernet),
			pcapRecord(be, 1, 0, small, 0x7fffffff, 0x7fffffff)...),
		"pcap_snaplen_4GiB_record_64MiB": append(pcapHeader(le, pcapMagicNano, 0xffffffff, layers.LinkTypeRaw),
			pcapRecord(le, 1, 0, small, 1<<26, 1<<26)...),
		"pcapng_snaplen_4GiB_packet_4GiB": joinBytes(ngSHB(), ngIDB(layers.LinkTypeEthernet, 0xffffffff),
			ngEPB(small, 0xfffffff0, 0xfffffff0)),
		"pcapng_block_4GiB": joinBytes(ngSHB(), ngIDB(layers.LinkTypeEthernet, 0),
			binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 6), 0xfffffffc), small),
		"pcapng_snaplen_0_packet_2GiB": joinBytes(ngSHB(), ngIDB(layers.LinkTypeEthernet, 0),
			ngEPB(small, 0x7ffffff0, 0x7ffffff0)),
	}
	return out
}

func joinBytes(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestWriteCaptureCorpus regenerates testdata/fuzz/FuzzCapture from the rxe
// captures: the start of each capture, one frame of every opcode, the small
// ones also in classic pcap of both byte orders and resolutions, pcapng,
// raw IP and Linux cooked captures, small snap lengths, files cut in a
// record or mutated, the huge-length headers of TestHugeLengths and a file
// of one-packet flows. Seeds
// stay under a few KiB so that the fuzzer runs fast. It only runs with
// DUMP_WRITE_CORPUS=1.
func TestWriteCaptureCorpus(t *testing.T) {
	if os.Getenv("DUMP_WRITE_CORPUS") != "1" {
		t.Skip("set DUMP_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzCapture")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(rxeDir + "*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	sort.Strings(files)
	var perOpcode []Record
	seen := map[string]bool{}
	for _, fn := range files {
		whole, err := os.ReadFile(fn)
		if err != nil {
			t.Fatal(err)
		}
		// The first records, up to 1 KiB: small inputs keep the fuzzer fast.
		n := 24
		for n+16 <= len(whole) {
			l := int(binary.LittleEndian.Uint32(whole[n+8:]))
			if n > 24 && n+16+l > 1024 {
				break
			}
			n += 16 + l
		}
		write("head_"+strings.TrimSuffix(filepath.Base(fn), ".pcap"), whole[:n])
		for _, r := range readRecords(t, fn) {
			var p wire.Packet
			name := "other"
			if err := wire.Parse(r.Data, &p); err == nil {
				name = p.Opcode().String()
			}
			if !seen[name] && len(r.Data) <= 1200 {
				seen[name] = true
				perOpcode = append(perOpcode, r)
			}
		}
	}
	t.Logf("%d opcodes", len(perOpcode))
	pcapOf := func(order binary.ByteOrder, nano bool, snaplen uint32, link layers.LinkType, recs []Record) []byte {
		magic := uint32(pcapMagicMicro)
		if nano {
			magic = pcapMagicNano
		}
		b := pcapHeader(order, magic, snaplen, link)
		for _, r := range recs {
			frac := uint32(r.Time.Nanosecond() / 1000)
			if nano {
				frac = uint32(r.Time.Nanosecond())
			}
			data := r.Data
			if snaplen > 0 && len(data) > int(snaplen) {
				data = data[:snaplen]
			}
			b = append(b, pcapRecord(order, uint32(r.Time.Unix()), frac, data, uint32(len(data)), uint32(r.OrigLen))...)
		}
		return b
	}
	le, be := binary.LittleEndian, binary.BigEndian
	// Every opcode, in files of up to 1.5 KiB of frames.
	for i, n := 0, 0; i < len(perOpcode); n++ {
		j, size := i, 0
		for j < len(perOpcode) && (j == i || size+len(perOpcode[j].Data) <= 1536) {
			size += len(perOpcode[j].Data)
			j++
		}
		write(fmt.Sprintf("opcodes_%d", n), pcapOf(le, false, 262144, layers.LinkTypeEthernet, perOpcode[i:j]))
		i = j
	}
	// The small frames for the variants.
	var smallest []Record
	for _, r := range perOpcode {
		if len(r.Data) <= 200 {
			smallest = append(smallest, r)
		}
	}
	perOpcode = smallest
	t.Logf("%d small frames", len(perOpcode))
	opcodes := pcapOf(le, false, 262144, layers.LinkTypeEthernet, perOpcode)
	write("small_pcap_usec_le", opcodes)
	write("small_pcap_nsec_be", pcapOf(be, true, 262144, layers.LinkTypeEthernet, perOpcode))
	write("small_pcap_snaplen_64", pcapOf(le, true, 64, layers.LinkTypeEthernet, perOpcode))
	write("small_pcap_snaplen_54", pcapOf(le, false, 54, layers.LinkTypeEthernet, perOpcode))
	write("cut_in_record", opcodes[:len(opcodes)/2])
	write("cut_in_record_header", opcodes[:24+16+len(perOpcode[0].Data)+7])
	write("header_only", opcodes[:24])
	write("magic_only", opcodes[:4])

	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range perOpcode {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: r.Time, CaptureLength: len(r.Data), Length: r.OrigLen}, r.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	write("small_pcapng", ng.Bytes())
	write("pcapng_cut", ng.Bytes()[:ng.Len()*2/3])

	for _, lt := range []layers.LinkType{layers.LinkTypeRaw, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2} {
		var conv []Record
		for _, r := range perOpcode[:min(4, len(perOpcode))] {
			var hdr []byte
			switch lt {
			case layers.LinkTypeLinuxSLL:
				hdr = make([]byte, 16)
				copy(hdr[14:], r.Data[12:14])
			case layers.LinkTypeLinuxSLL2:
				hdr = make([]byte, 20)
				copy(hdr[0:], r.Data[12:14])
			}
			conv = append(conv, Record{Time: r.Time, Data: append(hdr, r.Data[wire.EthernetLen:]...), OrigLen: r.OrigLen - wire.EthernetLen + len(hdr)})
		}
		write("linktype_"+strings.ToLower(lt.String()), pcapOf(le, false, 262144, lt, conv))
	}

	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 3 {
		m := bytes.Clone(opcodes)
		for range 1 + i*3 {
			m[24+rng.IntN(len(m)-24)] = byte(rng.Uint32())
		}
		write(fmt.Sprintf("mutated_%d", i), m)
	}
	for name, b := range hugeLengthFiles() {
		write(name, b)
	}
	write("many_flows", manyFlows(t, 40))
}

// manyFlows is a pcap of n RC SEND_ONLY frames, each to its own QP: n
// flows of one request.
func manyFlows(t testing.TB, n int) []byte {
	fr := frames(t, []pkt{{op: wire.RCSendOnly, psn: 1}})[0].Data
	b := pcapHeader(binary.LittleEndian, pcapMagicMicro, 65535, layers.LinkTypeEthernet)
	for i := range n {
		d := bytes.Clone(fr)
		var p wire.Packet
		if err := wire.Parse(d, &p); err != nil {
			t.Fatal(err)
		}
		p.BTH.SetDestQP(uint32(i))
		n := len(p.L3) - wire.ICRCLen
		wire.PutICRC(p.L3[n:], wire.ICRC(p.L3[:n]))
		b = append(b, pcapRecord(binary.LittleEndian, 1, uint32(i), d, uint32(len(d)), uint32(len(d)))...)
	}
	return b
}

// TestManyFlowsMemory: a capture of one-packet flows costs memory in
// proportion to its size, not 8 KiB of retransmission bitmap per flow.
func TestManyFlowsMemory(t *testing.T) {
	data := manyFlows(t, 10000)
	var s Summary
	var err error
	a := allocs(uint64(len(data))*48, func() { _, s, err = dumpBytes(data, Options{Quiet: true, Location: time.UTC}) })
	if err != nil || len(s.Flows) != 10000 || s.ICRCFailures != 0 {
		t.Fatalf("%d flows, %d ICRC failures, %v", len(s.Flows), s.ICRCFailures, err)
	}
	t.Logf("%d-byte file, %d flows: %d bytes allocated (%.1f per input byte)", len(data), len(s.Flows), a, float64(a)/float64(len(data)))
	if a > uint64(len(data))*48 {
		t.Fatalf("%d bytes allocated for a %d-byte file", a, len(data))
	}
}

// TestFlowWindowPieces: retransmission detection across the pieces of the
// bitmap, which are allocated as PSNs are marked.
func TestFlowWindowPieces(t *testing.T) {
	cases := []struct {
		name string
		psns []uint32
		want RequestStats
	}{
		{"across a piece boundary", []uint32{4094, 4095, 4096, 4097, 4095, 4096}, RequestStats{Retransmitted: 2}},
		{"gap inside the window keeps what was seen", []uint32{10, 11, 5000, 11}, RequestStats{Gaps: 1, MissingPSNs: 4988, Retransmitted: 1}},
		{"gap past the window forgets", []uint32{10, 11, 70010, 11}, RequestStats{Gaps: 1, MissingPSNs: 69998, Late: 1}},
		{"forgotten PSNs are not seen after reuse", []uint32{10, 70010, 10 + seenWindow, 70010}, RequestStats{Gaps: 1, MissingPSNs: 69999, Late: 1, Retransmitted: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, s := run(t, frames(t, sends(c.psns...)), Options{Quiet: true})
			want := c.want
			want.Packets, want.FirstPSN, want.LastPSN = len(c.psns), c.psns[0], c.psns[len(c.psns)-1]
			if len(s.Flows) != 1 || s.Flows[0].Requests == nil || *s.Flows[0].Requests != want {
				t.Fatalf("got %+v\nwant %+v", s.Flows, want)
			}
		})
	}
}

// flowModel is the request PSN rules of flows.go with a set of PSNs for the
// retransmission window instead of the bitmap, for a known path MTU.
type flowModel struct {
	started                      bool
	next                         wire.PSN
	seen                         map[wire.PSN]bool
	gaps, missing, retrans, late int
}

func (m *flowModel) inWindow(p wire.PSN) bool {
	d := p.Diff(m.next)
	return d < 0 && -int(d) <= seenWindow
}

func (m *flowModel) moveNext(e wire.PSN) {
	if !e.After(m.next) {
		return
	}
	m.next = e
	for p := range m.seen {
		if !m.inWindow(p) {
			delete(m.seen, p)
		}
	}
}

func (m *flowModel) mark(p wire.PSN, n int) {
	for i := range min(n, seenWindow) {
		if q := p.Add(uint32(i)); m.inWindow(q) {
			m.seen[q] = true
		}
	}
}

func (m *flowModel) request(p wire.PSN, n int) {
	if !m.started {
		m.started, m.next = true, p
		m.moveNext(p.Add(uint32(n)))
		m.mark(p, n)
		return
	}
	switch d := p.Diff(m.next); {
	case d == 0:
	case d > 0:
		m.gaps++
		m.missing += int(d)
	case -int(d) <= seenWindow && m.seen[p]:
		m.retrans++
	default:
		m.late++
	}
	m.moveNext(p.Add(uint32(n)))
	m.mark(p, n)
}

// flowOps are the opcodes FuzzFlows builds: RC and UC requests (READs
// included), a UD request, and responses in the other direction.
var flowOps = []wire.Opcode{
	wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCRDMAWriteOnly,
	wire.RCRDMAReadRequest, wire.RCRDMAReadRequest, wire.UCSendOnly, wire.UDSendOnly,
	wire.RCAcknowledge, wire.RCRDMAReadResponseOnly, wire.RCRDMAReadResponseMiddle,
}

const flowMTU = 1024

// FuzzFlows drives the flow analysis with sequences of well-formed packets
// decoded from the fuzz input (6 bytes each: the opcode's index in flowOps,
// with bit 7 for an absolute 24-bit PSN in the next three bytes, else a
// 16-bit signed step from the previous PSN; a READ's DMA length in bytes
// 4-5, an AETH syndrome in byte 4), so that mutations reach the PSN rules
// rather than failing the ICRC. The requests' counters must equal those of
// flowModel, and the summary must be consistent. The seed corpus in
// testdata/fuzz/FuzzFlows is the packet sequences of the rxe captures
// (regenerate with DUMP_WRITE_CORPUS=1 go test -run TestWriteFlowsCorpus).
func FuzzFlows(f *testing.F) {
	seq := func(ops ...[6]byte) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, o[:]...)
		}
		return b
	}
	f.Add(seq([6]byte{0, 0, 1}, [6]byte{0, 0, 1}, [6]byte{0, 0, 1}, [6]byte{9, 0, 0, 0, 0}))
	f.Add(seq([6]byte{0, 0, 1}, [6]byte{0, 0, 3}, [6]byte{0, 0xff, 0xfe}, [6]byte{0, 0, 1}, [6]byte{10, 0, 0, 0, 0x60}))
	f.Add(seq([6]byte{5, 0, 1, 0, 0x10, 0}, [6]byte{0, 0, 4}, [6]byte{5, 0xff, 0xfe, 0, 0x08, 0}, [6]byte{9, 0, 0, 0, 0x21}))
	f.Add(seq([6]byte{0x80, 0xff, 0xff, 0xfe}, [6]byte{0, 0, 1}, [6]byte{0, 0, 1}, [6]byte{0x80, 0, 0x40, 0}, [6]byte{0x80, 0xff, 0xff, 0xff}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ps []pkt
		m := flowModel{seen: map[wire.PSN]bool{}}
		reqs, reads := 0, 0
		psn := wire.PSN(0)
		for len(data) >= 6 && len(ps) < 64 {
			c, x := data[0], data[1:6]
			data = data[6:]
			if c&0x80 != 0 {
				psn = wire.PSN(uint32(x[0])<<16 | uint32(x[1])<<8 | uint32(x[2]))
			} else {
				psn = psn.Add(uint32(int16(binary.BigEndian.Uint16(x[0:]))))
			}
			p := pkt{op: flowOps[int(c&0x7f)%len(flowOps)], psn: uint32(psn)}
			info := p.op.Info()
			switch {
			case info.Pos == wire.PosFirst || info.Pos == wire.PosMiddle:
				p.payload = flowMTU
			case info.Payload:
				p.payload = 8
			}
			if p.op.IsRead() {
				p.dmaLen = uint32(binary.BigEndian.Uint16(x[3:])) // up to 64 PSNs
				reads++
			}
			if info.Response {
				p.reverse, p.syn = true, wire.Syndrome(x[3])
			}
			if info.Request && p.op.Transport() != wire.TransportUD {
				n := 1
				if p.op.IsRead() {
					n = max(1, ceilDiv(int(p.dmaLen), flowMTU))
				}
				m.request(psn, n)
			}
			if info.Request {
				reqs++
			}
			ps = append(ps, p)
		}
		if len(ps) == 0 {
			return
		}
		_, s := run(t, frames(t, ps), Options{MTU: flowMTU, Quiet: true})
		checkSummary(t, &s)
		if s.RoCE != len(ps) || s.Malformed+s.ICRCFailures != 0 {
			t.Fatalf("%+v", s)
		}
		var got *RequestStats
		for _, fl := range s.Flows {
			if fl.Src == ipA.String() && fl.DQPN == 0x11 {
				got = fl.Requests
			}
		}
		if reqs == 0 {
			if got != nil {
				t.Fatalf("requests %+v without requests", got)
			}
			return
		}
		want := RequestStats{Packets: reqs, Reads: reads, Gaps: m.gaps, MissingPSNs: m.missing, Retransmitted: m.retrans, Late: m.late}
		if got == nil {
			t.Fatalf("no request stats, want %+v", want)
		}
		want.FirstPSN, want.LastPSN = got.FirstPSN, got.LastPSN
		if *got != want {
			t.Fatalf("requests %+v\nmodel    %+v", *got, want)
		}
	})
}

// TestWriteFlowsCorpus regenerates testdata/fuzz/FuzzFlows: the opcode and
// PSN sequences of the first 64 RoCEv2 packets of each rxe capture, in
// FuzzFlows's encoding. It only runs with DUMP_WRITE_CORPUS=1.
func TestWriteFlowsCorpus(t *testing.T) {
	if os.Getenv("DUMP_WRITE_CORPUS") != "1" {
		t.Skip("set DUMP_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzFlows")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(rxeDir + "*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	for _, fn := range files {
		var b []byte
		prev := wire.PSN(0)
		for _, r := range readRecords(t, fn) {
			var p wire.Packet
			if wire.Parse(r.Data, &p) != nil {
				continue
			}
			op := -1
			for i, o := range flowOps {
				if o == p.Opcode() {
					op = i
					break
				}
			}
			if op < 0 {
				continue
			}
			psn := p.BTH.PSN()
			var e [6]byte
			e[0] = byte(op)
			if d := psn.Diff(prev); len(b) == 0 || d < -32768 || d > 32767 {
				e[0] |= 0x80
				e[1], e[2], e[3] = byte(psn>>16), byte(psn>>8), byte(psn)
			} else {
				binary.BigEndian.PutUint16(e[1:], uint16(int16(d)))
			}
			switch {
			case p.RETH != nil && p.Opcode().IsRead():
				binary.BigEndian.PutUint16(e[4:], uint16(min(p.RETH.DMALen(), 0xffff)))
			case p.AETH != nil:
				e[4] = byte(p.AETH.Syndrome())
			}
			prev = psn
			b = append(b, e[:]...)
			if len(b) == 6*64 {
				break
			}
		}
		if len(b) == 0 {
			continue
		}
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		name := strings.TrimSuffix(filepath.Base(fn), ".pcap")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
