package wire

import (
	"testing"
	"time"
)

func TestOpcodeNames(t *testing.T) {
	for o, want := range map[Opcode]string{
		RCSendOnly:               "RC_SEND_ONLY",
		RCRDMAWriteFirst:         "RC_RDMA_WRITE_FIRST",
		RCRDMAReadResponseMiddle: "RC_RDMA_READ_RESPONSE_MIDDLE",
		RCAcknowledge:            "RC_ACKNOWLEDGE",
		RCAtomicAcknowledge:      "RC_ATOMIC_ACKNOWLEDGE",
		RCCompareSwap:            "RC_COMPARE_SWAP",
		RCFetchAdd:               "RC_FETCH_ADD",
		RCSendLastWithInvalidate: "RC_SEND_LAST_WITH_INVALIDATE",
		UCRDMAWriteOnlyWithImm:   "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		UDSendOnly:               "UD_SEND_ONLY",
		UDSendOnlyWithImmediate:  "UD_SEND_ONLY_WITH_IMMEDIATE",
		CNP:                      "CNP",
		0x15:                     "UNKNOWN_0x15",
		0x1C:                     "RC_FLUSH",
		0xFF:                     "UNKNOWN_0xFF",
		0x40:                     "UNKNOWN_0x40",
	} {
		if got := o.String(); got != want {
			t.Errorf("%#02x: %q, want %q", uint8(o), got, want)
		}
	}
}

// TestOpcodeTable checks the table against PROTOCOL §1.4, row by row.
func TestOpcodeTable(t *testing.T) {
	type row struct {
		hdrs    HeaderSet
		payload bool
		pos     Position
		req     bool
	}
	conn := map[Opcode]row{
		0x00: {0, true, PosFirst, true},
		0x01: {0, true, PosMiddle, true},
		0x02: {0, true, PosLast, true},
		0x03: {HasImmDt, true, PosLast, true},
		0x04: {0, true, PosOnly, true},
		0x05: {HasImmDt, true, PosOnly, true},
		0x06: {HasRETH, true, PosFirst, true},
		0x07: {0, true, PosMiddle, true},
		0x08: {0, true, PosLast, true},
		0x09: {HasImmDt, true, PosLast, true},
		0x0A: {HasRETH, true, PosOnly, true},
		0x0B: {HasRETH | HasImmDt, true, PosOnly, true},
	}
	rc := map[Opcode]row{
		0x0C: {HasRETH, false, PosOnly, true},
		0x0D: {HasAETH, true, PosFirst, false},
		0x0E: {0, true, PosMiddle, false},
		0x0F: {HasAETH, true, PosLast, false},
		0x10: {HasAETH, true, PosOnly, false},
		0x11: {HasAETH, false, PosOnly, false},
		0x12: {HasAETH | HasAtomicAckETH, false, PosOnly, false},
		0x13: {HasAtomicETH, false, PosOnly, true},
		0x14: {HasAtomicETH, false, PosOnly, true},
		0x16: {HasIETH, true, PosLast, true},
		0x17: {HasIETH, true, PosOnly, true},
		// IBTA 1.5 (rxe_opcode.c since 6.2): FLUSH carries FETH then RETH
		// and no payload, ATOMIC_WRITE a RETH and its 8 bytes.
		0x1C: {HasFETH | HasRETH, false, PosOnly, true},
		0x1D: {HasRETH, true, PosOnly, true},
	}
	want := map[Opcode]row{
		UDSendOnly:              {HasDETH, true, PosOnly, true},
		UDSendOnlyWithImmediate: {HasDETH | HasImmDt, true, PosOnly, true},
		CNP:                     {HasCNPPad, false, PosNone, false},
	}
	for o, r := range conn {
		want[TransportRC|o] = r
		want[TransportUC|o] = r
	}
	for o, r := range rc {
		want[o] = r
	}
	valid := 0
	for i := range 256 {
		o := Opcode(i)
		in := o.Info()
		r, ok := want[o]
		if in.Valid != ok || o.Valid() != ok {
			t.Errorf("%s: Valid %v, want %v", o, in.Valid, ok)
			continue
		}
		if !ok {
			if o.HeaderLen() != 0 {
				t.Errorf("%s: invalid but HeaderLen %d", o, o.HeaderLen())
			}
			continue
		}
		valid++
		if in.Headers != r.hdrs || in.Payload != r.payload || in.Pos != r.pos {
			t.Errorf("%s: %v payload=%v pos=%v, want %v %v %v", o, in.Headers, in.Payload, in.Pos, r.hdrs, r.payload, r.pos)
		}
		if o != CNP && (in.Request != r.req || in.Response == r.req) {
			t.Errorf("%s: request=%v response=%v", o, in.Request, in.Response)
		}
		if got := o.HeaderLen(); got != BTHLen+r.hdrs.Len() {
			t.Errorf("%s: HeaderLen %d", o, got)
		}
		// Helper predicates agree with the table.
		if o.HasImm() != (r.hdrs&HasImmDt != 0) || o.HasInv() != (r.hdrs&HasIETH != 0) {
			t.Errorf("%s: HasImm/HasInv", o)
		}
		if o.IsRead() && o != RCRDMAReadRequest || o.IsAck() && r.hdrs&HasAETH == 0 {
			t.Errorf("%s: IsRead/IsAck", o)
		}
		if o.IsReadResponse() && (r.req || !r.payload) || o.IsAtomic() && r.hdrs != HasAtomicETH {
			t.Errorf("%s: IsReadResponse/IsAtomic", o)
		}
		if o.IsWrite() && (r.hdrs&(HasRETH|HasImmDt) == 0 && r.pos != PosMiddle && r.pos != PosLast) {
			t.Errorf("%s: IsWrite", o)
		}
	}
	if valid != 12*2+13+3 {
		t.Errorf("%d valid opcodes", valid)
	}
	// Spot checks of the predicates.
	for _, c := range []struct {
		o    Opcode
		f    func(Opcode) bool
		name string
		want bool
	}{
		{RCSendOnly, Opcode.IsSend, "IsSend", true},
		{UDSendOnly, Opcode.IsSend, "IsSend", true},
		{RCSendOnlyWithInvalidate, Opcode.IsSend, "IsSend", true},
		{UCRDMAWriteFirst, Opcode.IsSend, "IsSend", false},
		{UCRDMAWriteMiddle, Opcode.IsWrite, "IsWrite", true},
		{RCRDMAReadRequest, Opcode.IsWrite, "IsWrite", false},
		{RCRDMAReadResponseMiddle, Opcode.IsReadResponse, "IsReadResponse", true},
		{RCAcknowledge, Opcode.IsReadResponse, "IsReadResponse", false},
		{RCFetchAdd, Opcode.IsAtomic, "IsAtomic", true},
		{RCAtomicAcknowledge, Opcode.IsAck, "IsAck", true},
		{RCAtomicAcknowledge, Opcode.IsAtomic, "IsAtomic", false},
		{UDSendOnlyWithImmediate, Opcode.HasImm, "HasImm", true},
		{CNP, Opcode.IsSend, "IsSend", false},
		{0x18 | TransportUC, Opcode.IsSend, "IsSend", false},
		{0x16 | TransportUC, Opcode.IsSend, "IsSend", false},
	} {
		if got := c.f(c.o); got != c.want {
			t.Errorf("%s.%s = %v", c.o, c.name, got)
		}
	}
	if RCSendOnly.Transport() != TransportRC || UCSendOnly.Transport() != TransportUC || UDSendOnly.Transport() != TransportUD || CNP.Transport() != TransportCNP {
		t.Error("Transport")
	}
	if got := (HasRETH | HasImmDt).String(); got != "RETH+ImmDt" {
		t.Errorf("HeaderSet.String %q", got)
	}
}

func TestSyndrome(t *testing.T) {
	for s, want := range map[Syndrome]string{
		SyndromeACKNoCredit:                    "ACK(credit=31)",
		ACKSyndrome(0):                         "ACK(credit=0)",
		RNRNAKSyndrome(12):                     "RNR_NAK(timer=12 640µs)",
		RNRNAKSyndrome(0):                      "RNR_NAK(timer=0 655.36ms)",
		NAKSyndrome(NAKPSNSequenceError):       "NAK(PSN_SEQUENCE_ERROR)",
		NAKSyndrome(NAKInvalidRequest):         "NAK(INVALID_REQUEST)",
		NAKSyndrome(NAKRemoteAccessError):      "NAK(REMOTE_ACCESS_ERROR)",
		NAKSyndrome(NAKRemoteOperationalError): "NAK(REMOTE_OPERATIONAL_ERROR)",
		NAKSyndrome(NAKInvalidRDRequest):       "NAK(INVALID_RD_REQUEST)",
		0x40:                                   "RESERVED(0x40)",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#02x: %q, want %q", uint8(s), got, want)
		}
	}
	// Byte values from PROTOCOL §1.3.
	if SyndromeACKNoCredit != 0x1F || RNRNAKSyndrome(12) != 0x2C || NAKSyndrome(NAKPSNSequenceError) != 0x60 ||
		NAKSyndrome(NAKInvalidRDRequest) != 0x64 || NAKSyndrome(NAKRemoteAccessError) != 0x62 {
		t.Error("syndrome byte values")
	}
	for i := range 256 {
		s := Syndrome(i)
		k := s.Kind()
		if want := SyndromeKind(i >> 5 & 3); k != want {
			t.Fatalf("%#x: kind %v", i, k)
		}
		switch k {
		case SynACK:
			if ACKSyndrome(s.Credit()) != s&0x7F {
				t.Errorf("%#x: ACK round trip", i)
			}
		case SynRNRNAK:
			if RNRNAKSyndrome(s.RNRTimer()) != s&0x7F {
				t.Errorf("%#x: RNR round trip", i)
			}
		case SynNAK:
			if NAKSyndrome(s.NAK()) != s&0x7F {
				t.Errorf("%#x: NAK round trip", i)
			}
		}
	}
	if SynACK.String() != "ACK" || SynRNRNAK.String() != "RNR_NAK" || SynReserved.String() != "RESERVED" || SynNAK.String() != "NAK" {
		t.Error("SyndromeKind strings")
	}
}

func TestRNRTimerTable(t *testing.T) {
	// PROTOCOL §3.5, IBTA table; code 25 is 61440 µs (rxe's table says 61410).
	want := []int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	for c, us := range want {
		if got := RNRTimerDuration(uint8(c)); got != time.Duration(us)*time.Microsecond {
			t.Errorf("code %d: %v, want %dµs", c, got, us)
		}
	}
	if RNRTimerDuration(25+32) != RNRTimerDuration(25) {
		t.Error("high bits not ignored")
	}
	// Codes 1..31 increase strictly.
	for c := 2; c < 32; c++ {
		if RNRTimerDuration(uint8(c)) <= RNRTimerDuration(uint8(c-1)) {
			t.Errorf("code %d not increasing", c)
		}
	}
}

func TestCreditCount(t *testing.T) {
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
		2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for c, n := range want {
		if got, ok := CreditCount(uint8(c)); !ok || got != n {
			t.Errorf("code %d: %d %v, want %d", c, got, ok, n)
		}
	}
	if _, ok := CreditCount(31); ok {
		t.Error("code 31 must be invalid")
	}
	if _, ok := CreditCount(200); ok {
		t.Error("code 200 must be invalid")
	}
}

func TestSourcePortExamples(t *testing.T) {
	// PROTOCOL §1.1.
	if fl := FlowLabel(0x11, 0x12); fl != 0x132 {
		t.Errorf("FlowLabel(0x11,0x12) = %#x", fl)
	}
	if p := RCSourcePort(0x11, 0x12); p != 0xC132 {
		t.Errorf("RCSourcePort(0x11,0x12) = %#x", p)
	}
	if fl := FlowLabel(0x1234, 0x567); fl != 0x256EA {
		t.Errorf("FlowLabel(0x1234,0x567) = %#x", fl)
	}
	if p := RCSourcePort(0x1234, 0x567); p != 0xD6E3 {
		t.Errorf("RCSourcePort(0x1234,0x567) = %#x", p)
	}
	if p := UDSourcePort(0x11); p != 0xDF94 {
		t.Errorf("UDSourcePort(0x11) = %#x", p)
	}
	// Symmetric, and a given flow label wins over the QPN hash.
	for _, q := range [][2]uint32{{1, 2}, {0xFFFFFF, 0x123456}, {77, 0}} {
		if RCSourcePort(q[0], q[1]) != RCSourcePort(q[1], q[0]) {
			t.Errorf("not symmetric for %v", q)
		}
		if RCSourcePortFL(0x517be, q[0], q[1]) != 0xD7AA {
			t.Errorf("flow label ignored for %v", q)
		}
	}
	// Every result lies in the RoCE range 0xC000..0xFFFF.
	for fl := uint32(0); fl < 1<<20; fl += 97 {
		if p := FlowLabelToUDPSport(fl); p < 0xC000 {
			t.Fatalf("fl %#x -> %#x", fl, p)
		}
	}
}

func TestPSN(t *testing.T) {
	const max = PSN(PSNMask)
	cases := []struct {
		p    PSN
		n    uint32
		want PSN
	}{{max, 1, 0}, {max - 1, 3, 1}, {0, 1 << 24, 0}, {5, 0, 5}, {0x800000, 0x800000, 0}}
	for _, c := range cases {
		if got := c.p.Add(c.n); got != c.want {
			t.Errorf("%#x.Add(%#x) = %#x, want %#x", c.p, c.n, got, c.want)
		}
		if got := c.want.Sub(c.n); got != c.p {
			t.Errorf("%#x.Sub(%#x) = %#x, want %#x", c.want, c.n, got, c.p)
		}
	}
	if d := PSN(0).Diff(max); d != 1 {
		t.Errorf("0 - max = %d", d)
	}
	if d := max.Diff(0); d != -1 {
		t.Errorf("max - 0 = %d", d)
	}
	if !max.Before(0) || !PSN(0).After(max) || PSN(3).Compare(3) != 0 || PSN(2).Compare(3) != -1 || PSN(3).Compare(2) != 1 {
		t.Error("compare across the wrap")
	}
	// Window edge: exactly 2^23 apart counts as "before" (psn_compare sign).
	if d := PSN(0x800000).Diff(0); d != -0x800000 {
		t.Errorf("half-range diff %d", d)
	}
	if !PSN(1).InWindow(max-1, 4) || PSN(2).InWindow(max-1, 4) || !PSN(max-1).InWindow(max-1, 1) || PSN(max-2).InWindow(max-1, 4) {
		t.Error("InWindow across the wrap")
	}
	if !max.Valid() || (max + 1).Valid() {
		t.Error("Valid")
	}
}
