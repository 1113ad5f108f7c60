package transport

import (
	"time"

	"github.com/goroce/goroce/wire"
)

// Congestion control hooks of the QP (dcqcn.go has the algorithm): with
// Config.CC set, every frame the QP sends carries ECT(0) in the IP ECN
// bits, the requester paces its packets to the reaction point's current
// rate, and CNP feeds the reaction point.

// ECN codepoints of the IP traffic class (RFC 3168).
const (
	ECNNotECT = 0b00
	ECNECT1   = 0b01
	ECNECT0   = 0b10
	ECNCE     = 0b11
)

// ccTrafficClass is the traffic class the QP sends with: tc's DSCP and,
// with congestion control, ECT(0).
func (q *QP) ccTrafficClass(tc uint8) uint8 {
	if q.pace == nil {
		return tc
	}
	return tc&^0b11 | ECNECT0
}

// CNP hands the QP a Congestion Notification Packet addressed to it (its
// reaction point). It reports whether the QP handled it: false when
// congestion control is off or the QP does not send (not RTS or SQD).
func (q *QP) CNP(now time.Time) bool {
	st := q.attr.State
	if q.pace == nil || (st != StateRTS && st != StateSQD) {
		q.inc(CntRPCNPIgnored)
		return false
	}
	q.inc(CntRPCNPHandled)
	q.pace.cc.onCNP(now)
	return true
}

// CongestionControl reports whether the QP runs DCQCN.
func (q *QP) CongestionControl() bool { return q.pace != nil }

// DCQCN returns the reaction point's state at now (the zero value when
// congestion control is off).
func (q *QP) DCQCN(now time.Time) DCQCNState {
	if q.pace == nil {
		return DCQCNState{}
	}
	return q.pace.cc.state(now)
}

// paceBlocked reports whether the requester must hold its next packet.
func (r *requester) paceBlocked(now time.Time) bool {
	return r.qp.pace != nil && r.qp.pace.blocked(now)
}

// paced charges the frame just sent to the pacer.
func (r *requester) paced(now time.Time) {
	if p := r.qp.pace; p != nil {
		p.sent(now, r.out.lastLen)
	}
}

// paceAckReq reports whether the packet being sent must ask for an ACK
// because of the pacing: a QP slowed down to a few packets per ACK timeout
// would otherwise reach the timeout before the 66th packet asks, and
// resend what arrived. It asks at least every quarter timeout.
func (r *requester) paceAckReq() bool {
	p := r.qp.pace
	if p == nil {
		return false
	}
	t := r.comp.ackTimeout()
	return t > 0 && p.now.Sub(p.ackReqAt) >= t/4
}

// paceAcked notes that the packet being sent asks for an ACK.
func (r *requester) paceAcked() {
	if p := r.qp.pace; p != nil {
		p.ackReqAt = p.now
	}
}

// paceHeld handles an ACK timeout while the pacer holds the requester
// back: the packets sent last may not have asked for an ACK (the rate was
// cut after they left), so the timeout waits for the next packet, which
// asks for one; a loss before it shows as a PSN gap then. It reports
// whether it deferred the timeout.
func (c *completer) paceHeld(now time.Time) bool {
	p := c.qp.pace
	if p == nil || !p.wait || !now.Before(p.next) {
		return false
	}
	p.ackReqAt = time.Time{}
	c.retryDeadline = p.next.Add(c.ackTimeout())
	return true
}

// paceDeadline is when a requester held by the pacer may send again.
func (r *requester) paceDeadline() (time.Time, bool) {
	if p := r.qp.pace; p != nil && p.wait {
		return p.next, true
	}
	return time.Time{}, false
}

// ecn returns the ECN bits of a received packet.
func ecn(p *wire.Packet) uint8 {
	if p.IPv4 != nil {
		return p.IPv4.TOS() & 0b11
	}
	return p.IPv6.TrafficClass() & 0b11
}

// CEMarked reports whether p arrived with ECN = CE (a switch on the path
// was congested).
func CEMarked(p *wire.Packet) bool { return ecn(p) == ECNCE }
