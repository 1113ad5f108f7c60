package pingpong

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// UsageHead and UsageTail are the usage lines of the options every
// example has (Common), before and after the tool's -q/-r/-n lines.
const (
	UsageHead = `  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use the network interface <dev> (default: the first one up with IPv4)
  -i, --ib-port=<port>   use port <port> of IB device (default 1, the only one)
  -s, --size=<size>      size of message to exchange (default 4096)
  -m, --mtu=<size>       path MTU (default 1024)
`
	UsageTail = `  -l, --sl=<sl>          service level value
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (1: the IPv4 GID; required on RoCE)
`
)

// GoroceUsage ends the examples' usage: goroce's own options and the
// environment.
const GoroceUsage = `goroce options:
  --timeout=<seconds>    give up (exit 1) after this long, waiting for the peer included;
                         a client then retries a refused connection until the timeout
  --metrics=<host:port>  serve /metrics (Prometheus) and /debug/vars (expvar) during the run
                         (a host of :PORT or 0.0.0.0 is every interface: warned about)
  --metrics-cmdline      also publish the command line in /debug/vars (left out by default)
  --pcap=<file>          write the frames the device sends and receives to this pcap file
                         (AF_XDP traffic included, which tcpdump on the interface does not see)
Environment: GOROCE_BACKEND=auto|afxdp|afpacket|udp (default auto); GOROCE_BUSYPOLL=1 (device
in busy-poll mode: no goroutine wake-ups, a core burnt per waiting thread); GOROCE_TX_DROP=P
(drop each transmitted frame with probability P, seeded by GOROCE_TX_DROP_SEED); GOROCE_QUEUES=N
(an AF_XDP device on N queues of the interface, QPs spread by UDP source port); GOROCE_VERBOSE=1.
`

// Main is a pingpong example's Run: -h/--help prints usage, goroce's own
// options are split off, parse reads the rest, and a command-line error
// prints "goroce name: error" and the usage on stderr (exit 2).
func Main[F any](env tool.Env, args []string, name, usage string, parse func([]string) (F, error),
	run func(tool.Env, tool.Options, F) int) int {
	if tool.WantsHelp(args) {
		fmt.Fprint(env.Stdout, usage)
		return 0
	}
	args, opts, err := tool.SplitOptions(args)
	if err == nil {
		var f F
		if f, err = parse(args); err == nil {
			return run(env, opts, f)
		}
	}
	fmt.Fprintf(env.Stderr, "goroce %s: %v\n%s", name, err, usage)
	return tool.ExitUsage
}

// Session is what an example runs on: its device (-d), the --metrics
// server for it, and the Progressor that keeps a busy-poll device
// answering outside the traffic loop.
type Session struct {
	Ctx  context.Context
	Env  tool.Env
	Dev  *qp.Device
	prog tool.Progressor
	stop []func()
}

// Open starts a session: the run's context (--timeout), the device named
// (tool.DeviceError when it cannot be opened), --metrics.
func Open(env tool.Env, opts tool.Options, name string) (*Session, error) {
	ctx, cancel := tool.RunContext(env, opts)
	s := &Session{Ctx: ctx, Env: env, stop: []func(){cancel}}
	dev, err := tool.Open(ctx, env, name)
	if err != nil {
		s.Close()
		return nil, tool.DeviceError(name, err)
	}
	s.Dev = dev
	s.stop = append(s.stop, func() { dev.Close() })
	_, stopMetrics := tool.StartMetrics(env, opts, dev)
	s.stop = append(s.stop, stopMetrics)
	s.prog = tool.Progressor{Dev: dev}
	s.prog.Start()
	s.stop = append(s.stop, s.prog.Stop)
	return s, nil
}

// Close ends the session, in the reverse order of Open.
func (s *Session) Close() {
	for i := len(s.stop) - 1; i >= 0; i-- {
		s.stop[i]()
	}
	s.stop = nil
}

// Traffic runs the timed loop and returns how long it took: loop polls
// through a Poller (sleeping on CQ events with -e) whose context ends when
// no completion comes for Env.Idle, and its polls drive a busy-poll device.
func (s *Session) Traffic(events bool, loop func(*tool.Poller) error) (time.Duration, error) {
	tctx, watch := tool.WatchProgress(s.Ctx, s.Env.Idle)
	defer watch.Stop()
	p := &tool.Poller{Ctx: tctx, Events: events, Busy: s.Dev.Mode() == qp.ModeBusyPoll, Watch: watch}
	s.prog.Stop()
	defer s.prog.Start()
	start := time.Now()
	err := loop(p)
	return time.Since(start), err
}
