package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/metrics"
	"github.com/goroce/goroce/qp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// pair runs n signalled RDMA WRITEs of size bytes from a to b.
func pair(t *testing.T, n, size int) (a, b *qp.Device, qa *qp.QP) {
	t.Helper()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, _ := pdA.RegMR(make([]byte, size), qp.LocalWrite)
	mrB, _ := pdB.RegMR(make([]byte, size), qp.LocalWrite|qp.RemoteWrite)
	cqA, _ := a.CreateCQ(16)
	cqB, _ := b.CreateCQ(16)
	caps := qp.Caps{MaxSendWR: 16, MaxRecvWR: 16}
	qa, _ = pdA.CreateQP(qp.InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	qb, _ := pdB.CreateQP(qp.InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 1, GID: gidB}, qp.ConnectOptions{SQPSN: 2}); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 2, GID: gidA}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	for i := range n {
		if err := qa.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{{Addr: mrA.IOVA(), Length: uint32(size), LKey: mrA.LKey()}},
			RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()}); err != nil {
			t.Fatal(err)
		}
		if _, err := cqA.Wait(ctx, wcs); err != nil || wcs[0].Status != qp.WCSuccess {
			t.Fatalf("write %d: %v %v", i, wcs[0].Status, err)
		}
	}
	return a, b, qa
}

func gather(t *testing.T, c prometheus.Collector) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, f := range fams {
		out[f.GetName()] = f.GetMetric()
	}
	return out
}

func value(t *testing.T, m map[string][]*dto.Metric, name string, labels map[string]string) float64 {
	t.Helper()
next:
	for _, x := range m[name] {
		for _, l := range x.GetLabel() {
			if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
				continue next
			}
		}
		if x.Counter != nil {
			return x.Counter.GetValue()
		}
		return x.Gauge.GetValue()
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// TestCollector: the collector's series equal the device's own counters
// after a run of 5 one-packet WRITEs: 5 requests out and 5 ACKs in on A,
// the reverse on B, per device and per QP, and the port counters equal the
// link's.
func TestCollector(t *testing.T) {
	a, b, qa := pair(t, 5, 512)
	c := metrics.NewCollector(metrics.Options{PerQP: true}, a, b)
	m := gather(t, c)
	sa, sb := a.Stats(), b.Stats()
	for _, s := range []qp.Stats{sa, sb} {
		dev := map[string]string{"device": s.Name}
		if got, want := value(t, m, "goroce_sent_pkts_total", dev), float64(s.Counters[qp.CntSentPkts]); got != want {
			t.Errorf("%s sent_pkts %v, want %v", s.Name, got, want)
		}
		if got, want := value(t, m, "goroce_port_xmit_bytes_total", dev), float64(s.Link.TxBytes/4*4); got != want {
			t.Errorf("%s port_xmit_bytes %v, want %v", s.Name, got, want)
		}
		if got, want := value(t, m, "goroce_port_rcv_packets_total", dev), float64(s.Link.RxFrames); got != want {
			t.Errorf("%s port_rcv_packets %v, want %v", s.Name, got, want)
		}
	}
	if sa.Counters[qp.CntSentPkts] != 5 || sa.Counters[qp.CntRcvdPkts] != 5 || sb.Counters[qp.CntRcvdPkts] != 5 {
		t.Fatalf("A sent %d received %d, B received %d; want 5 each (one packet per WRITE, one ACK each)",
			sa.Counters[qp.CntSentPkts], sa.Counters[qp.CntRcvdPkts], sb.Counters[qp.CntRcvdPkts])
	}
	qpn := map[string]string{"device": sa.Name, "qpn": fmt.Sprintf("%#x", qa.QPN())}
	if got := value(t, m, "goroce_qp_sent_pkts_total", qpn); got != 5 {
		t.Errorf("QP sent_pkts %v, want 5", got)
	}
	if got := value(t, m, "goroce_qp_state", qpn); got != float64(qp.StateRTS) {
		t.Errorf("QP state %v, want RTS (%d)", got, qp.StateRTS)
	}
	if got := value(t, m, "goroce_rdma_sends_total", map[string]string{"device": sa.Name}); got != 0 {
		t.Errorf("rdma_sends %v after WRITEs only, want 0", got)
	}
	// Requests by type: mlx5's rx_write_requests on B, goroce's
	// tx_write_requests on A, per device and per QP.
	if got := value(t, m, "goroce_rx_write_requests_total", map[string]string{"device": sb.Name}); got != 5 {
		t.Errorf("B rx_write_requests %v, want 5", got)
	}
	if got := value(t, m, "goroce_qp_tx_write_requests_total", qpn); got != 5 {
		t.Errorf("A's QP tx_write_requests %v, want 5", got)
	}
}
