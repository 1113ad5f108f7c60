package dump

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// TestGoldenRping: rping over rdma_cm (testdata/rxe/rping.pcap) shows its
// five CM MADs decoded, and the summary one connection set up and torn
// down, in text and in JSON.
func TestGoldenRping(t *testing.T) {
	out, s := dumpFileUTC(t, rxeDir+"rping.pcap", Options{})
	goldenCheck(t, "rping", out)
	jout, js := dumpFileUTC(t, rxeDir+"rping.pcap", Options{JSON: true})
	goldenCheck(t, "rping_json", jout)

	for _, want := range []string{
		"CM_REQ local_comm_id=0x555c7d1a remote_comm_id=0x0 service_id=0x0000000001061c06 (TCP port 7174) qpn=0x1f starting_psn=4791119 resp_res=1 init_depth=1 mtu=1024 retry=7 rnr_retry=7 cma 198.18.0.12:44360 -> 198.18.0.11:7174\n",
		"CM_REP local_comm_id=0xe959025c remote_comm_id=0x555c7d1a qpn=0x1f starting_psn=13531771 resp_res=1 init_depth=1\n",
		"CM_RTU local_comm_id=0x555c7d1a remote_comm_id=0xe959025c\n",
		"CM_DREQ local_comm_id=0x555c7d1a remote_comm_id=0xe959025c remote_qpn=0x1f\n",
		"CM_DREP local_comm_id=0xe959025c remote_comm_id=0x555c7d1a\n",
		"connections (IB CM):\n  198.18.0.12:44360 > 198.18.0.11:7174 service 0x0000000001061c06 (TCP port 7174): closed\n",
		"setup REQ> REP< RTU>  teardown DREQ> DREP<  (packets 1 2 3 64 65)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	for _, sum := range []Summary{s, js} {
		if len(sum.Connections) != 1 {
			t.Fatalf("connections %+v", sum.Connections)
		}
		c := sum.Connections[0]
		// The REQ's starting PSN is where the passive side's requests
		// start (its first READ REQUEST), the REP's the active side's.
		if c.State != "closed" || c.ActivePSN != 4791119 || c.PassivePSN == nil || *c.PassivePSN != 13531771 ||
			c.Port == nil || *c.Port != 7174 || c.PortSpace != "TCP" || c.ActiveCommID != 0x555c7d1a || c.PassiveCommID != 0xe959025c ||
			strings.Join(c.Messages, " ") != "REQ> REP< RTU> DREQ> DREP<" {
			t.Errorf("connection %+v", c)
		}
		var passiveReqs, activeReqs uint32
		for _, f := range sum.Flows {
			if f.DQPN == 0x1f && f.Requests != nil {
				if f.Src == "198.18.0.11" {
					passiveReqs = f.Requests.FirstPSN
				} else {
					activeReqs = f.Requests.FirstPSN
				}
			}
		}
		if passiveReqs != c.ActivePSN || activeReqs != *c.PassivePSN {
			t.Errorf("first request PSNs %d (passive) %d (active), CM said %d %d", passiveReqs, activeReqs, c.ActivePSN, *c.PassivePSN)
		}
	}
	rep, err := dumpjson.Read(strings.NewReader(jout))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, p := range rep.Packets {
		if p.CM != nil {
			msgs = append(msgs, p.CM.Msg)
		}
	}
	if strings.Join(msgs, " ") != "REQ REP RTU DREQ DREP" {
		t.Fatalf("cm messages %v", msgs)
	}
	req := rep.Packets[0].CM
	if req.ServiceID == nil || *req.ServiceID != 0x1061c06 || req.QPN == nil || *req.QPN != 0x1f || req.StartingPSN == nil ||
		*req.StartingPSN != 4791119 || req.CMASrc != "198.18.0.12:44360" || req.CMADst != "198.18.0.11:7174" {
		t.Errorf("REQ %+v", req)
	}
}

// madFrame builds the Ethernet frame of a MAD from src to dst on QP1.
func madFrame(t *testing.T, src, dst string, hdr mad.Header, m mad.Message) []byte {
	t.Helper()
	payload := make([]byte, mad.MADLen)
	if m != nil {
		if err := mad.Marshal(hdr, m, payload); err != nil {
			t.Fatal(err)
		}
	} else if err := hdr.Marshal(payload); err != nil {
		t.Fatal(err)
	}
	f := wire.Frame{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr(src), DstIP: netip.MustParseAddr(dst), SrcPort: 49152, HopLimit: 64,
		BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: 1},
		DETH: wire.DETHFields{QKey: mad.GSIQKey, SrcQP: 1},
	}
	b := make([]byte, 512)
	n, err := wire.BuildPayload(b, &f, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestCMRejectedAndOthers: a REJ of a REQ (local comm ID 0) joins the
// REQ's connection and shows its reason; MRA, SIDR and non-CM MADs decode.
func TestCMRejectedAndOthers(t *testing.T) {
	const a, p = "198.18.0.1", "198.18.0.2"
	req := &mad.REQ{LocalCommID: 0x1111, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 9999), LocalQPN: 0x12, StartingPSN: 7, PKey: 0xffff}
	cma := mad.CMAHeader{IPVersion: 4, SrcPort: 40000, Src: netip.MustParseAddr(a), Dst: netip.MustParseAddr(p)}
	if err := cma.Marshal(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	rej := &mad.REJ{RemoteCommID: 0x1111, MsgRejected: mad.MsgTypeREQ, Reason: mad.RejInvalidServiceID}
	mra := &mad.MRA{LocalCommID: 0x2222, RemoteCommID: 0x1111, MsgMRAed: mad.MsgTypeREQ, ServiceTimeout: 20}
	sreq := &mad.SIDRREQ{RequestID: 0x33, PKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 5000)}
	srep := &mad.SIDRREP{RequestID: 0x33, Status: mad.SIDRNoQP, ServiceID: sreq.ServiceID}
	sa := mad.Header{BaseVersion: 1, MgmtClass: 0x03, ClassVersion: 2, Method: mad.MethodGet, TID: 5, AttrID: 0x35}
	lap := mad.CMHeader(6, mad.AttrLAP)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var recs []Record
	for i, f := range [][]byte{
		madFrame(t, a, p, mad.CMHeader(1, 0), req),
		madFrame(t, p, a, mad.CMHeader(1, 0), mra),
		madFrame(t, p, a, mad.CMHeader(1, 0), rej),
		madFrame(t, a, p, mad.CMHeader(2, 0), sreq),
		madFrame(t, p, a, mad.CMHeader(2, 0), srep),
		madFrame(t, a, p, sa, nil),
		madFrame(t, a, p, lap, nil),
	} {
		recs = append(recs, Record{Time: t0.Add(time.Duration(i) * time.Millisecond), Data: f, LinkType: layers.LinkTypeEthernet})
	}
	out, s := run(t, recs, Options{})
	for _, want := range []string{
		"CM_REQ local_comm_id=0x1111 remote_comm_id=0x0 service_id=0x000000000106270f (TCP port 9999) qpn=0x12 starting_psn=7 resp_res=0 init_depth=0 retry=0 rnr_retry=0 cma 198.18.0.1:40000 -> 198.18.0.2:9999\n",
		"CM_MRA local_comm_id=0x2222 remote_comm_id=0x1111 mraed=REQ service_timeout=20 (4.294967296s)\n",
		"CM_REJ local_comm_id=0x0 remote_comm_id=0x1111 rejected=REQ reason=8 (invalid service ID)\n",
		"CM_SIDR_REQ request_id=0x33 service_id=0x0000000001111388 (UDP port 5000)\n",
		"CM_SIDR_REP request_id=0x33 status=3 (no QP) qpn=0x0 qkey=0x0 service_id=0x0000000001111388 (UDP port 5000)\n",
		"MAD class=0x03 method=0x01 attr=0x0035 tid=0x5: mad: not a CM MAD (class 0x03)\n",
		"MAD class=0x07 method=0x03 attr=0x0019 tid=0x6 (LAP): mad: unknown CM attribute 0x0019\n",
		"198.18.0.1:40000 > 198.18.0.2:9999 service 0x000000000106270f (TCP port 9999): rejected (invalid service ID)\n",
		"setup REQ> MRA< REJ<  (packets 1 2 3)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if len(s.Connections) != 2 || s.Connections[0].State != "rejected" || s.Connections[0].Reason != "invalid service ID" {
		t.Fatalf("connections %+v", s.Connections)
	}
	if c := s.Connections[1]; c.State != "rejected" || c.Reason != "no QP" || c.ActiveCommID != 0x33 || strings.Join(c.Messages, " ") != "SIDR_REQ> SIDR_REP<" {
		t.Errorf("SIDR %+v", c)
	}

	var buf bytes.Buffer
	d := New(&buf, Options{JSON: true, Location: time.UTC})
	for _, r := range recs {
		d.Packet(r)
	}
	if _, err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	rep, err := dumpjson.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	j := rep.Packets[2].CM
	if j.Msg != "REJ" || j.Reason != "invalid service ID" || j.ReasonCode == nil || *j.ReasonCode != 8 || j.Of != "REQ" || j.RemoteCommID != 0x1111 {
		t.Errorf("REJ json %+v", j)
	}
	if j := rep.Packets[4].CM; j.Msg != "SIDR_REP" || j.Status != "no QP" || j.RequestID == nil || *j.RequestID != 0x33 {
		t.Errorf("SIDR_REP json %+v", j)
	}
	if j := rep.Packets[5].CM; j.Msg != "MAD" || j.MgmtClass == nil || *j.MgmtClass != 3 || j.Error == "" {
		t.Errorf("SA MAD json %+v", j)
	}
}

// TestCMNotAMAD: UD SENDs that are not to QP1, or too short for a MAD, are
// not decoded as CM.
func TestCMNotAMAD(t *testing.T) {
	for _, c := range []struct {
		dqp uint32
		n   int
	}{{1, 255}, {2, 256}} {
		f := wire.Frame{
			SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"), SrcPort: 49152,
			BTH:  wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: c.dqp},
			DETH: wire.DETHFields{QKey: mad.GSIQKey, SrcQP: 1},
		}
		payload := make([]byte, c.n)
		h := mad.CMHeader(1, mad.AttrRTU)
		_ = h.Marshal(payload)
		b := make([]byte, 512)
		n, err := wire.BuildPayload(b, &f, payload)
		if err != nil {
			t.Fatal(err)
		}
		out, s := run(t, []Record{{Data: b[:n], LinkType: layers.LinkTypeEthernet}}, Options{})
		if strings.Contains(out, "CM_") || strings.Contains(out, "MAD") || len(s.Connections) != 0 {
			t.Errorf("dqp %d, %d bytes: %s", c.dqp, c.n, out)
		}
	}
}

// TestCMRealRejectAndSIDR: the kernel's REJ of a REQ to a port nobody
// listens on, and udaddy's SIDR exchange, from real rxe
// (testdata/rxe/rping_rej.pcap, udaddy.pcap).
func TestCMRealRejectAndSIDR(t *testing.T) {
	out, s := dumpFileUTC(t, rxeDir+"rping_rej.pcap", Options{})
	for _, want := range []string{
		"CM_REJ local_comm_id=0x0 remote_comm_id=0x55251f53 rejected=REQ reason=8 (invalid service ID)\n",
		"198.18.0.12:39103 > 198.18.0.11:7175 service 0x0000000001061c07 (TCP port 7175): rejected (invalid service ID)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rping_rej: output lacks %q:\n%s", want, out)
		}
	}
	if len(s.Connections) != 1 || s.Connections[0].State != "rejected" {
		t.Errorf("rping_rej connections %+v", s.Connections)
	}
	out, s = dumpFileUTC(t, rxeDir+"udaddy.pcap", Options{JSON: true})
	rep, err := dumpjson.Read(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var sidr []*dumpjson.CM
	for _, p := range rep.Packets {
		if p.CM != nil {
			sidr = append(sidr, p.CM)
		}
	}
	if len(sidr) != 2 || sidr[0].Msg != "SIDR_REQ" || sidr[1].Msg != "SIDR_REP" || sidr[1].Status != "success" ||
		sidr[1].QKey == nil || *sidr[1].QKey != 0x01234567 || *sidr[0].RequestID != *sidr[1].RequestID ||
		sidr[0].PortSpace != "UDP" || sidr[0].CMADst != "198.18.0.11:7174" {
		t.Fatalf("SIDR messages %+v", sidr)
	}
	if len(s.Connections) != 1 || s.Connections[0].State != "resolved" || s.Connections[0].PassiveQPN == nil ||
		*s.Connections[0].PassiveQPN != *sidr[1].QPN {
		t.Errorf("udaddy connections %+v", s.Connections)
	}
}
