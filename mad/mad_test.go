package mad_test

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/mad"
)

// roundTrip marshals m, checks the fixed bytes, parses it back and
// compares.
func roundTrip(t *testing.T, tid uint64, m mad.Message) []byte {
	t.Helper()
	b := make([]byte, mad.MADLen)
	if err := mad.Marshal(mad.CMHeader(tid, 0), m, b); err != nil {
		t.Fatalf("%s: Marshal: %v", m.Name(), err)
	}
	if b[0] != 1 || b[1] != 0x07 || b[2] != 2 || b[3] != 0x03 {
		t.Errorf("%s: header bytes % x", m.Name(), b[:4])
	}
	h, got, err := mad.Parse(b)
	if err != nil {
		t.Fatalf("%s: Parse: %v", m.Name(), err)
	}
	if h.TID != tid || h.AttrID != m.AttrID() {
		t.Errorf("%s: header %+v", m.Name(), h)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("%s: parsed\n%+v\nwant\n%+v", m.Name(), got, m)
	}
	return b
}

func TestRoundTripREJ(t *testing.T) {
	m := &mad.REJ{LocalCommID: 0, RemoteCommID: 0x8badf00d, MsgRejected: mad.MsgTypeREQ,
		RejInfoLen: 8, Reason: mad.RejInvalidServiceID}
	copy(m.ARI[:], "abcdefgh")
	m.PrivateData[0], m.PrivateData[147] = 0x5a, 0xa5
	b := roundTrip(t, 0x1234_0000_8badf00d, m)
	p := b[mad.HeaderLen:]
	// Table 108: MsgRejected [7:6] of byte 8, RejInfoLen [7:1] of byte 9,
	// Reason u16 at 10, ARI at 12, PrivateData at 84.
	if b[17] != 0x12 || p[8] != 0x00 || p[9] != 8<<1 || p[10] != 0 || p[11] != 8 || p[12] != 'a' || p[84] != 0x5a || p[231] != 0xa5 {
		t.Errorf("REJ bytes % x", p[:16])
	}
	if got := string(m.Info()); got != "abcdefgh" {
		t.Errorf("Info() = %q", got)
	}
	m.MsgRejected = mad.MsgTypeREP
	b = roundTrip(t, 1, m)
	if b[mad.HeaderLen+8] != 0x40 {
		t.Errorf("MsgRejected REP byte %#x, want 0x40", b[mad.HeaderLen+8])
	}
}

func TestRoundTripMRA(t *testing.T) {
	m := &mad.MRA{LocalCommID: 1, RemoteCommID: 2, MsgMRAed: mad.MsgTypeREP, ServiceTimeout: 20}
	m.PrivateData[221] = 0xee
	b := roundTrip(t, 7, m)
	p := b[mad.HeaderLen:]
	if b[17] != 0x11 || p[8] != 0x40 || p[9] != 20<<3 || p[231] != 0xee {
		t.Errorf("MRA bytes % x", p[:12])
	}
}

func TestRoundTripSIDR(t *testing.T) {
	req := &mad.SIDRREQ{RequestID: 0xdeadbeef, PKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 4242)}
	cma := mad.CMAHeader{IPVersion: 4, SrcPort: 50000, Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")}
	if err := cma.Marshal(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	b := roundTrip(t, 9, req)
	p := b[mad.HeaderLen:]
	if b[17] != 0x17 || !bytes.Equal(p[8:16], []byte{0, 0, 0, 0, 0x01, 0x11, 0x10, 0x92}) || p[16+1] != 0x40 {
		t.Errorf("SIDR_REQ bytes % x", p[:24])
	}
	if got, err := req.CMAHeader(); err != nil || got != cma {
		t.Errorf("CMAHeader() = %+v, %v", got, err)
	}

	rep := &mad.SIDRREP{RequestID: 0xdeadbeef, Status: mad.SIDRSuccess, AddInfoLen: 3, VendorID: 0x123456,
		QPN: 0xabcdef, ServiceID: req.ServiceID, QKey: 0x11111111}
	copy(rep.Info[:], "xyz")
	rep.PrivateData[135] = 1
	b = roundTrip(t, 9, rep)
	p = b[mad.HeaderLen:]
	// Table 120: Status 4, AddInfoLen 5, QPN 8-10, ServiceID 12, Q_Key 20,
	// Info 24, PrivateData 96; the ECE vendor ID in 6-7 and 11.
	if b[17] != 0x18 || p[4] != 0 || p[5] != 3 || p[6] != 0x12 || p[7] != 0x34 || p[8] != 0xab || p[10] != 0xef || p[11] != 0x56 ||
		p[19] != 0x92 || p[20] != 0x11 || p[24] != 'x' || p[231] != 1 {
		t.Errorf("SIDR_REP bytes % x", p[:28])
	}
	rep.Status = mad.SIDRNoQP
	roundTrip(t, 9, rep)
}

func TestRoundTripAll(t *testing.T) {
	req := &mad.REQ{LocalCommID: 1, VendorID: 0x02c9, ServiceID: 3, LocalCAGUID: 4, LocalQKey: 5, LocalQPN: 0xffffff,
		ResponderResources: 6, LocalEECN: 7, InitiatorDepth: 8, RemoteEECN: 9, RemoteCMResponseTimeout: 31,
		TransportType: mad.TransportUC, EndToEndFlowControl: true, StartingPSN: 0xabcdef, LocalCMResponseTimeout: 17,
		RetryCount: 5, PKey: 0x8001, PathMTU: 5, RDCExists: true, RNRRetryCount: 6, MaxCMRetries: 15, SRQ: true,
		ExtendedTransportType: 1, SAPSupported: true,
		Primary:   mad.Path{LocalLID: 0xffff, RemoteLID: 0xfffe, FlowLabel: 0xfffff, PacketRate: 63, TrafficClass: 0x80, HopLimit: 64, SL: 15, SubnetLocal: true, LocalAckTimeout: 18},
		Alternate: mad.Path{FlowLabel: 1, PacketRate: 1, SL: 1, LocalAckTimeout: 1}}
	req.Primary.LocalGID[15], req.Alternate.RemoteGID[0] = 1, 2
	req.PrivateData[91] = 9
	b := roundTrip(t, 1, req)
	p := b[mad.HeaderLen:]
	if p[7] != 0xc9 || p[6] != 0x02 || p[43] != 31<<3|1<<1|1 || p[47] != 17<<3|5 || p[50] != 5<<4|8|6 || p[51] != 15<<4|8|1 ||
		p[88] != 0xff || p[90] != 0xf0 || p[91] != 63 || p[94] != 0xf8 || p[95] != 18<<3 || p[139] != 1<<3|4 || p[231] != 9 {
		t.Errorf("REQ bytes % x", p[40:52])
	}
	rep := &mad.REP{LocalCommID: 1, RemoteCommID: 2, LocalQKey: 3, LocalQPN: 0x112233, LocalEECN: 0x445566, StartingPSN: 0x778899,
		VendorID: 0xaabbcc, ResponderResources: 4, InitiatorDepth: 5, TargetAckDelay: 15, FailoverAccepted: 1,
		EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x0102030405060708}
	b = roundTrip(t, 2, rep)
	p = b[mad.HeaderLen:]
	if p[15] != 0xaa || p[19] != 0xbb || p[23] != 0xcc || p[26] != 15<<3|1<<1|1 || p[27] != 7<<5|0x10 || p[28] != 1 {
		t.Errorf("REP bytes % x", p[12:36])
	}
	roundTrip(t, 3, &mad.RTU{LocalCommID: 1, RemoteCommID: 2})
	dreq := &mad.DREQ{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 0x11}
	b = roundTrip(t, 4, dreq)
	if p := b[mad.HeaderLen:]; p[10] != 0x11 || p[11] != 0 {
		t.Errorf("DREQ bytes % x", p[:12])
	}
	roundTrip(t, 4, &mad.DREP{LocalCommID: 2, RemoteCommID: 1})
}

func TestMarshalErrors(t *testing.T) {
	b := make([]byte, mad.MADLen)
	for _, m := range []mad.Message{
		&mad.REQ{LocalQPN: 1 << 24},
		&mad.REQ{StartingPSN: 1 << 24},
		&mad.REQ{Primary: mad.Path{SL: 16}},
		&mad.REQ{RetryCount: 8},
		&mad.REP{TargetAckDelay: 32},
		&mad.MRA{MsgMRAed: 4},
		&mad.REJ{RejInfoLen: 73},
		&mad.DREQ{RemoteQPN: 1 << 24},
		&mad.SIDRREP{AddInfoLen: 73},
	} {
		b[0] = 0xaa
		if err := mad.Marshal(mad.CMHeader(1, 0), m, b); !errors.Is(err, mad.ErrRange) {
			t.Errorf("%s %+v: err %v, want ErrRange", m.Name(), m, err)
		}
		if b[0] != 0xaa {
			t.Errorf("%s: Marshal wrote into b despite the error", m.Name())
		}
	}
	if err := mad.Marshal(mad.Header{}, &mad.RTU{}, b[:255]); !errors.Is(err, mad.ErrShort) {
		t.Errorf("short buffer: %v", err)
	}
	if err := mad.Marshal(mad.Header{}, nil, b); !errors.Is(err, mad.ErrNilMessage) {
		t.Errorf("nil: %v", err)
	}
	var nilREQ *mad.REQ
	if err := mad.Marshal(mad.Header{}, nilREQ, b); !errors.Is(err, mad.ErrNilMessage) {
		t.Errorf("nil *REQ: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	good := make([]byte, mad.MADLen)
	if err := mad.Marshal(mad.CMHeader(5, 0), &mad.RTU{LocalCommID: 1}, good); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < mad.MADLen; n++ {
		if _, m, err := mad.Parse(good[:n]); !errors.Is(err, mad.ErrShort) || m != nil {
			t.Fatalf("Parse of %d bytes: %v, %v", n, m, err)
		}
	}
	if h, _, _ := mad.Parse(good[:mad.HeaderLen]); h.TID != 5 {
		t.Errorf("short MAD: header not returned: %+v", h)
	}
	if _, _, err := mad.Parse(append(bytes.Clone(good), 0, 0, 0)); err != nil {
		t.Errorf("trailing bytes: %v", err)
	}
	mod := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	if _, _, err := mad.Parse(mod(0, 2)); !errors.Is(err, mad.ErrBaseVersion) {
		t.Errorf("base version 2: %v", err)
	}
	if h, _, err := mad.Parse(mod(1, 0x04)); !errors.Is(err, mad.ErrNotCM) || h.MgmtClass != 4 {
		t.Errorf("class 4: %v", err)
	}
	for _, id := range []byte{0x01, 0x19, 0x1a, 0x1b} {
		if h, _, err := mad.Parse(mod(17, id)); !errors.Is(err, mad.ErrUnknownAttr) || h.AttrID != uint16(id) {
			t.Errorf("attr %#x: %v", id, err)
		}
	}
}

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   mad.PortSpace
		port uint16
		id   uint64
	}{
		{mad.PortSpaceTCP, 7174, 0x0000000001061c06},
		{mad.PortSpaceTCP, 0, 0x0000000001060000},
		{mad.PortSpaceTCP, 65535, 0x000000000106ffff},
		{mad.PortSpaceUDP, 4791, 0x00000000011112b7},
		{mad.PortSpaceIB, 1, 0x00000000013f0001},
		{mad.PortSpaceIPoIB, 2, 0x0000000000020002},
	} {
		if got := mad.ServiceID(c.ps, c.port); got != c.id {
			t.Errorf("ServiceID(%v, %d) = %#016x, want %#016x", c.ps, c.port, got, c.id)
		}
		ps, port, ok := mad.ParseServiceID(c.id)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("ParseServiceID(%#x) = %v %d %v", c.id, ps, port, ok)
		}
	}
	for _, id := range []uint64{0, 0x0000000001070001, 0x0100000001061c06, 0x0200000000000000} {
		if _, _, ok := mad.ParseServiceID(id); ok {
			t.Errorf("ParseServiceID(%#x) ok", id)
		}
	}
	if s := mad.PortSpaceTCP.String(); s != "TCP" {
		t.Errorf("PortSpaceTCP = %q", s)
	}
}

func TestTimeout(t *testing.T) {
	if got := mad.Timeout(0); got != 4096*time.Nanosecond {
		t.Errorf("Timeout(0) = %v", got)
	}
	// CMA_CM_RESPONSE_TIMEOUT 20: about 4.3 s.
	if got := mad.Timeout(20); got != 4096*time.Nanosecond<<20 {
		t.Errorf("Timeout(20) = %v", got)
	}
	if mad.Timeout(31) != mad.Timeout(40) {
		t.Errorf("Timeout above 31 not clamped")
	}
	for code := uint8(0); code <= 31; code++ {
		d := mad.Timeout(code)
		if got := mad.TimeoutCode(d); got != code {
			t.Errorf("TimeoutCode(Timeout(%d)) = %d", code, got)
		}
		if code > 0 {
			if got := mad.TimeoutCode(d - 1); got != code {
				t.Errorf("TimeoutCode(Timeout(%d)-1) = %d", code, got)
			}
			if got := mad.TimeoutCode(mad.Timeout(code-1) + 1); got != code {
				t.Errorf("TimeoutCode(Timeout(%d)+1) = %d", code-1, got)
			}
		}
	}
	if mad.TimeoutCode(0) != 0 || mad.TimeoutCode(-time.Second) != 0 || mad.TimeoutCode(time.Duration(1<<62)) != 31 {
		t.Errorf("TimeoutCode edges")
	}
}

func TestCMAHeader(t *testing.T) {
	v6 := mad.CMAHeader{IPVersion: 6, SrcPort: 1, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	var b [mad.CMAHeaderLen]byte
	if err := v6.Marshal(b[:]); err != nil {
		t.Fatal(err)
	}
	if b[1] != 0x60 || b[19] != 1 || b[35] != 2 {
		t.Errorf("IPv6 header % x", b)
	}
	if got, err := mad.ParseCMAHeader(b[:]); err != nil || got != v6 {
		t.Errorf("ParseCMAHeader = %+v, %v", got, err)
	}
	mapped := mad.CMAHeader{IPVersion: 4, Src: netip.MustParseAddr("::ffff:198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")}
	if err := mapped.Marshal(b[:]); err != nil {
		t.Errorf("IPv4-mapped source: %v", err)
	}
	if !bytes.Equal(b[4:16], make([]byte, 12)) || b[19] != 1 {
		t.Errorf("IPv4 header % x", b)
	}
	for _, h := range []mad.CMAHeader{
		{IPVersion: 6, Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2")},
		{IPVersion: 4, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("198.18.0.2")},
		{IPVersion: 4},
		{IPVersion: 5},
	} {
		if err := h.Marshal(b[:]); !errors.Is(err, mad.ErrCMAHeader) {
			t.Errorf("Marshal(%+v) = %v", h, err)
		}
	}
	if err := v6.Marshal(b[:35]); !errors.Is(err, mad.ErrCMAHeader) {
		t.Errorf("short Marshal: %v", err)
	}
	if _, err := mad.ParseCMAHeader(b[:35]); !errors.Is(err, mad.ErrCMAHeader) {
		t.Errorf("short Parse: %v", err)
	}
	_ = v6.Marshal(b[:])
	b[0] = 1
	if _, err := mad.ParseCMAHeader(b[:]); !errors.Is(err, mad.ErrCMAHeader) {
		t.Errorf("version 1: %v", err)
	}
	b[0], b[1] = 0, 0x50
	if _, err := mad.ParseCMAHeader(b[:]); !errors.Is(err, mad.ErrCMAHeader) {
		t.Errorf("IP version 5: %v", err)
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{mad.RejInvalidServiceID.String(), "invalid service ID"},
		{mad.RejStaleConn.String(), "stale conn"},
		{mad.RejConsumerDefined.String(), "consumer defined"},
		{mad.RejVendorOptionNotSupported.String(), "vendor option is not supported"},
		{mad.RejectReason(34).String(), "RejectReason(34)"},
		{mad.MsgTypeREP.String(), "REP"},
		{mad.SIDRNoQP.String(), "no QP"},
		{mad.TransportRC.String(), "RC"},
		{mad.AttrName(mad.AttrSIDRREP), "SIDR_REP"},
		{mad.AttrName(mad.AttrLAP), "LAP"},
		{mad.AttrName(0x99), "0x0099"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestParseInvalidLengths(t *testing.T) {
	b := make([]byte, mad.MADLen)
	_ = mad.Marshal(mad.CMHeader(1, 0), &mad.REJ{}, b)
	b[mad.HeaderLen+9] = 73 << 1
	if h, m, err := mad.Parse(b); !errors.Is(err, mad.ErrInvalid) || m != nil || h.AttrID != mad.AttrREJ {
		t.Errorf("REJ RejInfoLen 73: %v %v", m, err)
	}
	b[mad.HeaderLen+9] = 72 << 1
	if _, _, err := mad.Parse(b); err != nil {
		t.Errorf("REJ RejInfoLen 72: %v", err)
	}
	_ = mad.Marshal(mad.CMHeader(1, 0), &mad.SIDRREP{}, b)
	b[mad.HeaderLen+5] = 73
	if _, _, err := mad.Parse(b); !errors.Is(err, mad.ErrInvalid) {
		t.Errorf("SIDR_REP AddInfoLen 73: %v", err)
	}
}

// TestDecoder: the Decoder gives the same results as Parse, reuses its
// messages, and does not allocate.
func TestDecoder(t *testing.T) {
	var d mad.Decoder
	mads := cmMADs(t, "rping.pcap")
	for _, b := range mads {
		h1, m1, err1 := mad.Parse(b)
		h2, m2, err2 := d.Parse(b)
		if h1 != h2 || !reflect.DeepEqual(m1, m2) || (err1 == nil) != (err2 == nil) {
			t.Fatalf("Decoder.Parse differs: %+v %+v %v, Parse %+v %+v %v", h2, m2, err2, h1, m1, err1)
		}
	}
	_, a, _ := d.Parse(mads[0])
	_, b, _ := d.Parse(mads[0])
	if a != b {
		t.Errorf("Decoder returned two REQs for one type")
	}
	if n := testing.AllocsPerRun(10, func() {
		for _, b := range mads {
			if _, _, err := d.Parse(b); err != nil {
				t.Fatal(err)
			}
		}
	}); n != 0 {
		t.Errorf("Decoder.Parse: %v allocations per run", n)
	}
	var out [mad.MADLen]byte
	h, m, _ := d.Parse(mads[0])
	if n := testing.AllocsPerRun(10, func() { _ = mad.Marshal(h, m, out[:]) }); n != 0 {
		t.Errorf("Marshal: %v allocations", n)
	}
}
