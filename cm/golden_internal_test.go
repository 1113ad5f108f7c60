package cm

import (
	"context"
	"encoding/binary"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/mad"
)

// kernelMADs returns the CM messages of a capture of two rxe VMs (UD
// SEND_ONLY to QP1 on UDP 4791, IPv4).
func kernelMADs(t *testing.T, path string) map[string]mad.Message {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]mad.Message{}
	for _, r := range recs {
		b := r.Data
		if len(b) < 14+20+8+12+8+mad.MADLen || binary.BigEndian.Uint16(b[12:]) != 0x0800 {
			continue
		}
		l4 := b[14+int(b[14]&0xF)*4:]
		if b[14+9] != 17 || binary.BigEndian.Uint16(l4[2:]) != 4791 || l4[8] != 0x64 ||
			binary.BigEndian.Uint32(l4[12:])&0xFFFFFF != 1 {
			continue
		}
		if _, m, err := mad.Parse(l4[8+12+8:]); err == nil {
			if _, seen := out[m.Name()]; !seen {
				out[m.Name()] = m
			}
		}
	}
	return out
}

// Our REQ and REP carry the same values as the kernel's in rping's capture
// (testdata/rxe/rping.pcap: rping -c against rping -s, both rxe, Linux
// 6.1) for every field that is not an identifier, a PSN, an address or
// private data: the timeouts, retries, MTU, LIDs, hop limit, transport,
// responder resources and initiator depth, target ACK delay.
func TestREQREPMatchKernel(t *testing.T) {
	k := kernelMADs(t, "../testdata/rxe/rping.pcap")
	kreq, ok1 := k["REQ"].(*mad.REQ)
	krep, ok2 := k["REP"].(*mad.REP)
	if !ok1 || !ok2 {
		t.Fatalf("rping.pcap: REQ %v REP %v", k["REQ"], k["REP"])
	}
	var mu sync.Mutex
	var req *mad.REQ
	var rep *mad.REP
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			switch m := m.(type) {
			case *mad.REQ:
				req = m
			case *mad.REP:
				rep = m
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{}) // rping's conn param: 1/1, retry 7, RNR 7
		e.client.Close()
		e.server.Close()
	})
	mask := func(m mad.REQ) mad.REQ {
		m.LocalCommID, m.VendorID, m.LocalCAGUID, m.LocalQPN, m.StartingPSN = 0, 0, 0, 0, 0
		m.Primary.LocalGID, m.Primary.RemoteGID = [16]byte{}, [16]byte{}
		m.Primary.FlowLabel = 0 // from the source port, checked below
		m.ServiceID &^= 0xFFFF  // the port
		m.PrivateData = [mad.REQPrivateDataLen]byte{}
		return m
	}
	if got, want := mask(*req), mask(*kreq); got != want {
		t.Errorf("REQ differs from the kernel's:\n got %+v\nwant %+v", got, want)
	}
	maskREP := func(m mad.REP) mad.REP {
		m.LocalCommID, m.RemoteCommID, m.VendorID, m.LocalCAGUID, m.LocalQPN, m.StartingPSN = 0, 0, 0, 0, 0, 0
		m.PrivateData = [mad.REPPrivateDataLen]byte{}
		return m
	}
	if got, want := maskREP(*rep), maskREP(*krep); got != want {
		t.Errorf("REP differs from the kernel's:\n got %+v\nwant %+v", got, want)
	}
	h, err := mad.ParseCMAHeader(req.PrivateData[:])
	kh, _ := mad.ParseCMAHeader(kreq.PrivateData[:])
	if err != nil || h.Version != kh.Version || h.IPVersion != kh.IPVersion {
		t.Errorf("cma_hdr %+v, the kernel's %+v (%v)", h, kh, err)
	}
	// The flow label is a hash of the ports (cma_get_roce_udp_flow_label).
	if fl := roceFlowLabel(kh.SrcPort, 7174); fl != kreq.Primary.FlowLabel {
		t.Errorf("kernel flow label %d, the ports' hash %d", kreq.Primary.FlowLabel, fl)
	}
	if fl := roceFlowLabel(h.SrcPort, 7174); fl != req.Primary.FlowLabel {
		t.Errorf("our flow label %d, the ports' hash %d", req.Primary.FlowLabel, fl)
	}
}
