package qp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
)

// srqRig is a deterministic (sim, Manual mode) pair: n RC QPs on A, each
// connected to one of n QPs on B that all take their receives from one SRQ
// and complete into one receive CQ.
type srqRig struct {
	t        *testing.T
	n        *sim.Net
	srq      *qp.SRQ
	aq, bq   []*qp.QP
	acq, bcq *qp.CQ // A's send CQ; B's shared receive CQ (and send CQ)
	abuf     []byte
	bbuf     []byte
	amr, bmr *qp.MR
}

const srqSlot = 256 // bytes of B's buffer per posted receive

func newSRQRig(t *testing.T, nqp int, sa qp.SRQInitAttr) *srqRig {
	t.Helper()
	return newSRQRigFaults(t, nqp, sa, sim.Faults{})
}

func newSRQRigFaults(t *testing.T, nqp int, sa qp.SRQInitAttr, f sim.Faults) *srqRig {
	t.Helper()
	n := simtest.NewPair(t, sim.Config{Seed: simtest.Seed(t, 1), AtoB: f, BtoA: f})
	r := &srqRig{t: t, n: n, abuf: make([]byte, 256<<10), bbuf: make([]byte, 256<<10)}
	pa, pb := n.A.Dev.AllocPD(), n.B.Dev.AllocPD()
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r.srq, err = pb.CreateSRQ(sa)
	must(err)
	r.acq, err = n.A.Dev.CreateCQ(4096)
	must(err)
	r.bcq, err = n.B.Dev.CreateCQ(4096)
	must(err)
	r.amr, err = pa.RegMR(r.abuf, qp.LocalWrite)
	must(err)
	r.bmr, err = pb.RegMR(r.bbuf, qp.LocalWrite)
	must(err)
	caps := qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	for range nqp {
		a, err := pa.CreateQP(qp.InitAttr{SendCQ: r.acq, RecvCQ: r.acq, Cap: caps})
		must(err)
		b, err := pb.CreateQP(qp.InitAttr{SendCQ: r.bcq, RecvCQ: r.bcq, Cap: qp.Caps{MaxSendWR: 4}, SRQ: r.srq})
		must(err)
		r.aq, r.bq = append(r.aq, a), append(r.bq, b)
	}
	ctx := context.Background()
	for i := range r.aq {
		must(r.aq[i].Connect(ctx, qp.Remote{QPN: r.bq[i].QPN(), GID: n.B.GID()}, qp.ConnectOptions{}))
		must(r.bq[i].Connect(ctx, qp.Remote{QPN: r.aq[i].QPN(), GID: n.A.GID()}, qp.ConnectOptions{}))
	}
	return r
}

// post posts receive wrID to the SRQ, in slot wrID of B's buffer.
func (r *srqRig) post(wrID uint64) {
	r.t.Helper()
	if err := r.srq.PostRecv(&qp.RecvWR{WRID: wrID, SGL: []qp.SGE{{Addr: r.bmr.IOVA() + wrID*srqSlot, Length: srqSlot, LKey: r.bmr.LKey()}}}); err != nil {
		r.t.Fatal(err)
	}
}

// send sends msg from A's QP i (from offset off of A's buffer).
func (r *srqRig) send(i int, wrID uint64, msg []byte) {
	r.t.Helper()
	off := uint64(wrID%64) * srqSlot
	copy(r.abuf[off:], msg)
	if err := r.aq[i].PostSend(&qp.SendWR{WRID: wrID, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: r.amr.IOVA() + off, Length: uint32(len(msg)), LKey: r.amr.LKey()}}}); err != nil {
		r.t.Fatal(err)
	}
}

// wait returns the next completion of cq within a simulated minute.
func (r *srqRig) wait(cq *qp.CQ) qp.WC {
	r.t.Helper()
	wcs := make([]qp.WC, 1)
	if _, err := r.n.Wait(cq, wcs, time.Minute); err != nil {
		r.t.Fatal(err)
	}
	return wcs[0]
}

// event returns the device's queued async event, if any, without waiting.
func event(d *qp.Device) (qp.AsyncEvent, bool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev, err := d.AsyncEvent(ctx)
	return ev, err == nil
}

// TestSRQSharedByManyQPs: four QPs share one SRQ; messages arriving on
// them in any order take the SRQ's WRs in posting order, land in those
// WRs' buffers, and each completion names the QP it arrived on.
func TestSRQSharedByManyQPs(t *testing.T) {
	r := newSRQRig(t, 4, qp.SRQInitAttr{MaxWR: 32, MaxSGE: 1})
	for id := range uint64(12) {
		r.post(id)
	}
	order := []int{2, 0, 3, 3, 1, 0, 2, 1, 0, 3, 2, 1}
	for k, i := range order {
		msg := []byte{byte(k), byte(i), 0xA5, byte(k * 7)}
		r.send(i, uint64(k), msg)
		wc := r.wait(r.bcq)
		if wc.Status != qp.WCSuccess || wc.Opcode != qp.WCRecv || wc.WRID != uint64(k) || wc.ByteLen != 4 {
			t.Fatalf("message %d on QP %d: %v; want a 4-byte RECV for WR %d", k, i, wc, k)
		}
		if wc.QPNum != r.bq[i].QPN() {
			t.Fatalf("message %d arrived on QP %#x, completion names %#x", k, r.bq[i].QPN(), wc.QPNum)
		}
		if got := r.bbuf[uint64(k)*srqSlot:][:4]; !bytes.Equal(got, msg) {
			t.Fatalf("WR %d's buffer holds %x, want %x", k, got, msg)
		}
		if wc := r.wait(r.acq); wc.Status != qp.WCSuccess || wc.WRID != uint64(k) {
			t.Fatalf("send %d: %v", k, wc)
		}
	}
	if err := r.bq[0].PostRecv(&qp.RecvWR{WRID: 99}); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v, want ErrInvalidArgument", err)
	}
	if c := r.bq[0].Query(); c.State != qp.StateRTS {
		t.Fatalf("QP state %v", c.State)
	}
}

// TestSRQLimitEvent: the limit event fires once, when a message leaves
// fewer WRs than the armed limit, and disarms (Query reads 0); arming it
// again makes it fire again.
func TestSRQLimitEvent(t *testing.T) {
	r := newSRQRig(t, 2, qp.SRQInitAttr{MaxWR: 16})
	for id := range uint64(6) {
		r.post(id)
	}
	if err := r.srq.Modify(qp.SRQAttr{Limit: 4}, qp.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if a, err := r.srq.Query(); err != nil || a.Limit != 4 || a.MaxWR != 16 || a.MaxSGE != 1 {
		t.Fatalf("Query %+v, %v; want max_wr 16, max_sge 1, limit 4", a, err)
	}
	recv := func(k int) {
		t.Helper()
		r.send(k%2, uint64(k), []byte{byte(k)})
		if wc := r.wait(r.bcq); wc.Status != qp.WCSuccess || wc.WRID != uint64(k) {
			t.Fatalf("message %d: %v", k, wc)
		}
		r.wait(r.acq)
	}
	recv(0) // 5 left
	recv(1) // 4 left: not below the limit
	if ev, ok := event(r.n.B.Dev); ok {
		t.Fatalf("event %v with 4 WRs left and limit 4", ev.Type)
	}
	recv(2) // 3 left
	ev, ok := event(r.n.B.Dev)
	if !ok || ev.Type != qp.EventSRQLimitReached || ev.SRQ != r.srq {
		t.Fatalf("after 3 left: event %v (SRQ %p, queued %v), want SRQ_LIMIT_REACHED for %p", ev.Type, ev.SRQ, ok, r.srq)
	}
	if a, _ := r.srq.Query(); a.Limit != 0 {
		t.Fatalf("limit %d after the event, want 0 (disarmed)", a.Limit)
	}
	recv(3) // 2 left
	recv(4) // 1 left
	if ev, ok := event(r.n.B.Dev); ok {
		t.Fatalf("second event %v while disarmed", ev.Type)
	}
	if err := r.srq.Modify(qp.SRQAttr{Limit: 2}, qp.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	recv(5) // 0 left
	if ev, ok := event(r.n.B.Dev); !ok || ev.Type != qp.EventSRQLimitReached {
		t.Fatalf("re-armed: event %v (queued %v), want SRQ_LIMIT_REACHED", ev.Type, ok)
	}
	if ev, ok := event(r.n.B.Dev); ok {
		t.Fatalf("extra event %v", ev.Type)
	}
	if err := r.srq.Modify(qp.SRQAttr{Limit: 17}, qp.SRQAttrLimit); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("limit 17 > max_wr 16: %v, want ErrInvalidArgument", err)
	}
}

// TestSRQEmptyRNR: a SEND to a QP whose SRQ is empty is RNR NAKed, and the
// requester's retry after its RNR back-off succeeds once a WR is posted.
func TestSRQEmptyRNR(t *testing.T) {
	r := newSRQRig(t, 2, qp.SRQInitAttr{MaxWR: 4})
	r.send(1, 7, []byte("late"))
	if err := r.n.RunUntil(func() bool { return r.bq[1].Counters()[qp.CntSendRNRErr] >= 2 }, time.Minute); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	if n, _ := r.bcq.Poll(wcs); n != 0 {
		t.Fatalf("a completion with an empty SRQ: %v", wcs[0])
	}
	if n, _ := r.acq.Poll(wcs); n != 0 {
		t.Fatalf("the sender completed while RNR NAKed: %v", wcs[0])
	}
	r.post(3)
	wc := r.wait(r.bcq)
	if wc.Status != qp.WCSuccess || wc.WRID != 3 || wc.QPNum != r.bq[1].QPN() || string(r.bbuf[3*srqSlot:][:4]) != "late" {
		t.Fatalf("after PostRecv: %v, buffer %q", wc, r.bbuf[3*srqSlot:][:4])
	}
	if wc := r.wait(r.acq); wc.Status != qp.WCSuccess || wc.WRID != 7 {
		t.Fatalf("sender: %v", wc)
	}
	if c := r.aq[1].Counters()[qp.CntRcvdRNRErr]; c < 2 {
		t.Fatalf("requester saw %d RNR NAKs", c)
	}
}

// TestSRQDestroy: an SRQ in use cannot be destroyed (EBUSY); once its QPs
// are gone it can, and every later call on it fails, as does creating a
// QP on it.
func TestSRQDestroy(t *testing.T) {
	r := newSRQRig(t, 2, qp.SRQInitAttr{MaxWR: 4})
	if err := r.srq.Destroy(); !errors.Is(err, qp.ErrSRQBusy) {
		t.Fatalf("Destroy with 2 QPs: %v, want ErrSRQBusy", err)
	}
	if err := r.bq[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.srq.Destroy(); !errors.Is(err, qp.ErrSRQBusy) {
		t.Fatalf("Destroy with 1 QP: %v, want ErrSRQBusy", err)
	}
	if err := r.bq[1].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r.srq.Destroy(); err != nil {
		t.Fatalf("Destroy unused: %v", err)
	}
	sge := []qp.SGE{{Addr: r.bmr.IOVA(), Length: 8, LKey: r.bmr.LKey()}}
	if err := r.srq.PostRecv(&qp.RecvWR{SGL: sge}); !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("PostRecv after Destroy: %v", err)
	}
	if n, err := r.srq.PostRecvList([]qp.RecvWR{{SGL: sge}}); n != 0 || !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("PostRecvList after Destroy: %d, %v", n, err)
	}
	if err := r.srq.Modify(qp.SRQAttr{Limit: 1}, qp.SRQAttrLimit); !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("Modify after Destroy: %v", err)
	}
	if _, err := r.srq.Query(); !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("Query after Destroy: %v", err)
	}
	if err := r.srq.Destroy(); !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("second Destroy: %v", err)
	}
	if _, err := r.srq.PD().CreateQP(qp.InitAttr{SendCQ: r.bcq, RecvCQ: r.bcq, Cap: qp.Caps{MaxSendWR: 1}, SRQ: r.srq}); !errors.Is(err, qp.ErrSRQDestroyed) {
		t.Fatalf("CreateQP on a destroyed SRQ: %v", err)
	}
	other, err := r.n.A.Dev.AllocPD().CreateSRQ(qp.SRQInitAttr{MaxWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.srq.PD().CreateQP(qp.InitAttr{SendCQ: r.bcq, RecvCQ: r.bcq, Cap: qp.Caps{MaxSendWR: 1}, SRQ: other}); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("CreateQP on another device's SRQ: %v", err)
	}
}

// TestSRQBounds: creation, post and resize limits; a resize keeps the
// posted WRs in order; a message longer than the SRQ WR it takes completes
// that WR with LOC_LEN_ERR on the QP it arrived on.
func TestSRQBounds(t *testing.T) {
	r := newSRQRig(t, 2, qp.SRQInitAttr{MaxWR: 2, MaxSGE: 2})
	pd := r.srq.PD()
	for _, a := range []qp.SRQInitAttr{{MaxWR: 0}, {MaxWR: qp.MaxSRQWR + 1}, {MaxWR: 1, MaxSGE: qp.MaxSGE + 1}, {MaxWR: 1, MaxSGE: -1}} {
		if _, err := pd.CreateSRQ(a); !errors.Is(err, qp.ErrInvalidArgument) {
			t.Fatalf("CreateSRQ(%+v): %v, want ErrInvalidArgument", a, err)
		}
	}
	sge := func(id uint64, n uint32) qp.SGE {
		return qp.SGE{Addr: r.bmr.IOVA() + id*srqSlot, Length: n, LKey: r.bmr.LKey()}
	}
	if err := r.srq.PostRecv(&qp.RecvWR{WRID: 9, SGL: []qp.SGE{sge(9, 1), sge(10, 1), sge(11, 1)}}); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("3 SGEs with max_sge 2: %v", err)
	}
	n, err := r.srq.PostRecvList([]qp.RecvWR{{WRID: 0, SGL: []qp.SGE{sge(0, 8), sge(0, 0)}}, {WRID: 1, SGL: []qp.SGE{sge(1, 8)}}, {WRID: 2, SGL: []qp.SGE{sge(2, 8)}}})
	if n != 2 || !errors.Is(err, qp.ErrQueueFull) {
		t.Fatalf("3 WRs into max_wr 2: posted %d, %v; want 2, ErrQueueFull", n, err)
	}
	if err := r.srq.Modify(qp.SRQAttr{MaxWR: 1}, qp.SRQAttrMaxWR); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("resize below the 2 posted: %v", err)
	}
	if err := r.srq.Modify(qp.SRQAttr{MaxWR: 4, Limit: 4}, qp.SRQAttrMaxWR|qp.SRQAttrLimit); err != nil {
		t.Fatalf("resize to 4 with limit 4: %v", err)
	}
	if err := r.srq.Modify(qp.SRQAttr{MaxWR: 3}, qp.SRQAttrMaxWR); !errors.Is(err, qp.ErrInvalidArgument) {
		t.Fatalf("resize below the armed limit: %v", err)
	}
	if err := r.srq.Modify(qp.SRQAttr{Limit: 0}, qp.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	r.post(2)
	if a, _ := r.srq.Query(); a.MaxWR != 4 || a.Limit != 0 {
		t.Fatalf("Query %+v", a)
	}
	// WR 0 holds 8 bytes: a 9-byte message is a length error for it.
	r.send(0, 0, []byte("123456789"))
	wc := r.wait(r.bcq)
	if wc.WRID != 0 || wc.Status != qp.WCLocLenErr || wc.QPNum != r.bq[0].QPN() {
		t.Fatalf("9 bytes into an 8-byte WR: %v; want WR 0 LOC_LEN_ERR on QP %#x", wc, r.bq[0].QPN())
	}
	if wc := r.wait(r.acq); wc.Status != qp.WCRemInvReqErr {
		t.Fatalf("sender of the long message: %v", wc)
	}
	// The SRQ and the other QP carry on: WRs 1 and 2 in order.
	for _, id := range []uint64{1, 2} {
		r.send(1, 10+id, []byte{byte(id)})
		if wc := r.wait(r.bcq); wc.Status != qp.WCSuccess || wc.WRID != id || wc.QPNum != r.bq[1].QPN() {
			t.Fatalf("after the error: %v, want WR %d", wc, id)
		}
		r.wait(r.acq)
	}
}

// TestSRQUnderLoss: four QPs share one SRQ while the link drops,
// duplicates and reorders frames both ways: every two-packet message is
// received once, whole, in some WR of the SRQ, with the completion naming
// the QP it came on, and every WR is used once.
func TestSRQUnderLoss(t *testing.T) {
	const nqp, per, size = 4, 10, 2000
	r := newSRQRigFaults(t, nqp, qp.SRQInitAttr{MaxWR: 64}, sim.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.05})
	for id := range uint64(nqp * per) {
		if err := r.srq.PostRecv(&qp.RecvWR{WRID: id, SGL: []qp.SGE{{Addr: r.bmr.IOVA() + id*2048, Length: 2048, LKey: r.bmr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(i, k int) []byte { return bytes.Repeat([]byte{byte(i<<4 | k)}, size) }
	for k := range per {
		for i := range nqp {
			off := uint64(k*nqp+i) * 2048
			copy(r.abuf[off:], msg(i, k))
			if err := r.aq[i].PostSend(&qp.SendWR{WRID: uint64(k), Opcode: qp.WRSend, Flags: qp.SendSignaled,
				SGL: []qp.SGE{{Addr: r.amr.IOVA() + off, Length: size, LKey: r.amr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	qpIndex := map[uint32]int{}
	for i, q := range r.bq {
		qpIndex[q.QPN()] = i
	}
	seen := map[byte]bool{}
	used := map[uint64]bool{}
	for range nqp * per {
		wc := r.wait(r.bcq)
		if wc.Status != qp.WCSuccess || wc.ByteLen != size || used[wc.WRID] {
			t.Fatalf("%v (WR used before: %v)", wc, used[wc.WRID])
		}
		used[wc.WRID] = true
		got := r.bbuf[wc.WRID*2048:][:size]
		tag := got[0]
		i, ok := qpIndex[wc.QPNum]
		if !ok || int(tag>>4) != i || !bytes.Equal(got, msg(i, int(tag&0xf))) || seen[tag] {
			t.Fatalf("WR %d on QP %#x holds message %#x (whole %v, seen %v)", wc.WRID, wc.QPNum, tag, bytes.Equal(got, msg(int(tag>>4), int(tag&0xf))), seen[tag])
		}
		seen[tag] = true
	}
	for range nqp * per {
		if wc := r.wait(r.acq); wc.Status != qp.WCSuccess {
			t.Fatalf("sender: %v", wc)
		}
	}
	var retrans uint64
	for _, q := range r.aq {
		retrans += q.Counters()[qp.CntRetransmittedPkts]
	}
	if d := r.n.A.LinkStats().Dropped + r.n.B.LinkStats().Dropped; d == 0 || retrans == 0 {
		t.Fatalf("seed %d: %d frames dropped, %d retransmitted: the loss did not happen", r.n.Seed(), d, retrans)
	}
}

// TestSRQLastWQEReached: a QP on an SRQ that enters ERR raises
// QP_LAST_WQE_REACHED (IBTA o11-5.2.5), after its own affiliated error,
// once per entry into ERR, whether a responder error or the application
// moved it there; the SRQ's WRs stay for its other QPs, and a QP without
// an SRQ raises nothing.
func TestSRQLastWQEReached(t *testing.T) {
	r := newSRQRig(t, 2, qp.SRQInitAttr{MaxWR: 16})
	ctx := context.Background()
	r.post(0)
	r.post(1)
	// An RDMA WRITE with a bad rkey: B's QP 0 NAKs and goes to ERR.
	if err := r.aq[0].PostSend(&qp.SendWR{WRID: 9, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: r.amr.IOVA(), Length: 8, LKey: r.amr.LKey()}}, RemoteAddr: r.bmr.IOVA(), RKey: r.bmr.RKey() ^ 0x80}); err != nil {
		t.Fatal(err)
	}
	if wc := r.wait(r.acq); wc.Status != qp.WCRemAccessErr {
		t.Fatalf("WRITE with a bad rkey: %v, want REM_ACCESS_ERR", wc)
	}
	if ev, ok := event(r.n.B.Dev); !ok || ev.Type != qp.EventQPAccessErr || ev.QP != r.bq[0] {
		t.Fatalf("first event %v QP %p (queued %v), want QP_ACCESS_ERR for %p", ev.Type, ev.QP, ok, r.bq[0])
	}
	if ev, ok := event(r.n.B.Dev); !ok || ev.Type != qp.EventQPLastWQEReached || ev.QP != r.bq[0] {
		t.Fatalf("second event %v QP %p (queued %v), want QP_LAST_WQE_REACHED for %p", ev.Type, ev.QP, ok, r.bq[0])
	}
	if ev, ok := event(r.n.B.Dev); ok {
		t.Fatalf("extra event %v", ev.Type)
	}
	// ERR to ERR is no new entry: no second event.
	if err := r.bq[0].Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if ev, ok := event(r.n.B.Dev); ok {
		t.Fatalf("ERR to ERR raised %v", ev.Type)
	}
	// The two WRs are still in the SRQ, for QP 1.
	r.send(1, 0, []byte("to QP 1"))
	if wc := r.wait(r.bcq); wc.Status != qp.WCSuccess || wc.WRID != 0 || wc.QPNum != r.bq[1].QPN() {
		t.Fatalf("QP 1 after QP 0 failed: %v, want WR 0 on QP %#x", wc, r.bq[1].QPN())
	}
	r.wait(r.acq)
	// The application moves QP 1 to ERR: the event again.
	if err := r.bq[1].Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if ev, ok := event(r.n.B.Dev); !ok || ev.Type != qp.EventQPLastWQEReached || ev.QP != r.bq[1] {
		t.Fatalf("modify to ERR: event %v QP %p (queued %v), want QP_LAST_WQE_REACHED for %p", ev.Type, ev.QP, ok, r.bq[1])
	}
	// RESET, INIT, ERR again is a new entry.
	for _, st := range []qp.State{qp.StateReset, qp.StateInit, qp.StateErr} {
		mask := qp.AttrState
		if st == qp.StateInit {
			mask |= qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags
		}
		if err := r.bq[1].Modify(ctx, qp.Attr{State: st, Port: 1}, mask); err != nil {
			t.Fatal(err)
		}
	}
	if ev, ok := event(r.n.B.Dev); !ok || ev.Type != qp.EventQPLastWQEReached || ev.QP != r.bq[1] {
		t.Fatalf("second entry into ERR: event %v (queued %v), want QP_LAST_WQE_REACHED", ev.Type, ok)
	}
	// A's QPs have no SRQ: ERR raises nothing there.
	if err := r.aq[1].Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if ev, ok := event(r.n.A.Dev); ok {
		t.Fatalf("QP without an SRQ raised %v", ev.Type)
	}
	if n := r.srq.PostRecv(&qp.RecvWR{WRID: 5, SGL: []qp.SGE{{Addr: r.bmr.IOVA(), Length: 8, LKey: r.bmr.LKey()}}}); n != nil {
		t.Fatalf("SRQ after its QPs failed: %v", n)
	}
}
