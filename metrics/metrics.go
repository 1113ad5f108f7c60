// Package metrics exports the counters of goroce devices as a Prometheus
// collector (github.com/prometheus/client_golang). It is separate from qp
// so that only the programs that import it depend on client_golang; qp
// itself publishes the same counters through the standard library's
// expvar (qp/qpexpvar).
//
// Metric names (docs/metrics.md has the full list with their origin):
//
//	goroce_<rxe hw counter>_total{device}        rxe's hw_counters (qp.RxeCounter), e.g. goroce_rcvd_pkts_total
//	goroce_<goroce counter>_total{device}        goroce's own transport counters, e.g. goroce_retransmitted_pkts_total
//	goroce_qp_<counter>_total{device,qpn}        the same per QP (NewCollector's PerQP option)
//	goroce_port_xmit_bytes_total{device}         port_xmit_data × 4, and port_rcv_bytes, port_xmit_packets, port_rcv_packets
//	goroce_rx_dropped_frames_total{device,reason} frames dropped before any QP (qp.RxStats)
//	goroce_link_<counter>_total{device}          the backend's counters (nic.Stats)
//	goroce_async_events_dropped_total{device}    async events lost to a full queue
//	goroce_qp_state{device,qpn}                  the QP state (enum ibv_qp_state)
package metrics

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/qp"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Collector.
type Options struct {
	// PerQP adds the per-QP counters and states (one series per QP and
	// counter: keep it off on devices with many QPs).
	PerQP bool
}

// Collector is a prometheus.Collector of goroce devices.
type Collector struct {
	opts Options
	mu   sync.Mutex
	devs []*qp.Device
}

// NewCollector returns a collector of devs; Add adds more.
func NewCollector(o Options, devs ...*qp.Device) *Collector {
	return &Collector{opts: o, devs: append([]*qp.Device(nil), devs...)}
}

// Add adds a device.
func (c *Collector) Add(d *qp.Device) {
	c.mu.Lock()
	c.devs = append(c.devs, d)
	c.mu.Unlock()
}

// Remove removes a device (before it closes, or after: a closed device
// still reports its last counters).
func (c *Collector) Remove(d *qp.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.devs {
		if x == d {
			c.devs = append(c.devs[:i], c.devs[i+1:]...)
			return
		}
	}
}

const ns = "goroce"

var (
	counterDescs, qpCounterDescs [qp.NumCounters]*prometheus.Desc

	portDescs = [4]*prometheus.Desc{
		prometheus.NewDesc(ns+"_port_xmit_bytes_total", "Bytes the port sent (port_xmit_data × 4).", []string{"device"}, nil),
		prometheus.NewDesc(ns+"_port_rcv_bytes_total", "Bytes the port received (port_rcv_data × 4).", []string{"device"}, nil),
		prometheus.NewDesc(ns+"_port_xmit_packets_total", "Frames the port sent (port_xmit_packets).", []string{"device"}, nil),
		prometheus.NewDesc(ns+"_port_rcv_packets_total", "Frames the port received (port_rcv_packets).", []string{"device"}, nil),
	}
	rxDropDesc = prometheus.NewDesc(ns+"_rx_dropped_frames_total",
		"Frames the device dropped before any QP saw them, by reason (qp.RxStats).", []string{"device", "reason"}, nil)
	rxFramesDesc = prometheus.NewDesc(ns+"_rx_frames_total", "Frames the device's receive path handled (qp.RxStats.Frames).", []string{"device"}, nil)
	linkDescs    = map[string]*prometheus.Desc{}
	asyncDesc    = prometheus.NewDesc(ns+"_async_events_dropped_total", "Asynchronous events lost because the queue was full.", []string{"device"}, nil)
	qpStateDesc  = prometheus.NewDesc(ns+"_qp_state", "QP state (enum ibv_qp_state: 0 RESET … 3 RTS … 6 ERR).", []string{"device", "qpn"}, nil)
)

var linkNames = []string{"rx_drops", "tx_drops", "ring_full", "wakeups"}

func init() {
	for i := range counterDescs {
		c := qp.Counter(i)
		origin := "goroce's own transport counter"
		if qp.RxeCounter(c) {
			origin = "rxe hw_counters " + c.String()
		} else if qp.MLX5Counter(c) {
			origin = "mlx5 hw_counters " + c.String()
		}
		counterDescs[i] = prometheus.NewDesc(ns+"_"+c.String()+"_total", "Device "+c.String()+" ("+origin+").", []string{"device"}, nil)
		qpCounterDescs[i] = prometheus.NewDesc(ns+"_qp_"+c.String()+"_total", "QP "+c.String()+" ("+origin+").", []string{"device", "qpn"}, nil)
	}
	for _, n := range linkNames {
		linkDescs[n] = prometheus.NewDesc(ns+"_link_"+n+"_total", "Backend link counter "+n+" (nic.Stats).", []string{"device"}, nil)
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range counterDescs {
		ch <- d
	}
	for _, d := range portDescs {
		ch <- d
	}
	ch <- rxDropDesc
	ch <- rxFramesDesc
	for _, n := range linkNames {
		ch <- linkDescs[n]
	}
	ch <- asyncDesc
	if c.opts.PerQP {
		for _, d := range qpCounterDescs {
			ch <- d
		}
		ch <- qpStateDesc
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	devs := append([]*qp.Device(nil), c.devs...)
	c.mu.Unlock()
	for _, d := range devs {
		s := d.Stats()
		name := s.Name
		counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
		}
		for i, v := range s.Counters {
			counter(counterDescs[i], v, name)
		}
		counter(portDescs[0], s.Port.XmitData*4, name)
		counter(portDescs[1], s.Port.RcvData*4, name)
		counter(portDescs[2], s.Port.XmitPackets, name)
		counter(portDescs[3], s.Port.RcvPackets, name)
		counter(rxFramesDesc, s.Rx.Frames, name)
		for _, r := range []struct {
			reason string
			v      uint64
		}{{"parse_error", s.Rx.ParseErrors}, {"bad_icrc", s.Rx.BadICRC}, {"not_roce", s.Rx.NotRoCE},
			{"wrong_dst", s.Rx.WrongDst}, {"no_qp", s.Rx.NoQP}} {
			counter(rxDropDesc, r.v, name, r.reason)
		}
		for _, l := range []struct {
			name string
			v    uint64
		}{{"rx_drops", s.Link.RxDrops}, {"tx_drops", s.Link.TxDrops}, {"ring_full", s.Link.RingFull}, {"wakeups", s.Link.Wakeups}} {
			counter(linkDescs[l.name], l.v, name)
		}
		counter(asyncDesc, s.AsyncEventsDropped, name)
		if !c.opts.PerQP {
			continue
		}
		for _, q := range s.QPs {
			qpn := fmt.Sprintf("%#x", q.QPN)
			for i, v := range q.Counters {
				counter(qpCounterDescs[i], v, name, qpn)
			}
			ch <- prometheus.MustNewConstMetric(qpStateDesc, prometheus.GaugeValue, float64(q.State), name, qpn)
		}
	}
}
