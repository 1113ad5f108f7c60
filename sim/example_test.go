package sim_test

import (
	"bytes"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// A 64 KiB RDMA WRITE over a link that loses 10 % of the frames in each
// direction. The transport recovers (NAKs, go-back-N, ACK timeouts) and the
// counters are the same on every run: everything is decided by the seed.
func Example_lossyWrite() {
	loss := sim.Faults{Drop: 0.10}
	n, err := sim.NewPair(sim.Config{Seed: 1, AtoB: loss, BtoA: loss})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	a, b, err := n.ConnectQPs(sim.QPOptions{}, sim.QPOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for i := range a.Buf {
		a.Buf[i] = byte(i * 7)
	}
	err = a.QP.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.SGE(0, len(a.Buf))}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]qp.WC, 1)
	if _, err := n.Wait(a.SendCQ, wc, time.Minute); err != nil {
		log.Fatal(err) // names the seed: sim: ... (manual mode, seed 1, ...)
	}
	c := a.QP.Counters()
	fmt.Println("status:", wc[0].Status, "data equal:", bytes.Equal(a.Buf, b.Buf))
	fmt.Println("frames lost A→B:", n.A.LinkStats().Dropped, "B→A:", n.B.LinkStats().Dropped)
	fmt.Println("retransmitted packets:", c[qp.CntRetransmittedPkts])
	fmt.Println("sequence NAKs received:", c[qp.CntRcvdSeqErr], "ACK timeouts:", c[qp.CntLocalAckTimeoutErr])
	fmt.Println("simulated time:", n.Clock().Elapsed())
	// Output:
	// status: SUCCESS data equal: true
	// frames lost A→B: 31 B→A: 1
	// retransmitted packets: 273
	// sequence NAKs received: 6 ACK timeouts: 2
	// simulated time: 134.217728ms
}

// The same seed replays the same run, frame for frame; another seed is
// another run. A test that fails under random faults prints its seed
// (sim/simtest does it for a testing.TB), and a test that takes its seeds
// from sim.EnvSeed (or simtest.Seeds) runs that seed again with
// GOROCE_SEED=<seed> go test -run <the test>.
func Example_replay() {
	run := func(seed int64) string {
		f := sim.Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01, Delay: 5 * time.Microsecond}
		n, err := sim.NewPair(sim.Config{Seed: seed, AtoB: f, BtoA: f})
		if err != nil {
			log.Fatal(err)
		}
		defer n.Close()
		a, b, err := n.ConnectQPs(sim.QPOptions{}, sim.QPOptions{})
		if err != nil {
			log.Fatal(err)
		}
		wc := make([]qp.WC, 1)
		for i := range 20 {
			err := a.QP.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
				SGL: []qp.SGE{a.SGE(0, 8192)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
			if err != nil {
				log.Fatal(err)
			}
			if _, err := n.Wait(a.SendCQ, wc, time.Minute); err != nil {
				log.Fatal(err)
			}
		}
		s := n.A.LinkStats()
		return fmt.Sprintf("seed %d: %d retransmitted, %d dropped, %d corrupted, done at %v",
			seed, a.QP.Counters()[qp.CntRetransmittedPkts], s.Dropped, s.Corrupted, n.Clock().Elapsed())
	}
	first := run(7)
	fmt.Println(first)
	fmt.Println("replayed identically:", run(7) == first)
	fmt.Println(run(8))
	// Output:
	// seed 7: 26 retransmitted, 4 dropped, 0 corrupted, done at 336.89432ms
	// replayed identically: true
	// seed 8: 20 retransmitted, 1 dropped, 0 corrupted, done at 337.89432ms
}
