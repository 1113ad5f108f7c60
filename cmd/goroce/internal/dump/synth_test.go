package dump

import (
	"bytes"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/wire"
)

// synth builds a capture frame by frame with package wire, at chosen
// times, for tests with exact expected answers.
type synth struct {
	t     testing.TB
	base  time.Time
	a, b  netip.Addr
	qa    uint32 // requester's QPN (A), where responses go
	qb    uint32 // responder's QPN (B), where requests go
	recs  []Record
	ipID  uint16
	frame []byte
}

func newSynth(t testing.TB) *synth {
	return &synth{t: t, base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		a: netip.MustParseAddr("198.18.0.1"), b: netip.MustParseAddr("198.18.0.2"), qa: 0x22, qb: 0x11,
		frame: make([]byte, 9000)}
}

// add builds one frame at us microseconds after the base time. Requests go
// A→B to qb, responses B→A to qa. corrupt flips a payload bit after the
// ICRC was computed.
func (s *synth) add(us float64, f wire.Frame, payload int, corrupt bool) {
	s.t.Helper()
	if f.BTH.Opcode.Info().Request {
		f.SrcIP, f.DstIP, f.BTH.DestQP = s.a, s.b, s.qb
	} else {
		f.SrcIP, f.DstIP, f.BTH.DestQP = s.b, s.a, s.qa
	}
	f.SrcPort = wire.RCSourcePort(s.qa, s.qb)
	f.BTH.PKey = wire.DefaultPKey
	f.HopLimit = 64
	s.ipID++
	f.IPID = s.ipID
	hl := f.HeaderLen()
	for i := range payload {
		s.frame[hl+i] = byte(i)
	}
	n, err := wire.Build(s.frame, &f, payload)
	if err != nil {
		s.t.Fatalf("build %v: %v", f.BTH.Opcode, err)
	}
	data := append([]byte(nil), s.frame[:n]...)
	if corrupt {
		data[hl] ^= 0x10
	}
	s.recs = append(s.recs, Record{Time: s.base.Add(time.Duration(us * float64(time.Microsecond))), Data: data, LinkType: 1})
}

func (s *synth) req(us float64, op wire.Opcode, psn uint32, payload int) {
	s.add(us, wire.Frame{BTH: wire.BTHFields{Opcode: op, PSN: wire.PSN(psn), AckReq: op.Info().Pos == wire.PosLast || op.Info().Pos == wire.PosOnly}}, payload, false)
}

func (s *synth) reth(us float64, op wire.Opcode, psn uint32, payload int, va uint64, rkey, dmaLen uint32) {
	s.add(us, wire.Frame{BTH: wire.BTHFields{Opcode: op, PSN: wire.PSN(psn), AckReq: true},
		RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: dmaLen}}, payload, false)
}

func (s *synth) ack(us float64, psn uint32, syn wire.Syndrome, msn uint32) {
	s.add(us, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCAcknowledge, PSN: wire.PSN(psn)},
		AETH: wire.AETHFields{Syndrome: syn, MSN: msn}}, 0, false)
}

// pcap returns the capture as a pcap file.
func (s *synth) pcap() []byte {
	var b bytes.Buffer
	w, err := pcapfile.NewWriter(&b, pcapfile.LinkTypeEthernet)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, r := range s.recs {
		if err := w.WritePacket(r.Time, r.Data); err != nil {
			s.t.Fatal(err)
		}
	}
	return b.Bytes()
}

// mixedCapture has one of everything, at exact times (µs):
//
//	   0 SEND_ONLY 100          10 ACK 100              → SEND 10 µs
//	  20 WRITE_FIRST 101 (1024) 21 MIDDLE 102 22 LAST 103
//	  23 SEND_ONLY 104          50 ACK 104 (coalesced)   → WRITE 28 µs, SEND 27 µs
//	  60 READ 105 len 2048      70 READ_RESPONSE_FIRST 105, 80 LAST 106 → READ 20 µs
//	 100 FETCH_ADD 107         130 ATOMIC_ACK 107        → ATOMIC 30 µs
//	 200 SEND_ONLY 108         205 RNR NAK 108 (timer 12 = 640 µs)
//	1000 SEND_ONLY 108 again  1010 ACK 108               → SEND 810 µs, retransmitted
//	1100 WRITE_ONLY 109       1105 NAK REMOTE_ACCESS_ERROR 109 → WRITE NAKed
//	1150 SEND_ONLY 110 with a bad ICRC (the responder drops it)
//	1200 SEND_ONLY 110        (no answer)                → SEND unanswered
func mixedCapture(t testing.TB) *synth {
	s := newSynth(t)
	s.req(0, wire.RCSendOnly, 100, 64)
	s.ack(10, 100, wire.SyndromeACKNoCredit, 1)
	s.reth(20, wire.RCRDMAWriteFirst, 101, 1024, 0x1000, 0x77, 3000)
	s.req(21, wire.RCRDMAWriteMiddle, 102, 1024)
	s.req(22, wire.RCRDMAWriteLast, 103, 952)
	s.req(23, wire.RCSendOnly, 104, 64)
	s.ack(50, 104, wire.SyndromeACKNoCredit, 3)
	s.reth(60, wire.RCRDMAReadRequest, 105, 0, 0x2000, 0x77, 2048)
	s.add(70, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseFirst, PSN: 105}, AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 3}}, 1024, false)
	s.add(80, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCRDMAReadResponseLast, PSN: 106}, AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 4}}, 1024, false)
	s.add(100, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCFetchAdd, PSN: 107, AckReq: true},
		AtomicETH: wire.AtomicETHFields{VA: 0x3000, RKey: 0x77, SwapAdd: 1}}, 0, false)
	s.add(130, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCAtomicAcknowledge, PSN: 107},
		AETH: wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: 5}, AtomicAckETH: 41}, 0, false)
	s.req(200, wire.RCSendOnly, 108, 64)
	s.ack(205, 108, wire.RNRNAKSyndrome(12), 5)
	s.req(1000, wire.RCSendOnly, 108, 64)
	s.ack(1010, 108, wire.SyndromeACKNoCredit, 6)
	s.reth(1100, wire.RCRDMAWriteOnly, 109, 16, 0xdead0000, 0x99, 16)
	s.ack(1105, 109, wire.NAKSyndrome(wire.NAKRemoteAccessError), 6)
	s.add(1150, wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PSN: 110, AckReq: true}}, 64, true)
	s.req(1200, wire.RCSendOnly, 110, 64)
	return s
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }
