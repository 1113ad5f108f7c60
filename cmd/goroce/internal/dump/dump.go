// Package dump is the engine of `goroce dump`: it decodes captured frames as
// RoCEv2 with package wire, prints one line (or one JSON object) per RoCEv2
// packet, and keeps the statistics and per-QP flow analysis printed in the
// summary. The command only parses flags and feeds it records, from a pcap
// or pcapng file (DumpFile, with gopacket's pure-Go pcapgo readers; the
// format is detected from the magic) or from a live AF_PACKET socket with a
// kernel filter for UDP port 4791 (Live, live_linux.go; no cgo).
//
// # Classification
//
// Every record is one of:
//
//   - RoCEv2: Ethernet (or raw IP, Linux cooked SLL/SLL2) → IPv4/IPv6 → UDP
//     to port 4791, decoded by wire.Parse. A packet whose ICRC does not
//     match is printed with icrc=BAD and counted in ICRCFailures; it is still
//     a RoCEv2 packet.
//   - non-RoCE: not IP, not UDP, or UDP to another port. Skipped and counted.
//   - malformed: UDP to port 4791 that wire.Parse rejects (bad TVer, unknown
//     opcode, bad pad, lengths that do not add up, or a frame shorter than its
//     IP/UDP length fields, which is what a small capture snaplen produces).
//     The line says what could be decoded, e.g.
//     "truncated after BTH: RC_SEND_FIRST dqpn 0x11 psn 123". Malformed
//     packets are RoCEv2 packets too, and truncated ones are a subset.
//
// The flow analysis is described in flows.go, the decoding of CM MADs on
// QP 1 and the connections they make in cm.go.
package dump

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// Options control the output.
type Options struct {
	// JSON prints one JSON object per packet and a final summary object
	// instead of text lines.
	JSON bool
	// MTU is the path MTU used to count the PSNs of RDMA READ requests. 0
	// infers it from the largest FIRST/MIDDLE payload (see flows.go).
	MTU int
	// Location is the time zone of the printed timestamps (nil: time.Local).
	Location *time.Location
	// Quiet prints only the summary.
	Quiet bool
	// Flush flushes the output after every packet (live capture).
	Flush bool
	// Count stops the input after this many RoCEv2 packets (0: no limit).
	Count int
	// Latency adds per-flow, per-operation-class latencies to the summary
	// (latency.go). It implies Quiet.
	Latency bool
	// Explain adds the anomalies and a verdict per flow to the summary
	// (explain.go). It implies Quiet.
	Explain bool
	// GraphDir, when set, is where Finish writes one SVG time–sequence
	// graph per RC request flow with more than one packet (graph.go).
	GraphDir string
}

// Record is one captured frame.
type Record struct {
	Time     time.Time
	Data     []byte // captured bytes; only read during Packet
	OrigLen  int    // length on the wire (0: len(Data))
	LinkType layers.LinkType
}

// Link types handled besides Ethernet.
const (
	linkTypeRawAlt1 layers.LinkType = 12 // DLT_RAW on most BSDs
	linkTypeRawAlt2 layers.LinkType = 14 // DLT_RAW on OpenBSD
)

// Dumper decodes records and writes one line or JSON object per RoCEv2
// packet. It is not safe for concurrent use.
type Dumper struct {
	w        *bufio.Writer
	opts     Options
	stats    stats
	flows    flowTable
	line     []byte // reused output buffer
	err      error  // first write error
	warnings []string
	evs      []ev // for the capture-wide analyses (analysis.go)
	cm       cmTable
	madDec   mad.Decoder
}

// New returns a Dumper writing to w.
func New(w io.Writer, opts Options) *Dumper {
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.Latency || opts.Explain {
		opts.Quiet = true
	}
	d := &Dumper{w: bufio.NewWriterSize(w, 64<<10), opts: opts}
	d.flows.init(opts.MTU)
	return d
}

// SetInferredMTU gives the Dumper the MTU found by a first pass over a file
// (InferMTU); it is ignored when Options.MTU is set.
func (d *Dumper) SetInferredMTU(mtu int) { d.flows.setInferred(mtu) }

// kind is the classification of a record.
type kind uint8

const (
	kindRoCE kind = iota
	kindBadICRC
	kindNonRoCE
	kindMalformed
)

// decoded is the result of decoding one record.
type decoded struct {
	rec  Record
	kind kind
	p    wire.Packet
	err  error // wire's error, for kindMalformed
	// For malformed packets: what could be decoded. bth is nil when the BTH
	// was not captured; partial names the last whole header ("UDP", "BTH",
	// "RETH", ...) and why.
	bth     wire.BTH
	ext     wire.Packet // extension-header views that were whole
	partial string
	ip      netip.Addr // source (valid when the IP header was decoded)
	ipDst   netip.Addr
	sport   uint16
	hasPort bool
	trunc   bool
	cm      cmDecoded // MADs on QP1 (cm.go)
}

// Packet decodes one record, prints it (unless it is not RoCEv2) and adds it
// to the statistics. It never panics on any input.
func (d *Dumper) Packet(rec Record) {
	if rec.OrigLen == 0 {
		rec.OrigLen = len(rec.Data)
	}
	var x decoded
	decode(&x, rec)
	d.stats.add(&x)
	if x.kind == kindNonRoCE {
		return
	}
	d.flows.add(&x)
	decodeCM(&x, &d.madDec)
	d.cm.add(&x, d.stats.packets)
	if d.opts.Latency || d.opts.Explain || d.opts.GraphDir != "" {
		d.record(&x, d.stats.packets)
	}
	if d.opts.Quiet {
		return
	}
	if d.opts.JSON {
		d.writeJSON(&x)
	} else {
		d.writeText(&x)
	}
	if d.opts.Flush {
		d.flush()
	}
}

// Done reports whether Options.Count RoCEv2 packets have been seen.
func (d *Dumper) Done() bool { return d.opts.Count > 0 && d.stats.roce >= d.opts.Count }

func (d *Dumper) flush() {
	if err := d.w.Flush(); err != nil && d.err == nil {
		d.err = err
	}
}

func (d *Dumper) write(b []byte) {
	if _, err := d.w.Write(b); err != nil && d.err == nil {
		d.err = err
	}
}

// Finish writes the summary, flushes, and returns the summary and the first
// write error.
func (d *Dumper) Finish() (Summary, error) {
	s := d.Summary()
	gerr := d.analyze(&s)
	if d.opts.JSON {
		d.writeSummaryJSON(&s)
	} else {
		d.writeSummaryText(&s)
		d.writeAnalysesText(&s)
	}
	d.flush()
	if d.err == nil && gerr != nil {
		d.err = gerr
	}
	return s, d.err
}

// decode classifies rec and fills x.
func decode(x *decoded, rec Record) {
	x.rec = rec
	data := rec.Data
	var err error
	var l3 []byte // for the partial decode of a malformed packet
	switch rec.LinkType {
	case layers.LinkTypeEthernet:
		err = wire.Parse(data, &x.p)
		if len(x.p.Eth) > 0 {
			l3 = data[len(x.p.Eth):]
		}
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, linkTypeRawAlt1, linkTypeRawAlt2:
		l3 = data
		err = wire.ParseL3(data, &x.p)
	case layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2:
		// SLL: 16 bytes, protocol at 14. SLL2: 20 bytes, protocol at 0.
		hl, po := 16, 14
		if rec.LinkType == layers.LinkTypeLinuxSLL2 {
			hl, po = 20, 0
		}
		if len(data) < hl {
			x.kind, x.err, x.partial = kindMalformed, wire.ErrTruncated, "truncated in the Linux cooked header"
			x.trunc = len(data) < rec.OrigLen
			return
		}
		switch binary.BigEndian.Uint16(data[po:]) {
		case wire.EtherTypeIPv4, wire.EtherTypeIPv6:
		default:
			x.kind = kindNonRoCE
			return
		}
		l3 = data[hl:]
		err = wire.ParseL3(l3, &x.p)
	default:
		x.kind = kindNonRoCE
		return
	}
	switch {
	case err == nil:
		x.kind = kindRoCE
	case errors.Is(err, wire.ErrBadICRC):
		x.kind = kindBadICRC
	case errors.Is(err, wire.ErrNotIP), errors.Is(err, wire.ErrNotRoCE):
		x.kind = kindNonRoCE
	default:
		x.kind, x.err = kindMalformed, err
		partial(x, l3)
	}
	if x.kind == kindRoCE || x.kind == kindBadICRC {
		x.ip, x.ipDst = x.p.SrcIP(), x.p.DstIP()
		x.sport, x.hasPort = x.p.UDP.SrcPort(), true
	}
}

// partial decodes as much of a malformed packet as was captured, from the IP
// header (l3, nil if the link header itself was cut), using wire's views and
// opcode table. It may reclassify the packet as non-RoCE: wire.Parse reports
// "truncated" for any UDP datagram cut short, before it looks at the port.
//
// A frame shorter than its headers or length fields is "truncated" (and
// x.trunc set) only when the capture cut it (captured < original length,
// a snaplen); otherwise its length fields are wrong and it is "malformed".
func partial(x *decoded, l3 []byte) {
	short := errors.Is(x.err, wire.ErrTruncated)
	x.trunc = short && len(x.rec.Data) < x.rec.OrigLen
	defer func() {
		if short && !x.trunc && x.kind == kindMalformed {
			x.partial = "malformed (frame shorter than its length fields: " + x.partial + ")"
		}
	}()
	if l3 == nil {
		x.partial = "truncated in the link-layer header"
		return
	}
	if len(l3) == 0 {
		x.partial = "truncated before the IP header"
		return
	}
	var ipLen int
	switch l3[0] >> 4 {
	case 4:
		if len(l3) < wire.IPv4Len || len(l3) < wire.IPv4(l3).HeaderLen() {
			x.partial = "truncated in the IPv4 header"
			return
		}
		ip := wire.IPv4(l3)
		ipLen = ip.HeaderLen()
		if ipLen < wire.IPv4Len {
			x.partial = "bad IPv4 header length"
			return
		}
		x.ip, x.ipDst = ip.Src(), ip.Dst()
	case 6:
		if len(l3) < wire.IPv6Len {
			x.partial = "truncated in the IPv6 header"
			return
		}
		ipLen = wire.IPv6Len
		x.ip, x.ipDst = wire.IPv6(l3).Src(), wire.IPv6(l3).Dst()
	default:
		x.partial = "bad IP version"
		return
	}
	if len(l3) < ipLen+wire.UDPLen {
		x.partial = "truncated in the UDP header"
		return
	}
	udp := wire.UDP(l3[ipLen:])
	if udp.DstPort() != wire.UDPPort {
		x.kind, x.err = kindNonRoCE, nil
		return
	}
	x.sport, x.hasPort = udp.SrcPort(), true
	// What the UDP length says was sent, bounded by what was captured.
	udpEnd := ipLen + int(udp.Length())
	b := l3[ipLen+wire.UDPLen:]
	if !short {
		// Length fields are inconsistent but the bytes are there: describe
		// the error and show the BTH if there is one.
		if len(b) >= wire.BTHLen {
			x.bth = wire.BTH(b[:wire.BTHLen:wire.BTHLen])
		}
		x.partial = "malformed (" + strings.TrimPrefix(x.err.Error(), "wire: ") + ")"
		return
	}
	if len(b) < wire.BTHLen {
		x.partial = "truncated in BTH"
		return
	}
	x.bth = wire.BTH(b[:wire.BTHLen:wire.BTHLen])
	op := x.bth.Opcode()
	info := op.Info()
	last := "BTH"
	off := wire.BTHLen
	for _, h := range extOrder {
		if info.Headers&h.set == 0 {
			continue
		}
		if len(b) < off+h.len {
			x.partial = "truncated after " + last
			return
		}
		v := b[off : off+h.len : off+h.len]
		switch h.set {
		case wire.HasDETH:
			x.ext.DETH = wire.DETH(v)
		case wire.HasRETH:
			x.ext.RETH = wire.RETH(v)
		case wire.HasAtomicETH:
			x.ext.AtomicETH = wire.AtomicETH(v)
		case wire.HasAETH:
			x.ext.AETH = wire.AETH(v)
		case wire.HasAtomicAckETH:
			x.ext.AtomicAckETH = wire.AtomicAckETH(v)
		case wire.HasImmDt:
			x.ext.ImmDt = wire.ImmDt(v)
		case wire.HasIETH:
			x.ext.IETH = wire.IETH(v)
		case wire.HasCNPPad:
			x.ext.CNPPad = wire.CNPPad(v)
		}
		last = h.name
		off += h.len
	}
	// Headers whole: the payload (or the ICRC) was cut.
	want := udpEnd - ipLen - wire.UDPLen - off - wire.ICRCLen // payload + pad
	got := len(b) - off
	switch {
	case want > 0 && got < want:
		x.partial = "truncated in payload (" + itoa(got) + " of " + itoa(want) + " bytes captured)"
	default:
		x.partial = "truncated in ICRC"
	}
}

// extOrder is the wire order of the extension headers (wire.HeaderSet).
var extOrder = [...]struct {
	set  wire.HeaderSet
	len  int
	name string
}{
	{wire.HasDETH, wire.DETHLen, "DETH"},
	{wire.HasRETH, wire.RETHLen, "RETH"},
	{wire.HasAtomicETH, wire.AtomicETHLen, "AtomicETH"},
	{wire.HasAETH, wire.AETHLen, "AETH"},
	{wire.HasAtomicAckETH, wire.AtomicAckETHLen, "AtomicAckETH"},
	{wire.HasImmDt, wire.ImmDtLen, "ImmDt"},
	{wire.HasIETH, wire.IETHLen, "IETH"},
	{wire.HasCNPPad, wire.CNPPadLen, "CNP"},
}

// headers returns the BTH and extension-header views to describe: the
// parsed ones, or what a malformed packet had whole.
func (x *decoded) headers() (wire.BTH, *wire.Packet) {
	if x.kind == kindMalformed {
		return x.bth, &x.ext
	}
	return x.p.BTH, &x.p
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
