package mad_test

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// cmMADs returns the payloads of the UD SENDs to QP1 in a capture.
func cmMADs(t testing.TB, name string) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "rxe", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, r := range recs {
		var p wire.Packet
		if wire.Parse(r.Data, &p) != nil || p.BTH == nil || p.DETH == nil {
			continue
		}
		if p.Opcode() != wire.UDSendOnly || p.BTH.DestQP() != mad.GSIQPN {
			continue
		}
		out = append(out, bytes.Clone(p.Payload))
	}
	return out
}

// TestRpingCapture parses every CM MAD that rxe sent during rping, checks
// the fields against what rdma_cm is known to send, and marshals each
// back to the same 256 bytes.
func TestRpingCapture(t *testing.T) {
	mads := cmMADs(t, "rping.pcap")
	var names []string
	var req *mad.REQ
	var rep *mad.REP
	var reqTID uint64
	for i, b := range mads {
		if len(b) != mad.MADLen {
			t.Fatalf("MAD %d: %d bytes, want %d", i, len(b), mad.MADLen)
		}
		h, m, err := mad.Parse(b)
		if err != nil {
			t.Fatalf("MAD %d: %v", i, err)
		}
		if h.BaseVersion != 1 || h.MgmtClass != mad.ClassCM || h.ClassVersion != mad.CMClassVersion || h.Method != mad.MethodSend {
			t.Errorf("MAD %d: header %+v", i, h)
		}
		names = append(names, m.Name())
		out := make([]byte, mad.MADLen)
		if err := mad.Marshal(h, m, out); err != nil {
			t.Fatalf("MAD %d (%s): Marshal: %v", i, m.Name(), err)
		}
		if !bytes.Equal(out, b) {
			for j := range out {
				if out[j] != b[j] {
					t.Errorf("MAD %d (%s): byte %d (payload offset %d) = %#02x, captured %#02x", i, m.Name(), j, j-mad.HeaderLen, out[j], b[j])
					break
				}
			}
		}
		switch m := m.(type) {
		case *mad.REQ:
			req, reqTID = m, h.TID
		case *mad.REP:
			rep = m
			if h.TID != reqTID {
				t.Errorf("REP TID %#x, REQ's %#x", h.TID, reqTID)
			}
		case *mad.RTU:
			if h.TID != reqTID {
				t.Errorf("RTU TID %#x, REQ's %#x", h.TID, reqTID)
			}
		}
	}
	want := []string{"REQ", "REP", "RTU", "DREQ", "DREP"}
	if !equalStrings(names, want) {
		t.Fatalf("messages %v, want %v", names, want)
	}
	if req.ServiceID != 0x0000000001061c06 {
		t.Errorf("REQ service ID %#x", req.ServiceID)
	}
	if ps, port, ok := mad.ParseServiceID(req.ServiceID); !ok || ps != mad.PortSpaceTCP || port != 7174 {
		t.Errorf("ParseServiceID = %v %d %v", ps, port, ok)
	}
	if req.TransportType != mad.TransportRC || req.ResponderResources != 1 || req.InitiatorDepth != 1 ||
		req.RetryCount != 7 || req.RNRRetryCount != 7 || req.PKey != 0xFFFF || req.MaxCMRetries != 15 ||
		req.LocalCMResponseTimeout != 20 || req.RemoteCMResponseTimeout != 20 || req.PathMTU != 3 {
		t.Errorf("REQ %+v", req)
	}
	if req.StartingPSN != 4791119 {
		t.Errorf("REQ StartingPSN %d: the passive side sends from it (its first READ REQUEST has PSN 4791119)", req.StartingPSN)
	}
	if rep.StartingPSN != 13531771 {
		t.Errorf("REP StartingPSN %d: the active side sends from it (its first SEND has PSN 13531771)", rep.StartingPSN)
	}
	if rep.RemoteCommID != req.LocalCommID {
		t.Errorf("REP RemoteCommID %#x, REQ LocalCommID %#x", rep.RemoteCommID, req.LocalCommID)
	}
	if got, want := netip.AddrFrom16(req.Primary.LocalGID), netip.MustParseAddr("::ffff:198.18.0.12"); got != want {
		t.Errorf("REQ primary local GID %v, want %v", got, want)
	}
	cma, err := req.CMAHeader()
	if err != nil {
		t.Fatal(err)
	}
	if cma.IPVersion != 4 || cma.Src != netip.MustParseAddr("198.18.0.12") || cma.Dst != netip.MustParseAddr("198.18.0.11") || cma.SrcPort == 0 {
		t.Errorf("CMA header %+v", cma)
	}
	var back [mad.CMAHeaderLen]byte
	if err := cma.Marshal(back[:]); err != nil || !bytes.Equal(back[:], req.PrivateData[:mad.CMAHeaderLen]) {
		t.Errorf("CMA header re-marshalled %x (%v), captured %x", back, err, req.PrivateData[:mad.CMAHeaderLen])
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCMCaptures: every CM MAD the kernel sent in the rdma_cm captures
// (rping, rping to a port nobody listens on, udaddy over SIDR, ucmatose
// with four connections, ib_send_bw -R) parses and marshals back to the
// same 256 bytes, and the messages are those the tools exchange.
func TestCMCaptures(t *testing.T) {
	for _, c := range []struct {
		file string
		msgs map[string]int
	}{
		{"rping.pcap", map[string]int{"REQ": 1, "REP": 1, "RTU": 1, "DREQ": 1, "DREP": 1}},
		{"rping_rej.pcap", map[string]int{"REQ": 1, "REJ": 1}},
		{"udaddy.pcap", map[string]int{"SIDR_REQ": 1, "SIDR_REP": 1}},
		{"ucmatose.pcap", map[string]int{"REQ": 4, "REP": 4, "RTU": 4, "DREQ": 4, "DREP": 4}},
		{"send_bw_rdma_cm.pcap", map[string]int{"REQ": 2, "REP": 2, "RTU": 2, "DREQ": 2, "DREP": 2}},
	} {
		t.Run(c.file, func(t *testing.T) {
			got := map[string]int{}
			for i, b := range cmMADs(t, c.file) {
				h, m, err := mad.Parse(b)
				if err != nil {
					t.Fatalf("MAD %d: %v", i, err)
				}
				got[m.Name()]++
				out := make([]byte, mad.MADLen)
				if err := mad.Marshal(h, m, out); err != nil {
					t.Fatalf("MAD %d (%s): %v", i, m.Name(), err)
				}
				if !bytes.Equal(out, b) {
					t.Fatalf("MAD %d (%s): re-marshalled bytes differ\n got % x\nwant % x", i, m.Name(), out, b)
				}
				switch m := m.(type) {
				case *mad.REJ:
					// Nothing listens on port 7175: the kernel's cm_req_handler
					// rejects with IB_CM_REJ_INVALID_SERVICE_ID, and LocalCommID
					// 0 (it made no cm_id).
					if m.Reason != mad.RejInvalidServiceID || m.MsgRejected != mad.MsgTypeREQ || m.LocalCommID != 0 {
						t.Errorf("REJ %+v", m)
					}
				case *mad.SIDRREQ:
					cma, err := m.CMAHeader()
					if ps, port, _ := mad.ParseServiceID(m.ServiceID); err != nil || ps != mad.PortSpaceUDP || port != 7174 ||
						cma.Dst != netip.MustParseAddr("198.18.0.11") {
						t.Errorf("SIDR_REQ %+v %+v %v", m, cma, err)
					}
				case *mad.SIDRREP:
					// udaddy's UD QP and its Q_Key (RDMA_UDP_QKEY 0x01234567).
					if m.Status != mad.SIDRSuccess || m.QPN == 0 || m.QKey != 0x01234567 {
						t.Errorf("SIDR_REP %+v", m)
					}
				}
			}
			if len(got) != len(c.msgs) {
				t.Fatalf("messages %v, want %v", got, c.msgs)
			}
			for k, v := range c.msgs {
				if got[k] != v {
					t.Fatalf("messages %v, want %v", got, c.msgs)
				}
			}
		})
	}
}
