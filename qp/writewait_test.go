package qp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// waitResult is one MR.WaitWrite's answer, delivered by a goroutine.
type waitResult struct {
	n   uint64
	err error
}

func goWaitWrite(ctx context.Context, mr *qp.MR, after uint64) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		n, err := mr.WaitWrite(ctx, after)
		ch <- waitResult{n, err}
	}()
	return ch
}

// stillWaiting fails t if the WaitWrite behind ch returned once every
// goroutine of the bubble is blocked (synctest.Wait): no timing involved.
func stillWaiting(t *testing.T, ch <-chan waitResult, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		t.Fatalf("%s: WaitWrite returned %d, %v; it should still wait", what, r.n, r.err)
	default:
	}
}

// TestWaitWrite: MR.WaitWrite returns on the peer's RDMA WRITE into that MR
// (data visible), WRITE_WITH_IMM counts too, a WRITE into another MR of
// the same device wakes nobody, and the end of the context ends the wait.
func TestWaitWrite(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		a, b := x.a, x.b
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n0 := b.mr.Writes()
		on := goWaitWrite(ctx, b.mr, n0)
		other := goWaitWrite(ctx, b.mr2, b.mr2.Writes())
		stillWaiting(t, on, "before any WRITE")

		data := pattern(1, 3000) // three packets at the pair's path MTU
		copy(a.buf, data)
		x.post(a, &qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, len(data))}, RemoteAddr: b.mr.IOVA() + 100, RKey: b.mr.RKey()})
		r := <-on
		if r.err != nil || r.n != n0+1 {
			t.Fatalf("WaitWrite: %d, %v; want %d, nil", r.n, r.err, n0+1)
		}
		if !bytes.Equal(b.buf[100:100+len(data)], data) {
			t.Fatal("the WRITE's data is not in the MR when WaitWrite returns")
		}
		expectWC(t, a.scq, 1, transport.WCSuccess, transport.WCRDMAWrite)
		stillWaiting(t, other, "the other MR")

		// WRITE_WITH_IMM: counted as it lands, besides its receive completion.
		x.recv(b, 7, b.sge(0, 8))
		on = goWaitWrite(ctx, b.mr, n0+1)
		x.post(a, &qp.SendWR{WRID: 2, Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled,
			SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey(), Imm: 5})
		if r := <-on; r.err != nil || r.n != n0+2 {
			t.Fatalf("WaitWrite after WRITE_WITH_IMM: %d, %v; want %d, nil", r.n, r.err, n0+2)
		}
		expectWC(t, a.scq, 2, transport.WCSuccess, transport.WCRDMAWrite)
		expectWC(t, b.rcq, 7, transport.WCSuccess, transport.WCRecvRDMAWithImm)
		// A count already passed returns at once.
		if n, err := b.mr.WaitWrite(ctx, n0); err != nil || n != n0+2 {
			t.Fatalf("WaitWrite for a passed count: %d, %v", n, err)
		}
		stillWaiting(t, other, "the other MR")

		cancel()
		if r := <-other; !errors.Is(r.err, context.Canceled) || r.n != 0 {
			t.Fatalf("WaitWrite on the other MR after cancel: %d, %v; want 0, context.Canceled", r.n, r.err)
		}
	})
}

// TestWaitWriteEnds: deregistering the MR, and closing the device, wake
// its waiters with an error; a deregistered MR's WaitWrite fails at once.
func TestWaitWriteEnds(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		b := x.b
		ctx := context.Background()
		dereg := goWaitWrite(ctx, b.mr2, 0)
		closed := goWaitWrite(ctx, b.mr, b.mr.Writes())
		stillWaiting(t, dereg, "before Deregister")
		if err := b.mr2.Deregister(); err != nil {
			t.Fatal(err)
		}
		if r := <-dereg; !errors.Is(r.err, memreg.ErrDeregistered) {
			t.Fatalf("WaitWrite across Deregister: %v, want ErrDeregistered", r.err)
		}
		if _, err := b.mr2.WaitWrite(ctx, 0); !errors.Is(err, memreg.ErrDeregistered) {
			t.Fatalf("WaitWrite on a deregistered MR: %v", err)
		}
		stillWaiting(t, closed, "before Close")
		if err := b.dev.Close(); err != nil {
			t.Fatal(err)
		}
		if r := <-closed; !errors.Is(r.err, qp.ErrClosed) {
			t.Fatalf("WaitWrite across Close: %v, want ErrClosed", r.err)
		}
		if _, err := b.mr.WaitWrite(ctx, b.mr.Writes()); !errors.Is(err, qp.ErrClosed) {
			t.Fatalf("WaitWrite after Close: %v", err)
		}
	})
}
