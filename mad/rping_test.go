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
