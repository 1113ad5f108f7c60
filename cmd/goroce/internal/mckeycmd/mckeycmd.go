// Package mckeycmd is the goroce mckey subcommand: librdmacm's mckey
// (rdma-core 44, librdmacm/examples/mckey.c) on a goroce device, its
// groups joined through package cm as rdma_cm joins them on RoCEv2.
//
// The test: each of -c nodes (a UD QP, a CQ of 2 × -C entries, a buffer
// of -S + 40 bytes) joins the group -m; a receiver (the default) posts -C
// receives first and then waits for -C datagrams on every node; a sender
// (-s) waits 3 s after joining ("to give SM chance to configure
// switches"), then sends -C datagrams of -S bytes from every node (SEND
// with immediate: the node's QPN, unsignalled) to the group: QPN
// 0xFFFFFF, Q_Key 0x01234567. The output lines are mckey's.
package mckeycmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// Summary is the command's line in goroce's usage.
const Summary = "mckey-compatible UD multicast test over RDMA CM (librdmacm mckey: receiver by default, -s sender, -m group)"

// Port spaces mckey's -p takes (rdma_cma.h).
const (
	portSpaceIPoIB = 0x0002
	portSpaceUDP   = 0x0111 // RDMA_PS_UDP, the default
	portSpaceIB    = 0x013F
)

// DefaultPause is mckey's sleep(3) between the join and the transfers.
const DefaultPause = 3 * time.Second

// Flags is mckey's command line (getopt "m:M:sb:c:C:S:p:ol").
type Flags struct {
	Dst          string // -m, or -M's MGID with Unmapped
	Unmapped     bool   // -M
	Sender       bool   // -s
	Src          string // -b
	Connections  int    // -c
	MessageCount int    // -C
	MessageSize  int    // -S
	PortSpace    int    // -p
	SendOnly     bool   // -o
	NoLoopback   bool   // -l: the QP does not loop its datagrams back to the device's members
	// Pause is goroce's --pause: the wait after the join (DefaultPause).
	Pause time.Duration
}

const usageText = `usage: mckey
	-m multicast_address
	[-M unmapped_multicast_address]
	 replaces -m and requires -b
	[-s(ender)]
	[-b bind_address]
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]
	[-o join as a send-only full-member]
	[-l join without multicast loopback]
goroce options:
	[--dev=IFACE]	network interface of the RoCE device (default: the one holding -b, else the first up with IPv4)
	[--pause=DUR]	wait this long between the join and the transfers (default 3s, mckey's sleep(3))
	[--timeout=SEC]	give up (exit 1) after this long; a receiver otherwise waits for its datagrams forever, as mckey
	[--pcap=FILE]	write the frames the device sends and receives to this pcap file
`

// ParseFlags parses mckey's options (after goroce's own were taken out);
// ok is false after a usage error (mckey prints its usage to stdout and
// exits 1).
func ParseFlags(args []string, stdout io.Writer) (f Flags, ok bool) {
	f = Flags{Connections: 1, MessageCount: 10, MessageSize: 100, PortSpace: portSpaceUDP, Pause: DefaultPause}
	opts, pos, err := getopt.Short("m:M:sb:c:C:S:p:ol", args)
	if err != nil || len(pos) > 0 {
		fmt.Fprint(stdout, usageText)
		return f, false
	}
	for _, o := range opts {
		val := o.Value
		switch o.Name {
		case "m":
			f.Dst = val
		case "M":
			f.Unmapped, f.Dst = true, val
		case "s":
			f.Sender = true
		case "b":
			f.Src = val
		case "c":
			f.Connections = tool.Atoi(val)
		case "C":
			f.MessageCount = tool.Atoi(val)
		case "S":
			f.MessageSize = tool.Atoi(val)
		case "p":
			v, _ := strconv.ParseInt(val, 0, 64) // strtol(optarg, NULL, 0)
			f.PortSpace = int(v)
		case "o":
			f.SendOnly = true
		case "l":
			f.NoLoopback = true
		}
	}
	return f, true
}

// splitPause takes goroce's --pause=DUR / --pause DUR out of args.
func splitPause(args []string) (rest []string, pause time.Duration, err error) {
	pause = DefaultPause
	for i := 0; i < len(args); i++ {
		a, val := args[i], ""
		switch {
		case a == "--":
			return append(rest, args[i:]...), pause, nil
		case a == "--pause":
			if i+1 == len(args) {
				return nil, 0, errors.New("option --pause requires an argument")
			}
			i++
			val = args[i]
		case strings.HasPrefix(a, "--pause="):
			val = strings.TrimPrefix(a, "--pause=")
		default:
			rest = append(rest, a)
			continue
		}
		if pause, err = time.ParseDuration(val); err != nil || pause < 0 {
			return nil, 0, fmt.Errorf("--pause %q: a duration such as 3s or 100ms", val)
		}
	}
	return rest, pause, nil
}

// Run is mckey on a goroce device. It returns the exit code (mckey's
// return status).
func Run(env tool.Env, args []string) int {
	args, opts, dev, exit, done := tool.CMCommand(env, args, "mckey", usageText, tool.ExitUsage)
	if done {
		return exit
	}
	args, pause, err := splitPause(args)
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce mckey: %v\n", err)
		fmt.Fprint(env.Stdout, usageText)
		return tool.ExitUsage
	}
	f, ok := ParseFlags(args, env.Stdout)
	if !ok {
		return tool.ExitUsage
	}
	f.Pause = pause
	if f.Unmapped && f.Src == "" {
		fmt.Fprintf(env.Stdout, "unmapped multicast address requires binding to source address\n")
		return tool.ExitUsage
	}
	if f.PortSpace != portSpaceUDP && f.PortSpace != portSpaceIB && f.PortSpace != portSpaceIPoIB {
		fmt.Fprintf(env.Stderr, "goroce mckey: port space %#x is not supported (0x111 UDP, 0x13f IB, 0x2 IPoIB)\n", f.PortSpace)
		return tool.ExitUsage
	}
	if f.Connections < 1 {
		fmt.Fprintf(env.Stderr, "goroce mckey: -c %d is not supported\n", f.Connections)
		return tool.ExitUsage
	}
	ctx, cancel := tool.RunContext(env, opts)
	defer cancel()
	t := &test{env: env, f: f, ctx: ctx}
	ret := t.run(dev)
	t.printf("test complete\n")
	t.destroy()
	t.printf("return status %d\n", ret)
	return ret & 0xff
}

// node is struct cmatest_node: one joined UD QP.
type node struct {
	id        int
	m         *cm.Multicast
	mem       []byte
	mr        *qp.MR
	connected bool
}

type test struct {
	env   tool.Env
	f     Flags
	ctx   context.Context
	dev   *qp.Device
	nodes []*node
}

func (t *test) printf(format string, a ...any) { fmt.Fprintf(t.env.Stdout, format, a...) }

// perror is perror(3): the message, ": " and the error's text.
func (t *test) perror(msg string, err error) {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		fmt.Fprintf(t.env.Stderr, "%s: %s\n", msg, strings.ToUpper(errno.Error()[:1])+errno.Error()[1:])
	case errors.Is(err, errors.ErrUnsupported):
		fmt.Fprintf(t.env.Stderr, "%s: Operation not supported\n", msg)
	default:
		fmt.Fprintf(t.env.Stderr, "%s: %v\n", msg, err)
	}
}

// count is what the CQ and QP are sized by (message_count, at least 1).
func (t *test) count() int {
	if t.f.MessageCount > 0 {
		return t.f.MessageCount
	}
	return 1
}

func (t *test) run(dev string) int {
	role := "server"
	if t.f.Sender {
		role = "client"
	}
	t.printf("mckey: starting %s\n", role)
	var src netip.Addr
	if t.f.Src != "" {
		var err error
		if src, err = tool.ParseHost(t.f.Src); err != nil {
			t.printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
			return -2
		}
	}
	var dst netip.Addr
	if t.f.Unmapped {
		// get_dst_addr: an AF_IB address, the MGID as inet_pton reads it.
		dst, _ = netip.ParseAddr(t.f.Dst)
	} else {
		var err error
		if dst, err = tool.ParseHost(t.f.Dst); err != nil {
			t.printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
			return -2
		}
	}
	if t.f.MessageSize <= 0 {
		t.f.MessageCount = 0 // create_message
	}
	t.printf("mckey: joining\n")
	d, prog, err := tool.StartCMDevice(t.ctx, t.env, dev, src)
	if err != nil {
		fmt.Fprintf(t.env.Stderr, "goroce mckey: %v\n", tool.DeviceError(dev, err))
		return -1
	}
	defer prog.Stop()
	t.dev = d
	for i := range t.f.Connections {
		t.nodes = append(t.nodes, &node{id: i})
	}
	for _, n := range t.nodes {
		ret, err := t.join(n, src, dst)
		switch {
		case ret == 0:
			continue
		case errors.Is(err, errBind):
			return ret // rdma_bind_addr failed: run returns at once
		case t.f.Unmapped:
			// addr_handler is called from run itself: its failure is
			// reported again as a resolve failure, and run returns.
			t.perror("mckey: resolve addr failure", err)
			return ret
		}
		// addr_handler ran as the ADDR_RESOLVED event's handler: the event
		// loop stops and run leaves every node's group ("out:"); leaving
		// a group never joined fails (EADDRNOTAVAIL), and that is run's
		// return value.
		return t.leaveAll()
	}
	// "Pause to give SM chance to configure switches."
	select {
	case <-time.After(t.f.Pause):
	case <-t.ctx.Done():
		fmt.Fprintf(t.env.Stderr, "%v\n", context.Cause(t.ctx))
		return -1
	}
	if t.f.MessageCount > 0 {
		if t.f.Sender {
			t.printf("initiating data transfers\n")
			for _, n := range t.nodes {
				if err := t.postSends(n); err != nil {
					return -1
				}
			}
		} else {
			t.printf("receiving data transfers\n")
			prog.Stop()
			if err := t.pollCQs(); err != nil {
				return -1
			}
		}
		t.printf("data transfers complete\n")
	}
	return 0
}

// errBind marks a failed rdma_bind_addr.
var errBind = errors.New("bind")

// join is addr_handler and join_handler: verify_test_params, init_node
// (PD, CQ, QP, message buffer), the receives (a receiver), the join and
// its event line. It returns addr_handler's value and what failed.
func (t *test) join(n *node, src, dst netip.Addr) (int, error) {
	if src.IsValid() {
		if err := checkBind(t.dev, src); err != nil {
			t.perror("mckey: addr bind failure", err)
			return -1, errBind
		}
	}
	if mtu := 128 << int(t.dev.ActiveMTU()); t.f.MessageCount > 0 && t.f.MessageSize > mtu {
		t.printf("mckey: message_size %d is larger than active mtu %d\n", t.f.MessageSize, mtu)
		return -22, syscall.EINVAL
	}
	if t.f.PortSpace == portSpaceIPoIB {
		// rdma_create_qp: the UD QP's Q_Key comes from the IPoIB broadcast
		// group's MCMemberRecord (cma_set_default_qkey), which a RoCE
		// port has no SA to ask for.
		err := errors.New("no IPoIB Q_Key on a RoCE port")
		t.perror("mckey: unable to create QP", err)
		return -1, err
	}
	if t.f.Unmapped {
		// An AF_IB group: cma_iboe_join_multicast refuses every family but
		// AF_INET on RoCEv2 (-ENOTSUPP).
		t.perror("mckey: failure joining", errors.ErrUnsupported)
		return -1, errors.ErrUnsupported
	}
	pd := t.dev.AllocPD()
	c := t.count()
	cq, err := t.dev.CreateCQ(2 * c)
	if err != nil {
		t.printf("mckey: unable to create CQ\n")
		return -12, err
	}
	if t.f.MessageCount > 0 {
		n.mem = make([]byte, t.f.MessageSize+qp.GRHLen)
		if n.mr, err = pd.RegMR(n.mem, qp.LocalWrite); err != nil {
			t.printf("failed to reg MR\n")
			t.printf("mckey: failed to create messages: %d\n", -1)
			return -1, err
		}
	}
	o := cm.Options{PD: pd, SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: c, MaxRecvWR: c, MaxSendSGE: 1, MaxRecvSGE: 1},
		BlockSelfMcastLoopback: t.f.NoLoopback} // -l: rdma_create_qp_ex with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
	if !t.f.Sender && t.f.MessageCount > 0 {
		o.Prepare = func(q *qp.QP) error { // post_recvs
			sge := []qp.SGE{n.mr.SGE(0, len(n.mem))}
			for range t.f.MessageCount {
				if err := q.PostRecv(&qp.RecvWR{WRID: uint64(n.id), SGL: sge}); err != nil {
					t.printf("failed to post receives: %d\n", -1)
					return err
				}
			}
			return nil
		}
	}
	if src.IsValid() {
		o.Local = netip.AddrPortFrom(src, 0)
	}
	flags := cm.JoinFullMember
	if t.f.SendOnly {
		flags = cm.JoinSendOnlyFullMember
	}
	m, err := cm.JoinMulticast(t.ctx, t.dev, dst, o, flags)
	if err != nil {
		t.perror("mckey: failure joining", err)
		return -1, err
	}
	n.m = m
	t.printf("mckey: joined dgid: %s mlid 0x%x sl %d\n", m.MGID(), m.MLID(), 0)
	n.connected = true
	return 0, nil
}

// leaveAll is run's "out:" after a failed join: rdma_leave_multicast for
// every node, which fails (EADDRNOTAVAIL) for those that never joined;
// run returns the last result.
func (t *test) leaveAll() int {
	ret := 0
	for _, n := range t.nodes {
		ret = 0
		if n.m == nil {
			t.perror("mckey: failure leaving", syscall.EADDRNOTAVAIL)
			ret = -1
			continue
		}
		if err := n.m.Leave(); err != nil {
			t.perror("mckey: failure leaving", err)
			ret = -1
		}
		n.m = nil // left
	}
	return ret
}

// checkBind is rdma_bind_addr's check: src must be the device's.
func checkBind(d *qp.Device, src netip.Addr) error {
	if src.IsUnspecified() {
		return nil
	}
	for _, g := range d.GIDs() {
		if g.Unmap() == src.Unmap() {
			return nil
		}
	}
	return syscall.EADDRNOTAVAIL
}

// postSends is post_sends: message_count SEND_WITH_IMM of message_size
// bytes, unsignalled, the immediate the node's QPN, to the group.
func (t *test) postSends(n *node) error {
	if !n.connected || t.f.MessageCount == 0 {
		return nil
	}
	q := n.m.QP()
	sge := []qp.SGE{n.mr.SGE(0, t.f.MessageSize)}
	for range t.f.MessageCount {
		wr := qp.SendWR{WRID: uint64(n.id), Opcode: qp.WRSendWithImm, SGL: sge, Imm: q.QPN(),
			AH: n.m.AH(), RemoteQPN: n.m.RemoteQPN(), RemoteQKey: n.m.RemoteQKey()}
		if err := q.PostSend(&wr); err != nil {
			t.printf("failed to post sends: %d\n", -1)
			return err
		}
	}
	return nil
}

// pollCQs is poll_cqs: message_count completions from every node's CQ,
// whatever their status (mckey counts them without looking).
func (t *test) pollCQs() error {
	var wcs [8]qp.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for done := 0; done < t.f.MessageCount; {
			k, err := n.m.RecvCQ().Wait(t.ctx, wcs[:])
			if err != nil {
				if t.ctx.Err() != nil {
					fmt.Fprintf(t.env.Stderr, "mckey: node %d received %d of %d datagrams: %v\n", n.id, done, t.f.MessageCount, context.Cause(t.ctx))
				} else {
					t.printf("mckey: failed polling CQ: %d\n", -1)
				}
				return err
			}
			done += k
		}
	}
	if t.env.Buffers != nil && len(t.nodes) > 0 && t.nodes[0].mem != nil {
		t.env.Buffers("final", append([]byte(nil), t.nodes[0].mem...))
	}
	return nil
}

// destroy is destroy_nodes, after rdma_leave_multicast for each node.
func (t *test) destroy() {
	for _, n := range t.nodes {
		if n.m != nil {
			if err := n.m.Leave(); err != nil {
				t.perror("mckey: failure leaving", err)
			}
		}
	}
	if t.dev != nil {
		t.dev.Close()
	}
}
