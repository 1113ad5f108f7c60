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
	Connection  string     // -c, --connection: RC or UC (UC for the SEND and WRITE tests)
	InlineSize  int        // -I, --inline_size (-1: device default)
	QPTimeout   int        // -u, --qp-timeout (14)
	Unsorted    bool       // -U, --report-unsorted (latency)
	Histogram   bool       // -H, --report-histogram (latency)
	Events      bool       // -e, --events
	OutReads    int        // -o, --outs (0: device maximum)
	DontXchg    bool       // --dont_xchg_versions
	PerPort     bool       // --report-per-port
	Bidir       bool       // -b, --bidirectional (BW): both sides send
	UseSRQ      bool       // --use-srq (SEND tests; --use_srq too): receives go to one SRQ
	ReportBoth  bool       // --report-both: with -b, each direction's line after the sum
	RunInf      bool       // --run_infinitely (BW): a report every -D seconds until interrupted
	PostList    int        // -l, --post_list (1): WRs per post (BW)
	CQModSet    bool       // -Q was given (req_cq_mod: -l then keeps it)
	TClass      int        // --tclass: the GRH traffic class (IP TOS byte)
	TOS         int        // -T, --tos (-1: not set); goroce uses it as the traffic class
	RDMACM      bool       // -R, --rdma_cm: connect through rdma_cm, exchange over SEND/RECV
	OutJSON     bool       // --out_json: write each report to OutJSONFile too
	OutJSONFile string     // --out_json_file (perftest_out.json)
	LimitBW     float64    // -w, --limit_bw: fail when the average BW is below it
	LimitBWSet  bool       // -w was given (is_limit_bw)
	LimitMsg    float64    // -y, --limit_msgrate (checked only together with -w, as perftest does)
	LimitMsgSet bool       // -y was given (is_limit_msgrate)
	Host        string     // server to connect to; "" for the server role
}

// DefaultReportPeriod is DEF_DURATION: the seconds between two reports of
// --run_infinitely when -D is not given.
const DefaultReportPeriod = 5

// ucMaxRx is perftest's UC_MAX_RX.
const ucMaxRx = 16000

// UC reports -c UC.
func (f Flags) UC() bool { return f.Connection == "UC" }

// DefaultJSONFile is DEFAULT_JSON_FILE_NAME.
const DefaultJSONFile = "perftest_out.json"

// ReportPeriod is the interval of --run_infinitely's reports: -D, or
// DefaultReportPeriod.
func (f Flags) ReportPeriod() int {
	if f.Duration > 0 {
		return f.Duration
	}
	return DefaultReportPeriod
}

// TrafficClass is the GRH traffic class of every packet the QPs send:
// -T when given, else --tclass.
func (f Flags) TrafficClass() uint8 {
	if f.TOS >= 0 {
		return uint8(f.TOS)
	}
	return uint8(f.TClass)
}

// ErrUsage is wrapped by every ParseFlags error.
var ErrUsage = errors.New("usage") // the tools print their own "goroce NAME: " prefix

// ErrUnsupported is wrapped when an option asks for a mode goroce does not
// implement (transports other than RC).
var ErrUnsupported = errors.New("unsupported option")

// Defaults returns the tool defaults for t (perftest_parameters.h:
// DEF_SIZE_BW 65536, DEF_SIZE_LAT 2, DEF_ITERS 1000, DEF_ITERS_WB 5000,
// DEF_TX_BW 128, DEF_TX_LAT 1, DEF_RX_SEND 512, DEF_CQ_MOD 100,
// DEF_QP_TIME 14).
func Defaults(t Test) Flags {
	f := Flags{Test: t, Size: 65536, Iters: 1000, NumQPs: 1, TxDepth: 128, RxDepth: 512, CQMod: 100,
		GIDIndex: -1, IBPort: 1, Port: DefaultPort, AtomicType: FetchAndAdd, Connection: "RC",
		InlineSize: -1, QPTimeout: 14, PostList: 1, TOS: -1, OutJSONFile: DefaultJSONFile}
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
		atomicType        = f.AtomicType.String()
		sizeSet, rdmaCM   bool
		limitBW, limitMsg string
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
	num("Q", "cq-mod", func(v int64) error {
		if v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%d is out of range", v)
		}
		f.CQMod, f.CQModSet = int(v), true
		return nil
	})
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
	boolFlag(&f.Bidir, "b", "bidirectional")
	boolFlag(&f.UseSRQ, "", "use-srq")
	boolFlag(&f.UseSRQ, "", "use_srq")
	boolFlag(&f.ReportBoth, "", "report-both")
	boolFlag(&f.RunInf, "", "run_infinitely")
	intFlag(&f.PostList, "l", "post_list")
	intFlag(&f.TClass, "", "tclass")
	intFlag(&f.TOS, "T", "tos")
	boolFlag(&f.OutJSON, "", "out_json")
	both("", "out_json_file", func(n string) { fs.StringVar(&f.OutJSONFile, n, f.OutJSONFile, "") })
	both("w", "limit_bw", func(n string) { fs.StringVar(&limitBW, n, "", "") })
	both("y", "limit_msgrate", func(n string) { fs.StringVar(&limitMsg, n, "", "") })

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
	f.RDMACM = rdmaCM
	// The checks of parser() and force_dependecies, with their messages.
	if f.Bidir && !t.BW() {
		return Flags{}, fmt.Errorf("%w: Bidirectional is only available in BW test", ErrUsage)
	}
	if (f.Histogram || f.Unsorted) && t.BW() {
		return Flags{}, fmt.Errorf("%w: -H and -U are Available only on Latency tests", ErrUsage)
	}
	if f.TOS != -1 && (f.TOS < 0 || f.TOS > 255) {
		return Flags{}, fmt.Errorf("%w: TOS %d out of range (0-255)", ErrUsage, f.TOS)
	}
	if f.TClass < 0 || f.TClass > 255 {
		return Flags{}, fmt.Errorf("%w: traffic class %d out of range (0-255)", ErrUsage, f.TClass)
	}
	if limitBW != "" {
		f.LimitBW, f.LimitBWSet = strtof(limitBW), true
		if f.LimitBW < 0 {
			return Flags{}, fmt.Errorf("%w: Invalid Minimum BW Limit", ErrUsage)
		}
	}
	if limitMsg != "" {
		f.LimitMsg, f.LimitMsgSet = strtof(limitMsg), true
		if f.LimitMsg < 0 {
			return Flags{}, fmt.Errorf("%w: Invalid Minimum msgRate Limit", ErrUsage)
		}
	}
	if f.RunInf {
		switch {
		case f.Events:
			return Flags{}, fmt.Errorf("%w: run_infinitely does not support events feature yet.", ErrUsage)
		case !t.BW():
			return Flags{}, fmt.Errorf("%w: run_infinitely exists only in BW tests for now.", ErrUsage)
		case f.Bidir && t.Verb() == Send:
			return Flags{}, fmt.Errorf("%w: run_infinitely mode is not supported in SEND Bidirectional BW test", ErrUsage)
		case f.AllSizes:
			return Flags{}, fmt.Errorf("%w: --run_infinitely and -a together", ErrUsage)
		}
	}
	if f.PostList < 1 {
		return Flags{}, fmt.Errorf("%w: post list size %d out of range", ErrUsage, f.PostList)
	}
	switch f.Connection {
	case "RC":
	case "UC":
		// perftest_parameters.c change_conn_type and force_dependecies.
		if v := t.Verb(); v == Read || v == Atomic {
			return Flags{}, fmt.Errorf("%w: UC connection not possible in READ/ATOMIC verbs", ErrUsage)
		}
		if f.RDMACM {
			return Flags{}, fmt.Errorf("%w: UC is not supported in librdmacm", ErrUsage)
		}
	case "UD", "XRC", "DC", "SRD", "RawEth":
		return Flags{}, fmt.Errorf("%w: connection type %q (RC and UC only)", ErrUnsupported, f.Connection)
	default:
		return Flags{}, fmt.Errorf("%w: Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}", ErrUsage)
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
		// force_dependecies: a UC (or UD) receiver posts a receive for
		// every message up front when rx_depth is still DEF_RX_SEND after
		// the cap, since a message without one is lost (UC_MAX_RX 16000).
		if f.UC() && f.RxDepth == 512 {
			f.RxDepth = int(min(f.Iters, ucMaxRx))
		}
	}
	// force_dependecies' SRQ checks, after the rx_depth cap.
	if f.UseSRQ && t.Verb() != Send {
		return Flags{}, fmt.Errorf("%w: Using SRQ only avavilible in SEND tests.", ErrUsage)
	}
	if f.UseSRQ && f.NumQPs > f.RxDepth {
		return Flags{}, fmt.Errorf("%w: Using SRQ depth should be greater than number of QPs.", ErrUsage)
	}
	// perftest can put rdma_cm's QPs on an SRQ; goroce's cm creates the
	// QPs without one, so the combination is refused rather than ignored.
	if f.UseSRQ && f.RDMACM {
		return Flags{}, fmt.Errorf("%w: --use-srq with -R (rdma_cm) is not supported by goroce", ErrUsage)
	}
	// A BW test requests a completion every cq_mod sends and may have only
	// tx_depth outstanding, so cq_mod shrinks to tx_depth (write_bw_4k.log:
	// "CQ Moderation : 20" for -n 20).
	if t.BW() && f.CQMod > f.TxDepth {
		f.CQMod = f.TxDepth
	}
	// Post lists (after the cq_mod clamp, as in force_dependecies): the
	// list is posted whole, so it must fit the send queue, and a completion
	// is asked every cq_mod WRs of it.
	if f.PostList > 1 {
		if !t.BW() {
			return Flags{}, fmt.Errorf("%w: Post list is supported in BW tests only", ErrUsage)
		}
		if f.Duration == 0 && !f.RunInf && f.Iters%uint64(f.PostList) != 0 {
			return Flags{}, fmt.Errorf("%w: Number of iterations must be a multiple of post list size", ErrUsage)
		}
		if !f.CQModSet {
			f.CQMod = f.PostList
		} else if f.PostList%f.CQMod != 0 {
			return Flags{}, fmt.Errorf("%w: Post list size must be a multiple of CQ moderation", ErrUsage)
		}
		if f.PostList > f.TxDepth {
			return Flags{}, fmt.Errorf("%w: post list %d is larger than the TX depth %d", ErrUsage, f.PostList, f.TxDepth)
		}
	}
	return f, nil
}

// PostListNote is what parser() prints (after a ResultLine) when -l sets the
// CQ moderation: "" when it does not apply.
func (f Flags) PostListNote() string {
	if f.PostList > 1 && !f.CQModSet {
		return ResultLine + "Post List requested - CQ moderation will be the size of the post list\n"
	}
	return ""
}

// strtof is C's strtof(s, NULL): the longest decimal prefix, 0 if none.
func strtof(s string) float64 { return float64(float32(Atof(s))) }
