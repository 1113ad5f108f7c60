package qp

import (
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/goroce/goroce/nic"
)

// MemoryPairOptions configure OpenMemoryPair. The zero value is usable.
type MemoryPairOptions struct {
	// MTU is the link's IP MTU (default 1500: path MTU 1024).
	MTU int
	// Seed makes memory keys deterministic and QP numbers start at 0x11
	// as rxe's (0: random keys and a random first QP number).
	Seed int64
	// Tap, when set, receives every frame that crosses the link as a pcap
	// stream (Ethernet), readable by Wireshark and `goroce dump`.
	Tap io.Writer
	// Mode is both devices' mode (Config.Mode): ModeThreaded (the
	// default) or ModeBusyPoll. Manual devices come from package sim, which
	// owns their clock and links.
	Mode Mode
}

// The addresses of the two devices OpenMemoryPair returns (198.18.0.0/15
// is reserved for benchmarks, RFC 2544: it is never anyone's real address).
var (
	memoryPairIPA = netip.MustParseAddr("198.18.0.1")
	memoryPairIPB = netip.MustParseAddr("198.18.0.2")
)

// OpenMemoryPair opens two devices joined by an in-memory link (nic's
// MemLink: complete RoCEv2 frames with ICRC, no system calls, no
// privileges), addressed 198.18.0.1 and 198.18.0.2 (GID index 1), each
// knowing the other's MAC. It is the smallest setup that runs every RC operation end
// to end: tests, examples and the demo use it. A device on a real network
// interface comes from OpenInterface instead. Close both devices when done.
func OpenMemoryPair(o MemoryPairOptions) (a, b *Device, err error) {
	if o.Mode == ModeManual {
		return nil, nil, fmt.Errorf("qp: OpenMemoryPair: manual devices come from package sim: %w", ErrInvalidArgument)
	}
	la, lb := nic.NewMemPair(nic.MemConfig{MTU: o.MTU, Tap: o.Tap, Seed: o.Seed})
	a, err = Open(Config{Name: "goroce-a", Link: la, IP: memoryPairIPA, Seed: o.Seed, Mode: o.Mode,
		Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPB: lb.HardwareAddr()}})
	if err != nil {
		la.Close()
		lb.Close()
		return nil, nil, err
	}
	seedB := o.Seed
	if seedB != 0 {
		seedB++
	}
	b, err = Open(Config{Name: "goroce-b", Link: lb, IP: memoryPairIPB, Seed: seedB, Mode: o.Mode,
		Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPA: la.HardwareAddr()}})
	if err != nil {
		a.Close()
		lb.Close()
		return nil, nil, err
	}
	return a, b, nil
}
