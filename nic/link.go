// Package nic moves complete Ethernet frames between goroce and a network,
// in batches. It knows nothing of RoCE transport: a backend only carries
// frames (for the raw backends: Ethernet + IP + UDP 4791 + BTH ... + ICRC).
//
// Backends: the in-memory link in this package (MemLink: tests, demo,
// deterministic simulation with seeded faults and a fake clock), and the
// real ones in subpackages: afpacket (AF_PACKET rings, root), afxdp (AF_XDP,
// root) and udp (an ordinary UDP socket, unprivileged, goroce-to-goroce and
// a stated subset of rxe). MemLink and udp work on every system Go has UDP
// sockets on; afpacket and afxdp are Linux only and elsewhere fail to Open
// with their ErrNotSupported (errors.ErrUnsupported). TapLink wraps any of them to capture their frames
// as pcap. Subpackage netaddr answers the addressing questions (GID table,
// path MTU, neighbour MAC, holding port 4791) for the real ones.
package nic

import (
	"errors"
	"net"
)

// ErrClosed is returned by a Link's blocking calls after Close.
var ErrClosed = errors.New("nic: link closed")

// Link is the batch interface every backend implements (modelled on
// wireguard-go's conn.Bind). Frames are complete Ethernet frames.
//
// ReadBatch blocks until at least one frame is available or the link is
// closed (ErrClosed). It copies up to len(bufs) frames into bufs, stores each
// frame's length in sizes[i] and returns the count. A frame larger than its
// buffer is dropped and counted.
//
// WriteBatch transmits frames in order and returns how many were accepted;
// the caller may reuse the buffers as soon as it returns.
//
// ReadBatch and WriteBatch may be called concurrently with each other, but
// each by one goroutine at a time.
type Link interface {
	ReadBatch(bufs [][]byte, sizes []int) (int, error)
	WriteBatch(frames [][]byte) (int, error)
	// BatchSize is the preferred number of frames per call.
	BatchSize() int
	// MTU is the IP MTU of the link (1500, 9000, ...): the largest frame is
	// MTU + 14 (+4 with a VLAN tag).
	MTU() int
	// HardwareAddr is the link's MAC address.
	HardwareAddr() net.HardwareAddr
	// Stats returns the backend's counters.
	Stats() Stats
	// Close stops the link and wakes every blocked call.
	Close() error
}

// Poller is implemented by links that can also be read without blocking:
// TryReadBatch copies the frames that are already waiting (0 if none) and
// never sleeps. After Close it returns ErrClosed. The in-memory link and the
// afpacket, afxdp and udp backends implement it; qp's busy-poll and manual
// modes need it.
type Poller interface {
	TryReadBatch(bufs [][]byte, sizes []int) (int, error)
}

// TxReserver is implemented by links whose transmit buffers a caller may
// build frames in, which saves WriteBatch's copy of each frame (afxdp: its
// UMEM chunks). ReserveTx replaces bufs[0:n] with free transmit buffers,
// each at least as long as the largest frame the link sends, and returns n
// (0 to len(bufs): as many as it can spare). A reserved buffer belongs to
// the caller until a WriteBatch accepts a frame built at its start
// (buf[:size]); from then on it is the link's again, and the caller must
// not touch it. A buffer never written stays reserved; the memory goes
// away at Close, so a caller stops using its reserved buffers before it
// closes the link. Only a caller that hands every frame it builds to this
// link's own WriteBatch may use it (a wrapper that drops or copies frames
// would leak the buffers).
type TxReserver interface {
	ReserveTx(bufs [][]byte) int
}

// RxLender is implemented by links that can hand received frames to the
// caller where they lie instead of copying them (afxdp: its UMEM chunks).
// LendRx(true) turns lending on and reports whether the link lends (false:
// it cannot lend every frame, and its reads go on copying): from then on
// its reads (ReadBatch, TryReadBatch, WaitReadBatch, whichever it has) do
// not copy a frame into bufs[i] but set bufs[i] to the frame in the link's
// memory (its length and capacity the frame's, sizes[i] too), so the
// caller's own buffers are never written. The frames one read lends are
// the caller's until the next read on the link, ReleaseRx, LendRx(false)
// or Close, which take them back; the caller must not touch them after
// that, nor write to them, nor hand them to WriteBatch. The memory goes
// away at Close, so a caller stops touching lent frames before it closes
// the link. LendRx(false) takes the lent frames back and turns lending off.
// Only a caller that reads the link itself may use it (a wrapper between
// them, which may keep, copy or drop frames, would not know that its frames
// are lent), and every reader of a lending link must know that its reads
// lend.
type RxLender interface {
	LendRx(on bool) bool
	ReleaseRx()
}

// Stats are per-backend counters. Backends fill what applies to them.
type Stats struct {
	RxFrames, RxBytes uint64
	TxFrames, TxBytes uint64
	RxDrops           uint64 // frames lost on receive (too big, ring overrun, filtered by a fault)
	TxDrops           uint64 // frames not sent (ring full, fault injection)
	RingFull          uint64
	Wakeups           uint64
	TxKicks           uint64 // transmit system calls, a subset of Wakeups (afxdp: sendto kicks)
}

// Add adds t's counters to s (a multi-queue device sums its queues' links).
func (s *Stats) Add(t Stats) {
	s.RxFrames += t.RxFrames
	s.RxBytes += t.RxBytes
	s.TxFrames += t.TxFrames
	s.TxBytes += t.TxBytes
	s.RxDrops += t.RxDrops
	s.TxDrops += t.TxDrops
	s.RingFull += t.RingFull
	s.Wakeups += t.Wakeups
	s.TxKicks += t.TxKicks
}
