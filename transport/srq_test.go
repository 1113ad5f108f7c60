package transport_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// srqPair is an engine pair whose B takes its receives from an SRQ of
// four WRs, with the limit armed at limit.
func srqPair(t *testing.T, limit uint32) (*epair, *transport.SRQ) {
	t.Helper()
	srq, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 4, MaxSGE: 2, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return newEPair(t, eopts{srqB: srq}), srq
}

// TestSRQMessageAcrossPackets: a SEND_FIRST takes the SRQ's oldest WR at
// once (the SRQ shrinks, the limit event fires then), the SEND_LAST lands
// in the same WR, whose two SGEs the data is scattered over.
func TestSRQMessageAcrossPackets(t *testing.T) {
	e, srq := srqPair(t, 2)
	for id := range uint64(2) {
		off := uint64(id) * 8192
		must(t, srq.Post(&transport.RecvWR{WRID: 10 + id, SGL: []transport.SGE{
			e.b.sge(int(off), 1500), e.b.sge(int(off)+4096, 1500)}}))
	}
	if err := e.b.q.PostRecv(&transport.RecvWR{WRID: 1}); !errors.Is(err, transport.ErrInvalidArgument) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v", err)
	}
	first, last := bytes.Repeat([]byte{0xA1}, 1024), bytes.Repeat([]byte{0xB2}, 1000)
	e.inject(wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCSendFirst, PSN: 0}}, first)
	if fired := e.b.events.count(transport.EventSRQLimit); srq.Len() != 1 || fired != 1 || srq.Attr().Limit != 0 {
		t.Fatalf("after SEND_FIRST: %d WRs left, limit event %d times, limit %d; want 1, 1, 0", srq.Len(), fired, srq.Attr().Limit)
	}
	if n := len(e.b.rcq.wcs); n != 0 {
		t.Fatalf("%d completions before the LAST packet", n)
	}
	e.inject(wire.Frame{BTH: bth(wire.RCSendLast, 1)}, last)
	wcs := e.b.rcq.take()
	if len(wcs) != 1 || wcs[0].WRID != 10 || wcs[0].Status != transport.WCSuccess || wcs[0].ByteLen != 2024 || wcs[0].QPNum != e.b.q.QPN() {
		t.Fatalf("completions %v; want WR 10, 2024 bytes, on QP %#x", wcs, e.b.q.QPN())
	}
	want := append(append([]byte(nil), first...), last...)
	got := append(append([]byte(nil), e.b.buf[:1500]...), e.b.buf[4096:4096+524]...)
	if !bytes.Equal(got, want) {
		t.Fatal("the message is not where the WR's SGEs point")
	}
	if fired := e.b.events.count(transport.EventSRQLimit); fired != 1 {
		t.Fatalf("limit event %d times, want once (disarmed)", fired)
	}
}

// TestSRQHeldWQEFlushed: a QP that goes to ERR in the middle of a message
// completes the WR it took from the SRQ with WR_FLUSH_ERR; the WRs still in
// the SRQ stay there (they belong to its other QPs).
func TestSRQHeldWQEFlushed(t *testing.T) {
	e, srq := srqPair(t, 0)
	for id := range uint64(3) {
		must(t, srq.Post(&transport.RecvWR{WRID: id, SGL: []transport.SGE{e.b.sge(int(id)*4096, 4096)}}))
	}
	e.inject(wire.Frame{BTH: wire.BTHFields{Opcode: wire.RCSendFirst, PSN: 0}}, make([]byte, 1024))
	must(t, e.b.q.Modify(&transport.Attr{State: transport.StateErr}, transport.AttrState, e.now))
	wcs := e.b.rcq.take()
	if len(wcs) != 1 || wcs[0].WRID != 0 || wcs[0].Status != transport.WCWRFlushErr || wcs[0].QPNum != e.b.q.QPN() {
		t.Fatalf("completions %v; want WR 0 flushed", wcs)
	}
	if fired := e.b.events.count(transport.EventSRQLimit); srq.Len() != 2 || fired != 0 {
		t.Fatalf("SRQ holds %d WRs (want 2), limit event %d times", srq.Len(), fired)
	}
}

// TestSRQEmptyRNRNAK: an empty SRQ answers SEND_ONLY with an RNR NAK
// carrying the QP's min_rnr_timer; the same PSN succeeds after a post.
func TestSRQEmptyRNRNAK(t *testing.T) {
	e, srq := srqPair(t, 0)
	out := e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, []byte("x"))
	if len(out) != 1 || out[0].p.AETH.Syndrome() != wire.RNRNAKSyndrome(0) {
		t.Fatalf("answer %v, want an RNR NAK", out)
	}
	must(t, srq.Post(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{e.b.sge(0, 16)}}))
	e.inject(wire.Frame{BTH: bth(wire.RCSendOnly, 0)}, []byte("x"))
	if wcs := e.b.rcq.take(); len(wcs) != 1 || wcs[0].WRID != 5 || wcs[0].Status != transport.WCSuccess {
		t.Fatalf("after the post: %v", wcs)
	}
}

// TestSRQModifyAndPost: rxe's checks on create, post and modify, and a
// resize that keeps the posted WRs (their order: qp.TestSRQBounds).
func TestSRQModifyAndPost(t *testing.T) {
	for _, c := range []transport.SRQConfig{{MaxWR: 0}, {MaxWR: transport.MaxSRQWR + 1}, {MaxWR: 1, MaxSGE: transport.MaxSGE + 1}} {
		if _, err := transport.NewSRQ(c); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Errorf("NewSRQ(%+v): %v", c, err)
		}
	}
	s, err := transport.NewSRQ(transport.SRQConfig{MaxWR: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Attr(); a.MaxWR != 2 || a.MaxSGE != 1 || a.Limit != 0 {
		t.Fatalf("Attr %+v", a)
	}
	two := []transport.SGE{{Length: 1}, {Length: 1}}
	if err := s.Post(&transport.RecvWR{SGL: two}); !errors.Is(err, transport.ErrInvalidArgument) {
		t.Fatalf("2 SGEs on max_sge 1: %v", err)
	}
	must(t, s.Post(&transport.RecvWR{WRID: 1}))
	must(t, s.Post(&transport.RecvWR{WRID: 2}))
	if err := s.Post(&transport.RecvWR{WRID: 3}); !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("third post on max_wr 2: %v", err)
	}
	for _, c := range []struct {
		a    transport.SRQAttr
		mask transport.SRQAttrMask
	}{
		{transport.SRQAttr{MaxWR: 1}, transport.SRQAttrMaxWR}, // below the 2 posted
		{transport.SRQAttr{MaxWR: 0}, transport.SRQAttrMaxWR}, // zero
		{transport.SRQAttr{Limit: 3}, transport.SRQAttrLimit}, // above max_wr
		{transport.SRQAttr{MaxWR: 3, Limit: 4}, transport.SRQAttrMaxWR | transport.SRQAttrLimit},
		{transport.SRQAttr{}, 1 << 5}, // unknown mask bit
	} {
		if err := s.Modify(c.a, c.mask); !errors.Is(err, transport.ErrInvalidArgument) {
			t.Errorf("Modify(%+v, %#x): %v", c.a, c.mask, err)
		}
	}
	must(t, s.Modify(transport.SRQAttr{MaxWR: 8, Limit: 8}, transport.SRQAttrMaxWR|transport.SRQAttrLimit))
	if err := s.Modify(transport.SRQAttr{MaxWR: 7}, transport.SRQAttrMaxWR); !errors.Is(err, transport.ErrInvalidArgument) {
		t.Fatalf("resize below the armed limit: %v", err)
	}
	must(t, s.Post(&transport.RecvWR{WRID: 3}))
	if a := s.Attr(); a.MaxWR != 8 || a.Limit != 8 || s.Len() != 3 {
		t.Fatalf("after the resize: %+v, %d posted", a, s.Len())
	}
}
