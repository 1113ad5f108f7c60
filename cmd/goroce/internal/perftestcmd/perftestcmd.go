// Package perftestcmd is the perftest-compatible subcommands of goroce
// (write_bw, read_lat, …), one per perftest.Test. Package perftest holds
// their flags, exchanges, plan and output; this package runs the QPs.
package perftestcmd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// summaries are the commands' lines in goroce's usage.
var summaries = map[perftest.Test]string{
	perftest.WriteBW:   "ib_write_bw-compatible RDMA WRITE bandwidth test",
	perftest.ReadBW:    "ib_read_bw-compatible RDMA READ bandwidth test",
	perftest.SendBW:    "ib_send_bw-compatible SEND bandwidth test",
	perftest.AtomicBW:  "ib_atomic_bw-compatible atomic bandwidth test",
	perftest.WriteLat:  "ib_write_lat-compatible RDMA WRITE latency test",
	perftest.ReadLat:   "ib_read_lat-compatible RDMA READ latency test",
	perftest.SendLat:   "ib_send_lat-compatible SEND latency test",
	perftest.AtomicLat: "ib_atomic_lat-compatible atomic latency test",
}

// Summary is the line of test t's command in goroce's usage.
func Summary(t perftest.Test) string { return summaries[t] }

// Command is the entry point of test t's command: Run for t.
func Command(t perftest.Test) func(env tool.Env, args []string) int {
	return func(env tool.Env, args []string) int { return Run(env, t, args) }
}

const usageText = `Usage:
  goroce %[1]s [options]          start a server and wait for connection
  goroce %[1]s [options] <host>   connect to server at <host>

perftest options goroce implements (the values and defaults of perftest 4.5):
  -s, --size=<size>         message size (BW: 65536, latency: 2, atomic: 8)
  -n, --iters=<iters>       iterations (1000; write_bw 5000)
  -a, --all                 every size from 2 to 2^23
  -D, --duration=<sec>      run for this long instead of -n (BW tests)
  -q, --qp=<num>            number of QPs
  -t, --tx-depth=<dep>      send queue depth (BW 128, latency 1)
  -r, --rx-depth=<dep>      receives posted by a SEND receiver (512)
  -Q, --cq-mod=<n>          one completion every n sends (100)
  -m, --mtu=<bytes>         path MTU (default: the port's active MTU)
  -x, --gid-index=<idx>     GID index (default 1, the IPv4 GID)
  -d, --ib-dev=<iface>      network interface (default: the first one up with IPv4)
  -p, --port=<port>         TCP port of the exchange (18515)
  -F, --CPU-freq            accepted (goroce times with the OS clock)
  -A, --atomic_type=<type>  FETCH_AND_ADD (default) or CMP_AND_SWAP
  -I, --inline_size=<size>  inline SEND/WRITE payloads up to this size (at most 256)
  -o, --outs=<num>          outstanding READs/atomics offered to the peer (16)
  -u, --qp-timeout=<t>      local ACK timeout exponent (14)
  -e, --events              sleep on CQ events instead of polling
  -c, --connection=RC|UC    connection type (UC: SEND and WRITE tests; no -R)
  -R, --rdma_cm             connect the QPs through rdma_cm (goroce's cm) and exchange over SEND/RECV
  --report_gbits            report Gb/s instead of MB/s
  --dont_xchg_versions      do not exchange versions
  -b, --bidirectional       both sides send (BW tests); the line is the sum of both directions
  --report-both             with -b, also each direction's line
  --use-srq, --use_srq      SEND tests: the receiving side's QPs share one SRQ of rx-depth WRs
  --run_infinitely          a line every -D seconds (5) until interrupted (BW tests)
  -H, --report-histogram    list the sorted latency samples (latency tests)
  -U, --report-unsorted     list the latency samples in order (latency tests)
  -l, --post_list=<size>    post lists of this many WRs (BW tests; CQ moderation = size)
  --tclass=<value>          traffic class: the IP TOS byte of every packet
  -T, --tos=<value>         the same (perftest takes -T only with rdma_cm)
  --out_json                also write each report as JSON to --out_json_file
  --out_json_file=<file>    (perftest_out.json)
  -w, --limit_bw=<value>    fail (exit 1) when the average BW is below this
  -y, --limit_msgrate=<v>   same for the message rate (checked only with -w, as perftest)
goroce options:
  --timeout=<seconds>       give up (exit 1) after this long, waiting for the peer included;
                            a client then retries a refused connection until the timeout
  --metrics=<host:port>     serve /metrics (Prometheus) and /debug/vars (expvar) during the run
                            (a host of :PORT or 0.0.0.0 is every interface: warned about)
  --metrics-cmdline         also publish the command line in /debug/vars (left out by default)
  --pcap=<file>             write the frames the device sends and receives to this pcap file
                            (AF_XDP traffic included, which tcpdump on the interface does not see)
Environment: GOROCE_BACKEND=auto|afxdp|afpacket|udp (default auto); GOROCE_BUSYPOLL=1 (device
in busy-poll mode: no goroutine wake-ups, a core burnt per waiting thread); GOROCE_TX_DROP=P
(drop each transmitted frame with probability P, seeded by GOROCE_TX_DROP_SEED); GOROCE_QUEUES=N
(an AF_XDP device on N queues of the interface, QPs spread by UDP source port); GOROCE_VERBOSE=1.
`

// settleTimeout bounds the wait for the device to settle before the final
// buffer is shown (tests only: Env.Buffers).
const settleTimeout = 10 * time.Second

// defaultOutReads is what a goroce end advertises as its out_reads (the
// responder resources it grants the peer's READs and atomics) when -o is
// not given: the ConnectOptions default of package qp. rxe advertises its
// max_qp_rd_atom (128).
const defaultOutReads = 16

// maxCycleBuffer bounds the cycle buffer and cache line size a peer may
// advertise (perftest sends its page size and cache line size: 4 KiB to
// 64 KiB pages in practice).
const maxCycleBuffer = 1 << 24

// Run is one of perftest's eight tools (4.5-0.17, the exchange of
// package perftest) on a goroce device. It returns the exit code.
func Run(env tool.Env, t perftest.Test, args []string) int {
	if tool.WantsHelp(args) {
		fmt.Fprintf(env.Stdout, usageText, t)
		return 0
	}
	args, opts, err := tool.SplitOptions(args)
	var f perftest.Flags
	if err == nil {
		f, err = perftest.ParseFlags(t, args)
	}
	if err == nil {
		switch {
		case f.Duration > 0 && !t.BW():
			err = fmt.Errorf("%w: -D in a latency test", perftest.ErrUnsupported)
		case f.IBPort != 1:
			err = fmt.Errorf("%w: IB port %d (a goroce device has port 1 only)", perftest.ErrUnsupported, f.IBPort)
		case f.RDMACM && (f.TOS >= 0 || f.TClass != 0):
			err = fmt.Errorf("%w: -T/--tclass with -R (goroce's cm sets no RDMA_OPTION_ID_TOS)", perftest.ErrUnsupported)
		}
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce %v: %v\n"+usageText, t, err, t)
		return tool.ExitUsage
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	r := &runner{env: env, ctx: ctx, f: f, test: t, verb: t.Verb(), server: f.Host == "", opts: opts}
	r.out(f.PostListNote())
	if f.RunInf {
		// --run_infinitely ends when interrupted: the traffic stops and the
		// run ends as upstream's SIGINT handler makes it end.
		var stop context.CancelFunc
		r.stop, stop = interruptContext(ctx)
		defer stop()
	}
	if err := r.run(); err != nil {
		fmt.Fprintf(env.Stderr, " %v\n", err)
		return 1
	}
	if msg := r.limitError(); msg != "" {
		fmt.Fprintln(env.Stderr, msg)
		return 1
	}
	return 0
}

// interruptContext is the context whose end interrupts --run_infinitely:
// SIGINT or SIGTERM. Tests replace it.
var interruptContext = func(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// runner is one run of a tool: perftest's pingpong_context and
// perftest_parameters for goroce.
type runner struct {
	env    tool.Env
	opts   tool.Options // goroce's own options (--timeout, --metrics)
	ctx    context.Context
	f      perftest.Flags
	test   perftest.Test
	verb   perftest.Verb
	server bool

	dev      *qp.Device
	prog     tool.Progressor // drives a busy-poll device outside the traffic loops
	gidIndex int
	outReads int
	mtu      perftest.MTU // offered in the exchange
	maxSize  uint64       // the largest message of the run (BUFF_SIZE uses it)
	inline   uint64

	neg       perftest.Negotiated
	cycle     uint64
	cacheLine uint64
	buffSize  uint64 // BUFF_SIZE: each QP's half of the buffer
	buf       []byte // 2 × QPs × BUFF_SIZE: sources first, then targets (the advertised vaddrs)
	pd        *qp.PD
	mr        *qp.MR
	scq, rcq  *qp.CQ
	qps       []*qp.QP
	srq       *qp.SRQ   // --use-srq on a receiving side (srq.go)
	qpAccess  qp.Access // the QPs' INIT access (Ethernet mode)
	keysSeen  int
	firstPeer []perftest.KeyMsg

	// SEND receivers: one receive request per QP whose address cycles.
	rwr    []qp.RecvWR
	rsge   [][1]qp.SGE
	rxBase []uint64

	// write_lat: the PSN the peer's next WRITE will have used up to.
	peerPSN wire.PSN

	conn net.Conn
	// -R: the rdma_cm control connection and the data connections.
	ctrl      *msgConn
	dataConns []*cm.Conn
	dataLn    *cm.Listener      // -R server: the data listener, from cmListen to cmConnect
	info      perftest.TestInfo // what FormatTestInfo printed (the JSON report repeats it)
	// stop ends --run_infinitely's traffic (nil otherwise); inf is the
	// reporter of its traffic phase.
	stop context.Context
	inf  *infinite
	// -w/-y: whether some report met the limits (is_*_limit_passed).
	bwPassed, msgPassed bool
}

func (r *runner) out(s string) { fmt.Fprint(r.env.Stdout, s) }

func (r *runner) run() error {
	f := r.f
	dev, err := tool.Open(r.ctx, r.env, f.IBDev)
	if err != nil {
		return tool.DeviceError(f.IBDev, err)
	}
	defer dev.Close()
	_, stopMetrics := tool.StartMetrics(r.env, r.opts, dev)
	defer stopMetrics()
	if err := r.init(dev); err != nil {
		return err
	}
	r.prog.Start()
	defer r.prog.Stop()
	conn, err := r.connect()
	if err != nil {
		return err
	}
	defer conn.Close()
	defer r.closeCM()
	r.conn = conn
	cfg := perftest.Config{Test: r.test, Server: r.server, Plan: perftest.PlanConfig{Size: f.Size, AllSizes: f.AllSizes,
		Duplex: f.Bidir, Duration: f.Duration > 0 || f.RunInf, RunInf: f.RunInf, RDMACM: f.RDMACM},
		MTU: r.mtu, DontExchangeVersions: f.DontXchg, ReportPerPort: f.PerPort, ExchangeTimeout: tool.ExchangeTimeout,
		GIDIndex: int32(r.gidIndex)}
	hooks := perftest.Hooks{Setup: r.setup, Connect: r.connectQPs, CMConnect: r.cmConnect, CMListen: r.cmListen, Prepare: r.prepare, Traffic: r.traffic, After: r.after}
	// An infinite run ends by an interruption, and a timed one when its
	// time is up, with operations in flight that nothing waits for
	// (run_iter_bw leaves them so): our own READs' responses, and the
	// peer's WRITEs after it closed the exchange, may still land in our
	// buffer (the race detector saw both in TestRunInfinitely), so there
	// is no final buffer to show.
	stillWritten := f.RunInf || f.Duration > 0
	if _, err := perftest.Run(r.ctx, conn, cfg, hooks); err != nil {
		switch {
		case errors.Is(err, errInfiniteEnd):
			// --run_infinitely ended by an interruption or by the peer
			// closing the exchange: nothing more is exchanged.
		case f.RunInf && r.server && !f.Bidir && r.verb != perftest.Send && r.ctx.Err() == nil && peerGone(err):
			// A write/read/atomic_bw client of 6.06 never leaves its
			// infinite loop; it ends when interrupted, closing the socket
			// the server waits on.
			r.out(perftest.ClientClosed)
		default:
			return fmt.Errorf("Failed to run the %v test: %w", r.test, err)
		}
	}
	r.out(perftest.ResultLine)
	if r.env.Buffers != nil && !stillWritten {
		// A UC WRITE completes at the client when its frames leave, and
		// the end-of-test exchange travels another way: the last WRITEs
		// may still be on the link. Settle waits until the device has
		// processed every frame that reached it (and takes the device
		// lock: their writes into buf happen before the copy).
		ctx, cancel := context.WithTimeout(r.ctx, settleTimeout)
		err := dev.Settle(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("the device did not settle after the test: %w", err)
		}
		r.env.Buffers("final", append([]byte(nil), r.buf...))
	}
	return nil
}

// init settles what the run takes from the device and the flags: GID
// index, MTU, out_reads, inline size, the largest message.
func (r *runner) init(dev *qp.Device) error {
	f := r.f
	r.dev = dev
	r.prog.Dev = dev
	// gid_index -1: perftest picks the first IPv4-mapped GID, index 1.
	r.gidIndex = f.GIDIndex
	if r.gidIndex == -1 {
		r.gidIndex = 1
	}
	if _, err := dev.GID(r.gidIndex); err != nil {
		return fmt.Errorf("Unable to query GID index %d: %w", r.gidIndex, err)
	}
	r.mtu = perftest.MTU(dev.ActiveMTU())
	if f.MTU != 0 {
		m := perftest.MTUFromBytes(f.MTU)
		if m > r.mtu {
			return fmt.Errorf("Requested mtu is higher than active mtu (%d > %d)", f.MTU, r.mtu.Bytes())
		}
		r.mtu = m
	}
	r.bwPassed, r.msgPassed = false, false
	r.outReads = 1
	if r.verb == perftest.Read || r.verb == perftest.Atomic {
		r.outReads = defaultOutReads
		if f.OutReads > 0 {
			r.outReads = min(f.OutReads, qp.MaxRdAtomic)
		}
	}
	if f.InlineSize > 0 && (r.verb == perftest.Send || r.verb == perftest.Write) {
		r.inline = uint64(min(f.InlineSize, qp.MaxInlineData))
	}
	r.maxSize = f.Size
	if f.AllSizes {
		r.maxSize = 1 << 23
	}
	return nil
}

// connect establishes the control connection: the server prints the
// banner and accepts one client, the client connects (IPv4, as perftest).
func (r *runner) connect() (net.Conn, error) {
	if r.f.RDMACM {
		return r.connectCM()
	}
	if r.server {
		r.out(perftest.WaitingBanner)
		ln, err := perftest.Listen(r.f.Port)
		if err != nil {
			return nil, fmt.Errorf("Couldn't listen to port %d: %w", r.f.Port, err)
		}
		if r.env.Listening != nil {
			r.env.Listening(ln.Addr())
		}
		c, err := tool.AcceptOne(r.ctx, ln)
		if err != nil {
			return nil, fmt.Errorf("Unable to init the socket connection: accept: %w", err)
		}
		return c, nil
	}
	c, err := tool.DialPeer(r.ctx, "tcp4", r.f.Host, r.f.Port)
	if err != nil {
		return nil, fmt.Errorf("Couldn't connect to %s:%d: %w\n Unable to init the socket connection", r.f.Host, r.f.Port, err)
	}
	return c, nil
}

// setup is ctx_init and set_up_connection: the buffer (random bytes, zeros
// for write_lat), one MR over it, the CQs, the QPs in INIT, and one key
// message per QP advertising the QP's half of the target area. With -R
// cmConnect has made all of it but the key messages.
func (r *runner) setup(n perftest.Negotiated) ([]perftest.KeyMsg, error) {
	f := r.f
	if !f.RDMACM {
		if err := r.alloc(n); err != nil {
			return nil, err
		}
		if err := r.createQPs(); err != nil {
			return nil, err
		}
	}
	gid, _ := r.dev.GID(r.gidIndex)
	keys := make([]perftest.KeyMsg, len(r.qps))
	for i, q := range r.qps {
		keys[i] = perftest.KeyMsg{OutReads: uint16(r.outReads), QPN: q.QPN(), PSN: tool.RandomPSN(), RKey: r.mr.RKey(),
			VAddr: perftest.TargetVAddr(r.mr.IOVA(), f.NumQPs, i, r.maxSize, n.CycleBuffer), GID: tool.GIDBytes(gid)}
	}
	r.info = perftest.TestInfo{Test: r.test, Server: r.server, AtomicType: f.AtomicType,
		Device: r.dev.Name(), NumQPs: f.NumQPs, Transport: "IB", PCIeRelax: r.test.BW(), TxDepth: f.TxDepth,
		RxDepth: f.RxDepth, CQMod: f.CQMod, MTU: n.MTU, LinkType: "Ethernet", GIDIndex: r.gidIndex,
		InlineSize: int(r.inline), OutReads: r.outReads, Duplex: f.Bidir, PostList: f.PostList, UseSRQ: f.UseSRQ, RDMACM: f.RDMACM,
		Connection: f.Connection}
	r.out(perftest.FormatTestInfo(r.info))
	if r.env.Buffers != nil {
		r.env.Buffers("init", append([]byte(nil), r.buf...))
	}
	return keys, nil
}

// alloc is ctx_init's memory: the buffer, its MR and the CQs.
func (r *runner) alloc(n perftest.Negotiated) error {
	f := r.f
	r.neg = n
	// The cycle buffer is the larger page size of the two hosts; a peer
	// cannot make us allocate gigabytes with a silly one.
	if n.CycleBuffer > maxCycleBuffer || n.CacheLine > maxCycleBuffer {
		return fmt.Errorf("the peer's cycle buffer (%d) or cache line (%d) is larger than %d bytes",
			n.CycleBuffer, n.CacheLine, maxCycleBuffer)
	}
	r.cycle = uint64(max(n.CycleBuffer, 1))
	r.cacheLine = uint64(max(n.CacheLine, 1))
	nq := f.NumQPs
	r.buffSize = perftest.BuffSize(r.maxSize, n.CycleBuffer)
	total := 2 * uint64(nq) * r.buffSize
	if total > 1<<32 {
		return fmt.Errorf("Couldn't allocate work buf: %d bytes", total)
	}
	r.buf = make([]byte, total)
	if r.test != perftest.WriteLat {
		fillRandom(r.buf, uint64(time.Now().UnixNano()))
	}
	access := qp.LocalWrite
	qpAccess := qp.Access(0)
	switch r.verb {
	case perftest.Write:
		access |= qp.RemoteWrite
		qpAccess = qp.RemoteWrite
	case perftest.Read:
		access |= qp.RemoteRead
		qpAccess = qp.RemoteRead
	case perftest.Atomic:
		access |= qp.RemoteAtomic
		qpAccess = qp.RemoteAtomic
	case perftest.Send:
		access |= qp.RemoteWrite
		qpAccess = qp.RemoteWrite | qp.LocalWrite
	}
	r.pd = r.dev.AllocPD()
	var err error
	if r.mr, err = r.pd.RegMR(r.buf, access); err != nil {
		return fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	if r.scq, err = r.dev.CreateCQ(f.TxDepth*nq + 16); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	r.rcq = r.scq
	r.qpAccess = qpAccess
	if r.verb == perftest.Send {
		// Every SEND side receives too: the server, and with -b the client.
		if r.rcq, err = r.dev.CreateCQ(f.RxDepth*nq + 16); err != nil {
			return fmt.Errorf("Couldn't create a receiver CQ: %w", err)
		}
	}
	return nil
}

// createQPs creates the QPs and moves them to INIT (the Ethernet mode;
// with -R rdma_cm creates them).
func (r *runner) createQPs() error {
	f := r.f
	maxRecv := 1
	if r.verb == perftest.Send {
		maxRecv = f.RxDepth
	}
	if err := r.createSRQ(); err != nil {
		return fmt.Errorf("Couldn't create SRQ: %w", err)
	}
	for range f.NumQPs {
		typ := qp.QPTypeRC
		if f.UC() {
			typ = qp.QPTypeUC
		}
		q, err := r.pd.CreateQP(qp.InitAttr{SendCQ: r.scq, RecvCQ: r.rcq, SRQ: r.srq, Type: typ,
			Cap: qp.Caps{MaxSendWR: f.TxDepth, MaxRecvWR: maxRecv, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("Unable to create QP: %w", err)
		}
		if err := tool.ModifyToInit(r.ctx, q, f.IBPort, r.qpAccess); err != nil {
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		r.qps = append(r.qps, q)
	}
	return nil
}

// fillRandom fills b with pseudo-random bytes, as create_single_mr does
// with rand().
func fillRandom(b []byte, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for ; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
}

// connectQPs is ctx_connect: each QP to RTR and RTS towards the peer's
// keys, with perftest's attributes (hop limit 0xFF, min_rnr_timer 12,
// retry and RNR retry 7, max_dest_rd_atomic = our out_reads, max_rd_atomic
// = the peer's).
func (r *runner) connectQPs(local, peer []perftest.KeyMsg) error {
	if len(peer) != len(local) {
		return fmt.Errorf("the peer has %d QPs, we have %d (-q must match)", len(peer), len(local))
	}
	for i, q := range r.qps {
		// ctx_check_gid_compatibility: both GIDs IPv4-mapped, or neither.
		if isV4Mapped(local[i].GID) != isV4Mapped(peer[i].GID) {
			return errors.New("Found Incompatibility issue with GID types.\n Please Try to use a different IP version.")
		}
		err := tool.ModifyToRTS(r.ctx, q, tool.ConnectAttrs{MTU: qp.MTU(r.neg.MTU), DestQPN: peer[i].QPN, RQPSN: peer[i].PSN,
			SQPSN: local[i].PSN, DGID: peer[i].GID, Global: true, SGIDIndex: r.gidIndex, HopLimit: 0xFF,
			TrafficClass:    r.f.TrafficClass(),
			MaxDestRdAtomic: uint8(local[i].OutReads), MaxRdAtomic: uint8(max(min(peer[i].OutReads, qp.MaxRdAtomic), 1)),
			Timeout: uint8(r.f.QPTimeout)})
		if err != nil {
			return fmt.Errorf("Unable to Connect the HCA's through the link: QP %d: %w", i, err)
		}
	}
	r.peerPSN = wire.PSN(peer[0].PSN)
	return nil
}

func isV4Mapped(g [16]byte) bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// after prints what the tools print between the steps: the address lines
// after the second key exchange (ctx_print_pingpong_data), then the table
// header, and a BW server's table line, the client's report.
func (r *runner) after(_ int, st perftest.Step, out *perftest.Outcome) error {
	switch st.Kind {
	case perftest.StepKeys:
		r.keysSeen++
		if r.keysSeen == 1 {
			r.firstPeer = append([]perftest.KeyMsg(nil), out.Peer...)
			return nil
		}
		if r.keysSeen != 2 {
			return nil
		}
		// The second exchange repeats the first. Different keys mean the
		// two sides are out of step, which is what a different -q does.
		for i := range out.Peer {
			if out.Peer[i] != r.firstPeer[i] {
				return fmt.Errorf("the peer's QP %d information changed between the key exchanges: do both sides use the same -q?", i)
			}
		}
		for _, k := range out.Local {
			r.out(perftest.FormatAddress("local", k, r.verb, true))
		}
		for _, k := range out.Peer {
			r.out(perftest.FormatAddress("remote", k, r.verb, true))
		}
		if r.server && (r.test == perftest.ReadLat || r.test == perftest.AtomicLat) {
			return nil // "Only Client post read request": the server prints no table
		}
		r.out(perftest.ResultLine)
		if r.test.BW() {
			r.out(perftest.BWHeader(r.f.ReportGbits))
		} else {
			r.out(perftest.LatHeader)
		}
	case perftest.StepReports:
		switch {
		case r.f.Bidir:
			// print_full_bw_report(my, rem): the sum of both directions.
			r.printBW(out.LocalReport, &out.RemoteReport)
			if r.f.ReportBoth && !r.f.AllSizes {
				r.out(perftest.FormatReportBoth(out.LocalReport, out.RemoteReport, r.f.ReportGbits))
				r.writeJSON(out.RemoteReport, r.f.ReportGbits && out.RemoteReport.BWAvg < 0.1)
			}
		case r.server && r.f.RunInf:
			r.out(perftest.ClientClosed)
		case r.server:
			r.printBW(out.RemoteReport, nil)
		}
	}
	return nil
}

// printBW is print_full_bw_report: the table line of my (plus rem, the
// peer's direction, in a bidirectional test), the --out_json file, and the
// -w/-y verdict of that line.
func (r *runner) printBW(my perftest.BWReport, rem *perftest.BWReport) {
	f := r.f
	inc := f.ReportGbits && my.BWAvg < 0.1
	sum := my
	if rem != nil {
		sum = perftest.SumBW(my, *rem)
		r.out(perftest.FormatBWSum(my, *rem, f.ReportGbits))
	} else {
		r.out(perftest.FormatBWReport(my, f.ReportGbits))
	}
	if f.Bidir == (rem != nil) {
		if !(f.LimitBWSet && f.LimitBW > sum.BWAvg) {
			r.bwPassed = true
		}
		if !(f.LimitMsgSet && f.LimitMsg > sum.MsgRateAvg) {
			r.msgPassed = true
		}
	}
	r.writeJSON(sum, inc)
}

// writeJSON rewrites the --out_json file with report rep.
func (r *runner) writeJSON(rep perftest.BWReport, inc bool) {
	if r.f.OutJSON {
		r.writeJSONFile(perftest.FormatJSONBW(r.info, rep, inc))
	}
}

func (r *runner) writeJSONFile(s string) {
	// open_file_write: O_CREAT|O_RDWR|O_TRUNC, 0600; a failure is reported
	// and the test goes on.
	if err := os.WriteFile(r.f.OutJSONFile, []byte(s), 0o600); err != nil {
		fmt.Fprintf(r.env.Stderr, "failed to open %s\n", r.f.OutJSONFile)
	}
}

// limitError is the verdict of -w and -y at the end of a BW test, as the
// tools give it after closing: a message and exit 1 when no report met the
// limit. Like perftest, -y counts only together with -w, and a non-duplex
// write/read/atomic_bw server (which returns before the check) never fails.
func (r *runner) limitError() string {
	f := r.f
	if !r.test.BW() || !f.LimitBWSet || (r.server && !f.Bidir && r.verb != perftest.Send) {
		return ""
	}
	if !r.bwPassed {
		return "Error: BW result is below bw limit"
	}
	if !r.msgPassed {
		return "Error: Msg rate  is below msg_rate limit"
	}
	return ""
}

// errInfiniteEnd ends a --run_infinitely traffic phase after which nothing
// is exchanged any more (a bidirectional or send test interrupted, or its
// peer gone).
var errInfiniteEnd = errors.New("the infinite run ended")

// peerGone reports whether err is the peer closing the exchange.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// prepare is ctx_set_recv_wqes for a SEND receiver: rx_depth receives per
// QP into the QP's target half, cycling through the cycle buffer in BW
// tests, the address reset to the start afterwards.
func (r *runner) prepare(size uint64, _ []perftest.KeyMsg) error {
	if r.verb != perftest.Send || (r.test == perftest.SendBW && !r.server && !r.f.Bidir) {
		return nil
	}
	nq := len(r.qps)
	if r.rwr == nil {
		r.rwr = make([]qp.RecvWR, nq)
		r.rsge = make([][1]qp.SGE, nq)
		r.rxBase = make([]uint64, nq)
	}
	cycling := r.test.BW() && size <= r.cycle/2
	for i := range r.qps {
		r.rxBase[i] = r.mr.IOVA() + uint64(nq+i)*r.buffSize
		r.rsge[i][0] = qp.SGE{Addr: r.rxBase[i], Length: uint32(size), LKey: r.mr.LKey()}
		r.rwr[i] = qp.RecvWR{WRID: uint64(i), SGL: r.rsge[i][:]}
		for j := range r.sizePerQP() {
			if err := r.postRecv(i); err != nil {
				if r.srq != nil {
					return fmt.Errorf("Couldn't post recv SRQ = %d: counter=%d: %w", i, j, err)
				}
				return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
			if cycling {
				r.increaseAddr(&r.rsge[i][0].Addr, size, uint64(j), r.rxBase[i])
			}
		}
		r.rsge[i][0].Addr = r.rxBase[i]
	}
	return nil
}

// inc is perftest's INC(size, cache_line_size): the message size rounded
// up to whole cache lines.
func (r *runner) inc(size uint64) uint64 {
	if size > r.cacheLine {
		return (size + r.cacheLine - 1) / r.cacheLine * r.cacheLine
	}
	return r.cacheLine
}

// increaseAddr is increase_loc_addr / increase_rem_addr: the next message
// goes one INC further, back to base after cycle_buffer / INC messages.
func (r *runner) increaseAddr(addr *uint64, size, cnt, base uint64) {
	inc := r.inc(size)
	*addr += inc
	if slots := r.cycle / inc; slots == 0 || (cnt+1)%slots == 0 {
		*addr = base
	}
}

// traffic runs one message size and prints its table line.
func (r *runner) traffic(size uint64, peer []perftest.KeyMsg) (perftest.BWReport, error) {
	tctx, watch := tool.WatchProgress(r.ctx, r.env.Idle)
	defer watch.Stop()
	p := &tool.Poller{Ctx: tctx, Events: r.f.Events, Busy: r.dev.Mode() == qp.ModeBusyPoll, Watch: watch}
	r.prog.Stop() // the loops' polls drive a busy-poll device
	defer r.prog.Start()
	switch {
	case r.f.RunInf && r.test.BW():
		// Its lines are printed during the run.
		var rep perftest.BWReport
		var err error
		if r.test == perftest.SendBW && r.server {
			rep, err = r.bwServer(p, size)
		} else {
			rep, err = r.bwClient(p, size, peer)
		}
		if err != nil && !errors.Is(err, errInfiniteEnd) && r.inf != nil {
			return r.inf.excuse(err)
		}
		return rep, err
	case r.test == perftest.SendBW && r.f.Bidir:
		// run_iter_bi; print_report_bw prints its own line only for a
		// timed run (no reports are exchanged then).
		rep, err := r.bwBi(p, size, peer)
		if err == nil && r.f.Duration > 0 {
			r.printBW(rep, nil)
		}
		return rep, err
	case r.test.BW() && (!r.server || r.f.Bidir):
		// With -b both sides run run_iter_bw; the sum is printed after
		// the reports are exchanged.
		rep, err := r.bwClient(p, size, peer)
		if err == nil && !r.f.Bidir {
			r.printBW(rep, nil)
		}
		return rep, err
	case r.test == perftest.SendBW:
		rep, err := r.bwServer(p, size)
		if err == nil {
			r.printBW(rep, nil)
		}
		return rep, err
	}
	var (
		samples []float64
		err     error
	)
	switch r.test {
	case perftest.WriteLat:
		samples, err = r.latWrite(p, size, peer)
	case perftest.SendLat:
		samples, err = r.latSend(p, size)
	default:
		samples, err = r.latReadAtomic(p, size, peer)
	}
	if err != nil {
		return perftest.BWReport{}, err
	}
	r.out(perftest.FormatLatSamples(samples, r.f.Unsorted, r.f.Histogram))
	rep := perftest.NewLatReport(size, r.f.Iters, samples)
	if r.f.OutJSON {
		r.writeJSONFile(perftest.FormatJSONLat(r.info, rep))
	}
	r.out(perftest.FormatLatReport(rep))
	return perftest.BWReport{Size: size, Iters: r.f.Iters}, nil
}

// sendWR builds the work request of QP i for this test: the message at the
// QP's source area towards the peer's advertised vaddr.
func (r *runner) sendWR(i int, size uint64, peer perftest.KeyMsg, sge *[1]qp.SGE) qp.SendWR {
	sge[0] = r.mr.SGE(i*int(r.buffSize), int(size))
	wr := qp.SendWR{WRID: uint64(i), Flags: qp.SendSignaled, SGL: sge[:], RemoteAddr: peer.VAddr, RKey: peer.RKey}
	switch r.verb {
	case perftest.Send:
		wr.Opcode = qp.WRSend
	case perftest.Write:
		wr.Opcode = qp.WRRDMAWrite
	case perftest.Read:
		wr.Opcode = qp.WRRDMARead
	case perftest.Atomic:
		sge[0].Length = 8
		if r.f.AtomicType == perftest.FetchAndAdd {
			wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAdd, 1 // ATOMIC_ADD_VALUE
		} else {
			wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpAndSwp, 0, 0 // ATOMIC_SWAP_VALUE
		}
	}
	if (r.verb == perftest.Send || r.verb == perftest.Write) && size <= r.inline {
		wr.Flags |= qp.SendInline
	}
	return wr
}

// completionError is NOTIFY_COMP_ERROR_SEND/RECV.
func completionError(side string, wc *qp.WC, scnt, ccnt int64) error {
	return fmt.Errorf("Completion with error at %s:\n Failed status %d (%v): wr_id %d syndrom 0x0\n scnt=%d, ccnt=%d",
		side, wc.Status, wc.Status, wc.WRID, scnt, ccnt)
}

func (r *runner) side() string {
	if r.server {
		return "server"
	}
	return "client"
}
