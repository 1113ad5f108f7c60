package dump

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

var lossySeed = flag.Int64("lossy-seed", 6, "seed of the lossy capture (with -update)")

// svgMarks parses an SVG with encoding/xml and counts the elements by
// class; it fails on anything that is not self-contained.
func svgMarks(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Local
		}
		switch se.Name.Local {
		case "script", "image", "foreignObject", "use":
			t.Fatalf("%s: <%s> element", path, se.Name.Local)
		}
		for _, a := range se.Attr {
			if a.Name.Local == "href" || strings.Contains(a.Value, "url(") {
				t.Fatalf("%s: external reference %v", path, a)
			}
			if a.Name.Local == "class" {
				counts[a.Value]++
			}
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q", path, root)
	}
	if bytes.Contains(b, []byte("@import")) || bytes.Contains(b, []byte("http://")) && !bytes.Contains(b, []byte(`xmlns="http://www.w3.org/2000/svg"`)) {
		t.Fatalf("%s: external resource", path)
	}
	return counts
}

// graphOf writes the graphs of a capture and returns the marks of the one
// for src → dst.
func graphOf(t *testing.T, capture []byte, name string) (map[string]int, Summary) {
	t.Helper()
	dir := t.TempDir()
	_, s := runBytes(t, capture, Options{GraphDir: dir, Quiet: true})
	for _, g := range s.Graphs {
		if filepath.Base(g) == name {
			return svgMarks(t, g), s
		}
	}
	t.Fatalf("no graph %s among %v", name, s.Graphs)
	return nil, s
}

func TestGraphPlanted(t *testing.T) {
	r := plantedCapture(t)
	for _, side := range []struct {
		name    string
		capture []byte
		acks    int
	}{{"exit", r.exit.Bytes(), 3}, {"entry", r.entry.Bytes(), 4}} {
		t.Run(side.name, func(t *testing.T) {
			m, s := graphOf(t, side.capture, "198.18.0.1_to_198.18.0.2_qp0x11.svg")
			if len(s.Graphs) != 1 {
				t.Fatalf("graphs %v: the response flow carries no requests and gets none", s.Graphs)
			}
			// 6 resent after the sequence NAK (at the exit the first of
			// them fills the gap), 1 after the timeout, 2 after RNR NAKs.
			want := map[string]int{"retx": 9, "seqnak": 1, "rnr": 2, "timeout": 1, "icrc": 0, "nak": 0, "ack": side.acks,
				"reorder": 0, "dup": 0, "readresp": 0, "ackline": 2, "goodput": 1}
			reqs := 10 + 1 + 1 // WRITE, SEND, SEND: the first transmissions
			if side.name == "exit" {
				reqs-- // PSN 0x1004 never reached the exit
			}
			want["req"] = reqs + 1 // + the legend
			for k, v := range want {
				if k != "req" && k != "ackline" && k != "goodput" {
					v++ // the legend's sample mark
				}
				if m[k] != v {
					t.Errorf("class %q: %d elements, want %d (%v)", k, m[k], v, m)
				}
			}
		})
	}
}

func TestGraphSynthetic(t *testing.T) {
	m, _ := graphOf(t, mixedCapture(t).pcap(), "198.18.0.1_to_198.18.0.2_qp0x11.svg")
	for k, v := range map[string]int{"icrc": 1 + 1, "nak": 1 + 1, "rnr": 1 + 1, "readresp": 2 + 1, "retx": 1 + 1, "req": 10 + 1} {
		if m[k] != v {
			t.Errorf("class %q: %d elements, want %d (%v)", k, m[k], v, m)
		}
	}
}

// A flow with one packet gets no graph.
func TestGraphOnePacket(t *testing.T) {
	s := newSynth(t)
	s.req(0, 0x04, 5, 8) // RC_SEND_ONLY, never answered
	dir := t.TempDir()
	_, sum := runBytes(t, s.pcap(), Options{GraphDir: dir, Quiet: true})
	if len(sum.Graphs) != 0 {
		t.Fatalf("graphs %v", sum.Graphs)
	}
}

// lossyCapture is the capture behind docs/debugging.md: 32 WRITEs of 2 KiB
// and 8 READs of 2 KiB (path MTU 512), up to 8 outstanding, over a link
// that drops 3 % of the frames each way and corrupts 0.5 %, captured where
// the frames are delivered. Deterministic: fake clock, seeded faults.
func lossyCapture(t *testing.T, seed int64) []byte {
	f := nic.Faults{Drop: 0.03, Corrupt: 0.01, Delay: 20 * time.Microsecond, Rate: 125_000_000}
	r := newLossRunMTU(t, seed, f, qp.ConnectOptions{Timeout: 8}, 600)
	const n, size, window = 40, 2048, 8
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < window {
			wr := &qp.SendWR{WRID: uint64(posted), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []qp.SGE{r.a.sge(posted*size, size)}, RemoteAddr: r.b.mr.IOVA() + uint64(posted*size), RKey: r.b.mr.RKey()}
			if posted%5 == 4 {
				wr.Opcode = transport.WRRDMARead
			}
			if err := r.a.qp.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		done += r.wait(r.a.cq, 1)
	}
	return r.exit.Bytes()
}

func TestLossyCapture(t *testing.T) {
	got := lossyCapture(t, *lossySeed)
	path := filepath.Join("testdata", "lossy.pcap")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the simulator produced a different capture than testdata/lossy.pcap (%d vs %d bytes): regenerate it with -update and the docs with it", len(got), len(want))
	}
}

// The lossy capture's graph has one mark per anomaly of --explain, and its
// --explain output is the golden file the docs quote.
func TestLossyGraphAndExplain(t *testing.T) {
	capture, err := os.ReadFile(filepath.Join("testdata", "lossy.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	out, s := runBytes(t, capture, Options{Explain: true})
	goldenCheck(t, "lossy_explain", out)
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "debugging.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), out[strings.Index(out, "explain:"):]) {
		t.Errorf("docs/debugging.md does not quote the current --explain output of testdata/lossy.pcap")
	}
	count := map[string]int{}
	for _, a := range s.Anomalies {
		k := a.Kind
		if k == KindRetransmission && a.Cause == CauseTimeout {
			k = "timeout"
		}
		count[k]++
	}
	if count[KindSeqNAK] == 0 || count[KindICRC] == 0 || count["timeout"] == 0 || count[KindDuplicate] == 0 {
		t.Fatalf("the lossy capture lacks an anomaly the docs show: %v", count)
	}
	m, _ := graphOf(t, capture, "198.18.0.1_to_198.18.0.2_qp0x11.svg")
	for class, kind := range map[string]string{"seqnak": KindSeqNAK, "icrc": KindICRC, "timeout": "timeout", "rnr": KindRNRNAK, "nak": KindNAK} {
		if m[class]-1 != count[kind] { // -1: the legend
			t.Errorf("%d %q marks, want %d (%s anomalies)", m[class]-1, class, count[kind], kind)
		}
	}
	if m["retx"] < 100 || m["req"] < 100 || m["readresp"] < 8 || m["ack"] < 40 {
		t.Errorf("marks %v", m)
	}
}

// docs/img/lossy-flow.svg is the graph of testdata/lossy.pcap as the code
// draws it now (-update rewrites it).
func TestDocsGraphCurrent(t *testing.T) {
	capture, err := os.ReadFile(filepath.Join("testdata", "lossy.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, s := runBytes(t, capture, Options{GraphDir: dir, Quiet: true})
	got, err := os.ReadFile(s.Graphs[0])
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join("..", "..", "..", "..", "docs", "img", "lossy-flow.svg")
	if *update {
		if err := os.WriteFile(doc, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the current graph of testdata/lossy.pcap: run this test with -update", doc)
	}
}

// The analyses never panic on nonsense: the lossy capture with random
// opcodes, PSNs, syndromes and RETH lengths, ICRCs recomputed so that the
// packets count.
func TestAnalysesGarbage(t *testing.T) {
	capture, err := os.ReadFile(filepath.Join("testdata", "lossy.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	base := readRecordsBytes(t, capture)
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		recs := make([]Record, len(base))
		for i, r := range base {
			b := append([]byte(nil), r.Data...)
			const bth = wire.EthernetLen + wire.IPv4Len + wire.UDPLen
			if len(b) > bth+wire.BTHLen+wire.ICRCLen && rng.IntN(4) == 0 {
				switch rng.IntN(4) {
				case 0:
					b[bth] = byte(rng.IntN(0x19)) // an RC opcode
				case 1:
					b[bth+9], b[bth+10], b[bth+11] = byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())
				case 2:
					b[bth+wire.BTHLen] = byte(rng.Uint32()) // AETH syndrome or RETH VA
				case 3:
					if len(b) > bth+wire.BTHLen+16 {
						b[bth+wire.BTHLen+12] = byte(rng.Uint32()) // RETH length
					}
				}
				wire.PutICRC(b[len(b)-wire.ICRCLen:], wire.ICRC(b[wire.EthernetLen:len(b)-wire.ICRCLen]))
			}
			recs[i] = Record{Time: r.Time.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond), Data: b, LinkType: r.LinkType}
		}
		rng.Shuffle(len(recs)/10, func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		dir := t.TempDir()
		out, s := run(t, recs, Options{Latency: true, Explain: true, GraphDir: dir})
		if len(s.Verdicts) == 0 || !strings.Contains(out, "verdict:") {
			t.Fatalf("seed %d: no verdict:\n%s", seed, out)
		}
		for _, g := range s.Graphs {
			svgMarks(t, g)
		}
	}
}

func readRecordsBytes(t *testing.T, capture []byte) []Record {
	t.Helper()
	f := filepath.Join(t.TempDir(), "c.pcap")
	if err := os.WriteFile(f, capture, 0o644); err != nil {
		t.Fatal(err)
	}
	return readRecords(t, f)
}
