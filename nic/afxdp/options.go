package afxdp

import (
	"log/slog"
	"time"
)

// Mode chooses how the XDP program is attached.
type Mode int

const (
	// ModeAuto tries native (driver) mode and falls back to generic mode.
	ModeAuto Mode = iota
	// ModeNative requires native (driver) mode.
	ModeNative
	// ModeGeneric uses generic (SKB) mode, which every device has.
	ModeGeneric
)

// Options configure Open. The zero value is a good default.
type Options struct {
	// FrameSize is the UMEM chunk size: 4096 (default) or 2048. A received
	// frame larger than FrameSize-256 bytes (XDP_PACKET_HEADROOM) spans
	// several chunks (multi-buffer, see the package doc).
	FrameSize int
	// SingleBuffer turns multi-buffer AF_XDP off, as on a kernel without
	// it: every frame must fit one chunk, so the link carries at most IP
	// MTU FrameSize-274, and at an interface MTU above a page the program
	// attaches in generic mode.
	SingleBuffer bool
	// NumFrames is the number of UMEM chunks, a power of two >= 64
	// (default 4096). Half
	// receive, half transmit; every ring has NumFrames/2 descriptors.
	NumFrames int
	// BatchSize is what BatchSize reports (default 64; RawrefOptions has
	// the raw reference sender's 256).
	BatchSize int
	// Mode selects native or generic XDP (default ModeAuto).
	Mode Mode
	// ZeroCopy requires a zero-copy socket (XDP_ZEROCOPY); bind fails where
	// the driver has none (veth). By default the kernel picks zero copy
	// when it can, else copy mode; generic mode always binds in copy mode.
	ZeroCopy bool
	// TxBudget is XDP_MAX_TX_SKB_BUDGET, the number of frames one kick sends
	// in copy mode (default 256; negative leaves the kernel default, 32).
	// Kernels without the option keep their default, with a log line.
	TxBudget int
	// BusyPoll makes ReadBatch spin on the RX ring (yielding the processor
	// between looks) for up to this long before it sleeps in poll(2). It
	// trades a core for latency: a poll(2) wake-up costs tens of µs here
	// (PERF-FACTS.md: 46 µs vs 5.9 µs request/response round trips). Zero
	// (default) sleeps at once.
	BusyPoll time.Duration
	// OneSocket keeps a copy-mode link's transmit side on its receiving
	// socket. By default a copy-mode, single-buffer link transmits on a
	// second socket sharing its UMEM, so that the runtime poller's polls of
	// the receiving socket do not drive (and wait on) its transmit
	// (txsock.go).
	OneSocket bool
	// Logger receives one line about the attach mode and fallbacks
	// (nil: nothing is logged).
	Logger *slog.Logger
}
