package qp

import (
	"time"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// Congestion control (docs/congestion.md). With Config.CC set, the device
// is a RoCEv2 congestion-control endpoint as a ConnectX NIC with DCQCN
// enabled:
//
//   - every frame its QPs send carries ECT(0) in the IP ECN bits (the DSCP
//     of the address vector's traffic class is kept);
//   - notification point: a received RoCEv2 packet marked CE by a switch
//     makes it send a CNP (opcode 0x81, BECN, PSN 0, 16 reserved bytes) to
//     the packet's source IP, addressed to the QP that sent the packet
//     (the receiving QP's destination QP), at most one per QP per
//     np_min_time_between_cnps;
//   - reaction point: a CNP addressed to one of its QPs cuts that QP's
//     rate (DCQCN, transport/dcqcn.go), and the QP's requester paces its
//     packets to the current rate.
//
// Without Config.CC (the default) nothing changes on the wire, and
// received CNPs are counted in rp_cnp_ignored: rxe neither sends nor
// understands CNPs, so a device talking to rxe peers keeps CC off.

// CCParams are the congestion-control parameters (mlx5 cc_params names;
// transport.DCQCNParams documents each).
type CCParams = transport.DCQCNParams

// DCQCNState is one QP's reaction-point state (QP.CongestionState).
type DCQCNState = transport.DCQCNState

// DefaultCCParams returns NVIDIA's documented defaults.
func DefaultCCParams() CCParams { return transport.DefaultDCQCNParams() }

// Congestion-control counters (mlx5's names).
const (
	CntNPECNMarkedRoCEPackets = transport.CntNPECNMarkedRoCEPackets
	CntNPCNPSent              = transport.CntNPCNPSent
	CntRPCNPHandled           = transport.CntRPCNPHandled
	CntRPCNPIgnored           = transport.CntRPCNPIgnored
)

// LineRater is implemented by links that know their line rate (bits per
// second); with CCParams.PortRate 0 the device takes the ceiling of its
// QPs' rates from it.
type LineRater interface {
	LineRate() int64
}

// ccSetup fixes the device's copy of the parameters at Open.
func (d *Device) ccSetup() error {
	if d.cfg.CC == nil {
		return nil
	}
	p := *d.cfg.CC
	if p.PortRate == 0 {
		if lr, ok := d.cfg.Link.(LineRater); ok {
			p.PortRate = lr.LineRate()
		}
	}
	if err := p.Check(); err != nil {
		return err
	}
	d.cc = &p
	return nil
}

// ccState is a QP's notification-point state, under dev.mu.
type ccState struct {
	lastCNP time.Time // when the last CNP for this QP was sent
	sentCNP bool
}

// ccInput runs the congestion-control part of receiving pkt for q (d.mu
// held). It reports whether pkt was a CNP, which goes no further.
func (d *Device) ccInput(q *QP, pkt *wire.Packet, now time.Time) bool {
	if pkt.Opcode() == wire.CNP {
		// An mlx5 sends CNPs from UDP source port 0 with P_Key 0xFFFF and
		// its own addressing: the QP number is all that names the flow.
		// The engine counts rp_cnp_handled or rp_cnp_ignored, for the QP
		// and the device.
		q.eng.CNP(now)
		d.touch(q)
		return true
	}
	if d.cc == nil || !transport.CEMarked(pkt) {
		return false
	}
	q.eng.Counters[CntNPECNMarkedRoCEPackets]++
	d.stats.counters[CntNPECNMarkedRoCEPackets]++
	if q.cc.sentCNP && now.Sub(q.cc.lastCNP) < d.cc.NPMinTimeBetweenCNPs {
		return false
	}
	if d.sendCNP(q, pkt) {
		q.cc.sentCNP, q.cc.lastCNP = true, now
		q.eng.Counters[CntNPCNPSent]++
		d.stats.counters[CntNPCNPSent]++
	}
	return false
}

// sendCNP builds the CNP answering pkt into the device's transmit batch:
// back to pkt's source (MAC and IP), to the QP q is connected to, with
// DSCP np_cnp_dscp and ECT(0) as a ConnectX sends it, and on a VLAN with
// priority np_cnp_prio.
func (d *Device) sendCNP(q *QP, pkt *wire.Packet) bool {
	dest := q.eng.Attr().DestQPN
	if dest == 0 || pkt.Eth == nil {
		return false
	}
	f := wire.CNPFrame(pkt.Eth.Src(), d.mac, pkt.DstIP(), pkt.SrcIP(), dest)
	f.TrafficClass = d.cc.NPCNPDSCP<<2 | transport.ECNECT0
	if pkt.HasVLAN {
		f.HasVLAN = true
		f.VLAN = uint16(d.cc.NPCNPPrio)<<13 | pkt.VLAN&0x0FFF
	}
	// IPv4 ID 0 with DF, as every frame the transport sends (the UDP
	// backend's receivers rebuild the header with ID 0).
	buf := d.tx.Frame()
	n, err := wire.Build(buf, &f, 0)
	if err != nil {
		return false
	}
	d.tx.Send(n)
	return true
}

// CongestionState returns the QP's DCQCN reaction-point state: its current
// and target rates and α (zero without Config.CC).
func (q *QP) CongestionState() DCQCNState {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	return q.eng.DCQCN(d.now())
}

// CCParams returns the device's congestion-control parameters, or false
// when congestion control is off.
func (d *Device) CCParams() (CCParams, bool) {
	if d.cc == nil {
		return CCParams{}, false
	}
	return *d.cc, true
}
