// Package ucmatosecmd is the goroce ucmatose subcommand: librdmacm's
// cmatose (rdma-core 44, librdmacm/examples/cmatose.c, installed as
// ucmatose) on a goroce device, connected through package cm.
//
// The test: the client opens -c connections at once (each with its own
// PD, CQs and QP, every receive posted before rdma_connect); once all are
// established the server sends -C messages of -S bytes on each, the client
// receives them all and sends as many back, the server receives them and
// disconnects every connection; each side waits for the DISCONNECTED
// events. Its output lines are cmatose's.
package ucmatosecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// Summary is the command's line in goroce's usage.
const Summary = "ucmatose-compatible RDMA CM connection test (librdmacm cmatose: -s server for the client role)"

// DefaultPort is cmatose's port ("7471").
const DefaultPort = 7471

// Flags is cmatose's command line (getopt "s:b:f:P:c:C:S:t:p:a:m").
type Flags struct {
	Dst, Src     string // -s server address (the client role), -b bind address
	Connections  int    // -c (1)
	MessageCount int    // -C (10)
	MessageSize  int    // -S (100)
	Port         string // -p (7471)
	TOS          int    // -t, -1 unset
	AckTimeout   int    // -a, -1 unset
	Migrate      bool   // -m
	Format       string // -f
	PortSpace    string // -P
}

// usageText is cmatose's usage, printed with argv[0] = "ucmatose".
const usageText = `usage: ucmatose
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-P port_space]
	    tcp or ib
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]
	[-p port_number]
	[-m(igrate)]
	[-a ack_timeout]
goroce options:
	[--dev=IFACE]	network interface of the RoCE device (default: the one holding -b/-s)
	[--timeout=SEC]	give up after this long; a client then retries a refused connection until the timeout
	[--pcap=FILE]	write the frames the devices send and receive to this pcap file (AF_XDP traffic included)
`

// ParseFlags parses cmatose's options; ok is false after a usage error
// (cmatose prints its usage to stdout and exits 1).
func ParseFlags(args []string, stdout, stderr io.Writer) (f Flags, ok bool) {
	f = Flags{Connections: 1, MessageCount: 10, MessageSize: 100, Port: strconv.Itoa(DefaultPort), TOS: -1, AckTimeout: -1}
	opts, pos, err := getopt.Short("s:b:f:P:c:C:S:t:p:a:m", args)
	if err != nil || len(pos) > 0 {
		fmt.Fprint(stdout, usageText)
		return f, false
	}
	for _, o := range opts {
		val := o.Value
		switch o.Name {
		case "s":
			f.Dst = val
		case "b":
			f.Src = val
		case "f":
			f.Format = val
			if !tool.HasPrefixFold(val, "ip") && !tool.HasPrefixFold(val, "gid") && !tool.HasPrefixFold(val, "name") {
				fmt.Fprintf(stderr, "Warning: unknown address format\n")
			}
		case "P":
			f.PortSpace = val
			if !tool.HasPrefixFold(val, "ib") && !tool.HasPrefixFold(val, "tcp") {
				fmt.Fprintf(stderr, "Warning: unknown port space format\n")
			}
		case "c":
			f.Connections = tool.Atoi(val)
		case "C":
			f.MessageCount = tool.Atoi(val)
		case "S":
			f.MessageSize = tool.Atoi(val)
		case "t":
			v, _ := strconv.ParseUint(val, 0, 8)
			f.TOS = int(v)
		case "p":
			f.Port = val
		case "m":
			f.Migrate = true
		case "a":
			v, _ := strconv.ParseUint(val, 0, 8)
			f.AckTimeout = int(v)
		}
	}
	return f, true
}

// Run is ucmatose on a goroce device. It returns the exit code (cmatose's
// return status).
func Run(env tool.Env, args []string) int {
	args, opts, dev, exit, done := tool.CMCommand(env, args, "ucmatose", usageText, tool.ExitUsage)
	if done {
		return exit
	}
	f, ok := ParseFlags(args, env.Stdout, env.Stderr)
	if !ok {
		return tool.ExitUsage
	}
	switch {
	case tool.HasPrefixFold(f.Format, "gid"):
		return unsupported(env, "-f gid (AF_IB addresses)")
	case tool.HasPrefixFold(f.PortSpace, "ib"):
		return unsupported(env, "-P ib (the IB port space)")
	case f.TOS >= 0:
		return unsupported(env, "-t (RDMA_OPTION_ID_TOS)")
	case f.AckTimeout >= 0:
		return unsupported(env, "-a (RDMA_OPTION_ID_ACK_TIMEOUT)")
	case f.Connections < 1:
		return unsupported(env, fmt.Sprintf("-c %d", f.Connections))
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	t := &test{env: env, f: f, ctx: ctx}
	if f.MessageSize <= 0 {
		t.f.MessageCount = 0 // create_message
	}
	if t.f.MessageCount < 0 {
		t.f.MessageCount = 0
	}
	var ret int
	if f.Dst != "" {
		ret = t.runClient(dev)
	} else {
		ret = t.runServer(dev)
	}
	t.printf("test complete\n")
	t.destroyNodes()
	t.printf("return status %d\n", ret)
	return ret & 0xff
}

func unsupported(env tool.Env, what string) int {
	fmt.Fprintf(env.Stderr, "goroce ucmatose: %s is not supported\n", what)
	return tool.ExitUsage
}

// node is struct cmatest_node: one connection.
type node struct {
	id        int
	conn      *cm.Conn
	pd        *qp.PD
	sendCQ    *qp.CQ
	recvCQ    *qp.CQ
	mr        *qp.MR
	mem       []byte
	connected bool
	ownPD     bool // the client's nodes own their PD and CQs
}

type test struct {
	env tool.Env
	f   Flags
	ctx context.Context
	dev *qp.Device

	mu    sync.Mutex
	nodes []*node
	// The server's nodes share the listener's PD and CQs; byQPN finds the
	// node of an accepted connection (the receives are posted in Prepare,
	// before Accept returns it).
	byQPN map[uint32]*node
}

func (t *test) printf(format string, a ...any) { fmt.Fprintf(t.env.Stdout, format, a...) }

func (t *test) cqe() int {
	if t.f.MessageCount > 0 {
		return t.f.MessageCount
	}
	return 1
}

// caps is init_node's QP: message_count (at least 1) WRs each way.
func (t *test) caps() qp.Caps {
	return qp.Caps{MaxSendWR: t.cqe(), MaxRecvWR: t.cqe(), MaxSendSGE: 1, MaxRecvSGE: 1}
}

// createMessage is create_message: one buffer of message_size, LOCAL_WRITE.
func (t *test) createMessage(n *node, pd *qp.PD) error {
	if t.f.MessageCount == 0 {
		return nil
	}
	n.mem = make([]byte, t.f.MessageSize)
	mr, err := pd.RegMR(n.mem, qp.LocalWrite)
	if err != nil {
		t.printf("failed to reg MR\n")
		return err
	}
	n.mr = mr
	return nil
}

// postRecvs is post_recvs: message_count receives into the node's buffer.
func (t *test) postRecvs(n *node, q *qp.QP) error {
	if t.f.MessageCount == 0 {
		return nil
	}
	sge := []qp.SGE{n.mr.SGE(0, t.f.MessageSize)}
	for range t.f.MessageCount {
		if err := q.PostRecv(&qp.RecvWR{WRID: uint64(n.id), SGL: sge}); err != nil {
			t.printf("failed to post receives: %d\n", -1)
			return err
		}
	}
	return nil
}

// postSends is post_sends: message_count SENDs of the node's buffer
// (sq_sig_all: every one signalled).
func (t *test) postSends(n *node) error {
	if !n.connected || t.f.MessageCount == 0 {
		return nil
	}
	sge := []qp.SGE{n.mr.SGE(0, t.f.MessageSize)}
	for range t.f.MessageCount {
		wr := qp.SendWR{WRID: uint64(n.id), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: sge}
		if err := n.conn.QP().PostSend(&wr); err != nil {
			t.printf("failed to post sends: %d\n", -1)
			return err
		}
	}
	return nil
}

// pollCQs is poll_cqs: message_count completions of every connected node
// from its send or receive CQ. Like cmatose it counts completions, not
// their status. The server's nodes share one CQ each way, so there the
// count is per CQ.
func (t *test) pollCQs(recv bool) error {
	seen := map[*qp.CQ]int{}
	var wcs [8]qp.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		cq := n.sendCQ
		if recv {
			cq = n.recvCQ
		}
		seen[cq] += t.f.MessageCount
	}
	for cq, want := range seen {
		for done := 0; done < want; {
			k, err := cq.Wait(t.ctx, wcs[:min(8, want-done)])
			if err != nil {
				t.printf("cmatose: failed polling CQ: %d\n", -1)
				return fmt.Errorf("%w", context.Cause(t.ctx))
			}
			done += k
		}
	}
	return nil
}

// connectError is what cma_handler prints for an error event; its status
// becomes the test's return value.
func (t *test) connectError(err error) int {
	ev, status := tool.CMEvent(err)
	t.printf("cmatose: event: %s, error: %d\n", ev, status)
	return status
}

func (t *test) runServer(dev string) int {
	t.printf("cmatose: starting server\n")
	bind := netip.IPv4Unspecified()
	if t.f.Src != "" {
		a, err := tool.ParseHost(t.f.Src)
		if err != nil {
			t.printf("cmatose: getrdmaaddr error: %v\n", err)
			return -1
		}
		bind = a
	}
	port, err := strconv.ParseUint(t.f.Port, 10, 16)
	if err != nil {
		t.printf("cmatose: getrdmaaddr error: Servname not supported for ai_socktype\n")
		return -1
	}
	d, prog, err := tool.StartCMDevice(t.ctx, t.env, dev, bind)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "No RDMA devices were detected (%v)\n", err)
		return -1
	}
	defer prog.Stop()
	t.dev = d
	// The listener's connections share one PD and a send and a receive CQ
	// large enough for all of them.
	pd := d.AllocPD()
	scq, err := d.CreateCQ(t.cqe() * t.f.Connections)
	if err == nil {
		var rcq *qp.CQ
		if rcq, err = d.CreateCQ(t.cqe() * t.f.Connections); err == nil {
			t.byQPN = map[uint32]*node{}
			return t.serve(d, pd, scq, rcq, netip.AddrPortFrom(bind, uint16(port)))
		}
	}
	t.printf("cmatose: unable to create CQ\n")
	return -1
}

func (t *test) serve(d *qp.Device, pd *qp.PD, scq, rcq *qp.CQ, addr netip.AddrPort) int {
	opts := cm.Options{PD: pd, SendCQ: scq, RecvCQ: rcq, Cap: t.caps(),
		Accept: func(*cm.Request) ([]byte, error) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if len(t.byQPN) >= t.f.Connections {
				t.printf("cmatose: failing connection request\n")
				return nil, cm.Reject(nil)
			}
			return nil, nil
		},
		Prepare: func(q *qp.QP) error {
			t.mu.Lock()
			n := &node{id: len(t.byQPN), pd: pd, sendCQ: scq, recvCQ: rcq}
			t.byQPN[q.QPN()] = n
			t.mu.Unlock()
			if err := t.createMessage(n, pd); err != nil {
				return err
			}
			return t.postRecvs(n, q)
		}}
	l, err := cm.Listen(t.ctx, d, addr.String(), opts)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "cmatose: bind address failed: %v\n", err)
		return -1
	}
	defer l.Close()
	if t.env.Listening != nil {
		t.env.Listening(tool.CMAddr(l.Addr()))
	}
	// connect_events: until every connection is established.
	for len(t.nodes) < t.f.Connections {
		c, err := l.Accept(t.ctx)
		if err != nil {
			if t.ctx.Err() != nil {
				fmt.Fprintf(t.env.Stderr, "cmatose: failure in rdma_get_cm_event in connect events: %v\n", context.Cause(t.ctx))
				return -1
			}
			return t.connectError(err)
		}
		t.mu.Lock()
		n := t.byQPN[c.QP().QPN()]
		t.mu.Unlock()
		if n == nil {
			c.Close()
			continue
		}
		n.conn, n.connected = c, true
		t.nodes = append(t.nodes, n)
	}
	if t.f.MessageCount > 0 {
		t.printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if err := t.postSends(n); err != nil {
				return -1
			}
		}
		t.printf("completing sends\n")
		if t.pollCQs(false) != nil {
			return -1
		}
		t.printf("receiving data transfers\n")
		if t.pollCQs(true) != nil {
			return -1
		}
		t.printf("data transfers complete\n")
	}
	if t.f.Migrate {
		t.printf("migrating to new event channel\n")
	}
	t.printf("cmatose: disconnecting\n")
	// rdma_disconnect on each, then disconnect_events: every DREP (or the
	// peer's own DREQ crossing ours) is a DISCONNECTED event.
	t.closeAll()
	t.printf("disconnected\n")
	return 0
}

// closeAll disconnects every connected node at once.
func (t *test) closeAll() {
	var wg sync.WaitGroup
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		n.connected = false
		wg.Add(1)
		go func(c *cm.Conn) {
			defer wg.Done()
			c.Close()
		}(n.conn)
	}
	wg.Wait()
}

func (t *test) runClient(dev string) int {
	t.printf("cmatose: starting client\n")
	dst, err := tool.ParseHost(t.f.Dst)
	if err != nil {
		t.printf("cmatose: getaddrinfo error: %v\n", err)
		return -1
	}
	var src netip.Addr
	if t.f.Src != "" {
		if src, err = tool.ParseHost(t.f.Src); err != nil {
			t.printf("cmatose: getaddrinfo error: %v\n", err)
			return -1
		}
	}
	port, err := strconv.ParseUint(t.f.Port, 10, 16)
	if err != nil {
		t.printf("cmatose: getaddrinfo error: Servname not supported for ai_socktype\n")
		return -1
	}
	d, prog, err := tool.StartCMDevice(t.ctx, t.env, dev, src, dst)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "No RDMA devices were detected (%v)\n", err)
		return -1
	}
	defer prog.Stop()
	t.dev = d
	t.printf("cmatose: connecting\n")
	// Every connection is resolved and connected at once, as the client's
	// rdma_resolve_addr loop starts them all before waiting for events.
	t.nodes = make([]*node, t.f.Connections)
	errs := make([]error, t.f.Connections)
	var wg sync.WaitGroup
	for i := range t.nodes {
		n := &node{id: i, ownPD: true}
		t.nodes[i] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.connect(n, netip.AddrPortFrom(dst, uint16(port)), src)
		}()
	}
	wg.Wait()
	ret := 0
	for _, err := range errs {
		if err != nil && ret == 0 {
			var setup *setupError
			if errors.As(err, &setup) {
				ret = -1
			} else {
				ret = t.connectError(err)
			}
		}
	}
	if ret == 0 && t.f.MessageCount > 0 {
		t.printf("receiving data transfers\n")
		if t.pollCQs(true) != nil {
			ret = -1
		} else {
			t.printf("sending replies\n")
			for _, n := range t.nodes {
				if err := t.postSends(n); err != nil {
					ret = -1
					break
				}
			}
			if ret == 0 {
				t.printf("data transfers complete\n")
			}
		}
	}
	if ret == 0 && t.f.Migrate {
		t.printf("migrating to new event channel\n")
	}
	// disconnect_events: the server disconnects; each DISCONNECTED event
	// is answered with rdma_disconnect.
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		select {
		case <-n.conn.Done():
		case <-t.ctx.Done():
			fmt.Fprintf(t.env.Stderr, "cmatose: failure in rdma_get_cm_event in disconnect events: %v\n", context.Cause(t.ctx))
			if ret == 0 {
				ret = -1
			}
		}
		n.conn.Close()
		n.connected = false
	}
	return ret
}

// connParam is route_handler's rdma_conn_param: responder resources and
// initiator depth 1, retry count 5, and the RNR retry count cmatose leaves
// at zero.
var connParam = cm.Options{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetry: 0, ZeroRetry: true}

// setupError is a failure before rdma_connect (init_node, post_recvs):
// cmatose prints its own line for those, not an event.
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// connect is route_handler for one node: its PD, CQs, QP and buffer,
// every receive posted, then rdma_connect with responder resources and
// initiator depth 1, retry count 5 and RNR retry 0 (cmatose leaves it
// zero).
func (t *test) connect(n *node, addr netip.AddrPort, src netip.Addr) error {
	n.pd = t.dev.AllocPD()
	var err error
	if n.sendCQ, err = t.dev.CreateCQ(t.cqe()); err == nil {
		n.recvCQ, err = t.dev.CreateCQ(t.cqe())
	}
	if err != nil {
		t.printf("cmatose: unable to create CQ\n")
		return &setupError{err}
	}
	if err := t.createMessage(n, n.pd); err != nil {
		t.printf("cmatose: failed to create messages: %d\n", -1)
		return &setupError{err}
	}
	o := connParam
	o.PD, o.SendCQ, o.RecvCQ, o.Cap = n.pd, n.sendCQ, n.recvCQ, t.caps()
	o.Prepare = func(q *qp.QP) error { return t.postRecvs(n, q) }
	if src.IsValid() {
		o.Local = netip.AddrPortFrom(src, 0)
	}
	c, err := tool.DialRetry(t.ctx, t.dev, addr, o)
	if err != nil {
		return err
	}
	n.conn, n.connected = c, true
	return nil
}

// destroyNodes is destroy_nodes: the QPs went with their connections;
// the buffers and the client's CQs remain.
func (t *test) destroyNodes() {
	for _, n := range t.nodes {
		if n.conn != nil && n.connected {
			n.conn.Close()
		}
		if n.mr != nil {
			n.mr.Deregister()
		}
	}
	if t.dev != nil {
		t.dev.Close()
	}
}
