// Package probecmd is the goroce probe subcommand: its command line, the
// raw link it sends crafted frames on, and exit codes. Package probe holds
// the checks.
package probecmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/probe"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/netaddr"
	"github.com/goroce/goroce/qp"
)

// Summary is the command's line in goroce's usage.
const Summary = "test a peer's RoCEv2 responder with crafted frames (via a perftest server)"

const probeUsage = `usage: goroce probe [flags] HOST

Connects to a perftest server on HOST (ib_write_bw, ib_read_bw or
ib_atomic_bw with -F -x 1, or goroce's own) once per check, learns its QPN,
PSN, rkey and buffer through the usual exchange, and instead of the
client's traffic sends crafted RoCEv2 frames on a raw link (root): a wrong
rkey, an access outside the region or straddling its end, a length that
disagrees with the packets, an oversized READ, a MIDDLE without a FIRST,
a misaligned atomic, a PSN gap and a far-future PSN, a duplicate, a bad
ICRC, a truncated frame, a wrong destination QP. Prints what the peer did
next to what IBTA requires; where the peer does what Linux rxe is known
to do instead (rxe's source says so), the check is a DEVIATION that says
"rxe does X; IBTA requires Y". A stock server exits after one connection: run it in a loop
(while ib_write_bw -F -x 1; do :; done); the probe retries its connection
for 10 s. Checks: ` + "%s" + `.

flags:
`

// Run runs goroce probe with args and returns the exit code: 0 when every
// check passed or showed a known deviation (reported as such), 1 when one
// failed or could not run, 2 for bad flags.
func Run(env tool.Env, args []string) int {
	stdout, stderr := env.Stdout, env.Stderr
	fs := flag.NewFlagSet("goroce probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		iface   = fs.String("d", "", "network interface (default: the first one up with an IPv4 address)")
		port    = fs.Int("p", 18515, "the server's TCP port")
		test    = fs.String("test", "write_bw", "the server's program: write_bw, read_bw or atomic_bw")
		size    = fs.Uint64("s", 0, "the server's -s (default: perftest's)")
		only    = fs.String("checks", "", "comma-separated checks to run (default: all that apply)")
		window  = fs.Duration("window", 200*time.Millisecond, "how long the peer must stay silent where IBTA requires silence (a required answer is awaited up to ten windows)")
		jsonOut = fs.Bool("json", false, "print the results as one JSON object")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, probeUsage, probe.Names())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goroce probe: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() != 1 {
		return bad("give the server's host")
	}
	t, ok := perftest.ParseTest(*test)
	if !ok || (t != perftest.WriteBW && t != perftest.ReadBW && t != perftest.AtomicBW) {
		return bad("--test must be write_bw, read_bw or atomic_bw")
	}
	cfg := probe.Config{Test: t, Size: *size, Window: *window}
	if *only != "" {
		cfg.Checks = strings.Split(*only, ",")
	}
	host := fs.Arg(0)
	ctx, cancel := signal.NotifyContext(env.Context(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	penv, closeEnv, err := probeEnv(ctx, *iface, host, *port)
	if err != nil {
		fmt.Fprintf(stderr, "goroce probe: %v\n", err)
		return 1
	}
	defer closeEnv()
	res, err := probe.Run(ctx, penv, cfg)
	if err != nil && len(res) == 0 {
		fmt.Fprintf(stderr, "goroce probe: %v\n", err)
		return 1
	}
	if *jsonOut {
		b, _ := json.Marshal(struct {
			Host    string         `json:"host"`
			Test    string         `json:"test"`
			Results []probe.Result `json:"results"`
			Summary probe.Summary  `json:"summary"`
		}{host, t.String(), res, probe.Summarize(res)})
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprint(stdout, probe.Text(res))
	}
	if s := probe.Summarize(res); s.Fail+s.Error > 0 || err != nil {
		return 1
	}
	return 0
}

// probeEnv opens the raw link on iface and returns how the probe reaches
// host. The link opening is here alone, so that it follows the device
// opening code wherever that goes.
func probeEnv(ctx context.Context, iface, host string, port int) (*probe.Env, func(), error) {
	if iface == "" {
		var err error
		if iface, err = tool.DefaultInterface(); err != nil {
			return nil, nil, err
		}
	}
	backend := os.Getenv("GOROCE_BACKEND")
	if backend == "" {
		backend = "afpacket" // crafted frames must leave as built (no UDP socket)
	}
	link, info, err := qp.OpenInterfaceLink(ctx, iface, qp.InterfaceOptions{Backend: backend})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", iface, err)
	}
	var l nic.Link = link
	env := &probe.Env{
		Link: l, LocalIP: info.IP, LocalMAC: info.MAC,
		PeerMAC: func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
			return netaddr.ResolveMAC(ctx, iface, ip)
		},
		Dial: func(ctx context.Context) (net.Conn, error) {
			// A stock server restarts between connections: retry.
			deadline := time.Now().Add(10 * time.Second)
			for {
				c, err := perftest.Dial(host, port)
				if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
					return c, err
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
			}
		},
	}
	return env, func() { link.Close() }, nil
}
