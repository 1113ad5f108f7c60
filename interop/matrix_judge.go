//go:build linux

package interop

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/goroce/goroce/internal/dumpjson"
)

// StrictRetransmissions makes any retransmission in a cell that expects no
// trouble a failure (GOROCE_INTEROP_STRICT_RETRANS=1). By default a clean
// cell tolerates retransmissions that come with no NAK and no PSN gap: they
// are the requester's ACK timeout firing while the responder's VM was not
// scheduled (TCG on a loaded 2-core host), and rxe↔rxe runs show the same
// (testdata/rxe/rc_pingpong.pcap: 4 per side, the duplicates re-ACKed). They
// are counted in the table and logged.
var StrictRetransmissions = os.Getenv("GOROCE_INTEROP_STRICT_RETRANS") != ""

// judge applies the capture checks to r; impls names the senders.
func (m *Matrix) judge(r *CellResult, rep *dumpjson.Report, e Expect, impls map[netip.Addr]string) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	s := rep.Summary
	r.Packets = s.RoCE
	rxeRNR, rxeSeq := 0, 0 // sent by rxe
	for _, f := range s.Flows {
		line := fmt.Sprintf("%s > %s dqpn 0x%x: %d packets", f.Src, f.Dst, f.DQPN, f.Packets)
		if f.DQPN == gsiQPN {
			// Connection management (CM MADs, UD SENDs to QP1): expected
			// in the rdma_cm cells, and its PSNs are no RC sequence (a lost
			// MAD is a gap, its retry a new PSN).
			r.MADs += f.Packets
			r.Summaries = append(r.Summaries, line+" (CM MADs on QP1)")
			continue
		}
		if q := f.Requests; q != nil {
			r.Retrans += q.Retransmitted
			if q.Retransmitted > 0 {
				if r.RetransBy == nil {
					r.RetransBy = map[string]int{}
				}
				who := f.Src
				if a, err := netip.ParseAddr(f.Src); err == nil && impls[a] != "" {
					who = impls[a]
				}
				r.RetransBy[who] += q.Retransmitted
			}
			r.Gaps += q.Gaps
			line += fmt.Sprintf("; requests %d psn %d..%d gaps %d retransmitted %d late %d", q.Packets, q.FirstPSN, q.LastPSN, q.Gaps, q.Retransmitted, q.Late)
		}
		if p := f.Responses; p != nil {
			if a, err := netip.ParseAddr(f.Src); err == nil && impls[a] == "rxe" {
				rxeRNR += p.RNRNAKs
				rxeSeq += p.NAKs[seqNAK]
			}
			for k, n := range p.NAKs {
				r.NAKs += n
				if r.NAKKinds == nil {
					r.NAKKinds = map[string]int{}
				}
				r.NAKKinds[k] += n
			}
			r.RNRNAKs += p.RNRNAKs
			if e.RNRTimer != 0 && p.RNRNAKs > 0 && (p.RNRTimer == nil || *p.RNRTimer != e.RNRTimer) {
				fail("%s > %s: RNR NAK timer code %v, want %d (min_rnr_timer)", f.Src, f.Dst, derefU8(p.RNRTimer), e.RNRTimer)
			}
			line += fmt.Sprintf("; responses %d acks %d naks %v rnr_naks %d", p.Packets, p.ACKs, p.NAKs, p.RNRNAKs)
		}
		r.Summaries = append(r.Summaries, line)
	}
	if s.RoCE == 0 {
		fail("the capture holds no RoCEv2 packet")
	}
	if s.ICRCFailures > 0 {
		fail("%d RoCEv2 packets with a bad ICRC", s.ICRCFailures)
	}
	if s.Malformed > 0 {
		fail("%d malformed RoCEv2 packets", s.Malformed)
	}
	// A sequence NAK follows a lost request (loss) and also an RNR NAK:
	// the requester has sent the next packets before the RNR NAK reached it,
	// and the responder, which dropped the RNR'd packet, NAKs the first of
	// them once (rxe_resp.c check_psn; seen rxe↔rxe). Other NAKs are
	// errors in every cell.
	//
	// An rxe responder in a cell built for no RNR NAK may still run out of
	// receives: the stock tool reposts each one only after polling its
	// completion, and under TCG on 2 loaded cores its process can go
	// unscheduled while rxe's kernel side consumes a burst (seen: send_bw
	// --use-srq -q 2 goroce-client, 2 RNR NAKs and 2 sequence NAKs, one
	// pair per QP). That is rxe's correct answer and goroce's pace, not a
	// fault of either, so it is a warning when every RNR NAK came from rxe
	// and its sequence NAKs are no more than one per RNR NAK; the caller
	// then checks goroce's recovery with --explain (rnrRecoveryCauses).
	// RNR NAKs from goroce stay failures.
	rxeDry := !e.RNR && !e.Loss && rxeRNR > 0 && rxeRNR == r.RNRNAKs &&
		rxeSeq == r.NAKKinds[seqNAK] && rxeSeq <= rxeRNR
	seqOK := e.Loss || e.RNR || rxeDry
	for k, n := range r.NAKKinds {
		if k != seqNAK || !seqOK {
			fail("%d NAKs %s (not expected)", n, k)
		}
	}
	if !e.Loss {
		if r.Gaps > 0 {
			fail("%d PSN gaps (none expected)", r.Gaps)
		}
		if r.Retrans > 0 && !e.RNR && !rxeDry {
			switch {
			case StrictRetransmissions || r.Gaps > 0:
				fail("%d retransmitted PSNs (none expected; by %v)", r.Retrans, r.RetransBy)
			default:
				r.Warnings = append(r.Warnings, fmt.Sprintf("%d timeout retransmissions (by %s) without NAK or gap", r.Retrans, byString(r.RetransBy)))
			}
		}
	}
	switch {
	case e.RNR && r.RNRNAKs == 0:
		fail(noRNRProblem)
	case rxeDry:
		r.RXERNRNAKs = rxeRNR
		r.Warnings = append(r.Warnings, fmt.Sprintf("rxe's receive queue ran dry: %d RNR NAKs and %d sequence NAKs from rxe", rxeRNR, rxeSeq))
	case !e.RNR && !e.Loss && r.RNRNAKs > 0:
		fail("%d RNR NAKs (none expected)", r.RNRNAKs)
	}
	if e.UDQKey != 0 {
		judgeUD(r, rep, e.UDQKey)
	}
	if e.UC {
		judgeUC(r, rep)
		if e.Loss {
			// UC never retransmits: a repeated PSN is a fault; a gap is a
			// lost packet, whose message the receiver dropped.
			if r.Retrans > 0 {
				fail("UC cell: %d retransmitted PSNs (UC retransmits nothing)", r.Retrans)
			}
			r.Warnings = append(r.Warnings, fmt.Sprintf("UC cell: %d PSN gaps (packets lost on purpose; their messages dropped, not retransmitted)", r.Gaps))
		}
	}
	if e.PathMTU > 0 {
		largest := 0
		for _, p := range rep.Packets {
			if p.PayloadLen != nil && *p.PayloadLen > largest {
				largest = *p.PayloadLen
			}
		}
		if largest != e.PathMTU {
			fail("largest RoCEv2 payload %d bytes, want the path MTU %d", largest, e.PathMTU)
		}
	}
	if e.Atomic {
		n, probs := CheckAtomics(rep.Packets, !e.Loss)
		r.Atomics = n
		for _, p := range probs {
			fail("atomics: %s", p)
		}
		if n == 0 {
			fail("atomics: no operation hit an address twice, nothing to check (use more iterations)")
		}
	}
}

// judgeUD checks a UD cell's packets: UD SENDs only, the expected Q_Key,
// AckReq clear (as rxe sends them), and no responses at all.
func judgeUD(r *CellResult, rep *dumpjson.Report, qkey uint32) {
	bad := map[string]int{}
	for _, p := range rep.Packets {
		switch {
		case p.Opcode != "UD_SEND_ONLY" && p.Opcode != "UD_SEND_ONLY_WITH_IMMEDIATE":
			bad["opcode "+p.Opcode]++
		case p.DETH == nil || p.DETH.QKey != qkey:
			bad["DETH Q_Key"]++
		case p.AckReq != nil && *p.AckReq:
			bad["AckReq set"]++
		}
	}
	for what, n := range bad {
		r.Problems = append(r.Problems, fmt.Sprintf("UD cell: %d packets with %s (want UD SEND, Q_Key %#x, AckReq clear)", n, what, qkey))
	}
	for _, f := range rep.Summary.Flows {
		if f.Responses != nil && f.Responses.Packets > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("UD cell: %s > %s: %d responses (UD has none)", f.Src, f.Dst, f.Responses.Packets))
		}
	}
}

// judgeUC checks a UC cell's packets: UC SEND/WRITE requests only (QP1's
// CM MADs aside) and no responses at all. AckReq is not judged: IBTA lets
// a UC requester set it and the responder ignores it (rxe sent it on UC
// until its requester learnt otherwise, ack_req for RC only); how many
// packets carried it is noted.
func judgeUC(r *CellResult, rep *dumpjson.Report) {
	bad := map[string]int{}
	ackReq := 0
	for _, p := range rep.Packets {
		if p.DQPN != nil && *p.DQPN == gsiQPN {
			continue
		}
		if !strings.HasPrefix(p.Opcode, "UC_SEND_") && !strings.HasPrefix(p.Opcode, "UC_RDMA_WRITE_") {
			bad[p.Opcode]++
		}
		if p.AckReq != nil && *p.AckReq {
			ackReq++
		}
	}
	for op, n := range bad {
		r.Problems = append(r.Problems, fmt.Sprintf("UC cell: %d packets %s (want UC SEND/WRITE requests only)", n, op))
	}
	for _, f := range rep.Summary.Flows {
		if f.DQPN != gsiQPN && f.Responses != nil && f.Responses.Packets > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("UC cell: %s > %s: %d responses (UC has none)", f.Src, f.Dst, f.Responses.Packets))
		}
	}
	if ackReq > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("UC cell: %d packets with AckReq set (ignored by UC responders)", ackReq))
	}
}

func derefU8(p *uint8) any {
	if p == nil {
		return "none"
	}
	return *p
}

func byString(m map[string]int) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// Retransmission causes of `goroce dump --explain` that packet loss
// explains (cmd/goroce/internal/dump/analysis.go Cause*): the responder's
// sequence NAK, the requester's ACK timeout, a gap in the READ responses,
// and an ACK passing an unanswered READ (implicit NAK).
var lossCauses = map[string]bool{
	"sequence_nak": true, "timeout": true, "read_response_gap": true, "implicit_nak": true,
}

// rnrRecoveryCauses are the causes of the retransmissions that follow an
// RNR NAK in a cell built for none: the RNR'd request and those behind it
// (rnr_nak), a sequence NAK for one behind it (sequence_nak), and the
// timeouts every clean cell tolerates (StrictRetransmissions).
var rnrRecoveryCauses = map[string]bool{"rnr_nak": true, "sequence_nak": true, "timeout": true}

// seqNAK is dump's name of the PSN sequence error NAK.
const seqNAK = "PSN_SEQUENCE_ERROR"

// causeWord names a set of causes in judgeExplain's problems.
func causeWord(causes map[string]bool) string {
	if causes["rnr_nak"] {
		return "an RNR NAK"
	}
	return "loss"
}

// explained counts the retransmissions whose cause is in causes. A READ
// requester that sees a gap in the responses re-requests at once
// (read_response_gap), so a READ cell may recover every loss that way
// without a single timeout or NAK.
func explained(by map[string]int, causes map[string]bool) int {
	n := 0
	for cause, k := range by {
		if causes[cause] {
			n += k
		}
	}
	return n
}

// judgeExplain checks the --explain analysis of a loss cell's capture
// after judge (r.Retrans), or of a clean cell whose rxe side ran out of
// receives: when the capture holds retransmitted PSNs the anomalies
// include retransmissions explained by causes (lossCauses, or
// rnrRecoveryCauses); every retransmission is so explained and lies in a
// data flow (a verdict with operations from src, the requester, to dst:
// one per QP, send_bw -q 2 has two); and every data flow's operations
// completed. A capture may hold no retransmission at all: when the
// dropping side is the responder of a WRITE stream, it loses only
// coalesced ACKs, which the next ACK covers, and the capture point (after
// the drop) sees nothing to explain.
func judgeExplain(r *CellResult, s *dumpjson.Summary, src, dst string, causes map[string]bool) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	r.Explained = len(s.Anomalies)
	r.ExplainedBy = map[string]int{}
	isData := func(v dumpjson.Verdict) bool {
		return v.Src == src && v.Dst == dst && v.DQPN != gsiQPN && v.Operations > 0
	}
	data := map[uint32]bool{} // by DQPN
	for _, v := range s.Verdicts {
		if isData(v) {
			data[v.DQPN] = true
		}
	}
	if len(data) == 0 {
		fail("explain: no verdict for the data flow %s > %s", src, dst)
		return
	}
	for _, a := range s.Anomalies {
		if a.Kind != "retransmission" {
			continue
		}
		r.ExplainedBy[a.Cause]++
		if a.Src != src || a.Dst != dst || !data[a.DQPN] {
			fail("explain: retransmission in %s > %s dqpn %#x, outside the data flows %s > %s: %s",
				a.Src, a.Dst, a.DQPN, src, dst, a.Text)
		}
		if !causes[a.Cause] {
			fail("explain: retransmission with cause %q, not one %s explains: %s", a.Cause, causeWord(causes), a.Text)
		}
	}
	retransExplained(r, causes, fail)
	r.Completed = 0
	for _, v := range s.Verdicts {
		if !isData(v) {
			continue
		}
		r.Completed += v.Completed
		if v.Unanswered != 0 || v.Failed != 0 || v.Completed != v.Operations {
			fail("explain: data flow %s > %s dqpn %#x: %d operations, %d completed, %d failed, %d unanswered: %s",
				v.Src, v.Dst, v.DQPN, v.Operations, v.Completed, v.Failed, v.Unanswered, v.Text)
		}
	}
}

// retransExplained is the end of judgeExplain and judgeExplainFlows: the
// flow summary's retransmitted PSNs must have a retransmission explained
// by causes, and the explanations a retransmission the summary counts.
func retransExplained(r *CellResult, causes map[string]bool, fail func(format string, a ...any)) {
	switch n := explained(r.ExplainedBy, causes); {
	case r.Retrans > 0 && n == 0:
		fail("explain: %d retransmitted PSNs but no retransmission explained by %s (causes %s; %d anomalies, retransmissions by cause: %s)",
			r.Retrans, causeWord(causes), setString(causes, func(c string) string { return c }), r.Explained, byString(r.ExplainedBy))
	case r.Retrans == 0 && len(r.ExplainedBy) > 0:
		fail("explain: retransmissions (%s) where the flow summary counts none", byString(r.ExplainedBy))
	}
}

// dreqSenders are the IP addresses that sent the first DREQ of a
// connection in the capture (Connection.Messages: "DREQ>" from the active
// side, "DREQ<" from the passive one).
func dreqSenders(s *dumpjson.Summary) map[string]bool {
	ip := func(addr string) string {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			return ap.Addr().String()
		}
		return addr
	}
	out := map[string]bool{}
	for _, c := range s.Connections {
	messages:
		for _, m := range c.Messages {
			switch m {
			case "DREQ>":
				out[ip(c.Active)] = true
				break messages
			case "DREQ<":
				out[ip(c.Passive)] = true
				break messages
			}
		}
	}
	return out
}

// judgeExplainFlows is judgeExplain for a tool whose both ends are
// requesters (rping): every retransmission is explained by loss and lies in
// an RC flow, not in the CM's traffic on QP1 (which retries by sending
// anew), and every RC flow's operations completed.
func judgeExplainFlows(r *CellResult, s *dumpjson.Summary, causes map[string]bool) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	r.Explained = len(s.Anomalies)
	r.ExplainedBy = map[string]int{}
	disconnectedBy := dreqSenders(s)
	flows := 0
	for _, v := range s.Verdicts {
		if v.DQPN == gsiQPN {
			continue
		}
		flows++
		r.Completed += v.Completed
		// The peer that disconnected may have taken the flow's last
		// operation and sent DREQ while the ACK of it was lost: nothing
		// retransmits to a QP that is gone (a stock rping client does
		// exactly that under loss). One such operation is allowed.
		lastLost := v.Unanswered == 1 && v.Completed == v.Operations-1 && disconnectedBy[v.Dst]
		if !lastLost && (v.Unanswered != 0 || v.Failed != 0 || v.Completed != v.Operations) {
			fail("explain: flow %s > %s dqpn %#x: %d operations, %d completed, %d failed, %d unanswered: %s",
				v.Src, v.Dst, v.DQPN, v.Operations, v.Completed, v.Failed, v.Unanswered, v.Text)
		}
	}
	if flows == 0 {
		fail("explain: no verdict for any RC flow")
	}
	for _, a := range s.Anomalies {
		if a.Kind != "retransmission" {
			continue
		}
		r.ExplainedBy[a.Cause]++
		if a.DQPN == gsiQPN {
			fail("explain: retransmission on QP1: %s", a.Text)
		}
		if !causes[a.Cause] {
			fail("explain: retransmission with cause %q, not one %s explains: %s", a.Cause, causeWord(causes), a.Text)
		}
	}
	retransExplained(r, causes, fail)
}

// RunDump runs `bin dump --json [flags] pcap` and parses it.
func RunDump(bin, pcap string, flags ...string) (*dumpjson.Report, error) {
	var stderr bytes.Buffer
	c := exec.Command(bin, append(append([]string{"dump", "--json"}, flags...), pcap)...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s dump --json %s: %v: %s", bin, pcap, err, stderr.Bytes())
	}
	return dumpjson.Read(bytes.NewReader(out))
}

// CheckAtomics follows every 8-byte location the atomics of a capture touch.
// Requests are taken in PSN order (the order a responder executes them) and
// matched to their ATOMIC_ACKNOWLEDGE by PSN; from the second operation on a
// location, the original value returned must be what the previous operation
// left: orig+add for FETCH_ADD, swap if orig == compare for COMPARE_SWAP
// (IBTA 9.4.5; rxe_resp.c atomic_reply). A duplicate response must repeat
// the first one's value (rxe answers replays from its saved result). With
// strict, a request left unanswered is a problem too. It returns how many
// original values were checked against the chain.
func CheckAtomics(pkts []dumpjson.Packet, strict bool) (int, []string) {
	type key struct {
		src, dst string
		psn      uint32
	}
	type req struct {
		key
		fadd         bool
		va           uint64
		rkey         uint32
		swapAdd, cmp uint64
	}
	var reqs []req
	seen := map[key]bool{}
	orig := map[key]uint64{}
	var probs []string
	for _, p := range pkts {
		if p.PSN == nil {
			continue
		}
		switch {
		case (p.Opcode == "RC_FETCH_ADD" || p.Opcode == "RC_COMPARE_SWAP") && p.AtomicETH != nil:
			k := key{p.Src, p.Dst, *p.PSN}
			if seen[k] {
				continue
			}
			seen[k] = true
			a := p.AtomicETH
			reqs = append(reqs, req{k, p.Opcode == "RC_FETCH_ADD", uint64(a.VA), a.RKey, uint64(a.SwapAdd), uint64(a.Compare)})
		case p.Opcode == "RC_ATOMIC_ACKNOWLEDGE" && p.AtomicAckETH != nil && p.AETH != nil && p.AETH.Kind == "ACK":
			k := key{p.Dst, p.Src, *p.PSN} // keyed as the request: requester → responder
			v := uint64(p.AtomicAckETH.Orig)
			if old, ok := orig[k]; ok {
				if old != v && len(probs) < 10 {
					probs = append(probs, fmt.Sprintf("duplicate ATOMIC_ACK psn %d: orig %#x, first answer said %#x", k.psn, v, old))
				}
				continue
			}
			orig[k] = v
		}
	}
	// PSN order per requester→responder pair, relative to its first request.
	base := map[[2]string]uint32{}
	for _, r := range reqs {
		if _, ok := base[[2]string{r.src, r.dst}]; !ok {
			base[[2]string{r.src, r.dst}] = r.psn
		}
	}
	rel := func(r req) uint32 { return (r.psn - base[[2]string{r.src, r.dst}]) & 0xFFFFFF }
	sort.SliceStable(reqs, func(i, j int) bool {
		if reqs[i].src != reqs[j].src || reqs[i].dst != reqs[j].dst {
			return reqs[i].src+reqs[i].dst < reqs[j].src+reqs[j].dst
		}
		return rel(reqs[i]) < rel(reqs[j])
	})
	type loc struct {
		dst  string
		rkey uint32
		va   uint64
	}
	value := map[loc]uint64{}
	checked := 0
	for _, r := range reqs {
		o, ok := orig[r.key]
		l := loc{r.dst, r.rkey, r.va}
		if !ok {
			if strict && len(probs) < 10 {
				probs = append(probs, fmt.Sprintf("%s → %s psn %d: no ATOMIC_ACKNOWLEDGE", r.src, r.dst, r.psn))
			}
			delete(value, l) // the location's value is unknown from here
			continue
		}
		if want, ok := value[l]; ok {
			checked++
			if o != want && len(probs) < 10 {
				probs = append(probs, fmt.Sprintf("va %#x psn %d: original value %#x, the earlier operations imply %#x", r.va, r.psn, o, want))
			}
		}
		switch {
		case r.fadd:
			value[l] = o + r.swapAdd
		case o == r.cmp:
			value[l] = r.swapAdd
		default:
			value[l] = o
		}
	}
	return checked, probs
}
