package qp_test

// Every RC operation class between two endpoints over the in-memory link,
// with real data, canaries around every target and the frames on the wire
// checked through the pcap tap (PROTOCOL.md §3.2, §3.3).

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

const (
	srcOff = 133 // unaligned on purpose
	dstOff = 67
)

// opSizes are the message sizes of the matrix for a path MTU.
func opSizes(mtu int) []int { return []int{0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, 1 << 20} }

// npkts is the number of packets (or READ responses) of an n-byte message.
func npkts(n, mtu int) int { return max(1, (n+mtu-1)/mtu) }

// TestOpsMatrix runs SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE,
// RDMA_WRITE_WITH_IMM and RDMA_READ at sizes 0, 1, MTU-1, MTU, MTU+1,
// 3·MTU and 1 MiB, and FETCH_ADD and CMP_SWAP (success and failure), over
// path MTU 1024 (link 1500) and 4096 (link 9000).
func TestOpsMatrix(t *testing.T) {
	for _, lm := range []struct{ link, pmtu int }{{1500, 1024}, {9000, 4096}} {
		t.Run(fmt.Sprintf("mtu%d", lm.pmtu), func(t *testing.T) {
			// Retransmissions (an ACK timeout on a stalled machine) are
			// tolerated by firstCopies but need not happen.
			x := newX(t, xopts{linkMTU: lm.link, size: 1<<20 + 4096})
			if got := x.a.qp.Query().PathMTU.Bytes(); got != lm.pmtu {
				t.Fatalf("path MTU %d, want %d", got, lm.pmtu)
			}
			x.next()
			wrID := uint64(0)
			for _, n := range opSizes(lm.pmtu) {
				for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRSendWithInv,
					transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead} {
					wrID++
					t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
						x.t = t
						runOp(t, x, op, n, lm.pmtu, wrID)
					})
				}
			}
			x.t = t
			t.Run("atomics", func(t *testing.T) {
				x.t = t
				runAtomics(t, x)
			})
			x.t = t
			x.settle()
			checkCounters(t, x)
		})
	}
}

func runOp(t *testing.T, x *xpair, op transport.WROpcode, n, mtu int, wrID uint64) {
	a, b := x.a, x.b
	a.reset()
	b.reset()
	data := pattern(wrID, n)
	imm := uint32(0xA1B2C300) | uint32(wrID&0xFF)
	var inv *qp.MR
	switch op {
	case transport.WRRDMARead:
		copy(b.buf[srcOff:], data)
	default:
		copy(a.buf[srcOff:], data)
	}
	wr := &qp.SendWR{WRID: wrID, Opcode: op, Flags: transport.SendSignaled, Imm: imm,
		RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()}
	switch op {
	case transport.WRRDMARead:
		wr.SGL = []qp.SGE{a.sge(dstOff, n)}
		wr.RemoteAddr = b.mr.IOVA() + srcOff
	default:
		wr.SGL = []qp.SGE{a.sge(srcOff, n)}
	}
	if op == transport.WRSendWithInv {
		var err error
		inv, err = b.pd.RegMR(make([]byte, 64), memreg.RemoteWrite|memreg.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		wr.InvRKey = inv.RKey()
	}
	recv := op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRSendWithInv ||
		op == transport.WRRDMAWriteWithImm
	if recv {
		sgl := []qp.SGE{b.sge(dstOff, n)}
		if op == transport.WRRDMAWriteWithImm {
			sgl = nil // the data goes to the RETH target; the RECV only takes the CQE
		}
		x.recv(b, 1000+wrID, sgl...)
	}
	x.post(a, wr)
	wantOp := map[transport.WROpcode]transport.WCOpcode{transport.WRSend: transport.WCSend,
		transport.WRSendWithImm: transport.WCSend, transport.WRSendWithInv: transport.WCSend,
		transport.WRRDMAWrite: transport.WCRDMAWrite, transport.WRRDMAWriteWithImm: transport.WCRDMAWrite,
		transport.WRRDMARead: transport.WCRDMARead}[op]
	wc := expectWC(t, a.scq, wrID, transport.WCSuccess, wantOp)
	// rxe make_send_cqe: byte_len is the message length for every opcode,
	// and *_WITH_IMM send CQEs carry IBV_WC_WITH_IMM.
	if wc.ByteLen != uint32(n) {
		t.Fatalf("send completion byte_len %d, want %d", wc.ByteLen, n)
	}
	if withImm := op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm; (wc.Flags&transport.WCWithImm != 0) != withImm {
		t.Fatalf("send completion %v: WITH_IMM flag should be %v", wc, withImm)
	}
	if recv {
		rop := transport.WCRecv
		if op == transport.WRRDMAWriteWithImm {
			rop = transport.WCRecvRDMAWithImm
		}
		rwc := expectWC(t, b.rcq, 1000+wrID, transport.WCSuccess, rop)
		if rwc.ByteLen != uint32(n) {
			t.Fatalf("receive byte_len %d, want %d", rwc.ByteLen, n)
		}
		hasImm := op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm
		if (rwc.Flags&transport.WCWithImm != 0) != hasImm || (hasImm && rwc.Imm != imm) {
			t.Fatalf("receive completion %v: imm flag/value wrong (want imm=%v %#x)", rwc, hasImm, imm)
		}
		if op == transport.WRSendWithInv {
			if rwc.Flags&transport.WCWithInv == 0 || rwc.InvRKey != inv.RKey() {
				t.Fatalf("receive completion %v: want WITH_INV rkey %#x", rwc, inv.RKey())
			}
			if inv.Valid() {
				t.Fatalf("MR %#x still valid after SEND_WITH_INV", inv.RKey())
			}
		}
		if rwc.QPNum != b.qp.QPN() {
			t.Fatalf("receive completion qp_num %#x, want %#x", rwc.QPNum, b.qp.QPN())
		}
	}
	noWC(t, b.rcq, "responder")
	// Data and canaries.
	if op == transport.WRRDMARead {
		checkBuf(t, "requester", a.buf, region{dstOff, data})
		checkBuf(t, "responder", b.buf, region{srcOff, data})
	} else {
		checkBuf(t, "requester", a.buf, region{srcOff, data})
		checkBuf(t, "responder", b.buf, region{dstOff, data})
	}
	checkBuf(t, "requester mr2", a.buf2)
	checkBuf(t, "responder mr2", b.buf2)
	if inv != nil {
		inv.Deregister()
	}

	// The wire: packet count, opcode sequence, AckReq, SE, RETH, ImmDt, IETH.
	x.settle()
	ps := firstCopies(t, x.next())
	np := npkts(n, mtu)
	var reqs, resps []capPkt
	for _, p := range ps {
		if p.fromA {
			reqs = append(reqs, p)
		} else {
			resps = append(resps, p)
		}
	}
	if op == transport.WRRDMARead {
		if len(reqs) != 1 || reqs[0].p.Opcode() != wire.RCRDMAReadRequest || reqs[0].p.RETH.DMALen() != uint32(n) {
			t.Fatalf("READ: %d request frames %v", len(reqs), reqs)
		}
		if len(resps) != np {
			t.Fatalf("READ of %d bytes: %d responses, want %d", n, len(resps), np)
		}
		for i, r := range resps {
			if r.p.BTH.PSN() != reqs[0].p.BTH.PSN().Add(uint32(i)) {
				t.Fatalf("READ response %d: %v", i, &r)
			}
			pos := r.p.Opcode().Info().Pos
			hasAETH := r.p.AETH != nil
			if hasAETH != (pos != wire.PosMiddle) {
				t.Fatalf("READ response %d %v: AETH present=%v", i, &r, hasAETH)
			}
		}
		return
	}
	if len(reqs) != np {
		t.Fatalf("%v of %d bytes: %d request frames, want %d", op, n, len(reqs), np)
	}
	for i, r := range reqs {
		p := &r.p
		pos := p.Opcode().Info().Pos
		switch {
		case np == 1 && pos != wire.PosOnly, np > 1 && i == 0 && pos != wire.PosFirst,
			np > 1 && i == np-1 && pos != wire.PosLast, np > 1 && i > 0 && i < np-1 && pos != wire.PosMiddle:
			t.Fatalf("packet %d of %d: %v", i, np, &r)
		}
		wantLen := min(mtu, n-i*mtu)
		if len(p.Payload) != wantLen {
			t.Fatalf("packet %d payload %d, want %d", i, len(p.Payload), wantLen)
		}
		if !bytes.Equal(p.Payload, data[i*mtu:i*mtu+wantLen]) {
			t.Fatalf("packet %d payload bytes differ", i)
		}
		if p.BTH.PSN() != reqs[0].p.BTH.PSN().Add(uint32(i)) {
			t.Fatalf("packet %d PSN %#x not consecutive", i, uint32(p.BTH.PSN()))
		}
		if i == 0 && p.RETH != nil && p.RETH.DMALen() != uint32(n) {
			t.Fatalf("FIRST RETH length %d, want the whole message %d", p.RETH.DMALen(), n)
		}
		last := i == np-1
		if (p.ImmDt != nil) != (last && (op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm)) {
			t.Fatalf("packet %d: ImmDt present=%v", i, p.ImmDt != nil)
		}
		if p.ImmDt != nil && p.ImmDt.Imm() != imm {
			t.Fatalf("ImmDt %#x, want %#x", p.ImmDt.Imm(), imm)
		}
		if p.IETH != nil && p.IETH.RKey() != wr.InvRKey {
			t.Fatalf("IETH %#x, want %#x", p.IETH.RKey(), wr.InvRKey)
		}
		if p.BTH.SE() {
			t.Fatalf("packet %d: SE set without IBV_SEND_SOLICITED", i)
		}
	}
}

func runAtomics(t *testing.T, x *xpair) {
	a, b := x.a, x.b
	const tgt, res = 64, 256
	cases := []struct {
		name            string
		op              transport.WROpcode
		init, cmp, swap uint64
		want            uint64 // target afterwards
	}{
		{"fetch_add", transport.WRAtomicFetchAdd, 0x1122334455667788, 0x0101010101010101, 0, 0x1223344556677889},
		{"fetch_add_wrap", transport.WRAtomicFetchAdd, ^uint64(0), 2, 0, 1},
		{"cmp_swap_hit", transport.WRAtomicCmpAndSwp, 0xDEADBEEF00000001, 0xDEADBEEF00000001, 0x0123456789ABCDEF, 0x0123456789ABCDEF},
		{"cmp_swap_miss", transport.WRAtomicCmpAndSwp, 0xDEADBEEF00000001, 0xDEADBEEF00000002, 0x0123456789ABCDEF, 0xDEADBEEF00000001},
	}
	for i, c := range cases {
		a.reset()
		b.reset()
		copy(b.buf[tgt:], le64(c.init))
		wrID := uint64(5000 + i)
		x.post(a, &qp.SendWR{WRID: wrID, Opcode: c.op, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(res, 8)},
			RemoteAddr: b.mr.IOVA() + tgt, RKey: b.mr.RKey(), CompareAdd: c.cmp, Swap: c.swap})
		wop := transport.WCFetchAdd
		if c.op == transport.WRAtomicCmpAndSwp {
			wop = transport.WCCompSwap
		}
		wc := expectWC(t, a.scq, wrID, transport.WCSuccess, wop)
		if wc.ByteLen != 8 {
			t.Fatalf("%s: byte_len %d", c.name, wc.ByteLen)
		}
		checkBuf(t, c.name+" requester", a.buf, region{res, le64(c.init)})
		checkBuf(t, c.name+" responder", b.buf, region{tgt, le64(c.want)})
		x.settle()
		ps := x.next()
		if len(ps) != 2 || !ps[0].fromA || ps[1].fromA || ps[1].p.Opcode() != wire.RCAtomicAcknowledge ||
			ps[1].p.AtomicAckETH.OrigValue() != c.init || ps[1].p.BTH.PSN() != ps[0].p.BTH.PSN() {
			t.Fatalf("%s: frames %v", c.name, ps)
		}
		ae := ps[0].p.AtomicETH
		if ae.VA() != b.mr.IOVA()+tgt || ae.RKey() != b.mr.RKey() {
			t.Fatalf("%s: AtomicETH va %#x rkey %#x", c.name, ae.VA(), ae.RKey())
		}
		if c.op == transport.WRAtomicFetchAdd && (ae.SwapAdd() != c.cmp || ae.Compare() != 0) {
			t.Fatalf("%s: FETCH_ADD AtomicETH add %#x compare %#x", c.name, ae.SwapAdd(), ae.Compare())
		}
		if c.op == transport.WRAtomicCmpAndSwp && (ae.SwapAdd() != c.swap || ae.Compare() != c.cmp) {
			t.Fatalf("%s: CMP_SWAP AtomicETH swap %#x compare %#x", c.name, ae.SwapAdd(), ae.Compare())
		}
	}
}

// TestSGLists: SEND with 4 SGEs on the sender and 3 on the receiver, WRITE
// gathering 4 SGEs and READ scattering into 4, from two MRs, with uneven
// lengths that cross packet boundaries.
func TestSGLists(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		// Sender pieces: main MR and mr2 alternating, lengths 700+1500+1+799 = 3000.
		src := pattern(7, 3000)
		copy(a.buf[10:], src[0:700])
		copy(a.buf2[33:], src[700:2200])
		copy(a.buf[5000:], src[2200:2201])
		copy(a.buf2[9000:], src[2201:3000])
		sendSGL := []qp.SGE{a.sge(10, 700), a.sge2(33, 1500), a.sge(5000, 1), a.sge2(9000, 799)}
		aRegions := []region{{10, src[0:700]}, {5000, src[2200:2201]}}
		a2Regions := []region{{33, src[700:2200]}, {9000, src[2201:3000]}}

		// Receiver: 1234 bytes in mr2, 1000 in the main MR, 1766 in mr2 (room for 4000).
		x.recv(b, 1, b.sge2(100, 1234), b.sge(77, 1000), b.sge2(5000, 1766))
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: sendSGL})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
		if wc := expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv); wc.ByteLen != 3000 {
			t.Fatalf("byte_len %d", wc.ByteLen)
		}
		checkBuf(t, "recv main", b.buf, region{77, src[1234:2234]})
		checkBuf(t, "recv mr2", b.buf2, region{100, src[0:1234]}, region{5000, src[2234:3000]})
		checkBuf(t, "send main", a.buf, aRegions...)
		checkBuf(t, "send mr2", a.buf2, a2Regions...)

		// WRITE gathering the same 4 SGEs into one remote range.
		b.reset()
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled, SGL: sendSGL,
			RemoteAddr: b.mr2.IOVA() + 11, RKey: b.mr2.RKey()})
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMAWrite)
		checkBuf(t, "write target", b.buf2, region{11, src})
		checkBuf(t, "write main", b.buf)

		// READ scattering a remote range into 4 SGEs.
		a.reset()
		copy(b.buf[300:], src)
		x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled, SGL: sendSGL,
			RemoteAddr: b.mr.IOVA() + 300, RKey: b.mr.RKey()})
		expectWC(t, a.scq, 3, transport.WCSuccess, transport.WCRDMARead)
		checkBuf(t, "read main", a.buf, aRegions...)
		checkBuf(t, "read mr2", a.buf2, a2Regions...)
	})
}

// TestImmByteOrder: the 32-bit immediate goes on the wire big-endian and
// the receive completion's Imm equals the WR's Imm.
func TestImmByteOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		x.next()
		const imm = 0x01020304
		x.recv(x.b, 9)
		x.post(x.a, &qp.SendWR{WRID: 9, Opcode: transport.WRSendWithImm, Flags: transport.SendSignaled, Imm: imm})
		expectWC(t, x.a.scq, 9, transport.WCSuccess, transport.WCSend)
		wc := expectWC(t, x.b.rcq, 9, transport.WCSuccess, transport.WCRecv)
		if wc.Imm != imm || wc.Flags&transport.WCWithImm == 0 {
			t.Fatalf("completion %v", wc)
		}
		x.settle()
		req := requests(x.next(), true)[0]
		if !bytes.Equal(req.p.ImmDt[:4], []byte{1, 2, 3, 4}) {
			t.Fatalf("ImmDt bytes % x, want 01 02 03 04", []byte(req.p.ImmDt[:4]))
		}
	})
}

// TestInvalidate: SEND_WITH_INV invalidates the responder's rkey, so a later
// WRITE with it fails with REM_ACCESS_ERR (NAK 0x62); LOCAL_INV invalidates
// one of the requester's own keys the same way.
func TestInvalidate(t *testing.T) {
	t.Run("send_with_inv", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			x := newX(t, xopts{})
			a, b := x.a, x.b
			a.reset()
			b.reset()
			x.recv(b, 1, b.sge(0, 16))
			x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSendWithInv, Flags: transport.SendSignaled,
				SGL: []qp.SGE{a.sge(0, 16)}, InvRKey: b.mr2.RKey()})
			expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
			wc := expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv)
			if wc.Flags&transport.WCWithInv == 0 || wc.InvRKey != b.mr2.RKey() || b.mr2.Valid() {
				t.Fatalf("completion %v, mr2 valid=%v", wc, b.mr2.Valid())
			}
			x.settle()
			x.next()
			x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []qp.SGE{a.sge(0, 16)}, RemoteAddr: b.mr2.IOVA(), RKey: b.mr2.RKey()})
			expectWC(t, a.scq, 2, transport.WCRemAccessErr, 0)
			x.settle()
			nak := filter(x.next(), false)
			if len(nak) != 1 || nak[0].p.Opcode() != wire.RCAcknowledge || nak[0].p.AETH.Syndrome() != 0x62 {
				t.Fatalf("want one NAK 0x62, got %v", nak)
			}
			checkBuf(t, "invalidated MR", b.buf2)
		})
	})
	t.Run("local_inv", func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRLocalInv, Flags: transport.SendSignaled, InvRKey: a.mr2.RKey()})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCLocalInv)
		if a.mr2.Valid() {
			t.Fatal("mr2 still valid after LOCAL_INV")
		}
		a.reset()
		b.reset()
		x.post(b, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{b.sge(0, 16)}, RemoteAddr: a.mr2.IOVA(), RKey: a.mr2.RKey()})
		expectWC(t, b.scq, 2, transport.WCRemAccessErr, 0)
		checkBuf(t, "invalidated MR", a.buf2)
	})
}

// TestSolicited: a CQ armed with ReqNotify(true) is woken by a receive of an
// SE-marked message only, not by unsolicited ones (IBTA 11.4.2.2).
func TestSolicited(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		for i := 1; i <= 3; i++ {
			x.recv(b, uint64(i), b.sge(i*64, 64))
		}
		b.rcq.ReqNotify(true)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, 8)}})
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMAWrite)
		x.settle()
		// Both receives completed (the requester's ACKs prove it) without an event.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.rcq.WaitEvent(ctx); err == nil {
			t.Fatal("an unsolicited receive fired a solicited-only notification")
		}
		var wcs [4]qp.WC
		if n, _ := b.rcq.Poll(wcs[:]); n != 2 || wcs[0].Flags&transport.WCSolicited != 0 || wcs[1].Flags&transport.WCSolicited != 0 {
			t.Fatalf("receives %v", wcs[:n])
		}
		x.next()
		x.post(a, &qp.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled | transport.SendSolicited, SGL: []qp.SGE{a.sge(0, 8)}})
		ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel2()
		if err := b.rcq.WaitEvent(ctx2); err != nil {
			t.Fatalf("solicited receive did not fire the notification: %v", err)
		}
		wc := expectWC(t, b.rcq, 3, transport.WCSuccess, transport.WCRecv)
		if wc.Flags&transport.WCSolicited == 0 {
			t.Fatalf("completion %v lacks the solicited flag", wc)
		}
		expectWC(t, a.scq, 3, transport.WCSuccess, transport.WCSend)
		x.settle()
		req := requests(x.next(), true)
		if len(req) != 1 || !req[0].p.BTH.SE() {
			t.Fatalf("solicited SEND frames %v (want SE set)", req)
		}
	})
}

// TestZeroLengthReadPSN: a zero-length READ uses exactly one PSN; the next
// request carries the following PSN.
func TestZeroLengthReadPSN(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		x.next()
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 4)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCRDMARead)
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMAWrite)
		x.settle()
		ps := x.next()
		req := requests(ps, true)
		resp := filter(ps, false)
		if len(req) != 2 || req[0].p.Opcode() != wire.RCRDMAReadRequest || req[0].p.RETH.DMALen() != 0 ||
			req[1].p.BTH.PSN() != req[0].p.BTH.PSN().Add(1) || uint32(req[0].p.BTH.PSN()) != a.sentPSN {
			t.Fatalf("requests %v", req)
		}
		if resp[0].p.Opcode() != wire.RCRDMAReadResponseOnly || len(resp[0].p.Payload) != 0 {
			t.Fatalf("response %v", resp)
		}
	})
}

// TestUnsignaled: unsignalled WRs produce no CQE; a later signalled one
// does, and its CQE comes after the unsignalled ones completed.
func TestUnsignaled(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		for i := 1; i <= 5; i++ {
			x.post(a, &qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{a.sge(i*8, 8)},
				RemoteAddr: b.mr.IOVA() + uint64(i*8), RKey: b.mr.RKey()})
		}
		x.post(a, &qp.SendWR{WRID: 6, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, 6, transport.WCSuccess, transport.WCRDMAWrite)
		x.settle()
		noWC(t, a.scq, "unsignalled writes")
		if !bytes.Equal(a.buf[:48], b.buf[:48]) {
			t.Fatal("data not written")
		}
	})
}

// TestSQSigAll: with sq_sig_all every send WR completes, signalled or not.
func TestSQSigAll(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{sqSigAllA: true})
		a, b := x.a, x.b
		for i := 1; i <= 3; i++ {
			x.post(a, &qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, SGL: []qp.SGE{a.sge(0, 8)},
				RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		}
		for i := 1; i <= 3; i++ {
			expectWC(t, a.scq, uint64(i), transport.WCSuccess, transport.WCRDMAWrite)
		}
	})
}

// TestInline: an inline SEND copies the data at post time. The QP is
// drained (SQD) so the WR is queued, not sent, by PostSend; the buffer is
// overwritten at once and the QP returned to RTS: the receiver gets the
// bytes of post time.
func TestInline(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		data := pattern(3, 200)
		copy(a.buf, data)
		x.recv(b, 1, b.sge(dstOff, 256))
		if err := a.qp.Modify(context.Background(), qp.Attr{State: transport.StateSQD}, transport.AttrState); err != nil {
			t.Fatal(err)
		}
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.SendSignaled | transport.SendInline,
			SGL: []qp.SGE{a.sge(0, 200)}})
		for i := range 200 {
			a.buf[i] = 0xEE
		}
		x.settle()
		if f := x.next(); len(f) != 0 {
			t.Fatalf("frames sent in SQD: %v", f)
		}
		if err := a.qp.Modify(context.Background(), qp.Attr{State: transport.StateRTS}, transport.AttrState); err != nil {
			t.Fatal(err)
		}
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCSend)
		expectWC(t, b.rcq, 1, transport.WCSuccess, transport.WCRecv)
		checkBuf(t, "receiver", b.buf, region{dstOff, data})
		if err := a.qp.PostSend(&qp.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendInline,
			SGL: []qp.SGE{a.sge(0, transport.MaxInlineData+1)}}); err == nil {
			t.Fatal("inline SEND larger than the inline maximum accepted")
		}
	})
}

// TestFillSQ posts as many WRs as the send queue holds (more than the
// 128-PSN window), then one more (ErrQueueFull), and checks every
// completion arrives in order.
func TestFillSQ(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{capsA: qp.Caps{MaxSendWR: 300, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		a, b := x.a, x.b
		// Stop B from answering until the queue is full: B's link drops nothing,
		// but A's frames queue up in the link until B reads them, which it does
		// at once; so fill the queue faster than acknowledgements can free it by
		// posting multi-packet WRITEs.
		posted := 0
		for i := 0; i < 300; i++ {
			err := a.qp.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
				SGL: []qp.SGE{a.sge(0, 2048)}, RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()})
			if err != nil {
				t.Fatalf("post %d: %v", i, err)
			}
			posted++
		}
		for i := 0; i < posted; i++ {
			expectWC(t, a.scq, uint64(i), transport.WCSuccess, transport.WCRDMAWrite)
		}
	})
}

// TestPSNWrap: traffic starting at PSN 0xFFFFF0 wraps to 0 inside a
// multi-packet message and inside a READ's PSN range.
func TestPSNWrap(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{psnA: 0xFFFFF0, psnB: 0xFFFFFE})
		a, b := x.a, x.b
		a.reset()
		b.reset()
		data := pattern(11, 20*1024)
		copy(a.buf[srcOff:], data)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(srcOff, len(data))}, RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()})
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCRDMAWrite)
		checkBuf(t, "write target", b.buf, region{dstOff, data})
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(30000, 5000)}, RemoteAddr: b.mr.IOVA() + dstOff, RKey: b.mr.RKey()})
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMARead)
		checkBuf(t, "read target", a.buf, region{srcOff, data}, region{30000, data[:5000]})
		// B sends across its own wrap (PSN 0xFFFFFE, 0xFFFFFF, 0, ...).
		x.recv(a, 3, a.sge(40000, 4000))
		x.post(b, &qp.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{b.sge(dstOff, 4000)}})
		expectWC(t, b.scq, 3, transport.WCSuccess, transport.WCSend)
		expectWC(t, a.rcq, 3, transport.WCSuccess, transport.WCRecv)
		if !bytes.Equal(a.buf[40000:44000], data[:4000]) {
			t.Fatal("SEND data across the wrap differs")
		}
		x.settle()
		var psns []uint32
		for _, p := range firstCopies(t, requests(x.next(), true)) {
			psns = append(psns, uint32(p.p.BTH.PSN()))
		}
		// 20 WRITE packets 0xFFFFF0..0x3, then the READ at 0x4 (5 PSNs).
		if len(psns) != 21 || psns[0] != 0xFFFFF0 || psns[15] != 0xFFFFFF || psns[16] != 0 || psns[19] != 3 || psns[20] != 4 {
			t.Fatalf("A's PSNs %x", psns)
		}
		if got := x.a.qp.Query().SQPSN; got != 9 {
			t.Fatalf("next SQ PSN %#x, want 9", uint32(got))
		}
	})
}

// checkCounters: on a fault-free link every frame one side sent was
// received by the other, nothing was dropped or NAKed, and the device
// counters (one QP per device) equal the QP's.
func checkCounters(t *testing.T, x *xpair) {
	t.Helper()
	ca, cb := x.a.qp.Counters(), x.b.qp.Counters()
	if ca[transport.CntSentPkts] != cb[transport.CntRcvdPkts] || cb[transport.CntSentPkts] != ca[transport.CntRcvdPkts] {
		t.Errorf("A sent %d, B received %d; B sent %d, A received %d", ca[transport.CntSentPkts], cb[transport.CntRcvdPkts],
			cb[transport.CntSentPkts], ca[transport.CntRcvdPkts])
	}
	for _, c := range []transport.Counter{transport.CntSentNAKs, transport.CntRcvdNAKs, transport.CntOutOfSeqRequest,
		transport.CntRcvdBadAddr, transport.CntRcvdBadPKey, transport.CntRcvdBadOpcode, transport.CntRcvdWrongState,
		transport.CntSendErrors, transport.CntRcvdUnknownPSN, transport.CntRetryExceededErr} {
		if ca[c]+cb[c] != 0 {
			t.Errorf("counter %v: A %d B %d", c, ca[c], cb[c])
		}
	}
	for _, e := range []*xend{x.a, x.b} {
		if d, q := e.dev.Counters(), e.qp.Counters(); d != q {
			t.Errorf("device counters %v differ from the QP's %v", d, q)
		}
		if rx := e.dev.RxStats(); rx.ParseErrors+rx.BadICRC+rx.NotRoCE+rx.WrongDst+rx.NoQP != 0 {
			t.Errorf("receive drops %+v", rx)
		}
	}
}
