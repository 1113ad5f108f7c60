// Package srqpingpongcmd is the goroce srq_pingpong subcommand:
// ibv_srq_pingpong on a goroce device, several RC QPs taking their
// receives from one shared receive queue. The exchange records, the output
// lines and the connection steps are package pingpong's and tool's, shared
// with the pingpong subcommand.
package srqpingpongcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// The work request IDs and the QP limit of srq_pingpong.c.
const (
	recvWRID = 1
	sendWRID = 2
	// MaxQP is MAX_QP: the most QPs, and the number of address records
	// each side sends whatever -q is (the unused ones zero).
	MaxQP = 256
)

const usageText = `Usage:
  goroce srq_pingpong            start a server and wait for connection
  goroce srq_pingpong <host>     connect to server at <host>

Options (those of ibv_srq_pingpong):
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use the network interface <dev> (default: the first one up with IPv4)
  -i, --ib-port=<port>   use port <port> of IB device (default 1, the only one)
  -s, --size=<size>      size of message to exchange (default 4096)
  -m, --mtu=<size>       path MTU (default 1024)
  -q, --num-qp=<num>     number of QPs to use (default 16)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000; all QPs together)
  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (1: the IPv4 GID; required on RoCE)
goroce options:
  --timeout=<seconds>    give up (exit 1) after this long, waiting for the peer included;
                         a client then retries a refused connection until the timeout
  --metrics=<host:port>  serve /metrics (Prometheus) and /debug/vars (expvar) during the run
Environment: as goroce pingpong (GOROCE_BACKEND, GOROCE_BUSYPOLL, GOROCE_TX_DROP, GOROCE_VERBOSE).
`

// Summary is the command's line in goroce's usage.
const Summary = "ibv_srq_pingpong-compatible ping-pong: several RC QPs sharing one SRQ"

// Flags is ibv_srq_pingpong's command line (srq_pingpong.c main, getopt
// string "p:d:i:s:m:q:r:n:l:eg:").
type Flags struct {
	Port     int    // -p (18515)
	IBDev    string // -d
	IBPort   int    // -i (1)
	Size     uint32 // -s (4096)
	MTU      int    // -m in bytes (1024)
	NumQP    uint32 // -q (16)
	RxDepth  uint32 // -r (500)
	Iters    uint32 // -n (1000): completions each way over all QPs
	SL       int    // -l
	Events   bool   // -e
	GIDIndex int    // -g (-1: none)
	Host     string // "" for the server
}

// ErrUsage is wrapped by the parse errors for which the tool prints its
// usage and exits 1.
var ErrUsage = errors.New("srq_pingpong: usage")

// ParseFlags parses args as srq_pingpong's getopt_long loop does, with
// the checks it makes (port ≤ 65535, ib-port ≥ 1, size ≥ 1, a valid MTU,
// at most one host) and the ones its arrays need (1 ≤ num-qp ≤ MAX_QP).
func ParseFlags(args []string) (Flags, error) {
	f := Flags{Port: pingpong.DefaultPort, IBPort: 1, Size: 4096, MTU: 1024, NumQP: 16, RxDepth: 500, Iters: 1000, GIDIndex: -1}
	fs := flag.NewFlagSet("ibv_srq_pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	size, nqp, rx, iters := uint(f.Size), uint(f.NumQP), uint(f.RxDepth), uint(f.Iters)
	both := func(short, long string, reg func(name string)) { reg(short); reg(long) }
	both("p", "port", func(n string) { fs.IntVar(&f.Port, n, f.Port, "") })
	both("d", "ib-dev", func(n string) { fs.StringVar(&f.IBDev, n, f.IBDev, "") })
	both("i", "ib-port", func(n string) { fs.IntVar(&f.IBPort, n, f.IBPort, "") })
	both("s", "size", func(n string) { fs.UintVar(&size, n, size, "") })
	both("m", "mtu", func(n string) { fs.IntVar(&f.MTU, n, f.MTU, "") })
	both("q", "num-qp", func(n string) { fs.UintVar(&nqp, n, nqp, "") })
	both("r", "rx-depth", func(n string) { fs.UintVar(&rx, n, rx, "") })
	both("n", "iters", func(n string) { fs.UintVar(&iters, n, iters, "") })
	both("l", "sl", func(n string) { fs.IntVar(&f.SL, n, f.SL, "") })
	both("e", "events", func(n string) { fs.BoolVar(&f.Events, n, false, "") })
	both("g", "gid-idx", func(n string) { fs.IntVar(&f.GIDIndex, n, f.GIDIndex, "") })
	flagArgs, pos, err := getopt.Rewrite(fs, args)
	if err == nil {
		err = fs.Parse(flagArgs)
	}
	if err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch {
	case len(pos) > 1:
		return Flags{}, fmt.Errorf("%w: more than one host: %q", ErrUsage, pos)
	case len(pos) == 1:
		f.Host = pos[0]
	}
	const max32 = 1<<32 - 1
	switch {
	case f.Port < 0 || f.Port > 65535:
		return Flags{}, fmt.Errorf("%w: port %d out of range", ErrUsage, f.Port)
	case f.IBPort < 1:
		return Flags{}, fmt.Errorf("%w: IB port %d < 1", ErrUsage, f.IBPort)
	case size < 1:
		return Flags{}, fmt.Errorf("%w: size 0", ErrUsage)
	case pingpong.MTUEnum(f.MTU) == 0:
		return Flags{}, fmt.Errorf("%w: MTU %d is not one of 256, 512, 1024, 2048, 4096", ErrUsage, f.MTU)
	case nqp < 1 || nqp > MaxQP:
		return Flags{}, fmt.Errorf("%w: num-qp %d not in 1..%d (MAX_QP)", ErrUsage, nqp, MaxQP)
	case size > max32 || rx > max32 || iters > max32:
		return Flags{}, fmt.Errorf("%w: size, rx-depth or iters above 2^32-1", ErrUsage)
	}
	f.Size, f.NumQP, f.RxDepth, f.Iters = uint32(size), uint32(nqp), uint32(rx), uint32(iters)
	return f, nil
}

// Run is ibv_srq_pingpong (rdma-core 44, libibverbs/examples/
// srq_pingpong.c) on a goroce device. It returns the exit code.
func Run(env tool.Env, args []string) int {
	if tool.WantsHelp(args) {
		fmt.Fprint(env.Stdout, usageText)
		return 0
	}
	args, opts, err := tool.SplitOptions(args)
	if err == nil {
		var f Flags
		if f, err = ParseFlags(args); err == nil {
			return run(env, opts, f)
		}
	}
	fmt.Fprintf(env.Stderr, "goroce srq_pingpong: %v\n%s", err, usageText)
	return 1
}

// endpoint is struct pingpong_context.
type endpoint struct {
	pd      *qp.PD
	mr      *qp.MR
	buf     []byte
	cq      *qp.CQ
	srq     *qp.SRQ
	qps     []*qp.QP
	pending []int
	rxDepth int
	routs   int
	sendWR  qp.SendWR
	recvWR  qp.RecvWR
	sge     [1]qp.SGE
}

func run(env tool.Env, opts tool.Options, f Flags) int {
	errf := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, format, a...)
		return 1
	}
	if f.NumQP > f.RxDepth {
		return errf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP.\n", f.RxDepth, f.NumQP)
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	dev, err := env.Open(ctx, f.IBDev)
	if err != nil {
		return errf("IB device %s not found: %v\n", f.IBDev, err)
	}
	defer dev.Close()
	_, stopMetrics := tool.StartMetrics(env, opts, dev)
	defer stopMetrics()
	prog := &tool.Progressor{Dev: dev}
	prog.Start()
	defer prog.Stop()

	pp, err := initEndpoint(ctx, dev, f)
	if err != nil {
		return errf("%v\n", err)
	}
	defer pp.close()
	if pp.routs = pp.postRecv(pp.rxDepth); pp.routs < pp.rxDepth {
		return errf("Couldn't post receive (%d)\n", pp.routs)
	}
	if f.IBPort != 1 {
		return errf("Couldn't get port info\n")
	}
	my := make([]pingpong.Dest, MaxQP)
	for i, q := range pp.qps {
		my[i] = pingpong.Dest{QPN: q.QPN(), PSN: tool.RandomPSN()}
		if f.GIDIndex >= 0 {
			g, err := dev.GID(f.GIDIndex)
			if err != nil {
				return errf("Could not get local gid for gid index %d\n", f.GIDIndex)
			}
			my[i].GID = tool.GIDBytes(g)
		}
		fmt.Fprint(env.Stdout, pingpong.FormatLocal(my[i]))
	}

	rem := make([]pingpong.Dest, MaxQP)
	connect := func(rem []pingpong.Dest) error { return pp.connect(ctx, f, my, rem) }
	if f.Host == "" {
		err = pingpong.Serve(ctx, f.Port, env.Listening, my, rem, connect)
	} else {
		err = pingpong.Dial(ctx, f.Host, f.Port, my, rem)
	}
	if err != nil {
		return errf("%v\n", err)
	}
	for i := range pp.qps {
		fmt.Fprint(env.Stdout, pingpong.FormatRemote(rem[i]))
	}
	if f.Host != "" {
		if err := connect(rem); err != nil {
			return errf("%v\n", err)
		}
		for i, q := range pp.qps {
			if err := q.PostSend(&pp.sendWR); err != nil {
				return errf("Couldn't post send\n")
			}
			pp.pending[i] = sendWRID | recvWRID
		}
	} else {
		for i := range pp.pending {
			pp.pending[i] = recvWRID
		}
	}

	tctx, watch := tool.WatchProgress(ctx, env.Idle)
	defer watch.Stop()
	p := &tool.Poller{Ctx: tctx, Events: f.Events, Watch: watch}
	prog.Stop() // the loop's polls drive a busy-poll device
	start := time.Now()
	if err := pp.loop(p, f.Iters); err != nil {
		return errf("%v", err)
	}
	elapsed := time.Since(start)
	prog.Start()
	fmt.Fprint(env.Stdout, pingpong.FormatStats(f.Size, f.Iters, elapsed))
	// No "final" buffer hook: the buffer is every WR's and every SEND's,
	// and a message the peer sent beyond -n (each side may send up to
	// num_qp-1 more, as the C tool does) can still be landing in it.
	return 0
}

// initEndpoint is pp_init_ctx: a zeroed buffer of size bytes registered
// with LOCAL_WRITE, one CQ of rx_depth+num_qp entries, an SRQ of rx_depth
// WRs of one SGE, and num_qp RC QPs on it (max_send_wr 1) moved to INIT
// with no remote access.
func initEndpoint(ctx context.Context, dev *qp.Device, f Flags) (*endpoint, error) {
	pp := &endpoint{rxDepth: int(f.RxDepth), buf: make([]byte, f.Size), pending: make([]int, f.NumQP)}
	pp.pd = dev.AllocPD()
	var err error
	if pp.mr, err = pp.pd.RegMR(pp.buf, qp.LocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.cq, err = dev.CreateCQ(int(f.RxDepth) + int(f.NumQP)); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if pp.srq, err = pp.pd.CreateSRQ(qp.SRQInitAttr{MaxWR: int(f.RxDepth), MaxSGE: 1}); err != nil {
		return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
	}
	for i := range int(f.NumQP) {
		q, err := pp.pd.CreateQP(qp.InitAttr{SendCQ: pp.cq, RecvCQ: pp.cq, SRQ: pp.srq,
			Cap: qp.Caps{MaxSendWR: 1, MaxSendSGE: 1}})
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP[%d]: %w", i, err)
		}
		pp.qps = append(pp.qps, q)
	}
	for i, q := range pp.qps {
		if err := tool.ModifyToInit(ctx, q, f.IBPort, 0); err != nil {
			return nil, fmt.Errorf("Failed to modify QP[%d] to INIT: %w", i, err)
		}
	}
	pp.sge[0] = qp.SGE{Addr: pp.mr.IOVA(), Length: f.Size, LKey: pp.mr.LKey()}
	pp.recvWR = qp.RecvWR{WRID: recvWRID, SGL: pp.sge[:]}
	pp.sendWR = qp.SendWR{WRID: sendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: pp.sge[:]}
	return pp, nil
}

// close is pp_close_ctx's order: the QPs, then the SRQ they used.
func (pp *endpoint) close() {
	for _, q := range pp.qps {
		q.Destroy()
	}
	pp.srq.Destroy()
}

// connect is pp_connect_ctx: QP i to RTR and RTS towards rem[i]. Like the
// C tool it decides is_global from the first record's GID.
func (pp *endpoint) connect(ctx context.Context, f Flags, my, rem []pingpong.Dest) error {
	global := false
	for _, c := range rem[0].GID[8:] {
		global = global || c != 0
	}
	for i, q := range pp.qps {
		err := tool.ModifyToRTS(ctx, q, tool.ConnectAttrs{
			MTU: qp.MTU(pingpong.MTUEnum(f.MTU)), DestQPN: rem[i].QPN, RQPSN: rem[i].PSN, SQPSN: my[i].PSN,
			DGID: rem[i].GID, Global: global, SGIDIndex: f.GIDIndex, HopLimit: 1, SL: uint8(f.SL),
			MaxDestRdAtomic: 1, MaxRdAtomic: 1, Timeout: 14,
		})
		switch {
		case errors.Is(err, tool.ErrRTR):
			return fmt.Errorf("Failed to modify QP[%d] to RTR (%w)", i, err)
		case err != nil:
			return fmt.Errorf("Failed to modify QP[%d] to RTS (%w)", i, err)
		}
	}
	return nil
}

// postRecv is pp_post_recv: it returns how many receives it posted to the SRQ.
func (pp *endpoint) postRecv(n int) int {
	for i := range n {
		if pp.srq.PostRecv(&pp.recvWR) != nil {
			return i
		}
	}
	return n
}

// loop is srq_pingpong's main loop: rcnt and scnt count the completions
// of all QPs together; each QP sends its next message once its last SEND
// and a RECV on it completed; the SRQ is refilled to rx_depth once num_qp
// or fewer receives remain.
func (pp *endpoint) loop(p *tool.Poller, iters uint32) error {
	var rcnt, scnt uint32
	wc := make([]qp.WC, pp.rxDepth+len(pp.qps))
	for rcnt < iters || scnt < iters {
		n, err := p.Poll(pp.cq, wc)
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w\n", err)
		}
		for i := range n {
			if err := pp.parseWC(&wc[i], &scnt, &rcnt, iters); err != nil {
				return err
			}
		}
	}
	return nil
}

func (pp *endpoint) parseWC(wc *qp.WC, scnt, rcnt *uint32, iters uint32) error {
	if wc.Status != qp.WCSuccess {
		return errors.New(pingpong.FormatFailedStatus(int(wc.Status), wc.WRID))
	}
	qi := -1
	for i, q := range pp.qps {
		if q.QPN() == wc.QPNum {
			qi = i
			break
		}
	}
	if qi < 0 {
		return fmt.Errorf("Couldn't find QPN %06x\n", wc.QPNum)
	}
	switch wc.WRID {
	case sendWRID:
		*scnt++
	case recvWRID:
		if pp.routs--; pp.routs <= len(pp.qps) {
			pp.routs += pp.postRecv(pp.rxDepth - pp.routs)
			if pp.routs < pp.rxDepth {
				return fmt.Errorf("Couldn't post receive (%d)\n", pp.routs)
			}
		}
		*rcnt++
	default:
		return fmt.Errorf("Completion for unknown wr_id %d\n", int32(wc.WRID))
	}
	pp.pending[qi] &^= int(wc.WRID)
	if *scnt < iters && pp.pending[qi] == 0 {
		if err := pp.qps[qi].PostSend(&pp.sendWR); err != nil {
			return fmt.Errorf("Couldn't post send\n")
		}
		pp.pending[qi] = recvWRID | sendWRID
	}
	return nil
}
