// Package afpacket is the nic.Link backend over a Linux AF_PACKET socket:
// raw Ethernet frames in and out of one interface, no kernel IP/UDP
// processing, root (CAP_NET_RAW) required.
//
// Receive: a TPACKET_V3 ring shared with the kernel (mmap). The ring is
// NumBlocks blocks of BlockSize bytes; the kernel fills a block with frames
// and hands it to us ("retires" it) when it is full or BlockTimeout after its
// first frame, whichever comes first; we copy the frames out and give the
// block back. So a lone frame waits up to BlockTimeout (≥ 1 ms, the kernel's
// granularity) before ReadBatch sees it: V3 trades latency for throughput
// (no per-frame wake-up); Options.LowLatency switches to a TPACKET_V2 ring
// (one slot per frame, handed over at once). ReadBatch sleeps in poll(2) on the socket and an
// eventfd, so Close wakes it (ErrClosed). A classic BPF socket filter
// (filter.go) keeps everything but IPv4/IPv6 UDP to the RoCEv2 port out of
// the ring, and PACKET_IGNORE_OUTGOING keeps our own (and the host's)
// transmissions out. VLAN tags the kernel stripped into metadata are put
// back into the frame, so ReadBatch returns frames as they were on the wire.
//
// Transmit: sendmmsg(2) with one iovec per frame, BatchSize frames per
// system call, with PACKET_QDISC_BYPASS (frames go straight to the driver,
// like pktgen; no qdisc, no packet taps — tcpdump on the sending host does
// not see them, capture on the peer instead). A frame the driver refuses
// (ENOBUFS: device queue stopped) is retried after yielding the processor,
// up to 1000 times, then dropped and counted (Stats.TxDrops), as a wire would
// lose it; each retry and each wait for a full socket buffer (EAGAIN, in
// poll(2)) counts Stats.RingFull. Note that veth without XDP on the peer
// never refuses: when the receiving CPU's backlog (net.core.netdev_max_backlog)
// is full it drops silently, visible only in the peer's interface counters.
//
// The socket belongs to the network namespace of the thread that opened it.
// Kernel-side drops (ring full) are read with PACKET_STATISTICS and added to
// Stats.RxDrops. On the 6.18 build machine a TPACKET_V3 ring occasionally
// dropped a burst of frames although the reader had handed every block back
// (seen only under heavy CPU load, and with two-block rings; not seen with
// V2); the frames are counted, and RC retransmission recovers them.
//
// AF_PACKET is Linux's. The package builds on every system; outside Linux
// Open fails with ErrNotSupported (which matches errors.ErrUnsupported).
package afpacket

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// ErrNotSupported is what Open returns outside Linux.
var ErrNotSupported = fmt.Errorf("afpacket: AF_PACKET is Linux only, this is %s: %w", runtime.GOOS, errors.ErrUnsupported)

// Options configure Open. The zero value is usable.
type Options struct {
	// BlockSize is the ring block size in bytes, a multiple of the page
	// size (default 1 MiB). NumBlocks is the number of blocks (default 8,
	// at least 3: two-block TPACKET_V3 rings were seen dropping frames while
	// the reader kept up).
	BlockSize, NumBlocks int
	// BlockTimeout is how long the kernel waits before handing over a block
	// that is not full (default and minimum 1 ms; whole milliseconds).
	BlockTimeout time.Duration
	// BatchSize is the number of frames per sendmmsg (default 64).
	BatchSize int
	// Port is the UDP destination port the socket filter passes (default 4791).
	Port uint16
	// NoFilter receives every frame of the interface (debugging).
	NoFilter bool
	// NoQdiscBypass sends through the qdisc layer (and packet taps).
	NoQdiscBypass bool
	// LowLatency uses a TPACKET_V2 ring instead: fixed-size frame slots,
	// each handed over (and the reader woken) as soon as it is written, so
	// a lone frame is seen in microseconds instead of up to BlockTimeout,
	// at the cost of one wake-up per frame when traffic is sparse and a
	// slot of MTU size per frame.
	LowLatency bool
}
