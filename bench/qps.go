//go:build linux

package main

import (
	"fmt"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// wireSnap is what both ends' links and engines had done at one moment:
// the many-QP cell reports the difference over a run per message, to
// show where a run's frames and system calls went.
type wireSnap struct {
	txA, txB       uint64 // frames written by A (requests) and B (ACKs)
	kickA, kickB   uint64 // the backend's wakeups (AF_XDP: sendto kicks)
	coalB          uint64 // B's ACKs merged away (ack_coalesced)
	retransA       uint64 // A's retransmitted packets
	rxDropA, rxDrB uint64 // frames the links lost on receive
}

func snapWire(p *rdmaPair) wireSnap {
	a, b := p.a.dev.Stats(), p.b.dev.Stats()
	return wireSnap{txA: a.Link.TxFrames, txB: b.Link.TxFrames, kickA: a.Link.Wakeups, kickB: b.Link.Wakeups,
		coalB: b.Counters[qp.Counter(transport.CntAckCoalesced)], retransA: a.Counters[qp.CntRetransmittedPkts],
		rxDropA: a.Link.RxDrops, rxDrB: b.Link.RxDrops}
}

// perMsg formats the difference s−s0 per message.
func (s wireSnap) perMsg(s0 wireSnap, msgs int64) string {
	m := float64(max(msgs, 1))
	f := func(a, b uint64) float64 { return float64(a-b) / m }
	return fmt.Sprintf("per msg: A frames %.3f, B frames (ACKs) %.3f, A kicks %.3f, B kicks %.3f, B ack_coalesced %.3f, A retrans %.4f, rx drops %d/%d",
		f(s.txA, s0.txA), f(s.txB, s0.txB), f(s.kickA, s0.kickA), f(s.kickB, s0.kickB), f(s.coalB, s0.coalB),
		f(s.retransA, s0.retransA), s.rxDropA-s0.rxDropA, s.rxDrB-s0.rxDrB)
}

// cpuPerMsg is the run's CPU time per message: this process's and the
// whole machine's (everyone's), in µs, and the machine's idle share.
func (t throughput) cpuPerMsg() string {
	if t.cpuErr != nil || t.msgs == 0 {
		return ""
	}
	m := float64(t.msgs)
	return fmt.Sprintf("; CPU per msg: process %.2f µs, machine %.2f µs", t.cpu.proc/m*1e6, t.cpu.machine/m*1e6)
}

// ringPlan sizes the qps cell's receive rings. 1000 QPs with 4
// outstanding put 4000 frames in flight towards one receiver, against an
// AF_XDP RX ring of 2048 by default (afxdp.Options.NumFrames 4096, half of
// them receiving): a receiver that falls behind drops, and every drop of a
// QP's last outstanding frame waits for the local ACK timer (the cell then
// measures timeouts). The plan gives the RX ring room for the whole window
// with the same UMEM (2 KiB chunks: a 1500-byte frame fits one). AF_PACKET's
// ring (8 × 1 MiB blocks of 2 KiB slots) and the UDP backend's 8 MiB socket
// buffer already hold it.
type ringPlan struct {
	numFrames, frameSize int // AF_XDP; zero: the defaults
}

// AF_XDP defaults (nic/afxdp) and descriptor sizes: fill and completion
// rings carry 8-byte addresses, RX and TX rings 16-byte xdp_descs.
const (
	xdpDefaultFrames    = 4096
	xdpDefaultFrameSize = 4096
	xdpRingBytesPerSlot = 8 + 8 + 16 + 16
	afpacketRingBytes   = 8 << 20 // nic/afpacket: 8 blocks of 1 MiB
)

func qpsRings(window int) ringPlan {
	if window <= xdpDefaultFrames/2 {
		return ringPlan{}
	}
	n := xdpDefaultFrames
	for n/2 < window && n < 1<<19 {
		n *= 2
	}
	return ringPlan{numFrames: n, frameSize: 2048}
}

func (r ringPlan) tune(o *qp.InterfaceOptions) {
	if r.numFrames != 0 {
		o.AFXDP.NumFrames, o.AFXDP.FrameSize = r.numFrames, r.frameSize
	}
}

// linkBytes is the memory one device's link maps for its rings: AF_XDP's
// UMEM and four rings, AF_PACKET's receive ring; 0 for the UDP backend,
// whose socket buffers are the kernel's, allocated as frames queue.
func (r ringPlan) linkBytes(backend string) int {
	switch backend {
	case qp.BackendAFXDP:
		n, fs := r.numFrames, r.frameSize
		if n == 0 {
			n, fs = xdpDefaultFrames, xdpDefaultFrameSize
		}
		return n*fs + n/2*xdpRingBytesPerSlot
	case qp.BackendAFPacket:
		return afpacketRingBytes
	}
	return 0
}

// String describes the plan for the report.
func (r ringPlan) String() string {
	if r.numFrames == 0 {
		return fmt.Sprintf("the default %d-slot RX ring", xdpDefaultFrames/2)
	}
	return fmt.Sprintf("a %d-slot RX ring, NumFrames %d of %d B", r.numFrames/2, r.numFrames, r.frameSize)
}
