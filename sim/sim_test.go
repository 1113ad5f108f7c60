package sim_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
)

func postWrite(t *testing.T, a, b *sim.QPEnd, n int) {
	t.Helper()
	for i := range n {
		a.Buf[i] = byte(i*5 + 3)
	}
	err := a.QP.PostSend(&qp.SendWR{WRID: 9, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.SGE(0, n)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
	if err != nil {
		t.Fatal(err)
	}
}

// With nothing pending, RunUntil cannot make a false condition true: it
// says so at once (ErrIdle) and names the seed, without moving the clock.
func TestRunUntilIdle(t *testing.T) {
	n := simtest.NewPair(t, sim.Config{Seed: 77})
	err := n.RunUntil(func() bool { return false }, time.Hour)
	if !errors.Is(err, sim.ErrIdle) || !strings.Contains(err.Error(), "seed 77") {
		t.Fatalf("RunUntil on an idle pair: %v, want ErrIdle naming seed 77", err)
	}
	if n.Clock().Elapsed() != 0 {
		t.Fatalf("the clock moved to %v", n.Clock().Elapsed())
	}
}

// A black-holed WRITE keeps its ACK timer pending, so the run is not idle;
// the limit ends it (ErrTimeout) with the clock at the limit, not past it
// at the next event, and the write then fails with RETRY_EXC_ERR after its 7 retries.
func TestRunUntilTimeout(t *testing.T) {
	n := simtest.NewPair(t, sim.Config{Seed: 5, AtoB: sim.Faults{Drop: 1}})
	a, b := simtest.ConnectQPs(t, n, sim.QPOptions{}, sim.QPOptions{})
	postWrite(t, a, b, 100)
	wc := make([]qp.WC, 1)
	_, err := n.Wait(a.SendCQ, wc, 100*time.Millisecond)
	if !errors.Is(err, sim.ErrTimeout) || !strings.Contains(err.Error(), "seed 5") {
		t.Fatalf("Wait under total loss: %v, want ErrTimeout naming seed 5", err)
	}
	if e := n.Clock().Elapsed(); e != 100*time.Millisecond {
		t.Fatalf("stopped at %v, want at the 100ms limit", e)
	}
	if _, err := n.Wait(a.SendCQ, wc, time.Hour); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(wc[0].Err(), qp.WCRetryExcErr) {
		t.Fatalf("completion %v, want RETRY_EXC_ERR", wc[0])
	}
	if got := n.A.LinkStats().Dropped; got != 8 {
		t.Fatalf("%d frames dropped, want 8 (the first transmission and 7 retries)", got)
	}
}

// RunFor handles every event inside the interval and leaves the clock at
// its end: a WRITE over a link with 1 ms delay each way is not complete
// after 1.5 ms and is after 2.5 ms.
func TestRunFor(t *testing.T) {
	d := sim.Faults{Delay: time.Millisecond}
	n := simtest.NewPair(t, sim.Config{AtoB: d, BtoA: d})
	a, b := simtest.ConnectQPs(t, n, sim.QPOptions{}, sim.QPOptions{})
	postWrite(t, a, b, 100)
	wc := make([]qp.WC, 1)
	if err := n.RunFor(1500 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if k, _ := a.SendCQ.Poll(wc); k != 0 || n.Clock().Elapsed() != 1500*time.Microsecond {
		t.Fatalf("after 1.5 ms: %d completions at %v, want none at 1.5ms", k, n.Clock().Elapsed())
	}
	if !bytes.Equal(b.Buf[:100], a.Buf[:100]) {
		t.Fatal("the WRITE is not placed after 1.5 ms (it arrives at 1 ms)")
	}
	if err := n.RunFor(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if k, _ := a.SendCQ.Poll(wc); k != 1 || wc[0].Status != qp.WCSuccess || n.Clock().Elapsed() != 2500*time.Microsecond {
		t.Fatalf("after 2.5 ms: %d completions (%v) at %v, want one SUCCESS at 2.5ms", k, wc[0], n.Clock().Elapsed())
	}
}

// The real-time modes run the same setup: a WRITE over a lossy link
// completes, waited for with Net.Wait and with the CQ's own Wait.
func TestRealTimeModes(t *testing.T) {
	for _, mode := range []sim.Mode{sim.Goroutines, sim.BusyPoll} {
		t.Run(mode.String(), func(t *testing.T) {
			f := sim.Faults{Drop: 0.1}
			n := simtest.NewPair(t, sim.Config{Mode: mode, Seed: 3, AtoB: f, BtoA: f})
			o := sim.QPOptions{Connect: qp.ConnectOptions{Timeout: 12}} // 16 ms
			a, b := simtest.ConnectQPs(t, n, o, o)
			postWrite(t, a, b, 20000)
			wc := make([]qp.WC, 1)
			if _, err := n.Wait(a.SendCQ, wc, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if wc[0].Status != qp.WCSuccess || !bytes.Equal(a.Buf[:20000], b.Buf[:20000]) {
				t.Fatalf("completion %v, data equal %v", wc[0], bytes.Equal(a.Buf[:20000], b.Buf[:20000]))
			}
		})
	}
}

// Goroutines mode in a synctest bubble: the devices' goroutines run on the
// bubble's fake clock, so the ACK timeouts of a link losing 30 % of the
// frames (67 ms each, qp.Connect's default) pass without real waiting.
func TestGoroutinesInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := sim.Faults{Drop: 0.3}
		n := simtest.NewPair(t, sim.Config{Mode: sim.Goroutines, Seed: 11, AtoB: f, BtoA: f})
		a, b := simtest.ConnectQPs(t, n, sim.QPOptions{}, sim.QPOptions{})
		start := time.Now()
		for i := range 10 {
			postWrite(t, a, b, 8192)
			wc := make([]qp.WC, 1)
			ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
			_, err := a.SendCQ.Wait(ctx, wc)
			cancel()
			if err != nil || wc[0].Status != qp.WCSuccess {
				t.Fatalf("WRITE %d: %v %v", i, wc[0], err)
			}
		}
		c := a.QP.Counters()
		t.Logf("%d retransmitted packets, %d ACK timeouts, %v of bubble time", c[qp.CntRetransmittedPkts], c[qp.CntLocalAckTimeoutErr], time.Since(start))
		if c[qp.CntRetransmittedPkts] == 0 {
			t.Fatal("30 % loss and no retransmission")
		}
		if c[qp.CntLocalAckTimeoutErr] > 0 && time.Since(start) < 67*time.Millisecond {
			t.Fatalf("%d ACK timeouts in %v of bubble time", c[qp.CntLocalAckTimeoutErr], time.Since(start))
		}
	})
}

func TestEnvSeed(t *testing.T) {
	t.Setenv("GOROCE_SEED", "0x10")
	if s, ok, err := sim.EnvSeed(); s != 16 || !ok || err != nil {
		t.Fatalf("GOROCE_SEED=0x10: %d %v %v", s, ok, err)
	}
	if got := simtest.Seeds(t, 1, 2); len(got) != 1 || got[0] != 16 {
		t.Fatalf("Seeds with GOROCE_SEED=0x10: %v", got)
	}
	t.Setenv("GOROCE_SEED", "seven")
	if _, _, err := sim.EnvSeed(); err == nil {
		t.Fatal("GOROCE_SEED=seven accepted")
	}
	t.Setenv("GOROCE_SEED", "")
	if _, ok, err := sim.EnvSeed(); ok || err != nil {
		t.Fatalf("empty GOROCE_SEED: %v %v", ok, err)
	}
}
