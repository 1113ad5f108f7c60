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
` + pingpong.UsageHead + `  -q, --num-qp=<num>     number of QPs to use (default 16)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000; all QPs together)
` + pingpong.UsageTail + `` + pingpong.GoroceUsage

// Summary is the command's line in goroce's usage.
const Summary = "ibv_srq_pingpong-compatible ping-pong: several RC QPs sharing one SRQ"

// Flags is ibv_srq_pingpong's command line (srq_pingpong.c main, getopt
// string "p:d:i:s:m:q:r:n:l:eg:"): the examples' common options, where -n
// counts the completions each way over all QPs, and -q.
type Flags struct {
	pingpong.Common
	NumQP uint32 // -q, --num-qp (16)
}

// ParseFlags parses args as srq_pingpong's getopt_long loop does (see
// pingpong.ParseCommon), with the checks it adds (size ≥ 1) and the ones
// its arrays need (1 ≤ num-qp ≤ MAX_QP). Errors wrap pingpong.ErrUsage.
func ParseFlags(args []string) (Flags, error) {
	f := Flags{Common: pingpong.DefaultCommon(), NumQP: 16}
	nqp := uint(f.NumQP)
	err := pingpong.ParseCommon(&f.Common, args, func(fs *flag.FlagSet, both pingpong.Both) {
		both("q", "num-qp", func(n string) { fs.UintVar(&nqp, n, nqp, "number of QPs") })
	})
	switch {
	case err != nil:
		return Flags{}, err
	case f.Size < 1:
		return Flags{}, fmt.Errorf("%w: size 0", pingpong.ErrUsage)
	case nqp < 1 || nqp > MaxQP:
		return Flags{}, fmt.Errorf("%w: num-qp %d not in 1..%d (MAX_QP)", pingpong.ErrUsage, nqp, MaxQP)
	}
	f.NumQP = uint32(nqp)
	return f, nil
}

// Run is ibv_srq_pingpong (rdma-core 44, libibverbs/examples/
// srq_pingpong.c) on a goroce device. It returns the exit code.
func Run(env tool.Env, args []string) int {
	return pingpong.Main(env, args, "srq_pingpong", usageText, ParseFlags, run)
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
	sess, err := pingpong.Open(env, opts, f.IBDev)
	if err != nil {
		return errf("%v\n", err)
	}
	defer sess.Close()
	ctx, dev := sess.Ctx, sess.Dev
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

	elapsed, err := sess.Traffic(f.Events, func(p *tool.Poller) error { return pp.loop(p, f.Iters) })
	if err != nil {
		return errf("%v", err)
	}
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
	pp.sge[0] = pp.mr.SGE(0, int(f.Size))
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
			MTU: qp.MTUFromBytes(f.MTU), DestQPN: rem[i].QPN, RQPSN: rem[i].PSN, SQPSN: my[i].PSN,
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
