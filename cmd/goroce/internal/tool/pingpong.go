package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/qp"
)

// What rdma-core's rc_pingpong and ud_pingpong share: the strict SEND/RECV
// ping-pong of their main loops and the TCP exchange of their address
// records (the same 52-byte record and sequence in v44).

// The work request IDs of rc_pingpong.c and ud_pingpong.c.
const (
	PingpongRecvWRID = 1
	PingpongSendWRID = 2
)

// PingPong is the traffic part of struct pingpong_context: one QP whose
// CQ serves both queues, the one receive and the one send work request the
// tools post again and again.
type PingPong struct {
	QP      *qp.QP
	CQ      *qp.CQ
	SendWR  qp.SendWR
	RecvWR  qp.RecvWR
	RxDepth int
	Routs   int // receives posted and not yet completed
	Pending int // PingpongRecvWRID|PingpongSendWRID still outstanding
	// Buf is the registered buffer; Payload the part of it a SEND carries
	// and the -c check looks at (all of Buf for RC, Buf[40:] for UD).
	Buf, Payload []byte
}

// PingpongTool is one of the two ping-pong tools for its Run: what differs
// between rc_pingpong and ud_pingpong.
type PingpongTool struct {
	Name  string // the subcommand, for error messages
	Usage string
	Parse func(args []string) (pingpong.Flags, error)
	// Check refuses options the device cannot honour, before it is opened
	// (nil: none). Its error is printed as the tool's message.
	Check func(f pingpong.Flags) error
	// Setup is pp_init_ctx: buffer, MR, CQ and QP, moved to INIT.
	Setup func(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*PingPong, error)
	// FormatLocal is the tool's first line.
	FormatLocal func(pingpong.Dest) string
	// NoGID is the message for a -g index the device does not have, a
	// format with one %d.
	NoGID string
	// Connect is pp_connect_ctx: the QP to RTR and RTS (and for UD the
	// address handle into SendWR).
	Connect func(ctx context.Context, pp *PingPong, f pingpong.Flags, my, rem pingpong.Dest) error
}

// Run is the tool's main(): it parses args and runs the ping-pong. It
// returns the exit code.
func (t *PingpongTool) Run(env Env, args []string) int {
	if WantsHelp(args) {
		fmt.Fprint(env.Stdout, t.Usage)
		return 0
	}
	args, opts, err := SplitOptions(args)
	if err == nil {
		var f pingpong.Flags
		if f, err = t.Parse(args); err == nil {
			return t.run(env, opts, f)
		}
	}
	fmt.Fprintf(env.Stderr, "goroce %s: %v\n%s", t.Name, err, t.Usage)
	return 1
}

// run is main() once the options are parsed.
func (t *PingpongTool) run(env Env, opts Options, f pingpong.Flags) int {
	errf := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, format, a...)
		return 1
	}
	if t.Check != nil {
		if err := t.Check(f); err != nil {
			return errf("%v\n", err)
		}
	}
	ctx, cancel := RunContext(env, opts)
	defer cancel()

	dev, err := env.Open(ctx, f.IBDev)
	if err != nil {
		return errf("IB device %s not found: %v\n", f.IBDev, err)
	}
	defer dev.Close()
	_, stopMetrics := StartMetrics(env, opts, dev)
	defer stopMetrics()
	prog := &Progressor{Dev: dev}
	prog.Start()
	defer prog.Stop()
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
	my := pingpong.Dest{QPN: pp.QP.QPN(), PSN: RandomPSN()}
	if f.GIDIndex >= 0 {
		g, err := dev.GID(f.GIDIndex)
		if err != nil {
			return errf(t.NoGID, f.GIDIndex)
		}
		my.GID = GIDBytes(g)
	}
	fmt.Fprint(env.Stdout, t.FormatLocal(my))

	connect := func(rem pingpong.Dest) error { return t.Connect(ctx, pp, f, my, rem) }
	var rem pingpong.Dest
	if f.Host == "" {
		rem, err = ServePingpong(ctx, env, f.Port, my, connect)
	} else {
		rem, err = DialPingpong(ctx, f.Host, f.Port, my)
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
	pp.Pending = PingpongRecvWRID
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
		pp.Pending |= PingpongSendWRID
	}

	tctx, watch := WatchProgress(ctx, env.Idle)
	defer watch.Stop()
	p := &Poller{Ctx: tctx, Events: f.Events, Watch: watch}
	prog.Stop() // the loop's polls drive a busy-poll device
	start := time.Now()
	if err := pp.Loop(p, f.Iters); err != nil {
		return errf("%v", err)
	}
	elapsed := time.Since(start)
	prog.Start()
	fmt.Fprint(env.Stdout, pingpong.FormatStats(f.Size, f.Iters, elapsed))

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
				fmt.Fprint(env.Stdout, pingpong.FormatInvalidPage(page))
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
	for i := range n {
		if pp.QP.PostRecv(&pp.RecvWR) != nil {
			return i
		}
	}
	return n
}

// Loop is the tools' main loop: poll (or sleep on events), count, and
// keep the ping-pong going until iters messages went each way. The client
// posted the first SEND before.
func (pp *PingPong) Loop(p *Poller, iters uint32) error {
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
		return errors.New(pingpong.FormatFailedStatus(int(wc.Status), wc.WRID))
	}
	switch wc.WRID {
	case PingpongSendWRID:
		*scnt++
	case PingpongRecvWRID:
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
		pp.Pending = PingpongRecvWRID | PingpongSendWRID
	}
	return nil
}

// ServePingpong is pp_server_exch_dest: listen on port (every address
// family), accept one client, read its record, connect the QP (connect),
// answer.
func ServePingpong(ctx context.Context, env Env, port int, my pingpong.Dest,
	connect func(pingpong.Dest) error) (pingpong.Dest, error) {
	ln, err := pingpong.Listen(port)
	if err != nil {
		return pingpong.Dest{}, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
	}
	if env.Listening != nil {
		env.Listening(ln.Addr())
	}
	conn, err := AcceptOne(ctx, ln)
	if err != nil {
		return pingpong.Dest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	defer WithExchangeDeadline(ctx, conn)()
	var connErr error
	rem, err := pingpong.ServerExchange(conn, my, func(d pingpong.Dest) error {
		connErr = connect(d)
		return connErr
	})
	switch {
	case connErr != nil:
		return rem, fmt.Errorf("%w\nCouldn't connect to remote QP", connErr)
	case err != nil:
		return rem, fmt.Errorf("Couldn't read remote address: %w", ctxErr(ctx, err))
	}
	return rem, nil
}

// DialPingpong is pp_client_exch_dest.
func DialPingpong(ctx context.Context, host string, port int, my pingpong.Dest) (pingpong.Dest, error) {
	conn, err := DialPeer(ctx, "tcp", host, port)
	if err != nil {
		return pingpong.Dest{}, fmt.Errorf("Couldn't connect to %s:%d: %w", host, port, err)
	}
	defer conn.Close()
	defer WithExchangeDeadline(ctx, conn)()
	rem, err := pingpong.ClientExchange(conn, my)
	if err != nil {
		return rem, fmt.Errorf("Couldn't read/write remote address: %w", ctxErr(ctx, err))
	}
	return rem, nil
}

// ctxErr names the context's cause when it ended an I/O error.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return err
}
