package transport_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// inject delivers a frame built from f (addressed from A to B, at B's
// expected PSN unless f sets one) straight into B's engine, then lets the
// pair run. It returns B's answers.
func (e *epair) inject(f wire.Frame, payload []byte) []logged {
	e.t.Helper()
	return e.injectInto(false, f, payload)
}

// injectInto builds f as a frame from the other end to A (toA) or B, hands
// it straight to that end's engine, lets the pair run, and returns what that
// end sent in answer.
func (e *epair) injectInto(toA bool, f wire.Frame, payload []byte) []logged {
	e.t.Helper()
	from, to := e.a, e.b
	if toA {
		from, to = e.b, e.a
	}
	f.SrcMAC, f.DstMAC, f.SrcIP, f.DstIP, f.HopLimit = from.mac, to.mac, from.ip, to.ip, 64
	f.SrcPort = wire.RCSourcePort(from.q.QPN(), to.q.QPN())
	f.BTH.PKey, f.BTH.DestQP = wire.DefaultPKey, to.q.QPN()
	buf := make([]byte, frameCap)
	n, err := wire.BuildPayload(buf, &f, payload)
	if err != nil {
		e.t.Fatal(err)
	}
	var p wire.Packet
	if err := wire.Parse(buf[:n], &p); err != nil {
		e.t.Fatal(err)
	}
	e.rec = true
	e.log = nil
	to.q.Receive(&p, e.now)
	e.deliver()
	var out []logged
	for _, l := range e.log {
		if l.fromA == toA {
			out = append(out, l)
		}
	}
	return out
}

func bth(op wire.Opcode, psn wire.PSN) wire.BTHFields {
	return wire.BTHFields{Opcode: op, PSN: psn, AckReq: true}
}

// TestForgedRequests: requests no goroce or rxe requester sends, injected
// at the responder: each gets the NAK (or silence) rxe gives it, in rxe's
// check order (PSN, opcode sequence, QP access, resources, length, R_Key).
func TestForgedRequests(t *testing.T) {
	nak := func(c wire.NAKCode) wire.Syndrome { return wire.NAKSyndrome(c) }
	cases := []struct {
		name     string
		opts     eopts
		recv     bool // B has a RECV posted (4096 bytes)
		frames   func(e *epair) []wire.Frame
		payloads []int
		want     wire.Syndrome // of the answer to the last frame; 0 = no answer
		recvWC   transport.WCStatus
		err      bool // B ends in ERR
	}{
		{name: "middle_without_first", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendMiddle, 0)}}
		}, payloads: []int{1024}, recv: true, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCWRFlushErr, err: true},
		{name: "send_first_then_write_middle", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendFirst, 0)}, {BTH: bth(wire.RCRDMAWriteMiddle, 1)}}
		}, payloads: []int{1024, 1024}, recv: true, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCRemInvReqErr, err: true},
		{name: "send_only_too_long", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendOnly, 0)}}
		}, payloads: []int{1025}, recv: true, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCRemInvReqErr, err: true},
		// rxe checks resources (RNR) before the length.
		{name: "send_only_too_long_no_recv", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendOnly, 0)}}
		}, payloads: []int{1025}, want: wire.RNRNAKSyndrome(0)},
		{name: "send_middle_short", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendFirst, 0)}, {BTH: bth(wire.RCSendMiddle, 1)}}
		}, payloads: []int{1024, 1000}, recv: true, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCRemInvReqErr, err: true},
		{name: "write_only_reth_mismatch", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCRDMAWriteOnly, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), DMALen: 100}}}
		}, payloads: []int{50}, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCWRFlushErr, err: true},
		{name: "write_reth_len_over_2G", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCRDMAWriteFirst, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), DMALen: 1<<31 + 1024}}}
		}, payloads: []int{1024}, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCWRFlushErr, err: true},
		// A WRITE_WITH_IMM takes its RECV before the R_Key check: the RECV
		// completes with the error (rxe do_complete after class C).
		{name: "write_only_imm_bad_rkey", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCRDMAWriteOnlyWithImm, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey() ^ 1, DMALen: 8}}}
		}, payloads: []int{8}, recv: true, want: nak(wire.NAKRemoteAccessError), recvWC: transport.WCRemAccessErr, err: true},
		{name: "write_only_imm_too_long_no_recv", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCRDMAWriteOnlyWithImm, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), DMALen: 1025}}}
		}, payloads: []int{1025}, want: wire.RNRNAKSyndrome(0)},
		{name: "read_no_dest_rd_atomic", opts: eopts{zeroDestRd: true}, frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCRDMAReadRequest, 0),
				RETH: wire.RETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), DMALen: 8}}}
		}, payloads: []int{0}, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCWRFlushErr, err: true},
		{name: "atomic_no_dest_rd_atomic", opts: eopts{zeroDestRd: true}, frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCFetchAdd, 0),
				AtomicETH: wire.AtomicETHFields{VA: e.b.mr.IOVA(), RKey: e.b.mr.RKey(), SwapAdd: 1}}}
		}, payloads: []int{0}, want: nak(wire.NAKInvalidRequest), recvWC: transport.WCWRFlushErr, err: true},
		{name: "out_of_sequence", frames: func(e *epair) []wire.Frame {
			return []wire.Frame{{BTH: bth(wire.RCSendOnly, 5)}}
		}, payloads: []int{8}, recv: true, want: nak(wire.NAKPSNSequenceError)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, c.opts)
			if c.recv {
				must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(8192, 4096)}}))
			}
			for i := range e.b.buf[:4096] {
				e.b.buf[i] = 0xC5
			}
			var got []logged
			for i, f := range c.frames(e) {
				got = e.inject(f, make([]byte, c.payloads[i]))
			}
			if c.want == 0 {
				if len(got) != 0 {
					t.Fatalf("answers %v, want none", got)
				}
			} else if len(got) != 1 || got[0].p.Opcode() != wire.RCAcknowledge || got[0].p.AETH.Syndrome() != c.want {
				t.Fatalf("answers %v, want one with syndrome %#x", got, uint8(c.want))
			}
			if (e.b.q.State() == transport.StateErr) != c.err {
				t.Fatalf("responder state %v", e.b.q.State())
			}
			if c.recv {
				if w := e.b.rcq.take(); c.err && (len(w) != 1 || w[0].Status != c.recvWC) {
					t.Fatalf("RECV completions %v, want %v", w, c.recvWC)
				}
			}
			for i, v := range e.b.buf[:4096] {
				if v != 0xC5 {
					t.Fatalf("responder memory changed at %d", i)
				}
			}
		})
	}
}

// TestReceiveFilters: packets from the wrong address or P_Key, or of a
// non-RC opcode, are dropped and counted, without an answer.
func TestReceiveFilters(t *testing.T) {
	e := newEPair(t, eopts{})
	must(t, e.b.q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{e.b.sge(0, 64)}}))
	f := wire.Frame{BTH: bth(wire.RCSendOnly, 0)}
	// Wrong P_Key: build, then patch the BTH and go through Receive directly.
	if got := e.injectMod(f, func(p *wire.Packet) { p.BTH.SetPKey(0x1234) }); len(got) != 0 {
		t.Fatalf("answers to a bad P_Key: %v", got)
	}
	if got := e.injectMod(f, func(p *wire.Packet) { p.IPv4.SetSrc(e.b.ip) }); len(got) != 0 {
		t.Fatalf("answers to a wrong source address: %v", got)
	}
	if got := e.injectMod(f, func(p *wire.Packet) { p.BTH.SetOpcode(wire.Opcode(0x64)) }); len(got) != 0 {
		t.Fatalf("answers to a UD opcode: %v", got)
	}
	c := e.b.q.Counters
	if c[transport.CntRcvdBadPKey] != 1 || c[transport.CntRcvdBadAddr] != 1 || c[transport.CntRcvdBadOpcode] != 1 {
		t.Fatalf("counters pkey %d addr %d opcode %d", c[transport.CntRcvdBadPKey], c[transport.CntRcvdBadAddr], c[transport.CntRcvdBadOpcode])
	}
	if e.b.q.State() != transport.StateRTS || len(e.b.rcq.wcs) != 0 {
		t.Fatalf("state %v completions %v", e.b.q.State(), e.b.rcq.wcs)
	}
}

func (e *epair) injectMod(f wire.Frame, mod func(p *wire.Packet)) []logged {
	e.t.Helper()
	a, b := e.a, e.b
	f.SrcMAC, f.DstMAC, f.SrcIP, f.DstIP, f.HopLimit = a.mac, b.mac, a.ip, b.ip, 64
	f.BTH.PKey, f.BTH.DestQP = wire.DefaultPKey, b.q.QPN()
	buf := make([]byte, frameCap)
	n, err := wire.BuildPayload(buf, &f, make([]byte, 8))
	if err != nil {
		e.t.Fatal(err)
	}
	var p wire.Packet
	if err := wire.Parse(buf[:n], &p); err != nil {
		e.t.Fatal(err)
	}
	mod(&p)
	e.rec, e.log = true, nil
	b.q.Receive(&p, e.now)
	e.deliver()
	return e.log
}

// TestPostValidation: PostSend/PostRecv reject malformed WRs with EINVAL
// and queue nothing.
func TestPostValidation(t *testing.T) {
	e := newEPair(t, eopts{})
	five := make([]transport.SGE, 5)
	for i := range five {
		five[i] = e.a.sge(i*8, 8)
	}
	bad := []*transport.SendWR{
		{Opcode: transport.WRSend, SGL: five},
		{Opcode: transport.WRSend, Flags: transport.SendInline, SGL: []transport.SGE{e.a.sge(0, transport.MaxInlineData+1)}},
		{Opcode: transport.WRAtomicFetchAdd, SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: 4},
		{Opcode: transport.WRAtomicCmpAndSwp, SGL: []transport.SGE{e.a.sge(0, 7)}},
		{Opcode: transport.WRBindMW, SGL: []transport.SGE{e.a.sge(0, 8)}}, // rdma-core rxe validate_send_wr: no SGEs
		{Opcode: transport.WRBindMW, Imm: 1},                              // and no immediate
		{Opcode: transport.WROpcode(10)},
		{Opcode: transport.WRSend, SGL: []transport.SGE{{Addr: 0, Length: 1 << 31, LKey: 1}, {Addr: 0, Length: 1, LKey: 1}}},
	}
	for _, wr := range bad {
		if err := e.a.q.PostSend(wr, e.now); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Errorf("PostSend(%v, %d SGEs) = %v, want EINVAL", wr.Opcode, len(wr.SGL), err)
		}
	}
	if err := e.a.q.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.SendInline,
		SGL: []transport.SGE{{Addr: 0, Length: 8, LKey: 0x12345}}}, e.now); err == nil {
		t.Error("inline SEND from an unknown lkey accepted")
	}
	if err := e.b.q.PostRecv(&transport.RecvWR{SGL: five}); !errors.Is(err, transport.ErrInvalidArgument) {
		t.Errorf("PostRecv with 5 SGEs: %v", err)
	}
	e.run(0)
	if len(e.a.scq.wcs)+len(e.a.rcq.wcs)+len(e.b.rcq.wcs) != 0 || e.a.out.tail != 0 {
		t.Fatalf("rejected WRs left traces: %v %v, %d frames", e.a.scq.wcs, e.b.rcq.wcs, e.a.out.tail)
	}
	// The QP still works.
	e.post(e.a, &transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []transport.SGE{e.a.sge(0, 8)}, RemoteAddr: e.b.mr.IOVA(), RKey: e.b.mr.RKey()})
	e.run(0)
	if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess {
		t.Fatalf("completions %v", w)
	}
}

// TestDuplicateReadRange: a duplicate READ is replayed only when it asks for
// a sub-range of the original READ with the same R_Key (rxe
// duplicate_request); anything else is dropped without an answer (class D)
// and the QP stays in RTS. The sub-range check must not overflow: a VA near
// 2^64 whose end wraps past zero lies outside the original range.
func TestDuplicateReadRange(t *testing.T) {
	const top = ^uint64(0)
	cases := []struct {
		name    string
		va      func(e *epair) uint64
		length  uint32
		rkeyXor uint32
		replies int // 0: dropped
	}{
		{"whole", func(e *epair) uint64 { return e.b.mr.IOVA() }, 4096, 0, 4},
		{"sub_range", func(e *epair) uint64 { return e.b.mr.IOVA() + 1024 }, 2048, 0, 2},
		{"end_wraps", func(e *epair) uint64 { return top - 15 }, 32, 0, 0},
		{"end_wraps_long", func(e *epair) uint64 { return top }, 4096, 0, 0},
		{"starts_before", func(e *epair) uint64 { return e.b.mr.IOVA() - 1 }, 16, 0, 0},
		{"ends_after", func(e *epair) uint64 { return e.b.mr.IOVA() + 4000 }, 200, 0, 0},
		{"longer", func(e *epair) uint64 { return e.b.mr.IOVA() }, 4097, 0, 0},
		{"other_rkey", func(e *epair) uint64 { return e.b.mr.IOVA() }, 4096, 0x100, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, eopts{})
			for i := range e.b.buf[:8192] {
				e.b.buf[i] = byte(i * 7)
			}
			read := func(va uint64, length, rkey uint32) []logged {
				return e.inject(wire.Frame{BTH: bth(wire.RCRDMAReadRequest, 0),
					RETH: wire.RETHFields{VA: va, RKey: rkey, DMALen: length}}, nil)
			}
			if got := read(e.b.mr.IOVA(), 4096, e.b.mr.RKey()); len(got) != 4 {
				t.Fatalf("original READ: answers %v, want 4 responses", got)
			}
			va := c.va(e)
			got := read(va, c.length, e.b.mr.RKey()^c.rkeyXor)
			if len(got) != c.replies {
				t.Fatalf("duplicate READ va=%#x len=%d: answers %v, want %d", va, c.length, got, c.replies)
			}
			for i, l := range got {
				off := va - e.b.mr.IOVA() + uint64(i)*1024
				if !l.p.Opcode().IsReadResponse() || !bytes.Equal(l.p.Payload, e.b.buf[off:off+uint64(len(l.p.Payload))]) {
					t.Fatalf("replayed response %d (%v) does not carry the memory at offset %d", i, l, off)
				}
			}
			if e.b.q.State() != transport.StateRTS {
				t.Fatalf("responder state %v after the duplicate, want RTS", e.b.q.State())
			}
			if n := e.b.q.Counters[transport.CntDuplicateRequest]; n != 1 {
				t.Fatalf("duplicate_request = %d, want 1", n)
			}
		})
	}
}

// TestRequestRangeWraps: new WRITE, READ and atomic requests whose range
// [va, va+len) wraps past 2^64 are refused with NAK remote access error
// before anything is placed, whether the region is zero-based (a wrapped
// end lands inside it) or ends just below 2^64. The range checks (memreg's
// Remote, the responder's own) add nothing that can overflow.
func TestRequestRangeWraps(t *testing.T) {
	const top = ^uint64(0)
	for _, c := range []struct {
		name    string
		iova    uint64
		f       func(rkey uint32) wire.Frame
		payload int
	}{
		{"write_only_zero_based", 0, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAWriteOnly, 0), RETH: wire.RETHFields{VA: top - 7, RKey: k, DMALen: 64}}
		}, 64},
		{"write_first_zero_based", 0, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAWriteFirst, 0), RETH: wire.RETHFields{VA: top - 1023, RKey: k, DMALen: 4096}}
		}, 1024},
		{"write_only_top", top - 4096, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAWriteOnly, 0), RETH: wire.RETHFields{VA: top - 32, RKey: k, DMALen: 64}}
		}, 64},
		{"read_zero_based", 0, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAReadRequest, 0), RETH: wire.RETHFields{VA: top - 7, RKey: k, DMALen: 64}}
		}, 0},
		{"read_top", top - 4096, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCRDMAReadRequest, 0), RETH: wire.RETHFields{VA: top - 8, RKey: k, DMALen: 4096}}
		}, 0},
		{"atomic_zero_based", 0, func(k uint32) wire.Frame {
			return wire.Frame{BTH: bth(wire.RCFetchAdd, 0), AtomicETH: wire.AtomicETHFields{VA: top - 7, RKey: k, SwapAdd: 1}}
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEPair(t, eopts{})
			mem := e.b.buf[:4096]
			mr, err := e.b.pd.RegisterIOVA(mem, c.iova, memreg.LocalWrite|memreg.RemoteAny)
			must(t, err)
			for i := range mem {
				mem[i] = 0xC5
			}
			got := e.inject(c.f(mr.RKey()), make([]byte, c.payload))
			if want := wire.NAKSyndrome(wire.NAKRemoteAccessError); len(got) != 1 || got[0].p.Opcode() != wire.RCAcknowledge ||
				got[0].p.AETH.Syndrome() != want {
				t.Fatalf("answers %v, want one NAK %#x", got, uint8(want))
			}
			if e.b.q.State() != transport.StateErr {
				t.Fatalf("responder state %v, want ERR", e.b.q.State())
			}
			for i, v := range e.b.buf {
				if v != 0xC5 && i < len(mem) || v != 0 && i >= len(mem) {
					t.Fatalf("responder memory changed at %d", i)
				}
			}
		})
	}
}
