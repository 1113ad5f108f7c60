package sim_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/sim/simtest"
	"github.com/goroce/goroce/transport"
)

// readCost runs one READ of size bytes from B's memory across a link that
// drops a fraction loss of the frames in each direction, and returns the
// bytes B (the responder) put on the link per byte of READ payload.
func readCost(t *testing.T, seed int64, size int, loss float64) float64 {
	t.Helper()
	f := sim.Faults{Drop: loss}
	n := simtest.NewPair(t, sim.Config{Seed: seed, AtoB: f, BtoA: f})
	o := sim.QPOptions{BufSize: size, CQSize: 16, Caps: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}}
	oa, ob := o, o
	oa.Connect.SQPSN, ob.Connect.SQPSN = 0x200, 0x100
	a, b := simtest.ConnectQPs(t, n, oa, ob)
	for i := range b.Buf {
		b.Buf[i] = byte(i*7 + 3)
	}
	if err := a.QP.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
		SGL: []qp.SGE{a.SGE(0, size)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	var wc [1]qp.WC
	if _, err := n.Wait(a.SendCQ, wc[:], time.Hour); err != nil {
		t.Fatal(err)
	}
	if wc[0].Status != transport.WCSuccess || !bytes.Equal(a.Buf, b.Buf) {
		t.Fatalf("seed %d: completion %v, data equal %v", seed, wc[0], bytes.Equal(a.Buf, b.Buf))
	}
	ca, cb := a.QP.Counters(), b.QP.Counters()
	t.Logf("seed %d loss %.2f: requester retries %d (ACK timeouts %d), responder READs restarted %d, simulated %v",
		seed, loss, ca[transport.CntCompleterRetryErr], ca[transport.CntLocalAckTimeoutErr], cb[transport.CntReadRestarted], n.Clock().Elapsed())
	return float64(n.B.LinkStats().TxBytes) / float64(size)
}

// TestReadLossCost reports what a large READ costs the responder on a lossy
// link: bytes sent per byte of payload. It measures; the only pass/fail
// condition is that the READ completes with the right data.
// GOROCE_READCOST=1 runs 16 MiB instead of 1 MiB.
func TestReadLossCost(t *testing.T) {
	size := 1 << 20
	if os.Getenv("GOROCE_READCOST") != "" {
		size = 16 << 20
	}
	for _, loss := range []float64{0.01, 0.05} {
		for _, seed := range simtest.Seeds(t, 1, 2) {
			c := readCost(t, seed, size, loss)
			t.Logf("READ %d MiB, loss %.0f %%, seed %d: responder sent %.2f bytes per payload byte", size>>20, loss*100, seed, c)
		}
	}
}
