//go:build linux

package main

import (
	"fmt"

	"github.com/goroce/goroce/qp"
)

// wireSnap is what both ends' links and engines had done at one moment:
// the many-QP cell reports the difference over a run per message, to
// show where a run's frames and system calls went.
type wireSnap struct {
	txA, txB       uint64 // frames written by A (requests) and B (ACKs)
	kickA, kickB   uint64 // the backend's wakeups (AF_XDP: sendto kicks)
	txkA, txkB     uint64 // the transmit kicks among them
	fullA, fullB   uint64 // WriteBatch found the TX ring or chunks exhausted (RingFull)
	coalB          uint64 // B's ACKs merged away (ack_coalesced)
	retransA       uint64 // A's retransmitted packets
	rxDropA, rxDrB uint64 // frames the links lost on receive
	badA, badB     uint64 // frames the devices dropped for a bad ICRC (a frame changed after its ICRC)
}

func snapWire(p *rdmaPair) wireSnap { return wireOf(snapEnd(p.a.dev), snapEnd(p.b.dev)) }

// perMsg formats the difference s−s0 per message.
func (s wireSnap) perMsg(s0 wireSnap, msgs int64) string {
	m := float64(max(msgs, 1))
	f := func(a, b uint64) float64 { return float64(a-b) / m }
	return fmt.Sprintf("per msg: A frames %.3f, B frames (ACKs) %.3f, A kicks %.3f, B kicks %.3f, B ack_coalesced %.3f, A retrans %.4f, rx drops %d/%d",
		f(s.txA, s0.txA), f(s.txB, s0.txB), f(s.kickA, s0.kickA), f(s.kickB, s0.kickB), f(s.coalB, s0.coalB),
		f(s.retransA, s0.retransA), s.rxDropA-s0.rxDropA, s.rxDrB-s0.rxDrB)
}

// kicks formats each end's link wake-ups per frame it sent over s−s0
// (nic.Stats.Wakeups: on AF_XDP the sendto kicks, each sending at most
// XDP_MAX_TX_SKB_BUDGET frames in copy mode, and the receive side's
// wake-up calls).
func (s wireSnap) kicks(s0 wireSnap) string {
	f := func(k, n uint64) float64 { return float64(k) / float64(max(n, 1)) }
	fa, fb := s.txA-s0.txA, s.txB-s0.txB
	return fmt.Sprintf("per frame sent: A %d frames, %.4f TX kicks, %.4f wake-ups, ring full %d; B %d frames, %.4f TX kicks, %.4f wake-ups, ring full %d; A retrans %d, rx drops %d/%d, bad ICRC %d/%d",
		fa, f(s.txkA-s0.txkA, fa), f(s.kickA-s0.kickA, fa), s.fullA-s0.fullA, fb, f(s.txkB-s0.txkB, fb), f(s.kickB-s0.kickB, fb), s.fullB-s0.fullB,
		s.retransA-s0.retransA, s.rxDropA-s0.rxDropA, s.rxDrB-s0.rxDrB, s.badA-s0.badA, s.badB-s0.badB)
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

// ringPlan sizes the qps cell's receive rings to hold its whole window:
// 1000 QPs with 8 outstanding put 8000 frames in flight towards one
// receiver. The defaults hold 2048 (AF_XDP: NumFrames 4096, half of them
// receiving) and 4096 (AF_PACKET: 8 blocks of 1 MiB in 2 KiB slots); a
// receiver that falls behind drops, and every drop of a QP's last
// outstanding frame waits for the local ACK timer (at 4000 in flight and
// the AF_XDP default, runs dropped up to 11 000 frames and the cell
// measured timeouts). The plan gives AF_XDP an RX ring of at least the
// window in 2 KiB chunks (a 1500-byte frame fits one), AF_PACKET enough
// 1 MiB blocks, and the UDP socket 4 KiB of buffer per frame in flight
// (the kernel charges a small datagram's whole skb).
type ringPlan struct {
	numFrames, frameSize int // AF_XDP; zero: the defaults
	afpBlocks            int // AF_PACKET blocks of 1 MiB; zero: the default
	udpBuf               int // UDP SO_RCVBUF/SO_SNDBUF; zero: the default
}

// Backend defaults (nic/afxdp, nic/afpacket, qp) and AF_XDP descriptor
// sizes: fill and completion rings carry 8-byte addresses, RX and TX
// rings 16-byte xdp_descs.
const (
	xdpDefaultFrames    = 4096
	xdpDefaultFrameSize = 4096
	xdpRingBytesPerSlot = 8 + 8 + 16 + 16
	afpBlockSize        = 1 << 20
	afpDefaultBlocks    = 8
	afpSlot             = 2048
)

func qpsRings(window int) ringPlan {
	var r ringPlan
	if window > xdpDefaultFrames/2 {
		n := xdpDefaultFrames
		for n/2 < window && n < 1<<19 {
			n *= 2
		}
		r.numFrames, r.frameSize = n, 2048
	}
	if b := (window*afpSlot + afpBlockSize - 1) / afpBlockSize; b > afpDefaultBlocks {
		r.afpBlocks = b
	}
	if u := window * 4096; u > qp.DefaultUDPSocketBuffer {
		r.udpBuf = u
	}
	return r
}

func (r ringPlan) tune(o *qp.InterfaceOptions) {
	if r.numFrames != 0 {
		o.AFXDP.NumFrames, o.AFXDP.FrameSize = r.numFrames, r.frameSize
	}
	if r.afpBlocks != 0 {
		o.AFPacket.BlockSize, o.AFPacket.NumBlocks = afpBlockSize, r.afpBlocks
	}
	if r.udpBuf != 0 {
		o.UDPSocketBuffer = r.udpBuf
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
		return max(r.afpBlocks, afpDefaultBlocks) * afpBlockSize
	}
	return 0
}

// String describes the plan for the report.
func (r ringPlan) String() string {
	x := fmt.Sprintf("the default %d-slot AF_XDP RX ring", xdpDefaultFrames/2)
	if r.numFrames != 0 {
		x = fmt.Sprintf("a %d-slot AF_XDP RX ring (NumFrames %d of %d B)", r.numFrames/2, r.numFrames, r.frameSize)
	}
	return fmt.Sprintf("%s, %d MiB of AF_PACKET ring, %d MiB UDP socket buffers", x, max(r.afpBlocks, afpDefaultBlocks),
		max(r.udpBuf, qp.DefaultUDPSocketBuffer)>>20)
}
