// Package pingpongcmd is the goroce pingpong subcommand: ibv_rc_pingpong
// on a goroce device. Package pingpong holds its exchange format, flags
// and output lines; this package runs the QP.
package pingpongcmd

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// The work request IDs of rc_pingpong.c.
const (
	recvWRID = 1
	sendWRID = 2
)

const usageText = `Usage:
  goroce pingpong            start a server and wait for connection
  goroce pingpong <host>     connect to server at <host>

Options (those of ibv_rc_pingpong):
` + pingpong.UsageHead + `  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
` + pingpong.UsageTail + `  -c, --chk              validate received buffer
  -N, --new_send         accepted (the same SENDs on the wire)
` + pingpong.GoroceUsage

// Summary is the command's line in goroce's usage.
const Summary = "ibv_rc_pingpong-compatible RC SEND/RECV ping-pong (server without host, client with host)"

// Run is ibv_rc_pingpong (rdma-core 44, libibverbs/examples/
// rc_pingpong.c) on a goroce device: the same exchange, QP attributes,
// work requests and output lines. It returns the exit code.
func Run(env tool.Env, args []string) int {
	return pingpong.Main(env, args, "pingpong", usageText, pingpong.ParseFlags, run)
}

// endpoint is struct pingpong_context.
type endpoint struct {
	dev     *qp.Device
	pd      *qp.PD
	mr      *qp.MR
	buf     []byte
	cq      *qp.CQ
	qp      *qp.QP
	size    uint32
	rxDepth int
	routs   int // receives posted and not yet completed
	pending int
	sendWR  qp.SendWR
	recvWR  qp.RecvWR
	sge     [1]qp.SGE
}

// run is main() of rc_pingpong.c once the options are parsed.
func run(env tool.Env, opts tool.Options, f pingpong.Flags) int {
	errf := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, format, a...)
		return 1
	}
	switch {
	case f.ODP:
		return errf("The device isn't ODP capable or does not support RC send and receive with ODP\n")
	case f.Timestamps:
		return errf("The device isn't completion timestamp capable\n")
	case f.DM:
		return errf("Device doesn't support dm allocation\n")
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
	if pp.routs = pp.postRecv(pp.rxDepth); pp.routs < pp.rxDepth {
		return errf("Couldn't post receive (%d)\n", pp.routs)
	}
	if f.IBPort != 1 {
		return errf("Couldn't get port info\n")
	}
	my := pingpong.Dest{QPN: pp.qp.QPN(), PSN: tool.RandomPSN()}
	if f.GIDIndex >= 0 {
		g, err := dev.GID(f.GIDIndex)
		if err != nil {
			return errf("can't read sgid of index %d\n", f.GIDIndex)
		}
		my.GID = tool.GIDBytes(g)
	}
	fmt.Fprint(env.Stdout, pingpong.FormatLocal(my))

	connect := func(rem pingpong.Dest) error {
		return tool.ModifyToRTS(ctx, pp.qp, tool.ConnectAttrs{
			MTU: qp.MTU(pingpong.MTUEnum(f.MTU)), DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: my.PSN,
			DGID: rem.GID, Global: !allZero(rem.GID[8:]), SGIDIndex: f.GIDIndex, HopLimit: 1, SL: uint8(f.SL),
			MaxDestRdAtomic: 1, MaxRdAtomic: 1, Timeout: 14,
		})
	}
	var rem pingpong.Dest
	if f.Host == "" {
		rem, err = serverExchange(ctx, env, f, my, connect)
	} else {
		rem, err = clientExchange(ctx, f, my)
	}
	if err != nil {
		return errf("%v\n", err)
	}
	fmt.Fprint(env.Stdout, pingpong.FormatRemote(rem))
	if f.Host != "" {
		if err := connect(rem); err != nil {
			return errf("%v\n", err)
		}
	}

	pageSize := os.Getpagesize()
	pp.pending = recvWRID
	if f.Host != "" {
		if f.Check {
			// for (i = 0; i < size; i += page_size) buf[i] = i / page_size % sizeof(char): 0
			for i := 0; i < len(pp.buf); i += pageSize {
				pp.buf[i] = 0
			}
		}
		if err := pp.qp.PostSend(&pp.sendWR); err != nil {
			return errf("Couldn't post send\n")
		}
		pp.pending |= sendWRID
	}

	elapsed, err := sess.Traffic(f.Events, func(p *tool.Poller) error { return pp.loop(p, f.Iters) })
	if err != nil {
		return errf("%v", err)
	}
	fmt.Fprint(env.Stdout, pingpong.FormatStats(f.Size, f.Iters, elapsed))

	bad := false
	if f.Host == "" && f.Check {
		// rc_pingpong checks the first byte of each page of what the client
		// sent (0; the rest is the 0x7b the buffer was filled with). We check
		// every byte, with the same message per page.
		for page := 0; page*pageSize < len(pp.buf); page++ {
			chunk := pp.buf[page*pageSize : min((page+1)*pageSize, len(pp.buf))]
			ok := chunk[0] == 0
			for _, c := range chunk[1:] {
				ok = ok && c == 0x7b
			}
			if !ok {
				fmt.Fprint(env.Stdout, pingpong.FormatInvalidPage(page))
				bad = true
			}
		}
	}
	if env.Buffers != nil {
		env.Buffers("final", append([]byte(nil), pp.buf...))
	}
	if bad {
		return 1
	}
	return 0
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// initEndpoint is pp_init_ctx: a page-size-independent buffer of size bytes
// filled with 0x7b and registered with LOCAL_WRITE, one CQ of rx_depth+1
// entries for both queues, and an RC QP (max_send_wr 1, max_recv_wr
// rx_depth) moved to INIT with no remote access.
func initEndpoint(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*endpoint, error) {
	pp := &endpoint{dev: dev, size: f.Size, rxDepth: int(f.RxDepth), buf: make([]byte, f.Size)}
	for i := range pp.buf {
		pp.buf[i] = 0x7b // memset(ctx->buf, 0x7b, size)
	}
	pp.pd = dev.AllocPD()
	var err error
	if pp.mr, err = pp.pd.RegMR(pp.buf, qp.LocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.cq, err = dev.CreateCQ(int(f.RxDepth) + 1); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	pp.qp, err = pp.pd.CreateQP(qp.InitAttr{SendCQ: pp.cq, RecvCQ: pp.cq,
		Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: int(f.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	if err := tool.ModifyToInit(ctx, pp.qp, f.IBPort, 0); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	pp.sge[0] = qp.SGE{Addr: pp.mr.IOVA(), Length: f.Size, LKey: pp.mr.LKey()}
	pp.recvWR = qp.RecvWR{WRID: recvWRID, SGL: pp.sge[:]}
	pp.sendWR = qp.SendWR{WRID: sendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: pp.sge[:]}
	return pp, nil
}

// loop is rc_pingpong's main loop: poll (or sleep on events), count, and
// keep the ping-pong going until iters messages went each way. The client
// posted the first SEND before.
func (pp *endpoint) loop(p *tool.Poller, iters uint32) error {
	var rcnt, scnt uint32
	var wc [2]qp.WC
	for rcnt < iters || scnt < iters {
		n, err := p.Poll(pp.cq, wc[:])
		if err != nil {
			return fmt.Errorf("poll CQ failed: %w\n", err)
		}
		for i := range n {
			if err := pp.parseWC(&wc[i], &scnt, &rcnt, iters); err != nil {
				return fmt.Errorf("%vparse WC failed %d\n", err, n)
			}
		}
	}
	return nil
}

// postRecv is pp_post_recv: it returns how many receives it posted.
func (pp *endpoint) postRecv(n int) int {
	for i := range n {
		if pp.qp.PostRecv(&pp.recvWR) != nil {
			return i
		}
	}
	return n
}

// parseWC is parse_single_wc without timestamps: count the completion,
// refill the receive queue when one or fewer receives remain, and post the
// next SEND once both the last SEND and the last RECV completed.
func (pp *endpoint) parseWC(wc *qp.WC, scnt, rcnt *uint32, iters uint32) error {
	if wc.Status != qp.WCSuccess {
		return errors.New(pingpong.FormatFailedStatus(int(wc.Status), wc.WRID))
	}
	switch wc.WRID {
	case sendWRID:
		*scnt++
	case recvWRID:
		pp.routs--
		if pp.routs <= 1 {
			pp.routs += pp.postRecv(pp.rxDepth - pp.routs)
			if pp.routs < pp.rxDepth {
				return fmt.Errorf("Couldn't post receive (%d)\n", pp.routs)
			}
		}
		*rcnt++
	default:
		return fmt.Errorf("Completion for unknown wr_id %d\n", int32(wc.WRID))
	}
	pp.pending &^= int(wc.WRID)
	if *scnt < iters && pp.pending == 0 {
		if err := pp.qp.PostSend(&pp.sendWR); err != nil {
			return fmt.Errorf("Couldn't post send\n")
		}
		pp.pending = recvWRID | sendWRID
	}
	return nil
}

// serverExchange is pp_server_exch_dest: listen (every address family),
// accept one client, read its record, connect the QP, answer.
func serverExchange(ctx context.Context, env tool.Env, f pingpong.Flags, my pingpong.Dest,
	connect func(pingpong.Dest) error) (pingpong.Dest, error) {
	var rem [1]pingpong.Dest
	err := pingpong.Serve(ctx, f.Port, env.Listening, []pingpong.Dest{my}, rem[:],
		func(d []pingpong.Dest) error { return connect(d[0]) })
	return rem[0], err
}

// clientExchange is pp_client_exch_dest.
func clientExchange(ctx context.Context, f pingpong.Flags, my pingpong.Dest) (pingpong.Dest, error) {
	var rem [1]pingpong.Dest
	err := pingpong.Dial(ctx, f.Host, f.Port, []pingpong.Dest{my}, rem[:])
	return rem[0], err
}
