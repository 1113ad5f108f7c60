package qp_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/goroce/goroce/qp"
)

// TestStatsMap: the device's Stats.Map (what qp/qpexpvar publishes) is
// JSON with rxe's counters under hw_counters (rdma_sends/rdma_recvs
// counting 3 SENDs and their 3 receive completions), goroce's own under
// goroce_counters, and the QP's.
func TestStatsMap(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{})
		for i := range 3 {
			x.recv(x.b, uint64(i), x.b.sge(0, 64))
			x.post(x.a, &qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: []qp.SGE{x.a.sge(0, 64)}})
			expectWC(t, x.a.scq, uint64(i), qp.WCSuccess, qp.WCSend)
			expectWC(t, x.b.rcq, uint64(i), qp.WCSuccess, qp.WCRecv)
		}
		type qpv struct {
			State  string            `json:"state"`
			HW     map[string]uint64 `json:"hw_counters"`
			Goroce map[string]uint64 `json:"goroce_counters"`
		}
		var va, vb struct {
			HW     map[string]uint64 `json:"hw_counters"`
			Goroce map[string]uint64 `json:"goroce_counters"`
			Port   map[string]uint64 `json:"port_counters"`
			QPs    map[string]qpv    `json:"qps"`
		}
		for _, c := range []struct {
			dev *qp.Device
			v   any
		}{{x.a.dev, &va}, {x.b.dev, &vb}} {
			s := c.dev.Stats()
			j, err := json.Marshal(s.Map())
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(j, c.v); err != nil {
				t.Fatal(err)
			}
		}
		if va.HW["rdma_sends"] != 3 || vb.HW["rdma_recvs"] != 3 || va.HW["rdma_recvs"] != 0 {
			t.Fatalf("rdma_sends %d (A), rdma_recvs %d (B) %d (A); want 3, 3, 0", va.HW["rdma_sends"], vb.HW["rdma_recvs"], va.HW["rdma_recvs"])
		}
		if va.HW["sent_pkts"] != 3 || vb.HW["rcvd_pkts"] != 3 {
			t.Fatalf("sent_pkts %d rcvd_pkts %d, want 3 each", va.HW["sent_pkts"], vb.HW["rcvd_pkts"])
		}
		if _, ok := va.HW["retransmitted_pkts"]; ok {
			t.Fatal("goroce's retransmitted_pkts listed among rxe's hw_counters")
		}
		if _, ok := va.Goroce["retransmitted_pkts"]; !ok {
			t.Fatal("retransmitted_pkts missing from goroce_counters")
		}
		// Requests by type: mlx5 has no send counter, so rx_send_requests
		// and tx_send_requests are goroce's; mlx5's rx_write_requests is
		// among the hw_counters.
		if vb.Goroce["rx_send_requests"] != 3 || va.Goroce["tx_send_requests"] != 3 {
			t.Fatalf("rx_send_requests %d (B), tx_send_requests %d (A); want 3 each", vb.Goroce["rx_send_requests"], va.Goroce["tx_send_requests"])
		}
		if v, ok := vb.HW["rx_write_requests"]; !ok || v != 0 {
			t.Fatalf("mlx5's rx_write_requests in hw_counters: %d, %v", v, ok)
		}
		q := va.QPs[fmt.Sprintf("%#x", x.a.qp.QPN())]
		if q.State != "RTS" || q.HW["rdma_sends"] != 3 {
			t.Fatalf("QP %#x: %+v", x.a.qp.QPN(), q)
		}
		if va.Port["port_xmit_packets"] == 0 || va.Port["port_xmit_data"] == 0 {
			t.Fatalf("port counters %v", va.Port)
		}
	})
}
