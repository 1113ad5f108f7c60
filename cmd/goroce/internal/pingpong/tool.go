package pingpong

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// What rdma-core's rc_pingpong and ud_pingpong share: the strict SEND/RECV
// ping-pong of their main loops and the TCP exchange of their address
// records (the same 52-byte record and sequence in v44).

// The work request IDs of rc_pingpong.c and ud_pingpong.c.
const (
	RecvWRID = 1
	SendWRID = 2
)

// PingPong is the traffic part of struct pingpong_context: one QP whose
// CQ serves both queues, the one receive and the one send work request the
// tools post again and again.
type PingPong struct {
	QP *qp.QP
	CQ *qp.CQ
	// SRQ, when set, is the shared receive queue the QP takes its
	// receives from: PostRecv posts there.
	SRQ     *qp.SRQ
	SendWR  qp.SendWR
	RecvWR  qp.RecvWR
	RxDepth int
	Routs   int // receives posted and not yet completed
	Pending int // RecvWRID|SendWRID still outstanding
	// Buf is the registered buffer; Payload the part of it a SEND carries
	// and the -c check looks at (all of Buf for RC, Buf[40:] for UD).
	Buf, Payload []byte
}

// Tool is one of the two ping-pong tools for its Run: what differs
// between rc_pingpong and ud_pingpong.
type Tool struct {
	Name  string // the subcommand, for error messages
	Usage string
	Parse func(args []string) (Flags, error)
	// Check refuses options the device cannot honour, before it is opened
	// (nil: none). Its error is printed as the tool's message.
	Check func(f Flags) error
	// Setup is pp_init_ctx: buffer, MR, CQ and QP, moved to INIT.
	Setup func(ctx context.Context, dev *qp.Device, f Flags) (*PingPong, error)
	// FormatLocal is the tool's first line.
	FormatLocal func(Dest) string
	// NoGID is the message for a -g index the device does not have, a
	// format with one %d.
	NoGID string
	// Connect is pp_connect_ctx: the QP to RTR and RTS (and for UD the
	// address handle into SendWR).
	Connect func(ctx context.Context, pp *PingPong, f Flags, my, rem Dest) error
}

// Run is the tool's main(): it parses args and runs the ping-pong. It
// returns the exit code.
func (t *Tool) Run(env tool.Env, args []string) int {
	return Main(env, args, t.Name, t.Usage, t.Parse, t.run)
}

// run is main() once the options are parsed.
func (t *Tool) run(env tool.Env, opts tool.Options, f Flags) int {
	errf := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, format, a...)
		return 1
	}
	if t.Check != nil {
		if err := t.Check(f); err != nil {
			return errf("%v\n", err)
		}
	}
	sess, err := Open(env, opts, f.IBDev)
	if err != nil {
		return errf("%v\n", err)
	}
	defer sess.Close()
	ctx, dev := sess.Ctx, sess.Dev
	pp, err := t.Setup(ctx, dev, f)
	if err != nil {
		return errf("%v\n", err)
	}
	if pp.Routs = pp.PostRecv(pp.RxDepth); pp.Routs < pp.RxDepth {
		return errf("Couldn't post receive (%d)\n", pp.Routs)
	}
	if f.IBPort != 1 {
		return errf("Couldn't get port info\n")
	}
	my := Dest{QPN: pp.QP.QPN(), PSN: tool.RandomPSN()}
	if f.GIDIndex >= 0 {
		g, err := dev.GID(f.GIDIndex)
		if err != nil {
			return errf(t.NoGID, f.GIDIndex)
		}
		my.GID = tool.GIDBytes(g)
	}
	fmt.Fprint(env.Stdout, t.FormatLocal(my))

	connect := func(rem Dest) error { return t.Connect(ctx, pp, f, my, rem) }
	var rem [1]Dest
	if f.Host == "" {
		err = Serve(ctx, f.Port, env.Listening, []Dest{my}, rem[:], func(d []Dest) error { return connect(d[0]) })
	} else {
		err = Dial(ctx, f.Host, f.Port, []Dest{my}, rem[:])
	}
	if err != nil {
		return errf("%v\n", err)
	}
	fmt.Fprint(env.Stdout, FormatRemote(rem[0]))
	if f.Host != "" {
		if err := connect(rem[0]); err != nil {
			return errf("%v\n", err)
		}
	}

	pageSize := os.Getpagesize()
	pp.Pending = RecvWRID
	if f.Host != "" {
		if f.Check {
			// for (i = 0; i < size; i += page_size) buf[i] = i / page_size % sizeof(char): 0
			for i := 0; i < len(pp.Payload); i += pageSize {
				pp.Payload[i] = 0
			}
		}
		if err := pp.QP.PostSend(&pp.SendWR); err != nil {
			return errf("Couldn't post send\n")
		}
		pp.Pending |= SendWRID
	}

	elapsed, err := sess.Traffic(f.Events, func(p *tool.Poller) error { return pp.Loop(p, f.Iters) })
	if err != nil {
		return errf("%v", err)
	}
	fmt.Fprint(env.Stdout, FormatStats(f.Size, f.Iters, elapsed))

	bad := false
	if f.Host == "" && f.Check {
		// The tools check the first byte of each page of what the client
		// sent (0; the rest is the 0x7b the buffer was filled with). We
		// check every byte, with the same message per page.
		for page := 0; page*pageSize < len(pp.Payload); page++ {
			chunk := pp.Payload[page*pageSize : min((page+1)*pageSize, len(pp.Payload))]
			ok := chunk[0] == 0
			for _, c := range chunk[1:] {
				ok = ok && c == 0x7b
			}
			if !ok {
				fmt.Fprint(env.Stdout, FormatInvalidPage(page))
				bad = true
			}
		}
	}
	if env.Buffers != nil {
		env.Buffers("final", append([]byte(nil), pp.Buf...))
	}
	if bad {
		return 1
	}
	return 0
}

// PostRecv is pp_post_recv: it returns how many receives it posted.
func (pp *PingPong) PostRecv(n int) int {
	post := pp.QP.PostRecv
	if pp.SRQ != nil {
		post = pp.SRQ.PostRecv
	}
	for i := range n {
		if post(&pp.RecvWR) != nil {
			return i
		}
	}
	return n
}

// Loop is the tools' main loop: poll (or sleep on events), count, and
// keep the ping-pong going until iters messages went each way. The client
// posted the first SEND before.
func (pp *PingPong) Loop(p *tool.Poller, iters uint32) error {
	var rcnt, scnt uint32
	var wc [2]qp.WC
	for rcnt < iters || scnt < iters {
		n, err := p.Poll(pp.CQ, wc[:])
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

// parseWC is parse_single_wc without timestamps: count the completion,
// refill the receive queue when one or fewer receives remain, and post the
// next SEND once both the last SEND and the last RECV completed.
func (pp *PingPong) parseWC(wc *qp.WC, scnt, rcnt *uint32, iters uint32) error {
	if wc.Status != qp.WCSuccess {
		return errors.New(FormatFailedStatus(int(wc.Status), wc.WRID))
	}
	switch wc.WRID {
	case SendWRID:
		*scnt++
	case RecvWRID:
		pp.Routs--
		if pp.Routs <= 1 {
			pp.Routs += pp.PostRecv(pp.RxDepth - pp.Routs)
			if pp.Routs < pp.RxDepth {
				return fmt.Errorf("Couldn't post receive (%d)\n", pp.Routs)
			}
		}
		*rcnt++
	default:
		return fmt.Errorf("Completion for unknown wr_id %d\n", int32(wc.WRID))
	}
	pp.Pending &^= int(wc.WRID)
	if *scnt < iters && pp.Pending == 0 {
		if err := pp.QP.PostSend(&pp.SendWR); err != nil {
			return fmt.Errorf("Couldn't post send\n")
		}
		pp.Pending = RecvWRID | SendWRID
	}
	return nil
}
