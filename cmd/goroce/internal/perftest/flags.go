package perftest

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
)

// Flags is the subset of perftest's command line (perftest_parameters.c,
// parser()) that goroce supports. Zero values of the optional fields mean
// "the tool's default", resolved by ParseFlags for the test.
type Flags struct {
	Test Test

	Size        uint64     // -s, --size (65536 BW, 2 latency, always 8 atomic)
	Iters       uint64     // -n, --iters (1000; 5000 for write_bw)
	AllSizes    bool       // -a, --all: 2 … 2^23 bytes
	Duration    int        // -D, --duration seconds (0: iterations)
	NumQPs      int        // -q, --qp (1)
	TxDepth     int        // -t, --tx-depth (128 BW, 1 latency; capped at iters)
	RxDepth     int        // -r, --rx-depth (512; capped at iters)
	CQMod       int        // -Q, --cq-mod (100)
	MTU         int        // -m, --mtu bytes (0: the port's active MTU)
	GIDIndex    int        // -x, --gid-index (-1: choose the best RoCEv2 GID)
	IBDev       string     // -d, --ib-dev
	IBPort      int        // -i, --ib-port (1)
	Port        int        // -p, --port (18515)
	CPUFreqWarn bool       // -F, --CPU-freq: do not fail on a CPU frequency warning
	AtomicType  AtomicType // -A, --atomic_type (FETCH_AND_ADD)
	ReportGbits bool       // --report_gbits
	Connection  string     // -c, --connection (RC, the only one supported)
	InlineSize  int        // -I, --inline_size (-1: device default)
	QPTimeout   int        // -u, --qp-timeout (14)
	Unsorted    bool       // -U, --report-unsorted (latency)
	Histogram   bool       // -H, --report-histogram (latency)
	Events      bool       // -e, --events
	OutReads    int        // -o, --outs (0: device maximum)
	DontXchg    bool       // --dont_xchg_versions
	PerPort     bool       // --report-per-port
	Host        string     // server to connect to; "" for the server role
}

// ErrUsage is wrapped by every ParseFlags error.
var ErrUsage = errors.New("perftest: usage")

// ErrUnsupported is wrapped when an option asks for a mode goroce does not
// implement (rdma_cm, bidirectional, transports other than RC).
var ErrUnsupported = errors.New("perftest: unsupported option")

// Defaults returns the tool defaults for t (perftest_parameters.h:
// DEF_SIZE_BW 65536, DEF_SIZE_LAT 2, DEF_ITERS 1000, DEF_ITERS_WB 5000,
// DEF_TX_BW 128, DEF_TX_LAT 1, DEF_RX_SEND 512, DEF_CQ_MOD 100,
// DEF_QP_TIME 14).
func Defaults(t Test) Flags {
	f := Flags{Test: t, Size: 65536, Iters: 1000, NumQPs: 1, TxDepth: 128, RxDepth: 512, CQMod: 100,
		GIDIndex: -1, IBPort: 1, Port: DefaultPort, AtomicType: FetchAndAdd, Connection: "RC",
		InlineSize: -1, QPTimeout: 14}
	if !t.BW() {
		f.Size, f.TxDepth = 2, 1
	}
	if t == WriteBW {
		f.Iters = 5000
	}
	if t.Verb() == Atomic {
		f.Size = 8
	}
	return f
}

// ParseFlags parses args (without the program name) for test t, with GNU
// getopt_long conventions as ParseFlags in package pingpong: attached or
// separate values, switch clusters, long names and their unambiguous
// prefixes, options after the host.
func ParseFlags(t Test, args []string) (Flags, error) {
	f := Defaults(t)
	fs := flag.NewFlagSet("ib_"+t.String(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		atomicType      = f.AtomicType.String()
		sizeSet, rdmaCM bool
		bidir           bool
	)
	both := func(short, long string, reg func(string)) {
		if short != "" {
			reg(short)
		}
		reg(long)
	}
	num := func(short, long string, set func(v int64) error) {
		both(short, long, func(n string) {
			fs.Func(n, "", func(s string) error {
				v, err := strconv.ParseInt(s, 0, 64) // strtol(optarg, NULL, 0)
				if err != nil {
					return fmt.Errorf("%q is not a number", s)
				}
				return set(v)
			})
		})
	}
	uintFlag := func(p *uint64, short, long string, set *bool) {
		num(short, long, func(v int64) error {
			if v < 0 {
				return fmt.Errorf("%d is negative", v)
			}
			*p = uint64(v)
			if set != nil {
				*set = true
			}
			return nil
		})
	}
	intFlag := func(p *int, short, long string) {
		num(short, long, func(v int64) error {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("%d is out of range", v)
			}
			*p = int(v)
			return nil
		})
	}
	boolFlag := func(p *bool, short, long string) { both(short, long, func(n string) { fs.BoolVar(p, n, *p, "") }) }
	uintFlag(&f.Size, "s", "size", &sizeSet)
	uintFlag(&f.Iters, "n", "iters", nil)
	boolFlag(&f.AllSizes, "a", "all")
	intFlag(&f.Duration, "D", "duration")
	intFlag(&f.NumQPs, "q", "qp")
	intFlag(&f.TxDepth, "t", "tx-depth")
	intFlag(&f.RxDepth, "r", "rx-depth")
	intFlag(&f.CQMod, "Q", "cq-mod")
	intFlag(&f.MTU, "m", "mtu")
	intFlag(&f.GIDIndex, "x", "gid-index")
	both("d", "ib-dev", func(n string) { fs.StringVar(&f.IBDev, n, "", "") })
	intFlag(&f.IBPort, "i", "ib-port")
	intFlag(&f.Port, "p", "port")
	boolFlag(&f.CPUFreqWarn, "F", "CPU-freq")
	both("A", "atomic_type", func(n string) { fs.StringVar(&atomicType, n, atomicType, "") })
	boolFlag(&f.ReportGbits, "", "report_gbits")
	both("c", "connection", func(n string) { fs.StringVar(&f.Connection, n, f.Connection, "") })
	intFlag(&f.InlineSize, "I", "inline_size")
	intFlag(&f.QPTimeout, "u", "qp-timeout")
	boolFlag(&f.Unsorted, "U", "report-unsorted")
	boolFlag(&f.Histogram, "H", "report-histogram")
	boolFlag(&f.Events, "e", "events")
	intFlag(&f.OutReads, "o", "outs")
	boolFlag(&f.DontXchg, "", "dont_xchg_versions")
	boolFlag(&f.PerPort, "", "report-per-port")
	boolFlag(&rdmaCM, "R", "rdma_cm")
	boolFlag(&bidir, "b", "bidirectional")

	flagArgs, pos, err := getopt.Rewrite(fs, args)
	if err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if err := fs.Parse(flagArgs); err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch {
	case len(pos) > 1:
		return Flags{}, fmt.Errorf("%w: more than one host: %q", ErrUsage, pos)
	case len(pos) == 1:
		f.Host = pos[0]
	}
	if rdmaCM {
		return Flags{}, fmt.Errorf("%w: -R (rdma_cm): goroce speaks the Ethernet exchange only", ErrUnsupported)
	}
	if bidir {
		return Flags{}, fmt.Errorf("%w: -b (bidirectional)", ErrUnsupported)
	}
	if f.Connection != "RC" {
		return Flags{}, fmt.Errorf("%w: connection type %q (only RC)", ErrUnsupported, f.Connection)
	}
	switch atomicType {
	case "FETCH_AND_ADD":
		f.AtomicType = FetchAndAdd
	case "CMP_AND_SWAP":
		f.AtomicType = CmpAndSwap
	default:
		return Flags{}, fmt.Errorf("%w: Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}", ErrUsage)
	}
	if t.Verb() == Atomic {
		if sizeSet && f.Size != 8 {
			return Flags{}, fmt.Errorf("%w: atomic operations are 8 bytes", ErrUsage)
		}
		f.Size = 8
		f.AllSizes = false
	}
	if f.Size == 0 || f.Size > 1<<31 {
		return Flags{}, fmt.Errorf("%w: message size %d out of range", ErrUsage, f.Size)
	}
	if f.Iters < 5 {
		return Flags{}, fmt.Errorf("%w: at least 5 iterations", ErrUsage)
	}
	if f.Duration < 0 || f.NumQPs < 1 || f.TxDepth < 1 || f.RxDepth < 1 || f.CQMod < 1 || f.IBPort < 1 || f.QPTimeout < 0 || f.QPTimeout > 31 {
		return Flags{}, fmt.Errorf("%w: a value is out of range", ErrUsage)
	}
	if f.Port < 0 || f.Port > 65535 {
		return Flags{}, fmt.Errorf("%w: port %d out of range", ErrUsage, f.Port)
	}
	if f.MTU != 0 && MTUFromBytes(f.MTU) == 0 {
		return Flags{}, fmt.Errorf("%w: Please choose mtu from {256,512,1024,2048,4096}", ErrUsage)
	}
	if f.AllSizes && f.Duration > 0 {
		return Flags{}, fmt.Errorf("%w: -a and -D together", ErrUsage)
	}
	// The depths shrink to the iteration count (tx_depth and rx_depth
	// larger than iters are pointless; atomic_cas.log shows "TX depth : 100"
	// for -n 100 and send_bw_small.log "RX depth : 100").
	if f.Duration == 0 {
		if uint64(f.TxDepth) > f.Iters {
			f.TxDepth = int(f.Iters)
		}
		if uint64(f.RxDepth) > f.Iters {
			f.RxDepth = int(f.Iters)
		}
	}
	// A BW test requests a completion every cq_mod sends and may have only
	// tx_depth outstanding, so cq_mod shrinks to tx_depth (write_bw_4k.log:
	// "CQ Moderation : 20" for -n 20).
	if t.BW() && f.CQMod > f.TxDepth {
		f.CQMod = f.TxDepth
	}
	return f, nil
}
