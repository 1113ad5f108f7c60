package sim_test

import (
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// incast writes size bytes from each of hosts 1..n-1 to host 0 and waits
// for every completion.
func incast(t testing.TB, f *sim.Fabric, size int) {
	t.Helper()
	var ends []*sim.QPEnd
	for i := 1; i < len(f.Hosts); i++ {
		a, b, err := sim.ConnectQPs(t.Context(), f.Hosts[i].Dev, f.Hosts[0].Dev, sim.QPOptions{BufSize: size}, sim.QPOptions{BufSize: size})
		if err != nil {
			t.Fatal(err)
		}
		for j := range a.Buf {
			a.Buf[j] = byte(i + j)
		}
		if err := a.QP.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.SGE(0, size)},
			RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, a, b)
	}
	var wc [1]qp.WC
	for k := 0; k < len(ends); k += 2 {
		var got int
		err := f.RunUntil(func() bool {
			n, _ := ends[k].SendCQ.Poll(wc[:])
			got += n
			return got > 0
		}, time.Second)
		if err != nil || wc[0].Status != qp.WCSuccess {
			t.Fatalf("flow %d: %v %v", k/2+1, err, wc[0].Status)
		}
		for j, v := range ends[k+1].Buf {
			if v != ends[k].Buf[j] {
				t.Fatalf("flow %d: byte %d is %d, want %d", k/2+1, j, v, ends[k].Buf[j])
			}
		}
	}
}

// Four senders into one port with congestion control: the switch marks,
// the receiver answers with CNPs, the senders cut their rates, and nothing
// is dropped.
func TestFabricCongestionControl(t *testing.T) {
	p := qp.DefaultCCParams()
	f, err := sim.NewFabric(sim.FabricConfig{Hosts: 5, Seed: 1, Buffer: 1 << 20, ECN: sim.RED{Kmin: 10_000, Kmax: 50_000, Pmax: 1}, CC: &p})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	incast(t, f, 1<<20)
	st := f.Switch.PortStats(0)
	cnps := f.Hosts[0].Dev.Counters()[qp.CntNPCNPSent]
	var handled uint64
	for _, h := range f.Hosts[1:] {
		handled += h.Dev.Counters()[qp.CntRPCNPHandled]
	}
	if st.Marked == 0 || st.Dropped != 0 || cnps == 0 || handled != cnps {
		t.Fatalf("marked %d dropped %d, CNPs sent %d handled %d", st.Marked, st.Dropped, cnps, handled)
	}
}

// Without it the same incast into a small buffer is tail-dropped and
// recovered by go-back-N; nothing is marked (the frames are not
// ECN-capable) and no CNP is sent.
func TestFabricTailDrop(t *testing.T) {
	f, err := sim.NewFabric(sim.FabricConfig{Hosts: 5, Seed: 1, Buffer: 64 << 10, ECN: sim.RED{Kmin: 10_000, Kmax: 50_000, Pmax: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	incast(t, f, 1<<20)
	st := f.Switch.PortStats(0)
	var retrans uint64
	for _, h := range f.Hosts[1:] {
		retrans += h.Dev.Counters()[qp.CntRetransmittedPkts]
	}
	if st.Dropped == 0 || st.Marked != 0 || retrans == 0 || f.Hosts[0].Dev.Counters()[qp.CntNPCNPSent] != 0 {
		t.Fatalf("dropped %d marked %d retransmitted %d", st.Dropped, st.Marked, retrans)
	}
}

// Hosts on one switch: two senders write 256 KiB each to a third through
// its port, with congestion control on every device. The switch marks, the
// receiver sends CNPs, the senders slow down, and both WRITEs complete.
func ExampleNewFabric() {
	p := qp.DefaultCCParams()
	f, err := sim.NewFabric(sim.FabricConfig{Hosts: 3, Seed: 1, ECN: sim.RED{Kmin: 10_000, Kmax: 50_000, Pmax: 1}, CC: &p})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var cqs []*qp.CQ
	for i := 1; i <= 2; i++ {
		a, b, err := f.ConnectQPs(i, 0, sim.QPOptions{BufSize: 256 << 10}, sim.QPOptions{BufSize: 256 << 10})
		if err != nil {
			log.Fatal(err)
		}
		err = a.QP.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.SGE(0, 256<<10)},
			RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
		if err != nil {
			log.Fatal(err)
		}
		cqs = append(cqs, a.SendCQ)
	}
	if err := f.RunFor(10 * time.Millisecond); err != nil {
		log.Fatal(err)
	}
	done := 0
	for _, cq := range cqs {
		var wc [1]qp.WC
		if n, _ := cq.Poll(wc[:]); n == 1 && wc[0].Status == qp.WCSuccess {
			done++
		}
	}
	fmt.Println("completed:", done, "marked:", f.Switch.PortStats(0).Marked > 0, "CNPs:", f.Hosts[0].Dev.Counters()[qp.CntNPCNPSent] > 0)
	// Output: completed: 2 marked: true CNPs: true
}
