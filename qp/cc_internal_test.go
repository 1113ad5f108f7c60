package qp

import (
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// cx4CNP is the ConnectX-4 Lx CNP of wire/icrc_test.go (PROTOCOL §2
// vector 2), verbatim: 10.0.17.1 → 10.0.18.1, DestQP 0x118.
const cx4CNP = "e41d2dab2bc2 7cfe90643b32 0800 45c2 003c 718c 4000 4011 9161 0a001101 0a001201 0000 12b7 0028 0000 81 00 ffff 40 000118 00 000000 00000000000000000000000000000000 82fd002a"

type ccRig struct {
	t      *testing.T
	clock  atomic.Int64
	la, lb *nic.MemLink // la: the device's end; lb: the peer's (the test)
	d      *Device
	q      *QP
	peerQP uint32
	bufs   [][]byte
	sizes  []int
}

func (r *ccRig) now() time.Time { return time.Unix(0, r.clock.Load()) }

func (r *ccRig) advance(d time.Duration) { r.clock.Add(int64(d)) }

// newCCRig opens a manual device 10.0.18.1 (MAC e4:1d:2d:ab:2b:c2, as the
// captured CNP's destination) whose first QP is 0x118, connected to QP
// 0x77 at 10.0.17.1 (MAC 7c:fe:90:64:3b:32) on the other end of a memory
// link the test drives by hand.
func newCCRig(t *testing.T, cc *CCParams) *ccRig {
	r := &ccRig{t: t, peerQP: 0x77}
	r.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	macD, _ := net.ParseMAC("e4:1d:2d:ab:2b:c2")
	macP, _ := net.ParseMAC("7c:fe:90:64:3b:32")
	r.la, r.lb = nic.NewMemPair(nic.MemConfig{Clock: r.now, MACA: macD, MACB: macP})
	peer := netip.MustParseAddr("10.0.17.1")
	d, err := Open(Config{Link: r.la, IP: netip.MustParseAddr("10.0.18.1"), Mode: ModeManual, Now: r.now, CC: cc,
		Neighbors: map[netip.Addr]net.HardwareAddr{peer: macP}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); r.la.Close(); r.lb.Close() })
	r.d = d
	d.tab.nextQPN = 0x118
	cq, err := d.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	if r.q, err = d.AllocPD().CreateQP(InitAttr{SendCQ: cq, RecvCQ: cq, Cap: Caps{MaxSendWR: 8, MaxRecvWR: 8}}); err != nil {
		t.Fatal(err)
	}
	if r.q.QPN() != 0x118 {
		t.Fatalf("QPN %#x", r.q.QPN())
	}
	gid := netip.AddrFrom16(peer.As16())
	if err := r.q.Connect(context.Background(), Remote{QPN: r.peerQP, GID: gid}, ConnectOptions{TrafficClass: 26 << 2}); err != nil {
		t.Fatal(err)
	}
	r.bufs, r.sizes = make([][]byte, 64), make([]int, 64)
	for i := range r.bufs {
		r.bufs[i] = make([]byte, 2048)
	}
	return r
}

// inject hands the device frame as if the peer had sent it.
func (r *ccRig) inject(frame []byte) {
	r.t.Helper()
	if _, err := r.lb.WriteBatch([][]byte{frame}); err != nil {
		r.t.Fatal(err)
	}
	r.d.Poll()
}

// sent returns the frames the device sent, parsed.
func (r *ccRig) sent() []wire.Packet {
	r.t.Helper()
	var out []wire.Packet
	for {
		n, _ := r.lb.TryReadBatch(r.bufs, r.sizes)
		if n == 0 {
			return out
		}
		for i := 0; i < n; i++ {
			var p wire.Packet
			if err := wire.Parse(append([]byte(nil), r.bufs[i][:r.sizes[i]]...), &p); err != nil {
				r.t.Fatalf("device sent a bad frame: %v", err)
			}
			out = append(out, p)
		}
	}
}

// ceSend builds a SEND ONLY from the peer QP to 0x118 with ECN ecn.
func (r *ccRig) ceSend(psn uint32, ecn uint8) []byte {
	f := wire.Frame{DstMAC: r.d.mac, SrcMAC: [6]byte(r.lb.HardwareAddr()),
		SrcIP: netip.MustParseAddr("10.0.17.1"), DstIP: netip.MustParseAddr("10.0.18.1"),
		TrafficClass: 26<<2 | ecn, HopLimit: 64, SrcPort: 49152,
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x118, PSN: wire.PSN(psn)}}
	buf := make([]byte, 256)
	n, err := wire.BuildPayload(buf, &f, []byte("payload!"))
	if err != nil {
		r.t.Fatal(err)
	}
	return buf[:n]
}

func mustHexFrame(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The CNP a ConnectX-4 Lx sent, byte for byte, reaches QP 0x118 through
// the link and cuts its rate: rp_cnp_handled counts it, RC drops to about
// half the line rate.
func TestCCConnectX4CNPAccepted(t *testing.T) {
	p := DefaultCCParams()
	p.PortRate = 25_000_000_000
	r := newCCRig(t, &p)
	r.inject(mustHexFrame(t, cx4CNP))
	if got := r.d.Counters()[CntRPCNPHandled]; got != 1 {
		t.Fatalf("rp_cnp_handled %d, want 1 (rx stats %+v)", got, r.d.RxStats())
	}
	if got := r.q.Counters()[CntRcvdBadOpcode]; got != 0 {
		t.Fatalf("the CNP reached the RC engine: rcvd_bad_opcode %d", got)
	}
	s := r.q.CongestionState()
	if s.CurrentRate >= 13_000_000_000 || s.CurrentRate < 12_500_000_000 || s.TargetRate != 25_000_000_000 {
		t.Fatalf("after the CNP: %+v, want RC about half of 25 Gb/s, RT 25 Gb/s", s)
	}
}

// Without CC a device ignores CNPs and counts them.
func TestCCOffIgnoresCNP(t *testing.T) {
	r := newCCRig(t, nil)
	r.inject(mustHexFrame(t, cx4CNP))
	if got := r.d.Counters()[CntRPCNPIgnored]; got != 1 {
		t.Fatalf("rp_cnp_ignored %d, want 1", got)
	}
	if s := r.q.CongestionState(); s != (DCQCNState{}) {
		t.Fatalf("state %+v without CC", s)
	}
	// A CE mark does not make a device without CC answer with a CNP.
	r.inject(r.ceSend(0, transport.ECNCE))
	for _, p := range r.sent() {
		if p.Opcode() == wire.CNP {
			t.Fatal("CNP sent with CC off")
		}
		if p.IPv4.TOS() != 26<<2 {
			t.Fatalf("TOS %#x with CC off, want the traffic class as given (%#x)", p.IPv4.TOS(), 26<<2)
		}
	}
}

// Notification point: a CE-marked packet makes the device send a CNP back
// to its source, to the QP the receiving QP is connected to, shaped like
// the ConnectX-4 Lx's (BECN, PSN 0, 16 zero bytes, UDP source port 0,
// TOS = np_cnp_dscp and ECT(0)); a second CE inside
// np_min_time_between_cnps sends none; after it, one more. The device's
// own ACK carries ECT(0) with the traffic class's DSCP.
func TestCCNotificationPoint(t *testing.T) {
	p := DefaultCCParams()
	r := newCCRig(t, &p)
	for i := 0; i < 3; i++ {
		if err := r.q.PostRecv(&RecvWR{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r.inject(r.ceSend(0, transport.ECNCE))
	var cnps, acks int
	for _, pk := range r.sent() {
		switch pk.Opcode() {
		case wire.CNP:
			cnps++
			b := pk.BTH
			if b.DestQP() != r.peerQP || !b.BECN() || b.FECN() || b.PSN() != 0 || b.AckReq() || b.PKey() != 0xFFFF ||
				pk.SrcIP() != netip.MustParseAddr("10.0.18.1") || pk.DstIP() != netip.MustParseAddr("10.0.17.1") ||
				pk.IPv4.TOS() != 0xC2 || pk.UDP.SrcPort() != 0 || len(pk.CNPPad) != 16 || pk.Eth.Dst() != [6]byte(r.lb.HardwareAddr()) {
				t.Fatalf("CNP %+v TOS %#x", b.Fields(), pk.IPv4.TOS())
			}
		case wire.RCAcknowledge:
			acks++
			if pk.IPv4.TOS() != 26<<2|transport.ECNECT0 {
				t.Fatalf("ACK TOS %#x, want DSCP 26 and ECT(0)", pk.IPv4.TOS())
			}
		}
	}
	if cnps != 1 || acks != 1 {
		t.Fatalf("%d CNPs and %d ACKs, want one of each", cnps, acks)
	}
	r.advance(time.Microsecond)
	r.inject(r.ceSend(1, transport.ECNCE))
	r.inject(r.ceSend(2, transport.ECNECT0))
	for _, pk := range r.sent() {
		if pk.Opcode() == wire.CNP {
			t.Fatal("a second CNP inside np_min_time_between_cnps")
		}
	}
	r.advance(p.NPMinTimeBetweenCNPs)
	r.inject(r.ceSend(3, transport.ECNCE))
	cnps = 0
	for _, pk := range r.sent() {
		if pk.Opcode() == wire.CNP {
			cnps++
		}
	}
	c := r.d.Counters()
	if cnps != 1 || c[CntNPCNPSent] != 2 || c[CntNPECNMarkedRoCEPackets] != 3 || r.q.Counters()[CntNPCNPSent] != 2 {
		t.Fatalf("CNPs %d, np_cnp_sent %d, np_ecn_marked_roce_packets %d; want 1, 2, 3", cnps, c[CntNPCNPSent], c[CntNPECNMarkedRoCEPackets])
	}
}

// A paced QP wakes through the device's deadline heap: after a CNP cuts
// its rate, a 4-packet WRITE leaves one packet at a time, each when the
// device's next deadline (the pacer's) says, never before.
func TestCCPacingThroughDeadlines(t *testing.T) {
	p := DefaultCCParams()
	p.PortRate = 10_000_000_000
	r := newCCRig(t, &p)
	pd := r.q.pd
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	r.inject(mustHexFrame(t, cx4CNP))
	rate := r.q.CongestionState().CurrentRate
	if rate >= 5_010_000_000 {
		t.Fatalf("rate %d after the CNP", rate)
	}
	if err := r.q.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, 4096)},
		RemoteAddr: 0x1000, RKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	var sentAt []time.Time
	var lens []int
	for len(sentAt) < 4 {
		for _, pk := range r.sent() {
			sentAt = append(sentAt, r.now())
			lens = append(lens, len(pk.L3)+wire.EthernetLen)
		}
		if len(sentAt) >= 4 {
			break
		}
		next, ok := r.d.NextDeadline()
		if !ok {
			t.Fatalf("%d packets sent and no deadline", len(sentAt))
		}
		// Just before the deadline nothing leaves.
		r.clock.Store(next.UnixNano() - 1)
		r.d.Poll()
		if got := r.sent(); len(got) != 0 {
			t.Fatalf("packet %d left 1 ns before the pacer's deadline", len(sentAt)+1)
		}
		r.clock.Store(next.UnixNano())
		r.d.Poll()
	}
	for i := 1; i < len(sentAt); i++ {
		gap := sentAt[i].Sub(sentAt[i-1])
		want := time.Duration((int64(lens[i-1])*8*int64(time.Second) + rate - 1) / rate)
		if gap != want {
			t.Errorf("gap %d: %v, want %v (%d bytes at %d b/s)", i, gap, want, lens[i-1], rate)
		}
	}
}
