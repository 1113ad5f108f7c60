// Package rpingcmd is the goroce rping subcommand: librdmacm's rping
// (rdma-core 44, librdmacm/examples/rping.c) on a goroce device, connected
// through package cm. It is the peer of the stock rping in both roles: the
// same flags, QP (16 send WRs, 2 receives, one CQ of 32), memory
// registrations, control messages, ping data and output lines.
//
// The ping-pong, per ping (the client's start buffer holds the ping data):
//
//	client SEND  start buf info (be64 addr, be32 rkey, be32 size)
//	server RDMA READ of the start buffer, then SEND (go ahead)
//	client SEND  rdma buf info
//	server RDMA WRITE echo of strlen(data)+1 bytes, then SEND (go ahead)
//
// With -C the client disconnects (DREQ) after count pings and the server,
// which waits for the next start buffer, sees the DISCONNECTED event.
//
// A persistent server (-s -P) accepts one connection after another, and
// several at once, as rping's rping_run_persistent_server does: each
// connection gets its own PD, CQ, buffers and goroutine (rping's detached
// thread per connection), and the server goes on after each one ends. It
// runs until --timeout or a signal ends it (exit 0: the stock tool runs
// until it is killed).
package rpingcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// Summary is the command's line in goroce's usage.
const Summary = "rping-compatible RDMA CM ping over RC (-s server, -c client -a addr)"

// DefaultPort is rping's port (7174).
const DefaultPort = 7174

// sqDepth is RPING_SQ_DEPTH: the send queue, and half the CQ.
const sqDepth = 16

// usage is rping's usage(), printed to stdout on a bad command line, then
// goroce's own options.
const usage = `rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
	-c		client side
	-I		Source address to bind to for client.
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-P		persistent server mode allowing multiple connections
	-q		use self-created, self-modified QP
`

const goroceUsage = `goroce options:
	--dev=IFACE	network interface of the RoCE device (default: the one holding -a/-I, else the first up with IPv4)
	--timeout=SEC	give up (exit 1) after this long; a client then retries a refused connection until the timeout
	--metrics=HOST:PORT	serve /metrics (Prometheus) and /debug/vars (expvar) during the run
	--metrics-cmdline	also publish the command line in /debug/vars (left out by default)
	--pcap=FILE	write the frames the device sends and receives to this pcap file (AF_XDP traffic included)
`

// Flags is rping's command line (getopt "a:I:Pp:C:S:t:scvVdq").
type Flags struct {
	Server     int // -s 1, -c 0; -1 neither
	Addr       netip.Addr
	Source     netip.Addr // -I
	Port       int
	Count      int
	Size       int
	Verbose    bool
	Validate   bool
	Debug      bool
	Persistent bool // -P
	SelfQP     bool // -q
}

// errUsage makes the tool print its usage and return EINVAL.
var errUsage = errors.New("usage")

// exit codes of rping's main: it returns ret, which is EINVAL for a bad
// command line and -1 (255) for a failed run.
const (
	exitEINVAL = 22
	exitFail   = 255
)

// ParseFlags parses rping's options as its getopt loop does, including
// its quirks: every -a and -I sets ret afresh, so a bad -S before a good
// -a is forgotten (the stock rping then runs with that size). debug is
// what -d printed while parsing. It returns the exit code to give up with
// (0: run).
func ParseFlags(args []string, stdout, stderr io.Writer) (f Flags, code int) {
	f = Flags{Server: -1, Size: 64, Port: DefaultPort, Addr: netip.IPv4Unspecified()}
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Every option is a string here, so that getopt.Rewrite keeps them in
	// order and the loop below sees them as getopt returns them.
	for _, n := range []string{"a", "I", "p", "C", "S", "t"} {
		fs.String(n, "", "")
	}
	for _, n := range []string{"P", "s", "c", "v", "V", "d", "q"} {
		fs.Bool(n, false, "")
	}
	opts, pos, err := getopt.Rewrite(fs, args)
	if err != nil || len(pos) > 0 {
		fmt.Fprint(stdout, usage)
		return f, exitEINVAL
	}
	debugf := func(format string, a ...any) {
		if f.Debug {
			fmt.Fprintf(stdout, format, a...)
		}
	}
	ret := 0
	addrGiven := false
	for _, o := range opts {
		name, val, _ := cutOpt(o)
		switch name {
		case "a", "I":
			a, err := tool.ParseHost(val)
			if err != nil {
				fmt.Fprintf(stdout, "getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
				ret = -2 // EAI_NONAME
				continue
			}
			ret = 0
			if name == "a" {
				f.Addr, addrGiven = a, true
			} else {
				f.Source = a
			}
		case "P":
			f.Persistent = true
		case "p":
			f.Port = int(uint16(tool.Atoi(val)))
			debugf("port %d\n", tool.Atoi(val))
		case "s":
			f.Server = 1
			debugf("server\n")
		case "c":
			f.Server = 0
			debugf("client\n")
		case "S":
			f.Size = tool.Atoi(val)
			if f.Size < MinBufSize || f.Size > BufSize-1 {
				fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", f.Size, MinBufSize, BufSize)
				ret = exitEINVAL
			} else {
				debugf("size %d\n", f.Size)
			}
		case "C":
			f.Count = tool.Atoi(val)
			if f.Count < 0 {
				fmt.Fprintf(stderr, "Invalid count %d\n", f.Count)
				ret = exitEINVAL
			} else {
				debugf("count %d\n", f.Count)
			}
		case "v":
			f.Verbose = true
			debugf("verbose\n")
		case "V":
			f.Validate = true
			debugf("validate data\n")
		case "d":
			f.Debug = true
		case "q":
			f.SelfQP = true
		default: // -t is in the getopt string but has no case: usage
			fmt.Fprint(stdout, usage)
			return f, exitEINVAL
		}
	}
	if ret != 0 {
		return f, ret & 0xff
	}
	if f.Server == -1 {
		fmt.Fprint(stdout, usage)
		return f, exitEINVAL
	}
	if f.Server == 0 && !addrGiven {
		// The stock rping would try to connect to 0.0.0.0 and fail in
		// address resolution; say what is missing instead.
		fmt.Fprintf(stderr, "goroce rping: the client (-c) needs the server's address: -a ADDR\n")
		return f, exitEINVAL
	}
	return f, 0
}

// cutOpt splits "-name" / "-name=value" as getopt.Rewrite writes them.
func cutOpt(o string) (name, val string, ok bool) {
	o = o[1:]
	for i := 0; i < len(o); i++ {
		if o[i] == '=' {
			return o[:i], o[i+1:], true
		}
	}
	return o, "", false
}

// Run is rping on a goroce device. It returns the exit code.
func Run(env tool.Env, args []string) int {
	args, opts, dev, exit, done := tool.CMCommand(env, args, "rping", usage+goroceUsage, tool.ExitUsage)
	if done {
		return exit
	}
	f, code := ParseFlags(args, env.Stdout, env.Stderr)
	if code != 0 {
		return tool.ExitUsage // rping's own status (EINVAL, EAI_NONAME) is not kept: see tool.ExitUsage
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	cb := &controlBlock{env: env, f: f, ctx: ctx, server: f.Server == 1}
	d, err := tool.OpenCMDevice(ctx, env, dev, f.Source, f.Addr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce rping: %v\n", tool.DeviceError(dev, err))
		return tool.ExitFailure
	}
	defer d.Close()
	_, stopMetrics := tool.StartMetrics(env, opts, d)
	defer stopMetrics()
	cb.dev = d
	cb.prog.Dev = d
	cb.prog.Start()
	defer cb.prog.Stop()
	cb.debugf("created cm_id %p\n", cb)
	var ret int
	switch {
	case cb.server && f.Persistent:
		ret = cb.runPersistent()
	case cb.server:
		ret = cb.runServer()
	default:
		ret = cb.runClient()
	}
	if ret != 0 {
		return tool.ExitFailure // rping returns -1 or an errno
	}
	return tool.ExitOK
}

// state is enum test_state (its numbers appear in the error lines).
type state int

const (
	stIdle state = iota + 1
	stConnectRequest
	stAddrResolved
	stRouteResolved
	stConnected
	stRDMAReadAdv
	stRDMAReadComplete
	stRDMAWriteAdv
	stRDMAWriteComplete
	stDisconnected
	stError
)

// controlBlock is struct rping_cb.
type controlBlock struct {
	env    tool.Env
	f      Flags
	ctx    context.Context
	server bool
	dev    *qp.Device
	prog   tool.Progressor

	pd   *qp.PD
	cq   *qp.CQ
	conn *cm.Conn
	q    *qp.QP

	recvBuf, sendBuf, rdmaBuf, startBuf []byte
	recvMR, sendMR, rdmaMR, startMR     *qp.MR

	recvSGE [1]qp.SGE
	rqWR    qp.RecvWR
	sendSGE [1]qp.SGE
	sqWR    qp.SendWR
	rdmaSGE [1]qp.SGE
	rdmaWR  qp.SendWR

	state         state
	connCtx       context.Context // cb.ctx, also ended by the connection's end
	sawDisconnect bool
	remote        Info
	wcs           [1]qp.WC
}

func (cb *controlBlock) debugf(format string, a ...any) {
	if cb.f.Debug {
		fmt.Fprintf(cb.env.Stdout, format, a...)
	}
}

func (cb *controlBlock) errf(format string, a ...any) {
	fmt.Fprintf(cb.env.Stderr, format, a...)
}

// setupQP is rping_setup_qp up to the QP, which cm creates: the PD and
// one CQ of 2 × RPING_SQ_DEPTH for both queues.
func (cb *controlBlock) setupQP() error {
	cb.pd = cb.dev.AllocPD()
	cb.debugf("created pd %p\n", cb.pd)
	cb.debugf("created channel %p\n", &cb.cq)
	cq, err := cb.dev.CreateCQ(sqDepth * 2)
	if err != nil {
		cb.errf("ibv_create_cq failed\n")
		return err
	}
	cb.cq = cq
	cb.debugf("created cq %p\n", cb.cq)
	return nil
}

// setupBuffers is rping_setup_buffers and rping_setup_wr: recv_buf
// (LOCAL_WRITE), send_buf (no access), rdma_buf and, on the client,
// start_buf (LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE).
func (cb *controlBlock) setupBuffers() error {
	cb.debugf("rping_setup_buffers called on cb %p\n", cb)
	var err error
	cb.recvBuf = make([]byte, InfoLen)
	if cb.recvMR, err = cb.pd.RegMR(cb.recvBuf, qp.LocalWrite); err != nil {
		cb.errf("recv_buf reg_mr failed\n")
		return err
	}
	cb.sendBuf = make([]byte, InfoLen)
	if cb.sendMR, err = cb.pd.RegMR(cb.sendBuf, 0); err != nil {
		cb.errf("send_buf reg_mr failed\n")
		return err
	}
	rw := qp.LocalWrite | qp.RemoteRead | qp.RemoteWrite
	cb.rdmaBuf = make([]byte, cb.f.Size)
	if cb.rdmaMR, err = cb.pd.RegMR(cb.rdmaBuf, rw); err != nil {
		cb.errf("rdma_buf reg_mr failed\n")
		return err
	}
	if !cb.server {
		cb.startBuf = make([]byte, cb.f.Size)
		if cb.startMR, err = cb.pd.RegMR(cb.startBuf, rw); err != nil {
			cb.errf("start_buf reg_mr failed\n")
			return err
		}
	}
	cb.recvSGE[0] = cb.recvMR.SGE(0, InfoLen)
	cb.rqWR = qp.RecvWR{SGL: cb.recvSGE[:]}
	cb.sendSGE[0] = cb.sendMR.SGE(0, InfoLen)
	cb.sqWR = qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: cb.sendSGE[:]}
	cb.rdmaSGE[0] = qp.SGE{Addr: cb.rdmaMR.IOVA(), LKey: cb.rdmaMR.LKey()}
	cb.rdmaWR = qp.SendWR{Flags: qp.SendSignaled, SGL: cb.rdmaSGE[:]}
	cb.debugf("allocated & registered buffers...\n")
	return nil
}

func (cb *controlBlock) freeBuffers() {
	cb.debugf("rping_free_buffers called on cb %p\n", cb)
	for _, mr := range []*qp.MR{cb.recvMR, cb.sendMR, cb.rdmaMR, cb.startMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
}

// cmOptions are what rping gives rdma_create_qp and rdma_connect /
// rdma_accept: the caps of rping_create_qp, rping_init_conn_param's
// responder resources and initiator depth 1, retry and RNR retry 7, and
// the first receive posted before the connection is made.
func (cb *controlBlock) cmOptions() cm.Options {
	return cm.Options{PD: cb.pd, SendCQ: cb.cq, RecvCQ: cb.cq,
		Cap:                qp.Caps{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1},
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetry: 7,
		Prepare: func(q *qp.QP) error {
			cb.debugf("created qp %p\n", q)
			if err := q.PostRecv(&cb.rqWR); err != nil {
				cb.errf("ibv_post_recv failed: %d\n", -1)
				return err
			}
			cb.debugf("cq_thread started.\n")
			return nil
		}}
}

// cmEventError prints what rping_cma_event_handler prints for an error
// event; the C tool's cm thread then exits the process with -1.
func (cb *controlBlock) cmEventError(err error) int {
	ev, status := tool.CMEvent(err)
	cb.errf("cma event %s, error %d\n", ev, status)
	if cb.f.Debug {
		cb.debugf("%v\n", err)
	}
	return exitFail
}

// setup is rping's setup_qp and rping_setup_buffers, with their failure
// lines; the caller frees the buffers.
func (cb *controlBlock) setup() bool {
	if err := cb.setupQP(); err != nil {
		cb.errf("setup_qp failed: %d\n", -1)
		return false
	}
	if err := cb.setupBuffers(); err != nil {
		cb.errf("rping_setup_buffers failed: %d\n", -1)
		return false
	}
	return true
}

func (cb *controlBlock) runServer() int {
	if !cb.setup() {
		return exitFail
	}
	defer cb.freeBuffers()
	l := cb.listen(cb.cmOptions())
	if l == nil {
		return exitFail
	}
	defer l.Close()
	conn, err := l.Accept(cb.ctx)
	if err != nil {
		if cb.ctx.Err() != nil {
			cb.errf("wait for CONNECT_REQUEST state %d: %v\n", stIdle, context.Cause(cb.ctx))
			return exitFail
		}
		return cb.cmEventError(err)
	}
	cb.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id %p (child)\n", conn)
	cb.debugf("child cma %p\n", conn)
	cb.debugf("accepting client connection request\n")
	cb.debugf("cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id %p (child)\n", conn)
	cb.debugf("ESTABLISHED\n")
	cb.conn, cb.q = conn, conn.QP()
	cb.state = stConnected
	stop := cb.watchConn()
	ret := cb.testServer()
	stop()
	if ret != 0 {
		cb.errf("rping server failed: %d\n", ret)
	}
	conn.Close()
	if ret != 0 {
		return exitFail
	}
	cb.debugf("destroy cm_id %p\n", cb)
	return 0
}

func (cb *controlBlock) runClient() int {
	if cb.f.Addr.IsUnspecified() {
		// rdma_resolve_addr of 0.0.0.0 fails: no route.
		return cb.cmEventError(fmt.Errorf("resolve %v: %w", cb.f.Addr, errNoRoute))
	}
	cb.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	if !cb.setup() {
		return exitFail
	}
	defer cb.freeBuffers()
	o := cb.cmOptions()
	if cb.f.Source.IsValid() {
		o.Local = netip.AddrPortFrom(cb.f.Source, 0)
	}
	conn, err := tool.DialRetry(cb.ctx, cb.dev, netip.AddrPortFrom(cb.f.Addr, uint16(cb.f.Port)), o)
	if err != nil {
		return cb.cmEventError(err)
	}
	cb.debugf("cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id %p (parent)\n", conn)
	cb.debugf("ESTABLISHED\n")
	cb.debugf("rdma_connect successful\n")
	cb.conn, cb.q = conn, conn.QP()
	cb.state = stConnected
	stop := cb.watchConn()
	ret := cb.testClient()
	stop()
	if ret != 0 {
		cb.errf("rping client failed: %d\n", ret)
	}
	// rping_disconnect: rdma_disconnect sends the DREQ; the DREP brings the
	// client its own DISCONNECTED event.
	if err := conn.Close(); err == nil || errors.Is(err, cm.ErrClosed) {
		cb.disconnected()
	}
	if ret != 0 {
		return exitFail
	}
	cb.debugf("destroy cm_id %p\n", cb)
	return 0
}

var errNoRoute = errors.New("no route to the address")

// listen is rping's rdma_bind_addr and rdma_listen: a Listener on -a and
// -p, announced to env.Listening; nil (the error printed) when the
// address cannot be bound.
func (cb *controlBlock) listen(opts cm.Options) *cm.Listener {
	addr := netip.AddrPortFrom(cb.f.Addr, uint16(cb.f.Port))
	l, err := cm.Listen(cb.ctx, cb.dev, addr.String(), opts)
	if err != nil {
		cb.errf("rdma_bind_addr: %v\n", err)
		return nil
	}
	if cb.env.Listening != nil {
		cb.env.Listening(tool.CMAddr(l.Addr()))
	}
	cb.debugf("rdma_bind_addr successful\n")
	cb.debugf("rdma_listen\n")
	return l
}

// waitFor is rping's sem_wait and the check after it: it waits and
// reports whether the state is want, printing "wait for NAME state N" when
// it is not.
func (cb *controlBlock) waitFor(want state, name string) bool {
	cb.wait()
	if cb.state != want {
		cb.errf("wait for %s state %d\n", name, cb.state)
		return false
	}
	return true
}

// wait is sem_wait on the semaphore the CQ handler posts: it handles
// completions (rping_cq_event_handler) until one that posts it (a RECV,
// an RDMA READ or WRITE, an error) or the DISCONNECTED event.
func (cb *controlBlock) wait() {
	done := cb.conn.Done()
	for {
		n, err := cb.cq.Poll(cb.wcs[:])
		if err == nil && n == 0 {
			select {
			case <-done:
				// Completions may still be queued behind the DREQ (the
				// flush of our receive): the event wins, as in rping,
				// whose cm thread posts DISCONNECTED on its own.
				cb.disconnected()
				cb.state = stDisconnected
				return
			default:
			}
			n, err = cb.cq.Wait(cb.connCtx, cb.wcs[:])
			if n == 0 && err == nil {
				continue
			}
		}
		if err != nil {
			if cb.ctx.Err() != nil {
				cb.errf("%v\n", context.Cause(cb.ctx))
				cb.state = stError
				return
			}
			select {
			case <-done:
				continue // the DISCONNECTED event, handled above
			default:
			}
			cb.errf("poll error %d\n", -1)
			cb.state = stError
			return
		}
		if cb.handle(&cb.wcs[0]) {
			return
		}
	}
}

// watchConn makes connCtx, which ends with the run or with the
// connection (the peer's DREQ): what a CQ wait in wait() is woken by.
func (cb *controlBlock) watchConn() (stop func()) {
	ctx, cancel := context.WithCancel(cb.ctx)
	cb.connCtx = ctx
	done := cb.conn.Done()
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
		}
		cancel()
	}()
	return cancel
}

// disconnected prints what rping's cm thread prints for the
// DISCONNECTED event, once.
func (cb *controlBlock) disconnected() {
	if !cb.sawDisconnect {
		cb.sawDisconnect = true
		cb.errf("%s DISCONNECT EVENT...\n", cb.side())
	}
}

func (cb *controlBlock) side() string {
	if cb.server {
		return "server"
	}
	return "client"
}

// handle is one completion of rping_cq_event_handler; it reports whether
// the semaphore was posted.
func (cb *controlBlock) handle(wc *qp.WC) bool {
	if wc.Status != qp.WCSuccess {
		if wc.Status == qp.WCWRFlushErr {
			return false
		}
		cb.errf("cq completion failed status %d\n", wc.Status)
		cb.state = stError
		return true
	}
	switch wc.Opcode {
	case qp.WCSend:
		cb.debugf("send completion\n")
		return false
	case qp.WCRDMAWrite:
		cb.debugf("rdma write completion\n")
		cb.state = stRDMAWriteComplete
	case qp.WCRDMARead:
		cb.debugf("rdma read completion\n")
		cb.state = stRDMAReadComplete
	case qp.WCRecv:
		cb.debugf("recv completion\n")
		var err error
		if cb.server {
			err = cb.serverRecv(wc)
		} else {
			err = cb.clientRecv(wc)
		}
		if err != nil {
			cb.errf("recv wc error: %d\n", -1)
			cb.state = stError
			return true
		}
		if err := cb.q.PostRecv(&cb.rqWR); err != nil {
			cb.errf("post recv error: %d\n", -1)
			cb.state = stError
		}
	default:
		cb.debugf("unknown!!!!! completion\n")
		cb.state = stError
	}
	return true
}

func (cb *controlBlock) serverRecv(wc *qp.WC) error {
	in, err := DecodeInfo(cb.recvBuf, wc.ByteLen)
	if err != nil {
		cb.errf("Received bogus data, size %d\n", wc.ByteLen)
		return err
	}
	cb.remote = in
	cb.debugf("Received rkey %x addr %x len %d from peer\n", in.RKey, in.Buf, in.Size)
	if cb.state <= stConnected || cb.state == stRDMAWriteComplete {
		cb.state = stRDMAReadAdv
	} else {
		cb.state = stRDMAWriteAdv
	}
	return nil
}

func (cb *controlBlock) clientRecv(wc *qp.WC) error {
	if wc.ByteLen != InfoLen {
		cb.errf("Received bogus data, size %d\n", wc.ByteLen)
		return errBogus
	}
	if cb.state == stRDMAReadAdv {
		cb.state = stRDMAWriteAdv
	} else {
		cb.state = stRDMAWriteComplete
	}
	return nil
}

// formatSend is rping_format_send: buf's address, rkey and the ping size
// into send_buf.
func (cb *controlBlock) formatSend(mr *qp.MR) {
	in := Info{Buf: mr.IOVA(), RKey: mr.RKey(), Size: uint32(cb.f.Size)}
	in.Encode(cb.sendBuf)
	cb.debugf("RDMA addr %x rkey %x len %d\n", in.Buf, in.RKey, in.Size)
}

func (cb *controlBlock) post(wr *qp.SendWR) bool {
	if err := cb.q.PostSend(wr); err != nil {
		cb.errf("post send error %d\n", -1)
		if cb.f.Debug {
			cb.debugf("%v\n", err)
		}
		return false
	}
	return true
}

// testServer is rping_test_server.
func (cb *controlBlock) testServer() int {
	cb.prog.Stop() // the CQ waits drive a busy-poll device
	defer cb.prog.Start()
	for cb.serveRound() {
	}
	if cb.state == stDisconnected {
		return 0
	}
	return -1
}

// serveRound is one round of rping_test_server's loop: the client's
// advertisement, our RDMA READ of its buffer, go ahead, its second
// advertisement, our RDMA WRITE back, go ahead. It reports false at the
// first step that fails (the peer's disconnect included).
func (cb *controlBlock) serveRound() bool {
	// Wait for client's Start STAG/TO/Len
	if !cb.waitFor(stRDMAReadAdv, "RDMA_READ_ADV") {
		return false
	}
	cb.debugf("server received sink adv\n")
	cb.rdmaWR.Opcode = qp.WRRDMARead
	cb.rdmaWR.RKey, cb.rdmaWR.RemoteAddr = cb.remote.RKey, cb.remote.Buf
	cb.rdmaSGE[0].Length = cb.remote.Size
	if !cb.post(&cb.rdmaWR) {
		return false
	}
	cb.debugf("server posted rdma read req \n")
	if !cb.waitFor(stRDMAReadComplete, "RDMA_READ_COMPLETE") {
		return false
	}
	cb.debugf("server received read complete\n")
	if cb.f.Verbose {
		fmt.Fprintf(cb.env.Stdout, "server ping data: %s\n", CString(cb.rdmaBuf))
	}
	if !cb.post(&cb.sqWR) {
		return false
	}
	cb.debugf("server posted go ahead\n")
	if !cb.waitFor(stRDMAWriteAdv, "RDMA_WRITE_ADV") {
		return false
	}
	cb.debugf("server received sink adv\n")
	cb.rdmaWR.Opcode = qp.WRRDMAWrite
	cb.rdmaWR.RKey, cb.rdmaWR.RemoteAddr = cb.remote.RKey, cb.remote.Buf
	cb.rdmaSGE[0].Length = uint32(len(CString(cb.rdmaBuf)) + 1)
	cb.debugf("rdma write from lkey %x laddr %x len %d\n", cb.rdmaSGE[0].LKey, cb.rdmaSGE[0].Addr, cb.rdmaSGE[0].Length)
	if !cb.post(&cb.rdmaWR) {
		return false
	}
	if !cb.waitFor(stRDMAWriteComplete, "RDMA_WRITE_COMPLETE") {
		return false
	}
	cb.debugf("server rdma write complete \n")
	if !cb.post(&cb.sqWR) {
		return false
	}
	cb.debugf("server posted go ahead\n")
	return true
}

// testClient is rping_test_client.
func (cb *controlBlock) testClient() int {
	cb.prog.Stop()
	defer cb.prog.Start()
	start := 65
	for ping := 0; cb.f.Count == 0 || ping < cb.f.Count; ping++ {
		cb.state = stRDMAReadAdv
		start = FillPing(cb.startBuf, ping, start)
		cb.formatSend(cb.startMR)
		if !cb.post(&cb.sqWR) {
			return -1
		}
		// Wait for server to ACK
		if !cb.waitFor(stRDMAWriteAdv, "RDMA_WRITE_ADV") {
			return cb.endState(-1)
		}
		cb.formatSend(cb.rdmaMR)
		if !cb.post(&cb.sqWR) {
			return -1
		}
		// Wait for the server to say the RDMA Write is complete.
		if !cb.waitFor(stRDMAWriteComplete, "RDMA_WRITE_COMPLETE") {
			return cb.endState(-1)
		}
		if cb.f.Validate && string(cb.startBuf) != string(cb.rdmaBuf) {
			cb.errf("data mismatch!\n")
			return -1
		}
		if cb.f.Verbose {
			fmt.Fprintf(cb.env.Stdout, "ping data: %s\n", CString(cb.rdmaBuf))
		}
	}
	if cb.env.Buffers != nil {
		cb.env.Buffers("final", append([]byte(nil), cb.rdmaBuf...))
	}
	return 0
}

// endState is rping_test_client's return: 0 when the peer disconnected.
func (cb *controlBlock) endState(ret int) int {
	if cb.state == stDisconnected {
		return 0
	}
	return ret
}
