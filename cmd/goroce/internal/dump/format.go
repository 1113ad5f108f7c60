package dump

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/wire"
)

// Text format, one line per packet:
//
//	TIME SRC:SPORT > DST OPCODE dqpn=0x11 psn=123 [ackreq] [se] [fecn] [becn]
//	     [extension-header fields] [payload=N] icrc=ok|BAD
//
// Extension-header fields: DETH qkey= srcqp=; FETH placement=global|persistent|global+persistent
// level=range|mr; RETH va= rkey= len=;
// AtomicETH va= rkey= and swap= compare= (COMPARE_SWAP) or add= (FETCH_ADD);
// AETH aeth=ACK|RNR_NAK(timer 12 = 640µs)|NAK(PSN_SEQUENCE_ERROR) msn=;
// AtomicAckETH orig=; ImmDt imm=; IETH inv_rkey=. A malformed packet shows
// what could be decoded after the reason, e.g.
//
//	TIME SRC:SPORT > DST truncated after BTH: RC_SEND_FIRST dqpn=0x11 psn=123 (60 of 1082 bytes captured)

const timeLayout = "15:04:05.000000"

func appendHex(b []byte, v uint64) []byte {
	b = append(b, "0x"...)
	return strconv.AppendUint(b, v, 16)
}

// synText formats an AETH syndrome: ACK, ACK(credits N),
// RNR_NAK(timer 12 = 640µs), NAK(PSN_SEQUENCE_ERROR).
func synText(s wire.Syndrome) string {
	switch s.Kind() {
	case wire.SynACK:
		if n, ok := wire.CreditCount(s.Credit()); ok {
			return "ACK(credits " + strconv.Itoa(n) + ")"
		}
		return "ACK"
	case wire.SynRNRNAK:
		return "RNR_NAK(timer " + strconv.Itoa(int(s.RNRTimer())) + " = " + wire.RNRTimerDuration(s.RNRTimer()).String() + ")"
	case wire.SynNAK:
		return "NAK(" + s.NAK().String() + ")"
	}
	return s.String()
}

func (x *decoded) addrs(b []byte) []byte {
	start := len(b)
	switch {
	case x.ip.IsValid() && x.hasPort:
		b = netip.AddrPortFrom(x.ip, x.sport).AppendTo(b) // [v6]:port
	default:
		b = x.ip.AppendTo(b)
	}
	for len(b)-start < 17 { // "198.18.0.12:49152"
		b = append(b, ' ')
	}
	b = append(b, " > "...)
	start = len(b)
	b = x.ipDst.AppendTo(b)
	for len(b)-start < 11 {
		b = append(b, ' ')
	}
	return b
}

// appendFields appends the BTH and extension-header fields; payload < 0 is
// unknown.
func appendFields(b []byte, bth wire.BTH, ext *wire.Packet, payload int) []byte {
	op := bth.Opcode()
	b = append(b, "dqpn="...)
	b = appendHex(b, uint64(bth.DestQP()))
	b = append(b, " psn="...)
	b = strconv.AppendUint(b, uint64(bth.PSN()), 10)
	if bth.AckReq() {
		b = append(b, " ackreq"...)
	}
	if bth.SE() {
		b = append(b, " se"...)
	}
	if bth.MigReq() {
		b = append(b, " mig"...)
	}
	if bth.FECN() {
		b = append(b, " fecn"...)
	}
	if bth.BECN() {
		b = append(b, " becn"...)
	}
	if bth.PKey() != wire.DefaultPKey {
		b = append(b, " pkey="...)
		b = appendHex(b, uint64(bth.PKey()))
	}
	if bth.TVer() != 0 {
		b = append(b, " tver="...)
		b = strconv.AppendUint(b, uint64(bth.TVer()), 10)
	}
	if h := ext.DETH; h != nil {
		b = append(b, " qkey="...)
		b = appendHex(b, uint64(h.QKey()))
		b = append(b, " srcqp="...)
		b = appendHex(b, uint64(h.SrcQP()))
	}
	if h := ext.FETH; h != nil {
		b = append(b, " placement="...)
		b = append(b, flushPlacement(h.PlacementType())...)
		b = append(b, " level="...)
		b = append(b, flushLevel(h.Selectivity())...)
	}
	if h := ext.RETH; h != nil {
		b = append(b, " va="...)
		b = appendHex(b, h.VA())
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(h.RKey()))
		b = append(b, " len="...)
		b = strconv.AppendUint(b, uint64(h.DMALen()), 10)
	}
	if h := ext.AtomicETH; h != nil {
		b = append(b, " va="...)
		b = appendHex(b, h.VA())
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(h.RKey()))
		if op == wire.RCFetchAdd {
			b = append(b, " add="...)
			b = appendHex(b, h.SwapAdd())
		} else {
			b = append(b, " compare="...)
			b = appendHex(b, h.Compare())
			b = append(b, " swap="...)
			b = appendHex(b, h.SwapAdd())
		}
	}
	if h := ext.AETH; h != nil {
		b = append(b, " aeth="...)
		b = append(b, synText(h.Syndrome())...)
		b = append(b, " msn="...)
		b = strconv.AppendUint(b, uint64(h.MSN()), 10)
	}
	if h := ext.AtomicAckETH; h != nil {
		b = append(b, " orig="...)
		b = appendHex(b, h.OrigValue())
	}
	if h := ext.ImmDt; h != nil {
		b = append(b, " imm="...)
		b = appendHex(b, uint64(h.Imm()))
	}
	if h := ext.IETH; h != nil {
		b = append(b, " inv_rkey="...)
		b = appendHex(b, uint64(h.RKey()))
	}
	if payload >= 0 && op.Info().Payload {
		b = append(b, " payload="...)
		b = strconv.AppendInt(b, int64(payload), 10)
	}
	return b
}

func (d *Dumper) writeText(x *decoded) {
	b := d.line[:0]
	if !x.rec.Time.IsZero() {
		b = x.rec.Time.In(d.opts.Location).AppendFormat(b, timeLayout)
		b = append(b, ' ')
	}
	if x.ip.IsValid() {
		b = x.addrs(b)
		b = append(b, ' ')
	} else {
		b = append(b, "(no IP header) "...)
	}
	if x.kind == kindMalformed {
		b = append(b, x.partial...)
		if x.bth != nil {
			b = append(b, ": "...)
			b = append(b, x.bth.Opcode().String()...)
			b = append(b, ' ')
			b = appendFields(b, x.bth, &x.ext, -1)
		}
		if len(x.rec.Data) < x.rec.OrigLen {
			b = append(b, " ("...)
			b = strconv.AppendInt(b, int64(len(x.rec.Data)), 10)
			b = append(b, " of "...)
			b = strconv.AppendInt(b, int64(x.rec.OrigLen), 10)
			b = append(b, " bytes captured)"...)
		}
	} else {
		name := x.p.Opcode().String()
		b = append(b, name...)
		for i := len(name); i < 26; i++ { // RC_RDMA_READ_RESPONSE_ONLY
			b = append(b, ' ')
		}
		b = append(b, ' ')
		b = appendFields(b, x.p.BTH, &x.p, len(x.p.Payload))
		if x.p.HasVLAN {
			b = append(b, " vlan="...)
			b = strconv.AppendUint(b, uint64(x.p.VLAN&0xFFF), 10)
		}
		if x.kind == kindRoCE {
			b = append(b, " icrc=ok"...)
		} else {
			n := len(x.p.L3) - wire.ICRCLen
			b = append(b, " icrc=BAD got="...)
			b = appendHex(b, uint64(x.p.ICRC))
			b = append(b, " want="...)
			b = appendHex(b, uint64(wire.ICRC(x.p.L3[:n])))
		}
		if x.cm.ok {
			b = appendCM(b, &x.cm)
		}
	}
	b = append(b, '\n')
	d.line = b
	d.write(b)
}

// JSON format: one object per line.

// The records are package dumpjson's, which the interop harness reads too.
type (
	Hex64            = dumpjson.Hex64
	jsonRETH         = dumpjson.RETH
	jsonAETH         = dumpjson.AETH
	jsonAtomicETH    = dumpjson.AtomicETH
	jsonAtomicAckETH = dumpjson.AtomicAckETH
	jsonImmDt        = dumpjson.ImmDt
	jsonIETH         = dumpjson.IETH
	jsonDETH         = dumpjson.DETH
	jsonPacket       = dumpjson.Packet
)

func ptr[T any](v T) *T { return &v }

func (d *Dumper) writeJSON(x *decoded) {
	j := jsonPacket{CapLen: len(x.rec.Data), OrigLen: x.rec.OrigLen}
	if !x.rec.Time.IsZero() {
		j.Time = x.rec.Time.In(d.opts.Location).Format(time.RFC3339Nano)
	}
	if x.ip.IsValid() {
		j.Src, j.Dst = x.ip.String(), x.ipDst.String()
	}
	if x.hasPort {
		j.Sport = ptr(x.sport)
	}
	bth, ext := x.headers()
	if bth != nil {
		op := bth.Opcode()
		j.Opcode, j.OpcodeNum = op.String(), ptr(uint8(op))
		j.DQPN, j.PSN = ptr(bth.DestQP()), ptr(uint32(bth.PSN()))
		j.AckReq, j.SE, j.FECN, j.BECN = ptr(bth.AckReq()), ptr(bth.SE()), ptr(bth.FECN()), ptr(bth.BECN())
		j.PKey = ptr(bth.PKey())
	}
	if h := ext.FETH; h != nil {
		j.FETH = &dumpjson.FETH{PlacementType: h.PlacementType(), Placement: flushPlacement(h.PlacementType()),
			Selectivity: h.Selectivity(), Level: flushLevel(h.Selectivity())}
	}
	if h := ext.RETH; h != nil {
		j.RETH = &jsonRETH{VA: Hex64(h.VA()), RKey: h.RKey(), DMALen: h.DMALen()}
	}
	if h := ext.AETH; h != nil {
		s := h.Syndrome()
		a := &jsonAETH{Syndrome: uint8(s), Kind: s.Kind().String(), Text: synText(s), MSN: h.MSN()}
		switch s.Kind() {
		case wire.SynACK:
			if n, ok := wire.CreditCount(s.Credit()); ok {
				a.Credits = &n
			}
		case wire.SynRNRNAK:
			a.RNRTimer = ptr(s.RNRTimer())
			a.RNRUsec = ptr(wire.RNRTimerDuration(s.RNRTimer()).Microseconds())
		case wire.SynNAK:
			a.NAK = s.NAK().String()
		}
		j.AETH = a
	}
	if h := ext.AtomicETH; h != nil {
		j.AtomicETH = &jsonAtomicETH{VA: Hex64(h.VA()), RKey: h.RKey(), SwapAdd: Hex64(h.SwapAdd()), Compare: Hex64(h.Compare())}
	}
	if h := ext.AtomicAckETH; h != nil {
		j.AtomicAckETH = &jsonAtomicAckETH{Orig: Hex64(h.OrigValue())}
	}
	if h := ext.ImmDt; h != nil {
		j.ImmDt = &jsonImmDt{Imm: h.Imm()}
	}
	if h := ext.IETH; h != nil {
		j.IETH = &jsonIETH{RKey: h.RKey()}
	}
	if h := ext.DETH; h != nil {
		j.DETH = &jsonDETH{QKey: h.QKey(), SrcQP: h.SrcQP()}
	}
	if ext.CNPPad != nil {
		j.CNP = &struct{}{}
	}
	if x.cm.ok {
		j.CM = jsonCM(&x.cm)
	}
	switch x.kind {
	case kindMalformed:
		j.Malformed, j.Truncated, j.Error = true, x.trunc, x.partial
	default:
		j.PayloadLen, j.Pad = ptr(len(x.p.Payload)), ptr(x.p.Pad)
		j.ICRCOK, j.ICRC = ptr(x.kind == kindRoCE), ptr(x.p.ICRC)
		if x.p.HasVLAN {
			j.VLAN = ptr(x.p.VLAN & 0xFFF)
		}
	}
	d.writeJSONValue(&j)
}

func (d *Dumper) writeJSONValue(v any) {
	b, err := json.Marshal(v)
	if err != nil { // not reached: only plain types
		b = strconv.AppendQuote([]byte(`{"error":`), err.Error())
		b = append(b, '}')
	}
	d.write(append(b, '\n'))
}

// Summary is what `goroce dump` prints at the end. In JSON mode it is the
// last object, with "summary": true.
type Summary = dumpjson.Summary

// FlowSummary is one flow (see flows.go).
type FlowSummary = dumpjson.FlowSummary

// RequestStats are a flow's requests.
type RequestStats = dumpjson.RequestStats

// ResponseStats are a flow's responses.
type ResponseStats = dumpjson.ResponseStats

// warnings collected by the readers.
func (d *Dumper) Warn(msg string) { d.warnings = append(d.warnings, msg) }

// Summary returns the statistics so far.
func (d *Dumper) Summary() Summary {
	st := &d.stats
	s := Summary{
		Summary: true, Packets: st.packets, RoCE: st.roce, NonRoCE: st.nonRoCE,
		Malformed: st.malformed, Truncated: st.truncated, ICRCFailures: st.badICRC,
		Bytes: st.bytes, Opcodes: map[string]int{}, Flows: []FlowSummary{},
		Warnings: d.warnings,
	}
	if !st.first.IsZero() {
		s.First = st.first.In(d.opts.Location).Format(time.RFC3339Nano)
		s.Last = st.last.In(d.opts.Location).Format(time.RFC3339Nano)
		s.Seconds = st.last.Sub(st.first).Seconds()
	}
	for op, n := range st.opcodes {
		if n > 0 {
			s.Opcodes[wire.Opcode(op).String()] = n
		}
	}
	s.MTU, s.MTUSource = d.flows.mtu()
	for _, f := range d.flows.order {
		fs := FlowSummary{Src: f.key.src.String(), Dst: f.key.dst.String(), DQPN: f.key.dqpn, Packets: f.packets}
		if f.reqs > 0 {
			fs.Requests = &RequestStats{
				Packets: f.reqs, FirstPSN: uint32(f.reqFirst), LastPSN: uint32(f.reqLast), Reads: f.readReqs,
				Gaps: f.gaps, MissingPSNs: f.missing, Retransmitted: f.retrans, Late: f.late,
			}
		}
		if f.resps > 0 {
			r := &ResponseStats{
				Packets: f.resps, FirstPSN: uint32(f.respFirst), LastPSN: uint32(f.respLast),
				ACKs: f.acks, NAKs: map[string]int{}, RNRNAKs: f.rnrNaks,
			}
			for k, v := range f.naks {
				r.NAKs[k] = v
			}
			if f.rnrNaks > 0 {
				r.RNRTimer = ptr(f.rnrTimer)
			}
			fs.Responses = r
		}
		s.Flows = append(s.Flows, fs)
	}
	s.Connections = d.cm.summary()
	return s
}

func (d *Dumper) writeSummaryJSON(s *Summary) { d.writeJSONValue(s) }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func (d *Dumper) writeSummaryText(s *Summary) {
	var b strings.Builder
	if !d.opts.Quiet && s.RoCE > 0 {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s: %s", plural(s.Packets, "packet", "packets"), plural(s.RoCE, "RoCEv2", "RoCEv2"))
	fmt.Fprintf(&b, " (%s, %s", plural(s.ICRCFailures, "ICRC failure", "ICRC failures"), plural(s.Malformed, "malformed", "malformed"))
	if s.Truncated > 0 {
		fmt.Fprintf(&b, ", %d truncated", s.Truncated)
	}
	fmt.Fprintf(&b, "), %d other", s.NonRoCE)
	if s.Seconds > 0 {
		fmt.Fprintf(&b, ", %.3f s", s.Seconds)
	}
	b.WriteByte('\n')
	for _, w := range s.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	if len(s.Opcodes) > 0 {
		b.WriteString("opcodes:\n")
		type kv struct {
			k string
			v int
		}
		var ops []kv
		for k, v := range s.Opcodes {
			ops = append(ops, kv{k, v})
		}
		sort.Slice(ops, func(i, j int) bool {
			if ops[i].v != ops[j].v {
				return ops[i].v > ops[j].v
			}
			return ops[i].k < ops[j].k
		})
		for _, o := range ops {
			fmt.Fprintf(&b, "  %7d  %s\n", o.v, o.k)
		}
	}
	if len(s.Flows) > 0 {
		switch s.MTUSource {
		case "flag":
			fmt.Fprintf(&b, "flows (path MTU %d from --mtu):\n", s.MTU)
		case "inferred":
			fmt.Fprintf(&b, "flows (path MTU %d, the largest FIRST/MIDDLE payload):\n", s.MTU)
		default:
			b.WriteString("flows (path MTU unknown: no FIRST/MIDDLE packets):\n")
		}
	}
	for _, f := range s.Flows {
		fmt.Fprintf(&b, "  %s > %s dqpn %#x: %s\n", f.Src, f.Dst, f.DQPN, plural(f.Packets, "packet", "packets"))
		if r := f.Requests; r != nil {
			fmt.Fprintf(&b, "    requests  %6d  psn %d..%d", r.Packets, r.FirstPSN, r.LastPSN)
			fmt.Fprintf(&b, "  gaps %d", r.Gaps)
			if r.MissingPSNs > 0 {
				fmt.Fprintf(&b, " (%d PSNs)", r.MissingPSNs)
			}
			fmt.Fprintf(&b, "  retransmitted %d", r.Retransmitted)
			if r.Late > 0 {
				fmt.Fprintf(&b, "  late %d", r.Late)
			}
			if r.Reads > 0 {
				fmt.Fprintf(&b, "  (%s)", plural(r.Reads, "READ", "READs"))
			}
			b.WriteByte('\n')
		}
		if r := f.Responses; r != nil {
			fmt.Fprintf(&b, "    responses %6d  psn %d..%d  acks %d", r.Packets, r.FirstPSN, r.LastPSN, r.ACKs)
			naks := 0
			for _, n := range r.NAKs {
				naks += n
			}
			fmt.Fprintf(&b, "  naks %d", naks)
			if naks > 0 {
				keys := make([]string, 0, len(r.NAKs))
				for k := range r.NAKs {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				b.WriteString(" (")
				for i, k := range keys {
					if i > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "%s %d", k, r.NAKs[k])
				}
				b.WriteString(")")
			}
			fmt.Fprintf(&b, "  rnr_naks %d", r.RNRNAKs)
			if r.RNRTimer != nil {
				fmt.Fprintf(&b, " (timer %d = %v)", *r.RNRTimer, wire.RNRTimerDuration(*r.RNRTimer))
			}
			b.WriteByte('\n')
		}
	}
	writeConnectionsText(&b, s.Connections)
	d.write([]byte(b.String()))
}

// flushPlacement names a FETH placement type (IB_FLUSH_GLOBAL 1,
// IB_FLUSH_PERSISTENT 2, a bit set; anything else by number).
func flushPlacement(t uint8) string {
	switch t {
	case wire.FlushGlobal:
		return "global"
	case wire.FlushPersistent:
		return "persistent"
	case wire.FlushGlobal | wire.FlushPersistent:
		return "global+persistent"
	}
	return strconv.Itoa(int(t))
}

// flushLevel names a FETH selectivity level (IB_FLUSH_RANGE 0, IB_FLUSH_MR 1).
func flushLevel(l uint8) string {
	switch l {
	case wire.FlushRange:
		return "range"
	case wire.FlushMR:
		return "mr"
	}
	return strconv.Itoa(int(l))
}
