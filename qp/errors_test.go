package qp_test

// Every RC error path: the NAK on the wire (opcode, syndrome, PSN, decoded
// from the pcap tap), both sides' completion statuses, the QP states, the
// flush of the other WQEs, and the canaries of every responder buffer
// (PROTOCOL.md §3.3, §3.4, §5).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// errCase is one bad request from A to B.
type errCase struct {
	name string
	opts xopts
	// wr builds the failing WR (WRID 1); B has posted RECVs 100 and 101.
	wr func(x *xpair) *qp.SendWR
	// nak is the AETH syndrome B sends; nakPkt the index, within the failing
	// message, of the packet it NAKs.
	nak     wire.Syndrome
	nakPkt  uint32
	recvLen int // length of RECV 100 (default 4096)
	recvSGE func(x *xpair) qp.SGE
	req     qp.WCStatus // A's status for WR 1
	recv    qp.WCStatus // B's status for RECV 100 (WR_FLUSH_ERR when not consumed)
	// allowed lists responder bytes the failing message may have changed
	// before the error (rxe places the packets that preceded it).
	allowed func(x *xpair) (buf []region, buf2 []region)
}

func runErrCase(t *testing.T, c errCase) {
	x := newX(t, c.opts)
	a, b := x.a, x.b
	a.reset()
	b.reset()
	src := pattern(99, 8192)
	copy(a.buf, src)
	if c.recvLen == 0 {
		c.recvLen = 4096
	}
	if c.recvSGE != nil {
		x.recv(b, 100, c.recvSGE(x))
	} else {
		x.recv(b, 100, b.sge2(0, c.recvLen))
	}
	x.recv(b, 101, b.sge2(4096, 4096))
	x.next()
	wr := c.wr(x)
	wr.WRID, wr.Flags = 1, wr.Flags|transport.SendSignaled
	x.post(a, wr)
	// Two good WRs behind it: flushed once the NAK arrives.
	x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA() + 8000, RKey: b.mr.RKey()})
	x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRSend, SGL: []qp.SGE{a.sge(0, 8)}})

	expectWC(t, a.scq, 1, c.req, 0)
	expectWC(t, a.scq, 2, transport.WCWRFlushErr, 0)
	expectWC(t, a.scq, 3, transport.WCWRFlushErr, 0)
	expectWC(t, b.rcq, 100, c.recv, 0)
	expectWC(t, b.rcq, 101, transport.WCWRFlushErr, 0)
	if sa, sb := a.qp.State(), b.qp.State(); sa != transport.StateErr || sb != transport.StateErr {
		t.Fatalf("states A=%v B=%v, want ERR/ERR", sa, sb)
	}
	x.settle()
	noWC(t, a.scq, "requester")
	noWC(t, b.rcq, "responder")
	var naks []capPkt
	for _, p := range filter(x.next(), false) {
		if p.p.Opcode() == wire.RCAcknowledge && p.p.AETH.Syndrome().Kind() != wire.SynACK {
			naks = append(naks, p)
		}
	}
	want := wire.PSN(a.sentPSN).Add(c.nakPkt)
	if len(naks) != 1 || naks[0].p.AETH.Syndrome() != c.nak || naks[0].p.BTH.PSN() != want {
		t.Fatalf("NAKs on the wire %v, want one with syndrome %#x at PSN %#x", naks, uint8(c.nak), uint32(want))
	}
	if naks[0].p.BTH.DestQP() != a.qp.QPN() {
		t.Fatalf("NAK to QP %#x", naks[0].p.BTH.DestQP())
	}
	var r1, r2 []region
	if c.allowed != nil {
		r1, r2 = c.allowed(x)
	}
	checkBuf(t, "responder main", b.buf, r1...)
	checkBuf(t, "responder mr2", b.buf2, r2...)
	checkBuf(t, "responder other PD", b.bufO)
	checkBuf(t, "requester", a.buf, region{0, src})

	// Posting in ERR completes at once with WR_FLUSH_ERR, on both queues.
	x.post(a, &qp.SendWR{WRID: 7, Opcode: transport.WRSend, SGL: []qp.SGE{a.sge(0, 8)}})
	expectWC(t, a.scq, 7, transport.WCWRFlushErr, 0)
	x.recv(b, 8, b.sge(0, 8))
	expectWC(t, b.rcq, 8, transport.WCWRFlushErr, 0)
}

func TestRemoteErrors(t *testing.T) {
	write := func(rkey func(x *xpair) uint32, va func(x *xpair) uint64, n int) func(x *xpair) *qp.SendWR {
		return func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{x.a.sge(0, n)}, RemoteAddr: va(x), RKey: rkey(x)}
		}
	}
	read := func(rkey func(x *xpair) uint32, va func(x *xpair) uint64, n int) func(x *xpair) *qp.SendWR {
		return func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRRDMARead, SGL: []qp.SGE{x.a.sge(0, n)}, RemoteAddr: va(x), RKey: rkey(x)}
		}
	}
	fadd := func(rkey func(x *xpair) uint32, va func(x *xpair) uint64) func(x *xpair) *qp.SendWR {
		return func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRAtomicFetchAdd, SGL: []qp.SGE{x.a.sge(0, 8)}, RemoteAddr: va(x), RKey: rkey(x), CompareAdd: 1}
		}
	}
	rk := func(x *xpair) uint32 { return x.b.mr.RKey() }
	base := func(x *xpair) uint64 { return x.b.mr.IOVA() }
	end := func(x *xpair) uint64 { return x.b.mr.IOVA() + uint64(len(x.b.buf)) }
	accErr := wire.NAKSyndrome(wire.NAKRemoteAccessError)
	invReq := wire.NAKSyndrome(wire.NAKInvalidRequest)
	flush := transport.WCWRFlushErr
	// readOnlyMR registers, on B, an MR with only the given remote access
	// in place of mr (the canary checks still cover b.buf).
	onlyAccess := func(acc memreg.Access) func(x *xpair) uint32 {
		return func(x *xpair) uint32 {
			if err := x.b.mr.Deregister(); err != nil {
				x.t.Fatal(err)
			}
			mr, err := x.b.pd.RegMR(x.b.buf, acc)
			if err != nil {
				x.t.Fatal(err)
			}
			x.b.mr = mr
			return mr.RKey()
		}
	}
	qpAccess := func(acc memreg.Access) xopts { return xopts{connB: qp.ConnectOptions{Access: acc}} }
	cases := []errCase{
		{name: "write_wrong_rkey", wr: write(func(x *xpair) uint32 { return x.b.mr.RKey() ^ 0x80 }, base, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_unknown_key", wr: write(func(x *xpair) uint32 { return 0x7777_0000 }, base, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_wrong_pd", wr: write(func(x *xpair) uint32 { return x.b.mrO.RKey() }, func(x *xpair) uint64 { return x.b.mrO.IOVA() }, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_before_start", wr: write(rk, func(x *xpair) uint64 { return base(x) - 1 }, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_past_end", wr: write(rk, func(x *xpair) uint64 { return end(x) - 15 }, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_len_overflow", wr: write(rk, func(x *xpair) uint64 { return ^uint64(0) - 7 }, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		// A multi-packet WRITE whose range ends past the MR: rxe checks the
		// whole RETH range on the FIRST packet, so nothing is written and
		// the NAK names the first PSN.
		{name: "write_multi_past_end", wr: write(rk, func(x *xpair) uint64 { return end(x) - 2000 }, 3000), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "write_mr_no_remote_write", wr: write(onlyAccess(memreg.RemoteRead|memreg.LocalWrite), base, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "read_wrong_rkey", wr: read(func(x *xpair) uint32 { return x.b.mr.RKey() + 1 }, base, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "read_past_end", wr: read(rk, func(x *xpair) uint64 { return end(x) - 2000 }, 3000), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "read_len_overflow", wr: read(rk, func(x *xpair) uint64 { return ^uint64(0) - 7 }, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "read_mr_no_remote_read", wr: read(onlyAccess(memreg.RemoteWrite|memreg.LocalWrite), base, 16), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "atomic_wrong_pd", wr: fadd(func(x *xpair) uint32 { return x.b.mrO.RKey() }, func(x *xpair) uint64 { return x.b.mrO.IOVA() }), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "atomic_past_end", wr: fadd(rk, func(x *xpair) uint64 { return end(x) }), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		{name: "atomic_mr_no_remote_atomic", wr: fadd(onlyAccess(memreg.RemoteWrite|memreg.RemoteRead|memreg.LocalWrite), base), nak: accErr, req: transport.WCRemAccessErr, recv: flush},
		// QP access flags: an invalid request (0x61), not an access error.
		{name: "qp_no_remote_write", opts: qpAccess(memreg.RemoteRead | memreg.RemoteAtomic), wr: write(rk, base, 16), nak: invReq, req: transport.WCRemInvReqErr, recv: flush},
		{name: "qp_no_remote_read", opts: qpAccess(memreg.RemoteWrite | memreg.RemoteAtomic), wr: read(rk, base, 16), nak: invReq, req: transport.WCRemInvReqErr, recv: flush},
		{name: "qp_no_remote_atomic", opts: qpAccess(memreg.RemoteWrite | memreg.RemoteRead), wr: fadd(rk, base), nak: invReq, req: transport.WCRemInvReqErr, recv: flush},
		// RECV buffer too small: responder LOC_LEN_ERR, requester REM_INV_REQ_ERR.
		{name: "recv_too_small", wr: func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRSend, SGL: []qp.SGE{x.a.sge(0, 4097)}}
		}, nak: invReq, nakPkt: 4, req: transport.WCRemInvReqErr, recv: transport.WCLocLenErr,
			allowed: func(x *xpair) ([]region, []region) {
				// The four full packets before the failing one were placed.
				return nil, []region{{0, x.a.buf[:4096]}}
			}},
		{name: "recv_too_small_only", recvLen: 10, wr: func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRSend, SGL: []qp.SGE{x.a.sge(0, 100)}}
		}, nak: invReq, req: transport.WCRemInvReqErr, recv: transport.WCLocLenErr},
		// A RECV naming an MR of another PD is a malformed WQE (rxe
		// RESPST_ERR_MALFORMED_WQE): NAK 0x63, LOC_QP_OP_ERR / REM_OP_ERR.
		{name: "recv_sge_wrong_pd", recvSGE: func(x *xpair) qp.SGE {
			return qp.SGE{Addr: x.b.mrO.IOVA(), Length: 64, LKey: x.b.mrO.LKey()}
		}, wr: func(x *xpair) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRSend, SGL: []qp.SGE{x.a.sge(0, 16)}}
		}, nak: wire.NAKSyndrome(wire.NAKRemoteOperationalError), req: transport.WCRemOpErr, recv: transport.WCLocQPOpErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) { runErrCase(t, c) })
		})
	}
}

// TestMisalignedAtomic: PostSend rejects an atomic whose remote address is
// not 8-byte aligned (rxe validate_send_wr, EINVAL) or whose local buffer is
// shorter than 8 bytes; a forged misaligned atomic frame injected on the
// link is answered with NAK 0x61 and moves the responder to ERR.
func TestMisalignedAtomic(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		for _, wr := range []*qp.SendWR{
			{Opcode: transport.WRAtomicFetchAdd, SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA() + 4, RKey: b.mr.RKey()},
			{Opcode: transport.WRAtomicCmpAndSwp, SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA() + 1, RKey: b.mr.RKey()},
			{Opcode: transport.WRAtomicFetchAdd, SGL: []qp.SGE{a.sge(0, 4)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()},
		} {
			if err := a.qp.PostSend(wr); !errors.Is(err, transport.ErrInvalidArgument) {
				t.Fatalf("PostSend(%v at %#x, %d bytes) = %v, want EINVAL", wr.Opcode, wr.RemoteAddr, wr.SGL[0].Length, err)
			}
		}
		if a.qp.State() != transport.StateRTS {
			t.Fatalf("rejected posts changed the state to %v", a.qp.State())
		}
		x.recv(b, 100, b.sge(0, 64))
		// Forge a FETCH_ADD from A's address at the PSN B expects.
		f := wire.Frame{DstMAC: [6]byte(b.dev.MAC()), SrcMAC: [6]byte(a.dev.MAC()), SrcIP: a.ip, DstIP: b.ip, HopLimit: 64,
			SrcPort: wire.RCSourcePort(a.qp.QPN(), b.qp.QPN()),
			BTH: wire.BTHFields{Opcode: wire.RCFetchAdd, PKey: wire.DefaultPKey, DestQP: b.qp.QPN(), AckReq: true,
				PSN: wire.PSN(a.sentPSN)},
			AtomicETH: wire.AtomicETHFields{VA: b.mr.IOVA() + 12, RKey: b.mr.RKey(), SwapAdd: 1}}
		buf := make([]byte, 256)
		n, err := wire.Build(buf, &f, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.link.WriteBatch([][]byte{buf[:n]}); err != nil {
			t.Fatal(err)
		}
		expectWC(t, b.rcq, 100, transport.WCWRFlushErr, 0)
		if b.qp.State() != transport.StateErr {
			t.Fatalf("responder state %v, want ERR", b.qp.State())
		}
		x.settle()
		ps := x.next()
		if len(ps) != 2 || ps[1].fromA || ps[1].p.Opcode() != wire.RCAcknowledge ||
			ps[1].p.AETH.Syndrome() != wire.NAKSyndrome(wire.NAKInvalidRequest) || ps[1].p.BTH.PSN() != wire.PSN(a.sentPSN) {
			t.Fatalf("frames %v, want the forged request and one NAK 0x61 at PSN %#x", ps, a.sentPSN)
		}
		checkBuf(t, "responder", b.buf)
		// The requester never sent that PSN: it ignores the NAK and stays RTS.
		if a.qp.State() != transport.StateRTS {
			t.Fatalf("requester state %v", a.qp.State())
		}
		if c := a.qp.Counters(); c[transport.CntRcvdUnknownPSN] != 1 {
			t.Fatalf("rcvd_unknown_psn %d, want 1", c[transport.CntRcvdUnknownPSN])
		}
	})
}

// TestRNR: a SEND with no RECV posted gets an RNR NAK (0x20|min_rnr_timer,
// PSN of the SEND); once a RECV is posted the retry succeeds.
func TestRNR(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{connB: qp.ConnectOptions{MinRNRTimer: 14}}) // 1.28 ms
		a, b := x.a, x.b
		a.reset()
		b.reset()
		data := pattern(5, 3000)
		copy(a.buf, data)
		x.next()
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, 3000)}})
		// Wait until the RNR NAK is on the wire (bounded; no timing assertion).
		var seen []capPkt
		for i := 0; ; i++ {
			seen = append(seen, x.next()...)
			found := false
			for _, p := range seen {
				if !p.fromA && p.p.Opcode() == wire.RCAcknowledge && p.p.AETH.Syndrome().Kind() == wire.SynRNRNAK {
					found = true
				}
			}
			if found {
				break
			}
			if i > 5000 {
				t.Fatalf("no RNR NAK: %v", seen)
			}
			x.pause()
		}
		x.recv(b, 1, b.sge(dstOff, 3000))
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
		expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv)
		checkBuf(t, "receiver", b.buf, region{dstOff, data})
		x.settle()
		seen = append(seen, x.next()...)
		rnr := 0
		for _, p := range seen {
			if !p.fromA && p.p.Opcode() == wire.RCAcknowledge && p.p.AETH.Syndrome().Kind() == wire.SynRNRNAK {
				rnr++
				if p.p.AETH.Syndrome() != 0x20|14 || p.p.BTH.PSN() != wire.PSN(a.sentPSN) {
					t.Fatalf("RNR NAK %v, want syndrome 0x2e at PSN %#x", &p, a.sentPSN)
				}
			}
		}
		if rnr == 0 {
			t.Fatal("no RNR NAK counted")
		}
		if a.qp.State() != transport.StateRTS || b.qp.State() != transport.StateRTS {
			t.Fatalf("states %v %v", a.qp.State(), b.qp.State())
		}
		if c := b.qp.Counters(); c[transport.CntSendRNRErr] != uint64(rnr) {
			t.Fatalf("send_rnr_err %d, %d RNR NAKs on the wire", c[transport.CntSendRNRErr], rnr)
		}
	})
}

// TestRNRRetryExceeded: with rnr_retry 0 the first RNR NAK fails the WR;
// with 3 the SEND goes out 4 times (1 + 3 retries) before RNR_RETRY_EXC_ERR.
// WRITE_WITH_IMM consumes a RECV too and gets the same treatment.
func TestRNRRetryExceeded(t *testing.T) {
	for _, tc := range []struct {
		retry uint8
		op    transport.WROpcode
	}{{0, transport.WRSend}, {3, transport.WRSend}, {3, transport.WRRDMAWriteWithImm}} {
		t.Run(fmt.Sprintf("%v_rnr_retry_%d", tc.op, tc.retry), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				x := newX(t, xopts{
					connA: qp.ConnectOptions{SetRetry: true, RNRRetry: tc.retry, RetryCnt: 7, Timeout: 18},
					connB: qp.ConnectOptions{MinRNRTimer: 1}, // 10 µs
				})
				a, b := x.a, x.b
				b.reset()
				x.next()
				x.post(a, &qp.SendWR{WRID: 1, Opcode: tc.op, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, 100)},
					RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
				x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{a.sge(0, 8)},
					RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
				expectWC(t, a.scq, 1, transport.WCRNRRetryExcErr, 0)
				expectWC(t, a.scq, 2, transport.WCWRFlushErr, 0)
				if a.qp.State() != transport.StateErr || b.qp.State() != transport.StateRTS {
					t.Fatalf("states A=%v B=%v, want ERR/RTS", a.qp.State(), b.qp.State())
				}
				x.settle()
				ps := x.next() // every retransmission counts here
				sends, rnrs := 0, 0
				for _, p := range ps {
					switch {
					case p.fromA && p.p.BTH.PSN() == wire.PSN(a.sentPSN):
						sends++
					case !p.fromA && p.p.AETH != nil && p.p.AETH.Syndrome() == 0x21:
						rnrs++
					}
				}
				if sends != int(tc.retry)+1 || rnrs != sends {
					t.Fatalf("%d transmissions and %d RNR NAKs, want %d each: %v", sends, rnrs, tc.retry+1, ps)
				}
				checkBuf(t, "responder", b.buf)
				if c := a.qp.Counters(); c[transport.CntRetryRNRExceededErr] != 1 || c[transport.CntRcvdRNRErr] != uint64(rnrs) {
					t.Fatalf("counters: retry_rnr_exceeded_err %d rcvd_rnr_err %d", c[transport.CntRetryRNRExceededErr], c[transport.CntRcvdRNRErr])
				}
			})
		})
	}
}

// TestLocalProtErr: a WR whose local SGE fails the lkey/PD/access check
// completes with LOC_PROT_ERR and moves the requester to ERR: a SEND
// gathering from an MR of another PD, a READ scattering into an MR without
// LOCAL_WRITE, an atomic result into one.
func TestLocalProtErr(t *testing.T) {
	cases := []struct {
		name  string
		wr    func(x *xpair, ro *qp.MR) *qp.SendWR
		sends bool // the request still goes out (the failure is on the response)
	}{
		{"send_other_pd", func(x *xpair, ro *qp.MR) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRSend, SGL: []qp.SGE{{Addr: x.a.mrO.IOVA(), Length: 16, LKey: x.a.mrO.LKey()}}}
		}, false},
		{"write_bad_lkey", func(x *xpair, ro *qp.MR) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{{Addr: x.a.mr.IOVA(), Length: 16, LKey: x.a.mr.LKey() ^ 1}},
				RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()}
		}, false},
		{"read_into_readonly_mr", func(x *xpair, ro *qp.MR) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRRDMARead, SGL: []qp.SGE{{Addr: ro.IOVA(), Length: 16, LKey: ro.LKey()}},
				RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey()}
		}, true},
		{"atomic_into_readonly_mr", func(x *xpair, ro *qp.MR) *qp.SendWR {
			return &qp.SendWR{Opcode: transport.WRAtomicFetchAdd, SGL: []qp.SGE{{Addr: ro.IOVA(), Length: 8, LKey: ro.LKey()}},
				RemoteAddr: x.b.mr.IOVA(), RKey: x.b.mr.RKey(), CompareAdd: 1}
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				x := newX(t, xopts{})
				a, b := x.a, x.b
				roBuf := make([]byte, 64)
				for i := range roBuf {
					roBuf[i] = canary
				}
				ro, err := a.pd.RegMR(roBuf, memreg.RemoteRead) // no LOCAL_WRITE
				if err != nil {
					t.Fatal(err)
				}
				b.reset()
				x.next()
				wr := c.wr(x, ro)
				wr.WRID, wr.Flags = 1, transport.SendSignaled
				x.post(a, wr)
				x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{a.sge(0, 8)},
					RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
				expectWC(t, a.scq, 1, transport.WCLocProtErr, 0)
				expectWC(t, a.scq, 2, transport.WCWRFlushErr, 0)
				if a.qp.State() != transport.StateErr {
					t.Fatalf("requester state %v", a.qp.State())
				}
				x.settle()
				reqs := requests(x.next(), true)
				if c.sends != (len(reqs) > 0) {
					t.Fatalf("requests on the wire: %v", reqs)
				}
				checkBuf(t, "read-only MR", roBuf)
				if !c.sends {
					checkBuf(t, "responder", b.buf)
				}
			})
		})
	}
}

// TestSolicitedOnlyWakesOnError: a CQ armed for solicited completions only
// is woken by an error completion.
func TestSolicitedOnlyWakesOnError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.recv(b, 1, b.sge(0, 8))
		b.rcq.ReqNotify(true)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []qp.SGE{a.sge(0, 64)}}) // too long: LOC_LEN_ERR
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.rcq.WaitEvent(ctx); err != nil {
			t.Fatalf("no event for an error completion: %v", err)
		}
		expectWC(t, b.rcq, 1, transport.WCLocLenErr, 0)
	})
}

// TestSendWithInvBadRKey: SEND_WITH_INV naming an rkey that cannot be
// invalidated is rxe's class J error: no NAK (the SEND is acknowledged),
// the RECV completes with REM_INV_REQ_ERR and the responder goes to ERR.
func TestSendWithInvBadRKey(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		b.reset()
		x.recv(b, 1, b.sge(0, 64))
		x.recv(b, 2, b.sge(64, 64))
		x.next()
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 16)}, InvRKey: b.mrO.RKey()}) // an MR of another PD
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
		expectWC(t, b.rcq, 1, transport.WCRemInvReqErr, 0)
		expectWC(t, b.rcq, 2, transport.WCWRFlushErr, 0)
		if b.qp.State() != transport.StateErr || !b.mrO.Valid() {
			t.Fatalf("responder state %v, MR valid %v", b.qp.State(), b.mrO.Valid())
		}
		x.settle()
		for _, p := range filter(x.next(), false) {
			if p.p.AETH == nil || p.p.AETH.Syndrome() != wire.SyndromeACKNoCredit {
				t.Fatalf("responder sent %v, want only an ACK", p)
			}
		}
	})
}

// TestZeroLengthSkipsRKey: zero-length READ and WRITE skip the R_Key check
// (rxe check_rkey): they succeed with a bogus rkey and address.
func TestZeroLengthSkipsRKey(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		for i, op := range []transport.WROpcode{transport.WRRDMAWrite, transport.WRRDMARead} {
			x.post(x.a, &qp.SendWR{WRID: uint64(i), Opcode: op, Flags: transport.SendSignaled, RemoteAddr: 0xdead0000, RKey: 0xbadbad})
			expectWC(t, x.a.scq, uint64(i), transport.WCSuccess, map[transport.WROpcode]transport.WCOpcode{
				transport.WRRDMAWrite: transport.WCRDMAWrite, transport.WRRDMARead: transport.WCRDMARead}[op])
		}
	})
}

// TestRecoverAfterError: after an error both QPs go through RESET and are
// connected again (new PSNs); every operation then works, and nothing of
// the old connection (RECVs, PSNs, read/atomic history) leaks into it.
func TestRecoverAfterError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.recv(b, 50, b.sge(0, 64))
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey() ^ 0x40})
		expectWC(t, a.scq, 1, transport.WCRemAccessErr, 0)
		expectWC(t, b.rcq, 50, transport.WCWRFlushErr, 0)
		for _, e := range []*xend{a, b} {
			if err := e.qp.Modify(context.Background(), qp.Attr{State: transport.StateReset}, transport.AttrState); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.qp.Connect(context.Background(), qp.Remote{QPN: b.qp.QPN(), PSN: 0x500, GID: b.ip}, qp.ConnectOptions{SQPSN: 0x777}); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.Connect(context.Background(), qp.Remote{QPN: a.qp.QPN(), PSN: 0x777, GID: a.ip}, qp.ConnectOptions{SQPSN: 0x500}); err != nil {
			t.Fatal(err)
		}
		x.settle()
		x.next()
		a.reset()
		b.reset()
		data := pattern(21, 3000)
		copy(a.buf, data)
		x.recv(b, 2, b.sge(100, 3000))
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, 3000)}})
		x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 3000)}, RemoteAddr: b.mr.IOVA() + 5000, RKey: b.mr.RKey()})
		x.post(a, &qp.SendWR{WRID: 4, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(10000, 3000)}, RemoteAddr: b.mr.IOVA() + 5000, RKey: b.mr.RKey()})
		x.post(a, &qp.SendWR{WRID: 5, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(20000, 8)}, RemoteAddr: b.mr.IOVA() + 9000, RKey: b.mr.RKey(), CompareAdd: 3})
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCSend)
		expectWC(t, a.scq, 3, transport.WCSuccess, transport.WCRDMAWrite)
		expectWC(t, a.scq, 4, transport.WCSuccess, transport.WCRDMARead)
		expectWC(t, a.scq, 5, transport.WCSuccess, transport.WCFetchAdd)
		expectWC(t, b.rcq, 2, transport.WCSuccess, transport.WCRecv)
		noWC(t, b.rcq, "responder")
		want := le64(uint64(canary) * 0x0101010101010101)
		checkBuf(t, "requester", a.buf, region{0, data}, region{10000, data}, region{20000, want})
		binary.LittleEndian.PutUint64(want, binary.LittleEndian.Uint64(want)+3)
		checkBuf(t, "responder", b.buf, region{100, data}, region{5000, data}, region{9000, want})
		x.settle()
		ps := firstCopies(t, requests(x.next(), true))
		// SEND 3 packets, WRITE 3, READ 3 PSNs, atomic 1: 0x777..0x780.
		if len(ps) != 8 || ps[0].p.BTH.PSN() != 0x777 || ps[7].p.BTH.PSN() != 0x780 {
			t.Fatalf("requests after reconnect: %v", ps)
		}
	})
}
