package simtest_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
)

// TestWriteUnderLoss is the application test docs/using-go.md shows: an
// RDMA WRITE over a link losing 10 % of the frames, once per seed.
func TestWriteUnderLoss(t *testing.T) {
	for _, seed := range simtest.Seeds(t, 1, 2, 3) { // GOROCE_SEED=n runs seed n only
		n := simtest.NewPair(t, sim.Config{Seed: seed, AtoB: sim.Faults{Drop: 0.1}, BtoA: sim.Faults{Drop: 0.1}})
		a, b := simtest.ConnectQPs(t, n, sim.QPOptions{}, sim.QPOptions{})
		copy(a.Buf, "hello")
		err := a.QP.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{a.SGE(0, 5)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
		if err != nil {
			t.Fatal(err)
		}
		wc := make([]qp.WC, 1)
		if _, err := n.Wait(a.SendCQ, wc, time.Minute); err != nil { // simulated time
			t.Fatal(err) // the error names the seed
		}
		if err := wc[0].Err(); err != nil || string(b.Buf[:5]) != "hello" {
			t.Fatalf("seed %d: %v, B holds %q", seed, err, b.Buf[:5])
		}
	}
}
