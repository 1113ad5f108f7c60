package qp_test

// Wire conformance against real rxe captures (testdata/rxe, see its
// README): for the same operation, goroce's frames carry the same header
// values as rxe's, field by field. Fields that are per-host or per-run
// (MACs, IPs, IPv4 ID and checksum, QPNs, PSNs, VAs, R_Keys, payload
// bytes) are checked for consistency instead of equality.

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// rxeMessage is the first message of a capture: its request packets and
// the response that acknowledges (or answers) its last one.
type rxeMessage struct {
	reqs  []capPkt
	resps []capPkt
}

func loadRxeMessage(t *testing.T, file string) rxeMessage {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "rxe", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var all []capPkt
	for _, r := range recs {
		c := capPkt{raw: append([]byte(nil), r.Data...)}
		if wire.Parse(c.raw, &c.p) != nil {
			continue // the tools' TCP exchange
		}
		all = append(all, c)
	}
	if len(all) == 0 {
		t.Fatalf("%s: no RoCE packets", file)
	}
	src := all[0].p.SrcIP()
	var m rxeMessage
	i := 0
	for ; i < len(all); i++ {
		p := &all[i].p
		if p.SrcIP() != src || !p.Opcode().Info().Request {
			continue
		}
		m.reqs = append(m.reqs, all[i])
		if pos := p.Opcode().Info().Pos; pos == wire.PosLast || pos == wire.PosOnly {
			break
		}
	}
	first, last := m.reqs[0].p.BTH.PSN(), m.reqs[len(m.reqs)-1].p.BTH.PSN()
	if m.reqs[0].p.Opcode() == wire.RCRDMAReadRequest {
		last = first.Add(uint32(npkts(int(m.reqs[0].p.RETH.DMALen()), 1024)) - 1)
	}
	for _, c := range all {
		p := &c.p
		if p.SrcIP() == src || p.Opcode().Info().Request {
			continue
		}
		if psn := p.BTH.PSN(); !psn.Before(first) && !psn.After(last) {
			m.resps = append(m.resps, c)
			if psn == last {
				break
			}
		}
	}
	if len(m.resps) == 0 {
		t.Fatalf("%s: no response to the first message", file)
	}
	return m
}

// compareFrame checks ours against rxe's, field by field. qpnsRxe and
// qpnsOurs are (sender, receiver) QPNs of each frame.
func compareFrame(t *testing.T, what string, rxe, ours *capPkt, rxeSrc, rxeDst, ourSrc, ourDst uint32) {
	t.Helper()
	r, o := &rxe.p, &ours.p
	type field struct {
		name      string
		rxe, ours any
		mustEqual bool
	}
	fs := []field{
		{"frame length", len(rxe.raw), len(ours.raw), true},
		{"EtherType", r.Eth.EtherType(), o.Eth.EtherType(), true},
		{"IP version", r.IPv4.Version(), o.IPv4.Version(), true},
		{"IP header length", r.IPv4.HeaderLen(), o.IPv4.HeaderLen(), true},
		{"IP TOS", r.IPv4.TOS(), o.IPv4.TOS(), true},
		{"IP total length", r.IPv4.TotalLen(), o.IPv4.TotalLen(), true},
		{"IP flags (DF)", r.IPv4.Flags(), o.IPv4.Flags(), true},
		{"IP TTL", r.IPv4.TTL(), o.IPv4.TTL(), true},
		{"IP protocol", r.IPv4.Protocol(), o.IPv4.Protocol(), true},
		{"IP checksum valid", r.IPv4.ChecksumValid(), o.IPv4.ChecksumValid(), true},
		{"UDP dst port", r.UDP.DstPort(), o.UDP.DstPort(), true},
		{"UDP length", r.UDP.Length(), o.UDP.Length(), true},
		{"UDP checksum", r.UDP.Checksum(), o.UDP.Checksum(), true},
		{"UDP src port = rdma_get_udp_sport", r.UDP.SrcPort() == wire.RCSourcePort(rxeSrc, rxeDst),
			o.UDP.SrcPort() == wire.RCSourcePort(ourSrc, ourDst), true},
		{"BTH opcode", r.Opcode(), o.Opcode(), true},
		{"BTH SE", r.BTH.SE(), o.BTH.SE(), true},
		{"BTH M", r.BTH.MigReq(), o.BTH.MigReq(), true},
		{"BTH PadCnt", r.BTH.PadCnt(), o.BTH.PadCnt(), true},
		{"BTH TVer", r.BTH.TVer(), o.BTH.TVer(), true},
		{"BTH P_Key", r.BTH.PKey(), o.BTH.PKey(), true},
		{"BTH FECN", r.BTH.FECN(), o.BTH.FECN(), true},
		{"BTH BECN", r.BTH.BECN(), o.BTH.BECN(), true},
		{"BTH resv6", r.BTH.Resv6(), o.BTH.Resv6(), true},
		{"BTH DestQP is the peer", r.BTH.DestQP() == rxeDst, o.BTH.DestQP() == ourDst, true},
		{"BTH AckReq", r.BTH.AckReq(), o.BTH.AckReq(), true},
		{"BTH resv7", r.BTH.Resv7(), o.BTH.Resv7(), true},
		{"payload length", len(r.Payload), len(o.Payload), true},
		{"ICRC valid", wire.VerifyICRC(r.L3), wire.VerifyICRC(o.L3), true},
		{"RETH present", r.RETH != nil, o.RETH != nil, true},
		{"AETH present", r.AETH != nil, o.AETH != nil, true},
		{"AtomicETH present", r.AtomicETH != nil, o.AtomicETH != nil, true},
		{"AtomicAckETH present", r.AtomicAckETH != nil, o.AtomicAckETH != nil, true},
		{"ImmDt present", r.ImmDt != nil, o.ImmDt != nil, true},
		{"IETH present", r.IETH != nil, o.IETH != nil, true},
	}
	if r.RETH != nil && o.RETH != nil {
		fs = append(fs, field{"RETH DMA length", r.RETH.DMALen(), o.RETH.DMALen(), true})
	}
	if r.AETH != nil && o.AETH != nil {
		fs = append(fs, field{"AETH syndrome", r.AETH.Syndrome(), o.AETH.Syndrome(), true},
			field{"AETH MSN", r.AETH.MSN(), o.AETH.MSN(), true})
	}
	if r.AtomicETH != nil && o.AtomicETH != nil {
		fs = append(fs, field{"AtomicETH swap/add", r.AtomicETH.SwapAdd(), o.AtomicETH.SwapAdd(), true},
			field{"AtomicETH compare", r.AtomicETH.Compare(), o.AtomicETH.Compare(), true})
	}
	if r.UDP.SrcPort() != wire.RCSourcePort(rxeSrc, rxeDst) {
		t.Errorf("%s: the capture's own source port %#x is not rdma_get_udp_sport(%#x, %#x)", what, r.UDP.SrcPort(), rxeSrc, rxeDst)
	}
	for _, f := range fs {
		if f.mustEqual && f.rxe != f.ours {
			t.Errorf("%s: %s: rxe %v, goroce %v", what, f.name, f.rxe, f.ours)
		}
	}
}

// TestWireMatchesRxe runs, for each capture, the operation of its first
// message through goroce (same size, same TTL/TOS defaults) and compares
// the request and response frames with rxe's.
func TestWireMatchesRxe(t *testing.T) {
	cases := []struct {
		file string
		run  func(x *xpair, m rxeMessage)
	}{
		{"write_bw_gbits_small.pcap", func(x *xpair, m rxeMessage) { x.doWrite(64) }},
		{"write_lat.pcap", func(x *xpair, m rxeMessage) { x.doWrite(2) }},
		{"read_bw_small.pcap", func(x *xpair, m rxeMessage) {
			x.post(x.a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
				SGL: []qp.SGE{x.a.sge(0, 64)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()})
			expectWC(x.t, x.a.scq, 1, transport.WCSuccess, transport.WCRDMARead)
		}},
		{"send_bw_small.pcap", func(x *xpair, m rxeMessage) { x.doSend(64) }},
		{"rc_pingpong.pcap", func(x *xpair, m rxeMessage) { x.doSend(4096) }},
		{"rc_pingpong_small.pcap", func(x *xpair, m rxeMessage) { x.doSend(512) }},
		{"atomic_fadd.pcap", func(x *xpair, m rxeMessage) {
			x.post(x.a, &qp.SendWR{WRID: 1, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
				SGL: []qp.SGE{x.a.sge(0, 8)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey(), CompareAdd: m.reqs[0].p.AtomicETH.SwapAdd()})
			expectWC(x.t, x.a.scq, 1, transport.WCSuccess, transport.WCFetchAdd)
		}},
		{"atomic_cas.pcap", func(x *xpair, m rxeMessage) {
			ae := m.reqs[0].p.AtomicETH
			x.post(x.a, &qp.SendWR{WRID: 1, Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled,
				SGL: []qp.SGE{x.a.sge(0, 8)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey(), CompareAdd: ae.Compare(), Swap: ae.SwapAdd()})
			expectWC(x.t, x.a.scq, 1, transport.WCSuccess, transport.WCCompSwap)
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				m := loadRxeMessage(t, c.file)
				x := newX(t, xopts{})
				x.next()
				c.run(x, m)
				x.settle()
				ps := x.next()
				reqs, resps := requests(ps, true), filter(ps, false)
				if len(reqs) != len(m.reqs) || len(resps) != len(m.resps) {
					t.Fatalf("goroce sent %d requests / %d responses, rxe %d / %d: %v", len(reqs), len(resps), len(m.reqs), len(m.resps), ps)
				}
				rxeReq, rxeResp := m.reqs[0].p.BTH.DestQP(), m.resps[0].p.BTH.DestQP()
				for i := range reqs {
					compareFrame(t, "request "+reqs[i].p.Opcode().String(), &m.reqs[i], &reqs[i], rxeResp, rxeReq, x.a.qp.QPN(), x.b.qp.QPN())
				}
				for i := range resps {
					compareFrame(t, "response "+resps[i].p.Opcode().String(), &m.resps[i], &resps[i], rxeReq, rxeResp, x.b.qp.QPN(), x.a.qp.QPN())
				}
				// ACK/response PSN rules: the ACK names the request's PSN; READ
				// responses run from the request's PSN.
				for i, r := range resps {
					want := reqs[len(reqs)-1].p.BTH.PSN()
					if reqs[0].p.Opcode() == wire.RCRDMAReadRequest {
						want = reqs[0].p.BTH.PSN().Add(uint32(i))
					}
					if r.p.BTH.PSN() != want {
						t.Errorf("response %d PSN %#x, want %#x", i, uint32(r.p.BTH.PSN()), uint32(want))
					}
				}
			})
		})
	}
}

func (x *xpair) doWrite(n int) {
	x.post(x.a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{x.a.sge(0, n)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()})
	expectWC(x.t, x.a.scq, 1, transport.WCSuccess, transport.WCRDMAWrite)
}

func (x *xpair) doSend(n int) {
	x.recv(x.b, 1, x.b.sge(0, n))
	x.post(x.a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{x.a.sge(0, n)}})
	expectWC(x.t, x.a.scq, 1, transport.WCSuccess, transport.WCSend)
	expectWC(x.t, x.b.rcq, 1, transport.WCSuccess, transport.WCRecv)
}

// TestWireHopLimitTOS: the AV's hop limit and traffic class are written
// as the IPv4 TTL and TOS of every frame, in both directions; Connect's
// default hop limit is 64, what rxe shows in every capture.
func TestWireHopLimitTOS(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{connA: qp.ConnectOptions{HopLimit: 5, TrafficClass: 0x68}})
		x.next()
		x.doWrite(8)
		x.settle()
		for _, p := range x.next() {
			wantTTL, wantTOS := uint8(64), uint8(0)
			if p.fromA {
				wantTTL, wantTOS = 5, 0x68
			}
			if p.p.IPv4.TTL() != wantTTL || p.p.IPv4.TOS() != wantTOS {
				t.Fatalf("%v: TTL %d TOS %#x, want %d %#x", p, p.p.IPv4.TTL(), p.p.IPv4.TOS(), wantTTL, wantTOS)
			}
		}
	})
}

// TestIPv6 runs SEND, WRITE, READ and an atomic between IPv6 GIDs and checks
// the IPv6 header rxe writes: version 6, traffic class from the AV, flow
// label 0 (ip6_flow_hdr(..., 0)), next header UDP, hop limit from the AV,
// payload length, UDP checksum 0, ICRC over the IPv6 pseudo-header.
func TestIPv6(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{v6: true, connA: qp.ConnectOptions{TrafficClass: 0x20, HopLimit: 9}})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		data := pattern(61, 2500)
		copy(a.buf, data)
		x.recv(b, 1, b.sge(0, 2500))
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, 2500)}})
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 2500)}, RemoteAddr: b.mr.IOVA() + 4000, RKey: b.mr.RKey()})
		x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(8000, 2500)}, RemoteAddr: b.mr.IOVA() + 4000, RKey: b.mr.RKey()})
		x.post(a, &qp.SendWR{WRID: 4, Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(16000, 8)}, RemoteAddr: b.mr.IOVA() + 12000, RKey: b.mr.RKey(),
			CompareAdd: uint64(canary) * 0x0101010101010101, Swap: 42})
		for i, op := range []transport.WCOpcode{transport.WCSend, transport.WCRDMAWrite, transport.WCRDMARead, transport.WCCompSwap} {
			expectWC(t, a.scq, uint64(i+1), transport.WCSuccess, op)
		}
		expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv)
		checkBuf(t, "responder", b.buf, region{0, data}, region{4000, data}, region{12000, le64(42)})
		checkBuf(t, "requester", a.buf, region{0, data}, region{8000, data}, region{16000, le64(uint64(canary) * 0x0101010101010101)})
		x.settle()
		ps := x.next()
		if len(ps) == 0 {
			t.Fatal("no frames")
		}
		for _, p := range ps {
			ip := p.p.IPv6
			if ip == nil || p.p.IPv4 != nil || p.p.Eth.EtherType() != 0x86DD {
				t.Fatalf("%v: not an IPv6 frame", p)
			}
			wantTC, wantHL := uint8(0), uint8(64)
			if p.fromA {
				wantTC, wantHL = 0x20, 9
			}
			if ip.Version() != 6 || ip.TrafficClass() != wantTC || ip.FlowLabel() != 0 || ip.NextHeader() != 17 ||
				ip.HopLimit() != wantHL || int(ip.PayloadLen()) != len(p.raw)-wire.EthernetLen-wire.IPv6Len {
				t.Fatalf("%v: IPv6 header tc=%#x fl=%#x nh=%d hl=%d plen=%d", p, ip.TrafficClass(), ip.FlowLabel(),
					ip.NextHeader(), ip.HopLimit(), ip.PayloadLen())
			}
			if p.p.UDP.Checksum() != 0 || p.p.UDP.DstPort() != wire.UDPPort {
				t.Fatalf("%v: UDP checksum %#x dst %d", p, p.p.UDP.Checksum(), p.p.UDP.DstPort())
			}
		}
	})
}

// TestWireIPIDZero: every frame, from every QP and in both directions
// (requests and ACKs), carries IPv4 ID 0 with DF: an atomic datagram
// (RFC 6864), with the one ID a goroce UDP-backend receiver, which never
// sees the IP header, rebuilds for the ICRC (docs/backends.md).
func TestWireIPIDZero(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		ctx := context.Background()
		mk := func(e *xend) (*qp.QP, *qp.CQ) {
			cq, err := e.dev.CreateCQ(16)
			if err != nil {
				t.Fatal(err)
			}
			q, err := e.pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq,
				Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			return q, cq
		}
		a2, a2cq := mk(x.a)
		b2, _ := mk(x.b)
		if err := a2.Connect(ctx, qp.Remote{QPN: b2.QPN(), PSN: 7, GID: x.b.ip}, qp.ConnectOptions{SQPSN: 9, Timeout: 18}); err != nil {
			t.Fatal(err)
		}
		if err := b2.Connect(ctx, qp.Remote{QPN: a2.QPN(), PSN: 9, GID: x.a.ip}, qp.ConnectOptions{SQPSN: 7, Timeout: 18}); err != nil {
			t.Fatal(err)
		}
		x.next()
		for i := range 4 {
			q, cq := x.a.qp, x.a.scq
			if i%2 == 1 {
				q, cq = a2, a2cq
			}
			if err := q.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
				SGL: []qp.SGE{x.a.sge(0, 8)}, RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			expectWC(t, cq, uint64(i), qp.WCSuccess, transport.WCRDMAWrite)
			x.settle()
		}
		var fromA, fromB int
		for _, p := range x.next() {
			if p.fromA {
				fromA++
			} else {
				fromB++
			}
			if id, flags := p.p.IPv4.ID(), p.p.IPv4[6]; id != 0 || flags&0x40 == 0 {
				t.Fatalf("%v: IPv4 ID %#x flags %#x, want ID 0 with DF", p, id, flags)
			}
		}
		if fromA != 4 || fromB != 4 {
			t.Fatalf("%d frames from A, %d from B, want 4 each", fromA, fromB)
		}
	})
}
