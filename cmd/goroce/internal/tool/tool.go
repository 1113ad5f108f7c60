// Package tool is what goroce's subcommands share: the environment a
// subcommand runs in (Env: its outputs, its context and how it opens a
// device), and the pieces the ibv_rc_pingpong- and perftest-compatible
// subcommands have in common: how they wait for completions, how they
// connect to the peer, the QP transitions, and the bounds that keep a dead
// peer from hanging a script.
package tool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// Env is what a subcommand takes from its surroundings. The goroce binary
// runs its commands with DefaultEnv; tests build their own (devices on an
// in-memory link, captured output, the server's port).
type Env struct {
	// Ctx bounds the run; nil means context.Background().
	Ctx            context.Context
	Stdout, Stderr io.Writer
	// Open opens the device that -d names ("" when -d is not given), within ctx.
	Open func(ctx context.Context, name string) (*qp.Device, error)
	// Listening, when set, learns the server's TCP address once it listens
	// (tests pass -p 0 and connect the client to the port it got).
	Listening func(net.Addr)
	// Buffers, when set, sees a copy of the registered buffer after setup
	// ("init") and at the end of a successful run ("final").
	Buffers func(stage string, buf []byte)
	// MetricsListening, when set, learns where --metrics serves (tests
	// pass --metrics 127.0.0.1:0).
	MetricsListening func(net.Addr)
	// Idle bounds how long a traffic phase may go without any completion
	// (or, in write_lat, any arrival) before the run fails; 0 means
	// DefaultIdle.
	Idle time.Duration
}

// Context is e.Ctx, or context.Background() when it is nil.
func (e Env) Context() context.Context {
	if e.Ctx == nil {
		return context.Background()
	}
	return e.Ctx
}

// OpenDevice opens the goroce device of a tool run: the RoCE device bound
// to network interface name (the first usable interface when name is ""),
// with the backend that GOROCE_BACKEND names (auto, afxdp, afpacket or udp;
// default auto), in busy-poll mode when GOROCE_BUSYPOLL is 1 (no device
// goroutines: the tool's polls drive it, a Progressor between them), on
// GOROCE_QUEUES queues of the interface (qp.InterfaceOptions.Queues: a
// multi-queue AF_XDP device; default 1), and losing transmitted frames when
// GOROCE_TX_DROP is set (txdrop.go).
func OpenDevice(ctx context.Context, name string) (*qp.Device, error) {
	if name == "" {
		ifname, err := defaultInterface()
		if err != nil {
			return nil, err
		}
		name = ifname
	}
	backend := os.Getenv("GOROCE_BACKEND")
	if backend == "" {
		backend = qp.BackendAuto
	}
	level := slog.LevelWarn
	if os.Getenv("GOROCE_VERBOSE") != "" {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o := qp.InterfaceOptions{Backend: backend, Logger: logger}
	if os.Getenv("GOROCE_BUSYPOLL") == "1" {
		o.Mode = qp.ModeBusyPoll
	}
	if v := os.Getenv("GOROCE_QUEUES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > qp.MaxQueues {
			return nil, fmt.Errorf("GOROCE_QUEUES=%q: a number of queues from 1 to %d", v, qp.MaxQueues)
		}
		o.Queues = n
	}
	p, seed, err := TxDropFromEnv()
	if err != nil {
		return nil, err
	}
	if p > 0 {
		o.WrapLink = func(l nic.Link) nic.Link { w, _ := WrapTxDrop(l, p, seed, os.Stderr); return w }
	}
	dev, _, err := qp.OpenInterface(ctx, name, o)
	return dev, err
}

// DefaultEnv is the environment of the goroce binary: the process's
// standard outputs and OpenDevice.
func DefaultEnv() Env {
	return Env{Ctx: context.Background(), Stdout: os.Stdout, Stderr: os.Stderr, Open: OpenDevice}
}

// DefaultInterface is the interface a tool uses when -d is not given: the
// first one up with an IPv4 address.
func DefaultInterface() (string, error) { return defaultInterface() }

// defaultInterface is what stands in for "the first RDMA device" of the
// C tools: the first interface that is up, not a loopback, and has an IPv4
// address.
func defaultInterface() (string, error) {
	addrs, err := upAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if a.p.Addr().Is4() {
			return a.name, nil
		}
	}
	return "", errors.New("no network interface is up with an IPv4 address; name one with -d")
}

const (
	// ExchangeTimeout bounds the out-of-band exchange once connected.
	ExchangeTimeout = 30 * time.Second
	// dialTimeout bounds one TCP connection attempt.
	dialTimeout = 10 * time.Second
	// DefaultIdle: perftest's check_alive gives up after 60 s without progress.
	DefaultIdle = 60 * time.Second
)

// keepAlive makes a silent dead peer (host gone, cable pulled) surface as
// a read error within about 25 s instead of never.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}

func tuneConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(keepAlive)
	}
}

// Options are goroce's additions to the tools' command lines. They
// are taken out before the tool's own parser sees the arguments, so that
// the rest is parsed exactly as the C tool parses it.
type Options struct {
	// timeout bounds the whole run, waiting for the peer included; on
	// expiry the tool exits 1. With a timeout, a client whose server is not
	// listening yet retries until the timeout instead of failing at once.
	Timeout time.Duration
	// Metrics is the address --metrics ADDR serves the device's counters
	// on for the duration of the run (StartMetrics).
	Metrics string
	// MetricsCmdline (--metrics-cmdline) adds expvar's "cmdline", the
	// process's arguments, to /debug/vars; without it they are left out.
	MetricsCmdline bool
	// Pcap is the file --pcap FILE records the run's devices' frames in
	// (RunContext, Open; pcap.go).
	Pcap string
}

// WantsHelp reports whether args ask for the usage (-h, --help, before
// any "--").
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--help":
			return true
		}
	}
	return false
}

// SplitOptions removes goroce's own options from args: --timeout=DUR /
// --timeout DUR (seconds, or a Go duration such as 1m30s),
// --metrics=ADDR / --metrics ADDR, --metrics-cmdline and --pcap=FILE /
// --pcap FILE.
func SplitOptions(args []string) ([]string, Options, error) {
	var o Options
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if a == "--metrics-cmdline" {
			o.MetricsCmdline = true
			continue
		}
		if v, ok, err := cutValue(args, &i, "--pcap"); ok {
			if err == nil && v == "" {
				err = errors.New("option --pcap requires a file name")
			}
			if err != nil {
				return nil, o, err
			}
			o.Pcap = v
			continue
		}
		if v, ok, err := cutValue(args, &i, "--metrics"); ok {
			if err != nil {
				return nil, o, err
			}
			if _, _, err := net.SplitHostPort(v); err != nil {
				return nil, o, fmt.Errorf("--metrics %q: want host:port: %w", v, err)
			}
			o.Metrics = v
			continue
		}
		v, ok, err := cutValue(args, &i, "--timeout")
		switch {
		case !ok:
			rest = append(rest, a)
			continue
		case err != nil:
			return nil, o, err
		}
		d, err := parseSeconds(v)
		if err != nil {
			return nil, o, fmt.Errorf("--timeout %q: %w", v, err)
		}
		o.Timeout = d
	}
	return rest, o, nil
}

// cutValue reports whether args[*i] is the option name with a value,
// "name=V" or "name V" (then *i moves past V), and returns V; the error
// is for a name with nothing after it.
func cutValue(args []string, i *int, name string) (v string, ok bool, err error) {
	if v, ok := strings.CutPrefix(args[*i], name+"="); ok {
		return v, true, nil
	}
	if args[*i] != name {
		return "", false, nil
	}
	if *i+1 == len(args) {
		return "", true, fmt.Errorf("option %s requires an argument", name)
	}
	*i++
	return args[*i], true, nil
}

// ifAddr is one address of a network interface.
type ifAddr struct {
	name string
	p    netip.Prefix
}

// upAddrs returns the addresses of the interfaces that are up and not
// loopbacks, in the system's order.
func upAddrs() ([]ifAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []ifAddr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out = append(out, ifAddr{ifc.Name, p})
			}
		}
	}
	return out, nil
}

func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > 1e9 {
			return 0, errors.New("out of range")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("negative")
	}
	return d, err
}

// RunContext derives the run's context from env and the options; the
// cancel function must be called. With --pcap the context carries the
// capture that Open attaches each device to, and cancel flushes and closes
// the file (a failed capture is reported on env.Stderr).
func RunContext(env Env, o Options) (context.Context, context.CancelFunc) {
	ctx := env.Context()
	var stop func()
	if o.Pcap != "" {
		c := &capture{path: o.Pcap}
		ctx = context.WithValue(ctx, captureKey{}, c)
		stop = func() {
			if err := c.close(); err != nil {
				fmt.Fprintf(env.Stderr, "goroce: %v\n", err)
			}
		}
	}
	var cancel context.CancelFunc
	if o.Timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, fmt.Errorf("timed out after %v (--timeout)", o.Timeout))
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	if stop == nil {
		return ctx, cancel
	}
	return ctx, func() { cancel(); stop() }
}

// AcceptOne accepts a single connection on ln and closes ln, giving up when
// ctx ends.
func AcceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	tuneConn(c)
	return c, nil
}

// DialPeer connects to host:port. Without a deadline on ctx it tries once,
// as the C tools do; with one (--timeout) a refused connection is retried
// until the deadline, so that a script may start both ends at once.
func DialPeer(ctx context.Context, network, host string, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAliveConfig: keepAlive}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	deadline, retry := ctx.Deadline()
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return c, nil
		}
		if retry && ctx.Err() == nil && !time.Now().Before(deadline) {
			// The dialer's socket deadline (ctx's) can fire just before
			// ctx's own timer marks it done: wait for that, so that the
			// error says the deadline ended the attempt.
			<-ctx.Done()
		}
		if retry && ctx.Err() != nil {
			// The deadline ended the attempt (an i/o timeout): say so.
			return nil, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		}
		if !retry || !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WithExchangeDeadline bounds an exchange on c by ExchangeTimeout and by
// ctx; the returned function lifts both.
func WithExchangeDeadline(ctx context.Context, c net.Conn) func() {
	c.SetDeadline(time.Now().Add(ExchangeTimeout))
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		c.SetDeadline(time.Time{})
	}
}

// RandomPSN is lrand48() & 0xffffff.
func RandomPSN() uint32 { return rand.Uint32() & 0xffffff }

// ProgressWatch cancels a context when a counter of completions stops
// moving for idle: a traffic phase whose peer died (or never sends) fails
// instead of spinning forever, as perftest's check_alive does.
type ProgressWatch struct {
	n      atomic.Uint64
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func WatchProgress(ctx context.Context, idle time.Duration) (context.Context, *ProgressWatch) {
	if idle <= 0 {
		idle = DefaultIdle
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &ProgressWatch{cancel: cancel, done: make(chan struct{})}
	tick := max(idle/8, time.Millisecond)
	go func() {
		defer close(w.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := w.n.Load(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				if n := w.n.Load(); n != last {
					last, since = n, now
				} else if now.Sub(since) >= idle {
					cancel(fmt.Errorf("no progress for %v: is the peer still running?", idle))
					return
				}
			}
		}
	}()
	return ctx, w
}

func (w *ProgressWatch) Tick() { w.n.Add(1) }

func (w *ProgressWatch) Stop() {
	w.cancel(nil)
	<-w.done
}

// Poller waits for completions, for one goroutine: polling (the tools' default) or CQ events
// (-e). The C tools spin on ibv_poll_cq; here the device's receive and
// timer goroutines must run for a completion to appear at all, so a
// spinning Poller with a single P yields it between empty polls (with
// more it just spins) and, after spinPolls of them, sleeps on the CQ like -e (on a busy-poll device
// CQ.Wait spins and drives the device itself). On a machine with cores to
// spare a completion is caught while spinning; on a loaded one the waiter
// stops competing with the goroutines that produce it.
//
// On a busy-poll device (Busy) the polls themselves yield the OS thread
// every fourth empty look, and the Poller lets other goroutines run only
// every busyGosched looks: a runtime.Gosched at each look wakes an idle P's
// thread each time (futex), which then takes CPU from the peer and the
// kernel (qp/busypoll.go has the measurements).
type Poller struct {
	Ctx    context.Context
	Events bool           // sleep on CQ events (-e) instead of polling
	Busy   bool           // the device is in busy-poll mode (qp.ModeBusyPoll)
	Watch  *ProgressWatch // learns of every completion
	procs  int            // GOMAXPROCS, read at the first empty look
}

// busyGosched is how many empty looks a Poller on a busy-poll device makes
// between two runtime.Gosched calls.
const busyGosched = 64

// giveWay lets other goroutines run after the spins-th empty look. With a
// processor to spare (GOMAXPROCS > 1) a sleeping-mode Poller only spins:
// the goroutines that produce completions (the driver reading the link
// once the last waiter left it) run on another P, and each Gosched with an
// idle P woke a thread for nothing (bench's bw cell, which had the same
// loop: 64 B WRITE 1.60 -> 1.40 µs of CPU per message, docs/performance.md,
// "2026-12-08: the 64 B rate"). With one P it must yield, or they would
// not run until the Poller sleeps.
func (p *Poller) giveWay(spins int) {
	if p.procs == 0 {
		p.procs = runtime.GOMAXPROCS(0)
	}
	switch {
	case p.Busy:
		if spins%busyGosched == 0 {
			runtime.Gosched()
		}
	case p.procs <= 1:
		runtime.Gosched()
	}
}

// spinPolls is how many empty polls a polling waiter makes before it
// sleeps on the CQ.
const spinPolls = 64

// Poll returns at least one completion, or the reason it could not.
func (p *Poller) Poll(cq *qp.CQ, wcs []qp.WC) (int, error) {
	if p.Events {
		n, err := cq.Wait(p.Ctx, wcs)
		if err != nil && p.Ctx.Err() != nil {
			return 0, context.Cause(p.Ctx)
		}
		if n > 0 {
			p.Watch.Tick()
		}
		return n, err
	}
	for spins := 1; spins <= spinPolls; spins++ {
		n, err := cq.Poll(wcs)
		if n > 0 || err != nil {
			if n > 0 {
				p.Watch.Tick()
			}
			return n, err
		}
		p.giveWay(spins)
	}
	if p.Ctx.Err() != nil {
		return 0, context.Cause(p.Ctx)
	}
	n, err := cq.Wait(p.Ctx, wcs)
	if err != nil && p.Ctx.Err() != nil {
		return 0, context.Cause(p.Ctx)
	}
	if n > 0 {
		p.Watch.Tick()
	}
	return n, err
}

// TryPoll polls once, without waiting.
func (p *Poller) TryPoll(cq *qp.CQ, wcs []qp.WC) (int, error) {
	n, err := cq.Poll(wcs)
	if n > 0 {
		p.Watch.Tick()
	}
	return n, err
}

// IdleWait is called when a loop found nothing to do: it yields, and
// reports the context's end.
func (p *Poller) IdleWait(spins int) error {
	if spins%64 == 0 && p.Ctx.Err() != nil {
		return context.Cause(p.Ctx)
	}
	p.giveWay(spins)
	return nil
}

// Progressor keeps a busy-poll device (qp.ModeBusyPoll, which runs no
// goroutine of its own) answering its peer while the tool is not polling
// it: during the exchanges, on a perftest server that is only an RDMA
// target, between phases. The traffic loops stop it and drive the device
// through their own CQ polls. On a normal device it does nothing.
type Progressor struct {
	Dev    *qp.Device
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *Progressor) Start() {
	if p.Dev == nil || p.Dev.Mode() != qp.ModeBusyPoll || p.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		p.Dev.Progress(ctx)
	}()
}

func (p *Progressor) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
	p.cancel = nil
}

// ModifyToInit is the RESET→INIT transition both tools make right after
// creating the QP (pp_init_ctx, ctx_modify_qp_to_init).
func ModifyToInit(ctx context.Context, q *qp.QP, port int, access qp.Access) error {
	return q.Modify(ctx, qp.Attr{State: qp.StateInit, PKeyIndex: 0, Port: uint8(port), AccessFlags: access},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags)
}

// ConnectAttrs are the values of the INIT→RTR→RTS transitions that differ
// between the tools (PROTOCOL.md §4).
type ConnectAttrs struct {
	MTU             qp.MTU
	DestQPN         uint32
	RQPSN, SQPSN    uint32
	DGID            [16]byte
	Global          bool // is_global: rc_pingpong sets it only for a GID with a non-zero interface id
	SGIDIndex       int
	HopLimit        uint8
	TrafficClass    uint8 // GRH traffic class: the IP TOS byte (DSCP and ECN) of every packet
	SL              uint8
	MaxDestRdAtomic uint8
	MaxRdAtomic     uint8
	Timeout         uint8
}

// ErrRTR and ErrRTS say which transition failed.
var (
	ErrRTR = errors.New("Failed to modify QP to RTR")
	ErrRTS = errors.New("Failed to modify QP to RTS")
)

func ModifyToRTS(ctx context.Context, q *qp.QP, a ConnectAttrs) error {
	attr := qp.Attr{State: qp.StateRTR, PathMTU: a.MTU, DestQPN: a.DestQPN, RQPSN: wire.PSN(a.RQPSN),
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: 12, AV: qp.AV{SL: a.SL}}
	mask := qp.AttrState | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN |
		qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	uc := q.Type() == qp.QPTypeUC
	if uc {
		// uc_pingpong's pp_connect_ctx and perftest's
		// ctx_modify_qp_to_rtr/rts with -c UC: no READ depths, RNR timer,
		// ACK timeout or retry counts.
		mask &^= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	}
	if a.Global {
		if a.SGIDIndex < 0 || a.SGIDIndex > 255 {
			return fmt.Errorf("%w: GID index %d", ErrRTR, a.SGIDIndex)
		}
		attr.AV.DGID = netip.AddrFrom16(a.DGID)
		attr.AV.SGIDIndex = uint8(a.SGIDIndex)
		attr.AV.HopLimit = a.HopLimit
		attr.AV.TrafficClass = a.TrafficClass
		mask |= qp.AttrAV
	} else {
		// On Ethernet the AV must carry a GRH; without one rxe refuses the
		// transition (PROTOCOL.md §4), and so do we.
		return fmt.Errorf("%w: the peer sent no GID (RoCE needs -g/-x on both sides)", ErrRTR)
	}
	if err := q.Modify(ctx, attr, mask); err != nil {
		return fmt.Errorf("%w: %w", ErrRTR, err)
	}
	attr = qp.Attr{State: qp.StateRTS, Timeout: a.Timeout, RetryCnt: 7, RNRRetry: 7, SQPSN: wire.PSN(a.SQPSN),
		MaxRdAtomic: a.MaxRdAtomic}
	mask = qp.AttrState | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrSQPSN | qp.AttrMaxQPRdAtomic
	if uc {
		mask = qp.AttrState | qp.AttrSQPSN
	}
	if err := q.Modify(ctx, attr, mask); err != nil {
		return fmt.Errorf("%w: %w", ErrRTS, err)
	}
	return nil
}

// GIDBytes is a GID as the 16 bytes the exchanges carry.
func GIDBytes(g qp.GID) [16]byte { return g.As16() }
