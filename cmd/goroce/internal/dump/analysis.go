package dump

import (
	"hash/maphash"
	"strings"
	"time"

	"github.com/goroce/goroce/wire"
)

// Capture-wide analyses (--latency, --explain, --graph).
//
// Unlike the running counters of flows.go, these need the whole capture:
// the Dumper keeps a compact record (ev) of every RoCEv2 packet whose BTH
// was decoded, bad-ICRC ones included, and analyses them in Finish.
//
// This file keeps the records and runs the analyses; analysis_pair.go pairs
// each request flow with its response flow (conn), analysis_trace.go is the
// requester model (trace) that replays them, with its handling of requests
// in analysis_request.go and of responses in analysis_response.go.

// ev is one RoCEv2 packet kept for the capture-wide analyses.
type ev struct {
	no      int // frame number in the capture, 1-based, as Wireshark counts
	t       time.Time
	key     flowKey
	op      wire.Opcode
	psn     wire.PSN
	payload int
	bad     bool // ICRC mismatch
	hasAETH bool
	syn     wire.Syndrome
	hasRETH bool
	va      uint64
	rkey    uint32
	dmaLen  uint32
	atomic  bool // AtomicETH: va, rkey, swapAdd, compare
	swapAdd uint64
	compare uint64
	hasOrig bool
	orig    uint64
	icrc    uint32 // as captured
	want    uint32 // computed (bad ICRC only)
	sum     uint64 // hash of the IP packet, to tell path duplicates from retransmissions
}

var evSeed = maphash.MakeSeed()

// record keeps x for the capture-wide analyses.
func (d *Dumper) record(x *decoded, no int) {
	bth, ext := x.headers()
	if bth == nil || !x.ip.IsValid() {
		return
	}
	if x.kind == kindMalformed && !x.trunc {
		return
	}
	e := ev{no: no, t: x.rec.Time, key: flowKey{x.ip, x.ipDst, bth.DestQP()}, op: bth.Opcode(), psn: bth.PSN()}
	if x.kind != kindMalformed {
		e.payload = len(x.p.Payload)
		e.icrc = x.p.ICRC
		e.sum = maphash.Bytes(evSeed, x.p.L3)
	}
	if x.kind == kindBadICRC {
		e.bad = true
		e.want = wire.ICRC(x.p.L3[:len(x.p.L3)-wire.ICRCLen])
	}
	if h := ext.AETH; h != nil {
		e.hasAETH, e.syn = true, h.Syndrome()
	}
	if h := ext.RETH; h != nil {
		e.hasRETH, e.va, e.rkey, e.dmaLen = true, h.VA(), h.RKey(), h.DMALen()
	}
	if h := ext.AtomicETH; h != nil {
		e.atomic, e.va, e.rkey, e.swapAdd, e.compare = true, h.VA(), h.RKey(), h.SwapAdd(), h.Compare()
	}
	if h := ext.AtomicAckETH; h != nil {
		e.hasOrig, e.orig = true, h.OrigValue()
	}
	if len(d.evs) == maxEvents {
		d.Warn("the analyses keep the first " + itoa(maxEvents) + " RoCEv2 packets only (use -c)")
	}
	if len(d.evs) >= maxEvents {
		return
	}
	d.evs = append(d.evs, e)
}

// maxEvents bounds the analyses' memory (about 150 bytes a packet) on an
// endless live capture.
const maxEvents = 20_000_000

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	b := []byte("0x")
	started := false
	for s := 28; s >= 0; s -= 4 {
		d := (v >> uint(s)) & 0xF
		if d != 0 || started || s == 0 {
			b = append(b, digits[d])
			started = true
		}
	}
	return string(b)
}

// analyze runs the capture-wide analyses the options ask for and adds
// their results to s. The error is from writing the graphs.
func (d *Dumper) analyze(s *Summary) error {
	if !d.opts.Latency && !d.opts.Explain && d.opts.GraphDir == "" {
		return nil
	}
	mtu, _ := d.flows.mtu()
	var traces []*trace
	for _, c := range pairFlows(d.evs) {
		tr := newTrace(d.evs, c, mtu)
		tr.run()
		traces = append(traces, tr)
	}
	if d.opts.Latency {
		s.Latency = []LatencyStats{}
		for _, tr := range traces {
			s.Latency = append(s.Latency, latencyOf(tr)...)
		}
	}
	if d.opts.Explain {
		r := d.explain(traces)
		s.Anomalies, s.Verdicts = r.anomalies, r.verdicts
	}
	if d.opts.GraphDir != "" {
		files, err := d.writeGraphs(traces)
		s.Graphs = files
		return err
	}
	return nil
}

func (d *Dumper) writeAnalysesText(s *Summary) {
	var b strings.Builder
	if d.opts.Latency {
		b.WriteByte('\n')
		writeLatencyText(&b, s.Latency)
	}
	if d.opts.Explain {
		b.WriteByte('\n')
		writeExplainText(&b, s.Anomalies, s.Verdicts)
	}
	if len(s.Graphs) > 0 {
		b.WriteString("\ngraphs:\n")
		for _, g := range s.Graphs {
			b.WriteString("  " + g + "\n")
		}
	}
	d.write([]byte(b.String()))
}
