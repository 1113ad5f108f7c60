// Package udaddycmd is the goroce udaddy subcommand: librdmacm's udaddy
// (rdma-core 44, librdmacm/examples/udaddy.c) on a goroce device, its UD
// endpoints resolved through SIDR by package cm.
//
// The test: the client resolves -c UD services at once (SIDR_REQ in the
// UDP port space, port 7174; the SIDR_REP gives the server's QPN and Q_Key)
// with every receive posted, sends -C datagrams of -S bytes on each
// (SEND with immediate: its own QPN, unsignalled) and waits for as many
// back; the server answers each sender over an address handle made from
// the first datagram's GRH, to the QPN in its immediate. The output lines
// are udaddy's.
package udaddycmd

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
const Summary = "udaddy-compatible UD datagram test over RDMA CM SIDR (librdmacm udaddy: -s server for the client role)"

// Port is udaddy's port: fixed at "7174" (its -p is the port space).
const Port = 7174

// portSpaceUDP is RDMA_PS_UDP, the only port space goroce's cm resolves.
const portSpaceUDP = 0x0111

// Flags is udaddy's command line (getopt "s:b:c:C:S:t:p:P:f:").
type Flags struct {
	Dst, Src     string
	Connections  int
	MessageCount int
	MessageSize  int
	TOS          int // -1 unset
	PortSpace    int // -p (RDMA_PS_UDP), or -P ipoib
	Format       string
}

const usageText = `usage: udaddy
	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-P port_space]
	    udp or ipoib
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]
	[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]
goroce options:
	[--dev=IFACE]	network interface of the RoCE device (default: the one holding -b/-s)
	[--timeout=SEC]	give up after this long; a client then retries a refused resolution until the timeout
	[--pcap=FILE]	write the frames the devices send and receive to this pcap file (AF_XDP traffic included)
`

// ParseFlags parses udaddy's options; ok is false after a usage error
// (udaddy prints its usage to stdout and exits 1).
func ParseFlags(args []string, stdout, stderr io.Writer) (f Flags, ok bool) {
	f = Flags{Connections: 1, MessageCount: 10, MessageSize: 100, TOS: -1, PortSpace: portSpaceUDP}
	opts, pos, err := getopt.Short("s:b:c:C:S:t:p:P:f:", args)
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
			v, _ := strconv.ParseInt(val, 0, 64) // strtol(optarg, NULL, 0)
			f.PortSpace = int(v)
		case "P":
			switch {
			case tool.HasPrefixFold(val, "ipoib"):
				f.PortSpace = 0x0002
			case !tool.HasPrefixFold(val, "udp"):
				fmt.Fprintf(stderr, "Warning: unknown port space format\n")
			}
		case "f":
			f.Format = val
			if !tool.HasPrefixFold(val, "ip") && !tool.HasPrefixFold(val, "gid") && !tool.HasPrefixFold(val, "name") {
				fmt.Fprintf(stderr, "Warning: unknown address format\n")
			}
		}
	}
	return f, true
}

// Run is udaddy on a goroce device. It returns the exit code (udaddy's
// return status).
func Run(env tool.Env, args []string) int {
	args, opts, dev, exit, done := tool.CMCommand(env, args, "udaddy", usageText, tool.ExitUsage)
	if done {
		return exit
	}
	f, ok := ParseFlags(args, env.Stdout, env.Stderr)
	if !ok {
		return tool.ExitUsage
	}
	switch {
	case f.PortSpace != portSpaceUDP:
		return unsupported(env, fmt.Sprintf("port space %#x (only RDMA_PS_UDP)", f.PortSpace))
	case tool.HasPrefixFold(f.Format, "gid"):
		return unsupported(env, "-f gid (AF_IB addresses)")
	case f.TOS >= 0:
		return unsupported(env, "-t (RDMA_OPTION_ID_TOS)")
	case f.Connections < 1:
		return unsupported(env, fmt.Sprintf("-c %d", f.Connections))
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	t := &test{env: env, f: f, ctx: ctx}
	if t.f.MessageSize <= 0 || t.f.MessageCount < 0 {
		t.f.MessageCount = 0 // create_message
	}
	var ret int
	if f.Dst != "" {
		ret = t.runClient(dev)
	} else {
		ret = t.runServer(dev)
	}
	t.printf("test complete\n")
	t.destroy()
	t.printf("return status %d\n", ret)
	return ret & 0xff
}

func unsupported(env tool.Env, what string) int {
	fmt.Fprintf(env.Stderr, "goroce udaddy: %s is not supported\n", what)
	return tool.ExitUsage
}

// node is struct cmatest_node: one resolved UD service (client) or one
// sender being answered (server).
type node struct {
	id        int
	ep        *cm.UDEndpoint // client
	q         *qp.QP
	cq        *qp.CQ
	pd        *qp.PD
	mem       []byte // message_size + 40 per receive slot; sends go from slot 0
	mr        *qp.MR
	ah        *qp.AH
	ownAH     bool
	remoteQPN uint32
	remoteQ   uint32
	connected bool
	sent      int // server: replies posted
}

type test struct {
	env tool.Env
	f   Flags
	ctx context.Context
	dev *qp.Device

	nodes []*node
	l     *cm.UDListener
}

func (t *test) printf(format string, a ...any) { fmt.Fprintf(t.env.Stdout, format, a...) }

func (t *test) count() int {
	if t.f.MessageCount > 0 {
		return t.f.MessageCount
	}
	return 1
}

// slotLen is a receive's length: the message after the 40-byte GRH area.
func (t *test) slotLen() int { return t.f.MessageSize + qp.GRHLen }

// verify is verify_test_params: a datagram must fit the active MTU.
func (t *test) verify() error {
	mtu := 128 << int(t.dev.ActiveMTU())
	if t.f.MessageCount > 0 && t.f.MessageSize > mtu {
		t.printf("udaddy: message_size %d is larger than active mtu %d\n", t.f.MessageSize, mtu)
		return errInvalid
	}
	return nil
}

var errInvalid = errors.New("EINVAL")

// createMessage registers slots receive buffers of message_size + 40.
func (t *test) createMessage(n *node, pd *qp.PD, slots int) error {
	if t.f.MessageCount == 0 {
		return nil
	}
	n.mem = make([]byte, slots*t.slotLen())
	mr, err := pd.RegMR(n.mem, qp.LocalWrite)
	if err != nil {
		t.printf("failed to reg MR\n")
		return err
	}
	n.mr = mr
	return nil
}

// postRecvs posts one receive per slot.
func (t *test) postRecvs(n *node, q *qp.QP, slots int) error {
	if t.f.MessageCount == 0 {
		return nil
	}
	for i := range slots {
		sge := []qp.SGE{n.mr.SGE(i*t.slotLen(), t.slotLen())}
		if err := q.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: sge}); err != nil {
			t.printf("failed to post receives: %d\n", -1)
			return err
		}
	}
	return nil
}

// postSends is post_sends: message_count SEND_WITH_IMM of message_size
// bytes, the immediate our QPN, to the node's AH, QPN and Q_Key.
func (t *test) postSends(n *node, q *qp.QP, signaled bool) error {
	if !n.connected || t.f.MessageCount == 0 {
		return nil
	}
	var flags qp.SendFlags
	if signaled {
		flags = qp.SendSignaled
	}
	sge := []qp.SGE{n.mr.SGE(0, t.f.MessageSize)}
	for range t.f.MessageCount {
		wr := qp.SendWR{WRID: uint64(n.id), Opcode: qp.WRSendWithImm, Flags: flags, SGL: sge, Imm: q.QPN(),
			AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQ}
		if err := q.PostSend(&wr); err != nil {
			t.printf("failed to post sends: %d\n", -1)
			return err
		}
	}
	return nil
}

func (t *test) eventError(err error) int {
	ev, status := tool.CMEvent(err)
	t.printf("udaddy: event: %s, error: %d\n", ev, status)
	return status
}

func (t *test) runClient(dev string) int {
	t.printf("udaddy: starting client\n")
	dst, err := tool.ParseHost(t.f.Dst)
	if err != nil {
		t.printf("udaddy: getaddrinfo error: %v\n", err)
		return -1
	}
	var src netip.Addr
	if t.f.Src != "" {
		if src, err = tool.ParseHost(t.f.Src); err != nil {
			t.printf("udaddy: getaddrinfo error: %v\n", err)
			return -1
		}
	}
	d, prog, err := tool.StartCMDevice(t.ctx, t.env, dev, src, dst)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "No RDMA devices were detected (%v)\n", err)
		return -1
	}
	defer prog.Stop()
	t.dev = d
	t.printf("udaddy: connecting\n")
	t.nodes = make([]*node, t.f.Connections)
	errs := make([]error, t.f.Connections)
	var wg sync.WaitGroup
	for i := range t.nodes {
		n := &node{id: i}
		t.nodes[i] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.resolve(n, netip.AddrPortFrom(dst, Port), src)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if errors.Is(err, errInvalid) {
				return -22
			}
			var se *setupError
			if errors.As(err, &se) {
				return -1
			}
			return t.eventError(err)
		}
	}
	if t.f.MessageCount == 0 {
		return 0
	}
	t.printf("initiating data transfers\n")
	for _, n := range t.nodes {
		if err := t.postSends(n, n.q, false); err != nil {
			return -1
		}
	}
	t.printf("receiving data transfers\n")
	for _, n := range t.nodes {
		if err := t.pollRecvs(n.cq, t.f.MessageCount, nil); err != nil {
			return -1
		}
	}
	t.printf("data transfers complete\n")
	return 0
}

type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }
func (e *setupError) Unwrap() error { return e.err }

// resolve is route_handler and the ESTABLISHED event for one node: its
// PD, CQ (2 × message_count) and buffer, the QP with every receive posted
// (Prepare), the SIDR exchange, then the AH, QPN and Q_Key of the reply.
func (t *test) resolve(n *node, addr netip.AddrPort, src netip.Addr) error {
	if err := t.verify(); err != nil {
		return err
	}
	n.pd = t.dev.AllocPD()
	cq, err := t.dev.CreateCQ(2 * t.count())
	if err != nil {
		t.printf("udaddy: unable to create CQ\n")
		return &setupError{err}
	}
	n.cq = cq
	if err := t.createMessage(n, n.pd, t.count()); err != nil {
		t.printf("udaddy: failed to create messages: %d\n", -1)
		return &setupError{err}
	}
	o := cm.Options{PD: n.pd, SendCQ: cq, RecvCQ: cq,
		Cap:     qp.Caps{MaxSendWR: t.count(), MaxRecvWR: t.count(), MaxSendSGE: 1, MaxRecvSGE: 1},
		Prepare: func(q *qp.QP) error { return t.postRecvs(n, q, t.count()) }}
	if src.IsValid() {
		o.Local = netip.AddrPortFrom(src, 0)
	}
	e, err := tool.DialUDRetry(t.ctx, t.dev, addr, o)
	if err != nil {
		return err
	}
	n.ep, n.q = e, e.QP()
	n.ah, n.remoteQPN, n.remoteQ = e.AH(), e.RemoteQPN(), e.RemoteQKey()
	n.connected = true
	return nil
}

// pollRecvs waits for want completions on cq (udaddy counts completions,
// not their status); each receive is passed to recv.
func (t *test) pollRecvs(cq *qp.CQ, want int, recv func(wc *qp.WC) error) error {
	var wcs [8]qp.WC
	for done := 0; done < want; {
		k, err := cq.Wait(t.ctx, wcs[:min(8, want-done)])
		if err != nil {
			t.printf("udaddy: failed polling CQ: %d\n", -1)
			return err
		}
		for i := range k {
			if recv != nil && wcs[i].Opcode == qp.WCRecv {
				if err := recv(&wcs[i]); err != nil {
					return err
				}
			}
		}
		done += k
	}
	return nil
}

func (t *test) runServer(dev string) int {
	t.printf("udaddy: starting server\n")
	bind := netip.IPv4Unspecified()
	if t.f.Src != "" {
		a, err := tool.ParseHost(t.f.Src)
		if err != nil {
			t.printf("udaddy: getrdmaaddr error: %v\n", err)
			return -1
		}
		bind = a
	}
	d, prog, err := tool.StartCMDevice(t.ctx, t.env, dev, bind)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "No RDMA devices were detected (%v)\n", err)
		return -1
	}
	defer prog.Stop()
	t.dev = d
	if err := t.verify(); err != nil {
		return -22
	}
	// One UD QP answers every SIDR_REQ (cm.ListenUD), with the receives
	// and CQ entries of all the connections udaddy would give a QP each.
	total := t.count() * t.f.Connections
	srv := &node{pd: d.AllocPD()}
	cq, err := d.CreateCQ(2 * total)
	if err != nil {
		t.printf("udaddy: unable to create CQ\n")
		return -1
	}
	srv.cq = cq
	if err := t.createMessage(srv, srv.pd, total); err != nil {
		return -1
	}
	requests := make(chan struct{}, t.f.Connections)
	var mu sync.Mutex
	seen := 0
	o := cm.Options{PD: srv.pd, SendCQ: cq, RecvCQ: cq,
		Cap:     qp.Caps{MaxSendWR: total, MaxRecvWR: total, MaxSendSGE: 1, MaxRecvSGE: 1},
		Prepare: func(q *qp.QP) error { return t.postRecvs(srv, q, total) },
		Accept: func(*cm.Request) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if seen == t.f.Connections {
				t.printf("udaddy: failing connection request\n")
				return nil, cm.Reject(nil)
			}
			seen++
			requests <- struct{}{}
			return nil, nil
		}}
	l, err := cm.ListenUD(t.ctx, d, netip.AddrPortFrom(bind, Port).String(), o)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "udaddy: bind address failed: %v\n", err)
		return -1
	}
	t.l = l
	if t.env.Listening != nil {
		t.env.Listening(tool.CMAddr(l.Addr()))
	}
	// connect_events: until every request has been answered.
	for range t.f.Connections {
		select {
		case <-requests:
		case <-t.ctx.Done():
			fmt.Fprintf(t.env.Stderr, "udaddy: %v\n", context.Cause(t.ctx))
			return -1
		}
	}
	if t.f.MessageCount == 0 {
		return 0
	}
	q := l.QP()
	t.printf("receiving data transfers\n")
	// create_reply_ah: the first datagram of each sender gives its path
	// (the GRH area of its receive slot) and its QPN (the immediate).
	type sender struct {
		qpn uint32
		gid qp.GID
	}
	peers := map[sender]*node{}
	var order []*node
	err = t.pollRecvs(cq, total, func(wc *qp.WC) error {
		slot := srv.mem[int(wc.WRID)*t.slotLen():][:qp.GRHLen]
		attr, err := qp.AHAttrFromWC(wc, slot)
		if err != nil {
			t.printf("udaddy: failed to create reply AH\n")
			return err
		}
		key := sender{wc.SrcQP, attr.GID}
		if peers[key] != nil {
			return nil
		}
		ah, err := srv.pd.CreateAH(t.ctx, attr)
		if err != nil {
			t.printf("udaddy: failed to create reply AH\n")
			return err
		}
		n := &node{id: len(order), q: q, mem: srv.mem, mr: srv.mr, ah: ah, ownAH: true, remoteQPN: wc.Imm,
			remoteQ: l.QKey(), connected: true}
		peers[key] = n
		order = append(order, n)
		return nil
	})
	if err != nil {
		return -1
	}
	t.nodes = order
	t.printf("sending replies\n")
	for _, n := range order {
		if err := t.postSends(n, q, true); err != nil {
			return -1
		}
	}
	if err := t.pollRecvs(cq, len(order)*t.f.MessageCount, nil); err != nil {
		return -1
	}
	t.printf("data transfers complete\n")
	return 0
}

// destroy is destroy_nodes: AHs, endpoints (their QPs), the listener.
func (t *test) destroy() {
	for _, n := range t.nodes {
		if n.ownAH && n.ah != nil {
			n.ah.Destroy()
		}
		if n.ep != nil {
			n.ep.Close()
		}
	}
	if t.l != nil {
		t.l.Close()
	}
	if t.dev != nil {
		t.dev.Close()
	}
}
