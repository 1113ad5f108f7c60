package mad_test

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/mad"
)

// An rdma_cm connection request to TCP port 7174, as rping's client sends
// it, and what the passive side reads back.
func Example() {
	req := &mad.REQ{
		LocalCommID:             0x5e6c0a1d,
		ServiceID:               mad.ServiceID(mad.PortSpaceTCP, 7174),
		LocalQPN:                0x11,
		ResponderResources:      1,
		InitiatorDepth:          1,
		StartingPSN:             0x4d3b4f,
		RemoteCMResponseTimeout: 20,
		LocalCMResponseTimeout:  20,
		RetryCount:              7,
		RNRRetryCount:           7,
		MaxCMRetries:            15,
		PKey:                    0xffff,
		PathMTU:                 3, // 1024
	}
	cma := mad.CMAHeader{IPVersion: 4, SrcPort: 50000,
		Src: netip.MustParseAddr("198.18.0.12"), Dst: netip.MustParseAddr("198.18.0.11")}
	if err := cma.Marshal(req.PrivateData[:]); err != nil {
		panic(err)
	}
	var b [mad.MADLen]byte
	if err := mad.Marshal(mad.CMHeader(0x8c6e_0000_0000|uint64(req.LocalCommID), 0), req, b[:]); err != nil {
		panic(err)
	}

	h, m, err := mad.Parse(b[:])
	if err != nil {
		panic(err)
	}
	got := m.(*mad.REQ)
	ps, port, _ := mad.ParseServiceID(got.ServiceID)
	c, _ := got.CMAHeader()
	fmt.Printf("%s tid=%#x service_id=%#016x (%v port %d) qpn=%#x psn=%#x\n", m.Name(), h.TID, got.ServiceID, ps, port, got.LocalQPN, got.StartingPSN)
	fmt.Printf("%v:%d -> %v:%d, CM response timeout %v\n", c.Src, c.SrcPort, c.Dst, port, mad.Timeout(got.RemoteCMResponseTimeout))
	// Output:
	// REQ tid=0x8c6e5e6c0a1d service_id=0x0000000001061c06 (TCP port 7174) qpn=0x11 psn=0x4d3b4f
	// 198.18.0.12:50000 -> 198.18.0.11:7174, CM response timeout 4.294967296s
}
