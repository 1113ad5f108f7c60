package qp_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// TestSettleUCWrite: a UC WRITE completes when its frames leave, so when
// the requester has its 20 completions the frames are still on a link
// that delays them 20 ms; the responder's Settle returns only once they
// are in its memory.
func TestSettleUCWrite(t *testing.T) {
	for _, mode := range []qp.Mode{qp.ModeThreaded, qp.ModeBusyPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			la, lb := nic.NewMemPair(nic.MemConfig{AtoB: nic.Faults{Delay: 20 * time.Millisecond}})
			da, err := qp.Open(qp.Config{Link: la, IP: ipA, Mode: mode, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: lb.HardwareAddr()}})
			if err != nil {
				t.Fatal(err)
			}
			defer da.Close()
			db, err := qp.Open(qp.Config{Link: lb, IP: ipB, Mode: mode, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: la.HardwareAddr()}})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			a, b := connectEnds(t, da, db, sim.QPOptions{Type: qp.QPTypeUC, BufSize: 1 << 16}, 100, 200)
			const n, size = 20, 64
			copy(a.buf, pattern(5, n*size))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range n {
				if err := a.q.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
					SGL: []qp.SGE{a.mr.SGE(i*size, size)}, RemoteAddr: b.mr.IOVA() + uint64(i*size), RKey: b.mr.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			wcs := make([]qp.WC, n)
			for got := 0; got < n; {
				k, err := a.cq.Wait(ctx, wcs[got:])
				if err != nil {
					t.Fatal(err)
				}
				for _, wc := range wcs[got : got+k] {
					if wc.Status != qp.WCSuccess {
						t.Fatalf("completion %v", wc)
					}
				}
				got += k
			}
			if err := db.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			if lb.Pending() != 0 {
				t.Fatalf("Settle returned with %d frames still queued", lb.Pending())
			}
			if !bytes.Equal(b.buf[:n*size], a.buf[:n*size]) {
				t.Fatal("after Settle the responder's memory does not hold the WRITEs")
			}
			da.Close()
			db.Close()
			if err := db.Settle(ctx); !errors.Is(err, qp.ErrClosed) {
				t.Fatalf("Settle after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// TestSettleManual: in ModeManual Settle polls in the caller's goroutine
// until nothing due is left; a frame not yet due has not arrived.
func TestSettleManual(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	la, lb := nic.NewMemPair(nic.MemConfig{Clock: clock, AtoB: nic.Faults{Delay: time.Millisecond}})
	defer la.Close()
	defer lb.Close()
	d, err := qp.Open(qp.Config{Link: lb, IP: ipB, Mode: qp.ModeManual, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := la.WriteBatch([][]byte{make([]byte, 60), make([]byte, 60)}); err != nil {
		t.Fatal(err)
	}
	if err := d.Settle(context.Background()); err != nil || d.RxStats().Frames != 0 {
		t.Fatalf("Settle before the frames are due: %v, %d frames read", err, d.RxStats().Frames)
	}
	now = now.Add(time.Millisecond)
	if err := d.Settle(context.Background()); err != nil || d.RxStats().Frames != 2 || lb.Pending() != 0 {
		t.Fatalf("Settle once they are due: %v, %d frames read, %d pending", err, d.RxStats().Frames, lb.Pending())
	}
}
