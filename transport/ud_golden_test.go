package transport_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// udPingpongFrames returns the UD frames of testdata/rxe/ud_pingpong.pcap
// (ibv_ud_pingpong -g 1 -n 50 -s 512 between two rxe hosts), parsed.
func udPingpongFrames(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open("../testdata/rxe/ud_pingpong.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	var p wire.Packet
	for _, r := range recs {
		if wire.Parse(r.Data, &p) == nil && p.Opcode().Transport() == wire.TransportUD {
			out = append(out, r.Data)
		}
	}
	if len(out) != 100 {
		t.Fatalf("%d UD frames in the capture, want 100", len(out))
	}
	return out
}

// newUDEngine makes a UD engine with the numbers of one rxe host of the
// capture: QPN, Q_Key, SQ PSN.
func newUDEngine(t *testing.T, qpn, qkey uint32, psn wire.PSN, out transport.Output, scq, rcq transport.CompletionQueue) (*transport.QP, *memreg.Table, *memreg.PD) {
	t.Helper()
	mrs := memreg.NewTable(1)
	pd := mrs.AllocPD()
	q, err := transport.New(transport.Config{QPN: qpn, PD: pd, MRs: mrs, Caps: transport.Caps{MaxSendWR: 4, MaxRecvWR: 64},
		SendCQ: scq, RecvCQ: rcq, Out: out, PortMaxMTU: transport.MTU1024, Type: transport.QPTypeUD})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	steps := []struct {
		a    transport.Attr
		mask transport.AttrMask
	}{
		{transport.Attr{State: transport.StateInit, Port: 1, QKey: qkey}, transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort | transport.AttrQKey},
		{transport.Attr{State: transport.StateRTR}, transport.AttrState},
		{transport.Attr{State: transport.StateRTS, SQPSN: psn}, transport.AttrState | transport.AttrSQPSN},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.mask, now); err != nil {
			t.Fatal(err)
		}
	}
	return q, mrs, pd
}

// TestUDGoldenRxe: goroce's UD frame for the same send is rxe's, byte for
// byte, once the one field the kernel picks (the IPv4 ID, with the header
// checksum and ICRC it feeds) is taken from the capture; and every rxe
// datagram of the capture is received into the completion ibv_ud_pingpong
// saw.
func TestUDGoldenRxe(t *testing.T) {
	frames := udPingpongFrames(t)
	var p wire.Packet
	for i, fr := range frames {
		if err := wire.Parse(fr, &p); err != nil {
			t.Fatal(err)
		}
		src := p.DETH.SrcQP()
		out := newRing(4, frameCap)
		scq, rcq := &cq{}, &cq{}
		q, _, pd := newUDEngine(t, src, p.DETH.QKey(), p.BTH.PSN(), out, scq, rcq)
		payload := append([]byte(nil), p.Payload...)
		mr, err := pd.Register(payload, 0)
		if err != nil {
			t.Fatal(err)
		}
		ah := transport.NewAH(pd, transport.AV{DGID: p.DstIP(), SGID: p.SrcIP(), SGIDIndex: 1,
			HopLimit: p.IPv4.TTL(), TrafficClass: p.IPv4.TOS(), DMAC: p.Eth.Dst(), SMAC: p.Eth.Src()})
		wr := transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, AH: ah,
			RemoteQPN: p.BTH.DestQP(), RemoteQKey: p.DETH.QKey(),
			SGL: []transport.SGE{{Addr: mr.IOVA(), Length: uint32(len(payload)), LKey: mr.LKey()}}}
		if err := q.PostSend(&wr, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		got, ok := out.pop()
		if !ok {
			t.Fatal("no frame sent")
		}
		got = append([]byte(nil), got...)
		// rxe's IPv4 ID into ours; then checksum and ICRC follow from it.
		ip := got[wire.EthernetLen:]
		copy(ip[4:6], fr[wire.EthernetLen+4:wire.EthernetLen+6])
		wire.IPv4(ip).SetChecksum(wire.IPv4(ip).CalculateChecksum())
		wire.PutICRC(got[len(got)-4:], wire.ICRC(ip[:len(got)-wire.EthernetLen-4]))
		if !bytes.Equal(got, fr) {
			t.Fatalf("frame %d differs from rxe's:\n got % x\nwant % x", i, got, fr)
		}
		if wcs := scq.take(); len(wcs) != 1 || wcs[0].Status != transport.WCSuccess || wcs[0].ByteLen != 512 {
			t.Fatalf("send completions %v", wcs)
		}

		// The same frame received by a UD QP of the destination.
		dst, _, dpd := newUDEngine(t, p.BTH.DestQP(), p.DETH.QKey(), 0, newRing(2, frameCap), &cq{}, rcq)
		rbuf := make([]byte, 40+512)
		rmr, err := dpd.Register(rbuf, memreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.PostRecv(&transport.RecvWR{WRID: 9, SGL: []transport.SGE{{Addr: rmr.IOVA(), Length: 40 + 512, LKey: rmr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		dst.Receive(&p, time.Unix(0, 0))
		wcs := rcq.take()
		if len(wcs) != 1 || wcs[0].Status != transport.WCSuccess || wcs[0].Opcode != transport.WCRecv ||
			wcs[0].ByteLen != 552 || wcs[0].SrcQP != src || wcs[0].Flags&transport.WCGRH == 0 || wcs[0].WRID != 9 {
			t.Fatalf("frame %d: receive completions %v", i, wcs)
		}
		want := append(make([]byte, 20), fr[wire.EthernetLen:wire.EthernetLen+20]...)
		if !bytes.Equal(rbuf[:40], want) || !bytes.Equal(rbuf[40:], p.Payload) {
			t.Fatalf("frame %d: receive buffer GRH % x", i, rbuf[:40])
		}
	}
}

// TestUDGoldenFields pins what the capture shows of rxe's UD sends: AckReq
// set, P_Key 0xFFFF, the UD source port of the QPN, PSNs one apart, TTL 64
// (the route's, not ibv_ud_pingpong's hop limit 1).
func TestUDGoldenFields(t *testing.T) {
	frames := udPingpongFrames(t)
	var p wire.Packet
	last := map[netip.Addr]wire.PSN{}
	for _, fr := range frames {
		if err := wire.Parse(fr, &p); err != nil {
			t.Fatal(err)
		}
		if p.BTH.AckReq() || p.BTH.PKey() != 0xFFFF || p.UDP.SrcPort() != wire.UDSourcePort(p.DETH.SrcQP()) ||
			p.IPv4.TTL() != 64 || p.DETH.QKey() != 0x11111111 || binary.BigEndian.Uint16(fr[wire.EthernetLen+6:]) != 0x4000 {
			t.Fatalf("rxe frame: ackreq %v pkey %#x sport %d ttl %d qkey %#x", p.BTH.AckReq(), p.BTH.PKey(), p.UDP.SrcPort(), p.IPv4.TTL(), p.DETH.QKey())
		}
		if prev, ok := last[p.SrcIP()]; ok && p.BTH.PSN() != prev.Add(1) {
			t.Fatalf("PSN %#x after %#x", p.BTH.PSN(), prev)
		}
		last[p.SrcIP()] = p.BTH.PSN()
	}
}

// TestUDEngineAllocs: a UD send and a UD receive allocate nothing.
func TestUDEngineAllocs(t *testing.T) {
	frames := udPingpongFrames(t)
	var p wire.Packet
	if err := wire.Parse(frames[0], &p); err != nil {
		t.Fatal(err)
	}
	out := newRing(4, frameCap)
	scq, rcq := &cq{wcs: make([]transport.WC, 0, 4096)}, &cq{wcs: make([]transport.WC, 0, 4096)}
	q, _, pd := newUDEngine(t, 0x13, 0x11111111, 0, out, scq, rcq)
	buf := make([]byte, 4096)
	mr, _ := pd.Register(buf, memreg.LocalWrite)
	ah := transport.NewAH(pd, transport.AV{DGID: p.DstIP(), SGID: p.SrcIP(), HopLimit: 64})
	wr := transport.SendWR{Opcode: transport.WRSend, AH: ah, RemoteQPN: 0x13, RemoteQKey: 0x11111111,
		SGL: []transport.SGE{{Addr: mr.IOVA(), Length: 512, LKey: mr.LKey()}}}
	rwr := transport.RecvWR{SGL: []transport.SGE{{Addr: mr.IOVA() + 1024, Length: 552, LKey: mr.LKey()}}}
	now := time.Unix(0, 0)
	n := testing.AllocsPerRun(100, func() {
		if err := q.PostSend(&wr, now); err != nil {
			t.Fatal(err)
		}
		out.pop()
		if err := q.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
		q.Receive(&p, now)
	})
	if n != 0 {
		t.Fatalf("%v allocations per UD send + receive", n)
	}
}

// FuzzUDReceive feeds arbitrary frames (seeded with rxe's UD datagrams) to
// a UD QP whose Q_Key matches them: it must never panic, never write
// outside the receive buffer, and complete a receive only with GRH area +
// payload bytes that fit.
func FuzzUDReceive(f *testing.F) {
	f.Add(udPingpongFrames(f)[0], uint16(600))
	f.Add(udPingpongFrames(f)[1], uint16(40))
	f.Fuzz(func(t *testing.T, frame []byte, bufLen uint16) {
		var p wire.Packet
		if wire.Parse(frame, &p) != nil || p.DETH == nil {
			return
		}
		const guard = 64
		rcq := &cq{}
		q, _, pd := newUDEngine(t, max(p.BTH.DestQP(), 2), p.DETH.QKey(), 0, newRing(2, frameCap), &cq{}, rcq)
		n := int(bufLen % 2048)
		mem := make([]byte, guard+n+guard)
		for i := range mem {
			mem[i] = 0xA5
		}
		mr, err := pd.Register(mem, memreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{{Addr: mr.IOVA() + guard, Length: uint32(n), LKey: mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		q.Receive(&p, time.Unix(0, 0))
		for i := range guard {
			if mem[i] != 0xA5 || mem[len(mem)-1-i] != 0xA5 {
				t.Fatal("write outside the receive buffer")
			}
		}
		for _, wc := range rcq.take() {
			if wc.Status == transport.WCSuccess && (wc.ByteLen != uint32(40+len(p.Payload)) || int(wc.ByteLen) > n) {
				t.Fatalf("completion %v for a %d-byte payload into %d bytes", wc, len(p.Payload), n)
			}
		}
	})
}
