package qp

import (
	"fmt"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
)

// RxeCounter reports whether c is one of the counters rxe exposes in
// hw_counters (rxe_hw_counters.c), under the same name; the others are
// goroce's own (docs/metrics.md lists both).
func RxeCounter(c Counter) bool { return c <= CntRDMARecvs }

// MLX5Counter reports whether c is one of mlx5's hw counters under mlx5's
// name (rx_write_requests, rx_read_requests, rx_atomic_requests;
// drivers/infiniband/hw/mlx5/counters.c). Like rxe's, they are in
// hw_counters.
func MLX5Counter(c Counter) bool { return transport.MLX5Counter(c) }

// PortCounters are the port's traffic counters under the names of
// /sys/class/infiniband/DEV/ports/1/counters (mlx5 and rxe's ib core
// port counters), taken from the link: every frame the backend moved, in
// the units the files use (the data counters in 4-octet words, IBTA
// PortXmitData/PortRcvData).
type PortCounters struct {
	XmitData    uint64 // port_xmit_data: transmitted bytes / 4
	RcvData     uint64 // port_rcv_data: received bytes / 4
	XmitPackets uint64 // port_xmit_packets
	RcvPackets  uint64 // port_rcv_packets
}

// QPStats are one QP's counters.
type QPStats struct {
	QPN      uint32
	State    State
	Counters Counters
}

// Stats is a snapshot of everything a device counts.
type Stats struct {
	Name string
	// Counters are the device-wide counters: rxe's (RxeCounter) and
	// goroce's own, summed over every QP the device ever had.
	Counters Counters
	Port     PortCounters
	// Rx are the frames dropped before any QP saw them.
	Rx RxStats
	// Link is the backend's own counters (summed over the queues of a
	// multi-queue device).
	Link nic.Stats
	// Queues are each queue's link counters on a multi-queue device
	// (Config.Links; nil with one queue).
	Queues []nic.Stats
	// AsyncEventsDropped is DroppedAsyncEvents.
	AsyncEventsDropped uint64
	// QPs are the QPs that exist, in creation order.
	QPs []QPStats
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	link := d.linkStats()
	d.mu.Lock()
	s := Stats{Name: d.cfg.Name, Counters: d.countersLocked(), Rx: d.stats.rx, Link: link,
		Port: PortCounters{XmitData: link.TxBytes / 4, RcvData: link.RxBytes / 4,
			XmitPackets: link.TxFrames, RcvPackets: link.RxFrames}}
	s.QPs = make([]QPStats, len(d.tab.qpList))
	for i, q := range d.tab.qpList {
		s.QPs[i] = QPStats{QPN: q.eng.QPN(), State: q.eng.State(), Counters: q.eng.Counters}
	}
	d.mu.Unlock()
	if len(d.cfg.Links) > 1 {
		for _, l := range d.cfg.Links {
			s.Queues = append(s.Queues, l.Stats())
		}
	}
	s.AsyncEventsDropped = d.DroppedAsyncEvents()
	return s
}

// Map is the snapshot as nested maps of names (the layout qp/qpexpvar
// publishes): hw_counters holds rxe's counters under their rxe
// names and mlx5's under theirs, goroce_counters goroce's own, port_counters the sysfs port
// counters, rx the receive-path drops, link the backend's counters, and
// qps each QP's (by QP number in hex) state and counters.
func (s *Stats) Map() map[string]any {
	hw, own := counterMaps(&s.Counters)
	m := map[string]any{
		"name":            s.Name,
		"hw_counters":     hw,
		"goroce_counters": own,
		"port_counters": map[string]uint64{
			"port_xmit_data": s.Port.XmitData, "port_rcv_data": s.Port.RcvData,
			"port_xmit_packets": s.Port.XmitPackets, "port_rcv_packets": s.Port.RcvPackets,
		},
		"rx": map[string]uint64{
			"frames": s.Rx.Frames, "parse_errors": s.Rx.ParseErrors, "bad_icrc": s.Rx.BadICRC,
			"not_roce": s.Rx.NotRoCE, "wrong_dst": s.Rx.WrongDst, "no_qp": s.Rx.NoQP,
		},
		"link": map[string]uint64{
			"rx_frames": s.Link.RxFrames, "rx_bytes": s.Link.RxBytes, "tx_frames": s.Link.TxFrames,
			"tx_bytes": s.Link.TxBytes, "rx_drops": s.Link.RxDrops, "tx_drops": s.Link.TxDrops,
			"ring_full": s.Link.RingFull, "wakeups": s.Link.Wakeups,
		},
		"async_events_dropped": s.AsyncEventsDropped,
	}
	qps := make(map[string]any, len(s.QPs))
	for i := range s.QPs {
		q := &s.QPs[i]
		hw, own := counterMaps(&q.Counters)
		qps[fmt.Sprintf("%#x", q.QPN)] = map[string]any{"state": q.State.String(), "hw_counters": hw, "goroce_counters": own}
	}
	m["qps"] = qps
	return m
}

func counterMaps(c *Counters) (hw, own map[string]uint64) {
	hw, own = map[string]uint64{}, map[string]uint64{}
	for i, v := range c {
		if RxeCounter(Counter(i)) || MLX5Counter(Counter(i)) {
			hw[Counter(i).String()] = v
		} else {
			own[Counter(i).String()] = v
		}
	}
	return hw, own
}
