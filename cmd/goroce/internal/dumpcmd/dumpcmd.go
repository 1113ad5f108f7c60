// Package dumpcmd is the goroce dump subcommand: its command line, file
// or live input, and exit codes. Package dump decodes and prints.
package dumpcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/dump"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
)

// Summary is the command's line in goroce's usage.
const Summary = "decode RoCEv2 from pcap/pcapng files or a live interface"

const dumpUsage = `usage: goroce dump [flags] FILE.pcap|FILE.pcapng|-
       goroce dump [flags] -i IFACE

Prints one line per RoCEv2 packet (UDP port 4791): time, source:port >
destination, opcode, destination QP, PSN, flags, extension headers, payload
length and ICRC check, then a summary with per-opcode counts and a per-QP
flow analysis (PSN gaps, retransmissions, NAKs, RNR NAKs). IB CM MADs on QP 1
(rdma_cm's REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR) are decoded on their
line and paired into connections in the summary. Other packets are
skipped and counted. The file format (pcap or pcapng) is detected from its
first bytes; "-" reads standard input. Live capture (-i) uses an AF_PACKET
socket and needs root; Ctrl-C or SIGTERM ends it with the summary.

Live capture (and tcpdump) on an interface that a goroce device holds with
the default AF_XDP backend sees none of that device's traffic: XDP redirects
its frames to the socket before the kernel's packet taps. Capture on the
peer, or let goroce write its own: --pcap FILE on every goroce tool that
opens a device (qp.PcapWriter in a program), then goroce dump FILE.

flags:
`

// Run runs goroce dump with args and returns the exit code: 0 on success,
// 1 when the input cannot be read, 2 for bad flags.
func Run(env tool.Env, args []string) int {
	stdout, stderr := env.Stdout, env.Stderr
	fs := flag.NewFlagSet("goroce dump", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		jsonOut = fs.Bool("json", false, "one JSON object per packet, and a final summary object with \"summary\": true")
		iface   = fs.String("i", "", "capture live from this interface instead of reading a file")
		count   = fs.Int("c", 0, "stop after this many RoCEv2 packets")
		dur     = fs.Duration("t", 0, "stop a live capture after this long (e.g. 10s)")
		mtu     = fs.Int("mtu", 0, "path MTU for counting the PSNs of RDMA READs (default: the largest FIRST/MIDDLE payload)")
		snaplen = fs.Int("s", 0, "live capture: bytes to keep per packet (default 262144)")
		all     = fs.Bool("all", false, "live capture: do not filter UDP port 4791 in the kernel")
		quiet   = fs.Bool("q", false, "print only the summary")
		utc     = fs.Bool("utc", false, "print timestamps in UTC instead of local time")
		latency = fs.Bool("latency", false, "report per-QP operation latencies (count, min, p50, p90, p99, max) instead of the packet lines")
		explain = fs.Bool("explain", false, "explain the anomalies (loss, NAKs, timeouts, duplicates) instead of the packet lines")
		graph   = fs.String("graph", "", "write one SVG time-sequence graph per RC flow into this directory")
	)
	fs.Usage = func() {
		fmt.Fprint(stderr, dumpUsage)
		fs.PrintDefaults()
	}
	// Flags may come before or after the file name.
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goroce dump: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Run 'goroce dump -h' for usage.\n")
		return 2
	}
	switch {
	case *iface == "" && len(files) == 0:
		return bad("give a capture file or -i IFACE")
	case *iface != "" && len(files) > 0:
		return bad("give a capture file or -i IFACE, not both")
	case len(files) > 1:
		return bad("one capture file at a time (got %s)", strings.Join(files, " "))
	case *count < 0:
		return bad("-c must not be negative")
	case *dur < 0:
		return bad("-t must not be negative")
	case *dur > 0 && *iface == "":
		return bad("-t applies to live capture (-i) only")
	case *snaplen < 0 || *snaplen > 262144:
		return bad("-s must be between 0 and 262144")
	case (*snaplen > 0 || *all) && *iface == "":
		return bad("-s and -all apply to live capture (-i) only")
	case *mtu != 0 && !validMTU(*mtu):
		return bad("-mtu must be 256, 512, 1024, 2048 or 4096")
	}
	opts := dump.Options{JSON: *jsonOut, MTU: *mtu, Quiet: *quiet, Count: *count, Latency: *latency, Explain: *explain, GraphDir: *graph}
	if *utc {
		opts.Location = time.UTC
	}

	if *iface == "" {
		if _, err := dump.DumpFile(files[0], stdout, opts); err != nil {
			fmt.Fprintf(stderr, "goroce dump: %v\n", err)
			return 1
		}
		return 0
	}

	opts.Flush = true
	ctx, cancel := signal.NotifyContext(env.Context(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *dur > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, *dur)
		defer c()
	}
	d := dump.New(stdout, opts)
	err := dump.Live(ctx, *iface, d, dump.LiveOptions{Snaplen: *snaplen, All: *all})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || strings.Contains(err.Error(), "operation not permitted") {
			err = fmt.Errorf("%w (live capture needs root or CAP_NET_RAW)", err)
		}
		fmt.Fprintf(stderr, "goroce dump: -i %s: %v\n", *iface, err)
		if d.Summary().Packets == 0 {
			return 1
		}
	}
	if _, werr := d.Finish(); werr != nil {
		fmt.Fprintf(stderr, "goroce dump: %v\n", werr)
		return 1
	}
	if err != nil {
		return 1
	}
	return 0
}

func validMTU(n int) bool {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}
