package tool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// This file is what the librdmacm-style tools (rping, ucmatose, udaddy and
// perftest's -R) share: they name the peer by IP address and port instead
// of exchanging QPNs, the device is the one holding the address (as
// rdma_bind_addr / rdma_resolve_addr pick the RDMA device by its netdev),
// and connection failures are reported as the rdma_cm event the C tool
// would have seen.

// Atoi is C's atoi: leading blanks, an optional sign, then as many decimal
// digits as there are; anything else gives what was read so far (0 for no
// digits). The librdmacm examples parse every number with it.
func Atoi(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		if n > math.MaxInt32 {
			n = math.MaxInt32 // int overflow is undefined in C; saturate (and int may be 32 bits)
		}
	}
	if neg {
		n = -n
	}
	return int(int32(n))
}

// SplitDevice removes goroce's --dev=IFACE / --dev IFACE from args: the
// network interface of the RoCE device (the C tools find the RDMA device
// The exit statuses of every goroce subcommand: 0 success, 1 failure, 2 a
// command-line (usage) error. The C tools' own numbers (rping's EINVAL 22,
// devinfo's 4) are not kept: one rule for scripts across the subcommands.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// DeviceError says why the device on interface name could not be opened:
// the C tools' "IB device NAME not found" only when no such interface
// exists, otherwise the reason (a privilege, a busy interface, ...).
func DeviceError(name string, err error) error {
	if name == "" {
		name = "(default)"
	}
	if errors.Is(err, qp.ErrNoInterface) {
		return fmt.Errorf("IB device %s not found: no network interface of that name", name)
	}
	return fmt.Errorf("cannot open IB device %s: %w", name, err)
}

// CMCommand takes the parts of a librdmacm example's command line that are
// goroce's: -h/--help prints usage (done, exit 0), SplitOptions' options
// and --dev are split off; a bad one prints "goroce name: error" and the
// usage (done, exit bad). rest is what the tool's own parser reads.
func CMCommand(env Env, args []string, name, usage string, bad int) (rest []string, opts Options, dev string, exit int, done bool) {
	if WantsHelp(args) {
		fmt.Fprint(env.Stdout, usage)
		return nil, opts, "", 0, true
	}
	rest, opts, err := SplitOptions(args)
	if err == nil {
		rest, dev, err = SplitDevice(rest)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "goroce %s: %v\n", name, err)
		fmt.Fprint(env.Stdout, usage)
		return nil, opts, "", bad, true
	}
	return rest, opts, dev, 0, false
}

// SplitDevice removes --dev=IFACE / --dev IFACE from args: the interface
// an rdma_cm tool runs on (the C tools find their device from the address,
// and so does OpenCMDevice when --dev is not given).
func SplitDevice(args []string) (rest []string, dev string, err error) {
	rest = make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--" {
			return append(rest, args[i:]...), dev, nil
		}
		v, ok, err := cutValue(args, &i, "--dev")
		switch {
		case err != nil:
			return nil, "", err
		case ok:
			dev = v
		default:
			rest = append(rest, args[i])
		}
	}
	return rest, dev, nil
}

// InterfaceFor is the network interface that holds address a, or failing
// that the one whose subnet contains a ("" when none does).
func InterfaceFor(a netip.Addr) string {
	if !a.IsValid() || a.IsUnspecified() {
		return ""
	}
	addrs, _ := upAddrs()
	subnet := ""
	for _, ad := range addrs {
		switch {
		case ad.p.Addr().Unmap() == a.Unmap():
			return ad.name
		case subnet == "" && ad.p.Masked().Contains(a.Unmap()):
			subnet = ad.name
		}
	}
	return subnet
}

// HasPrefixFold is strncasecmp(s, p, strlen(p)) == 0, as the librdmacm
// examples compare their -f and -P words.
func HasPrefixFold(s, p string) bool { return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) }

// StartCMDevice is OpenCMDevice with a Progressor for the device, started
// (it drives a busy-poll device while the tool waits); the caller stops it
// before closing the device.
func StartCMDevice(ctx context.Context, env Env, dev string, addrs ...netip.Addr) (*qp.Device, *Progressor, error) {
	d, err := OpenCMDevice(ctx, env, dev, addrs...)
	if err != nil {
		return nil, nil, err
	}
	prog := &Progressor{Dev: d}
	prog.Start()
	return d, prog, nil
}

// OpenCMDevice opens the device of an rdma_cm tool: the interface --dev
// named, else the one holding (or routing, by subnet) the first of addrs
// that is a concrete address, else env's default.
func OpenCMDevice(ctx context.Context, env Env, dev string, addrs ...netip.Addr) (*qp.Device, error) {
	if dev == "" {
		for _, a := range addrs {
			if dev = InterfaceFor(a); dev != "" {
				break
			}
		}
	}
	return Open(ctx, env, dev)
}

// ParseHost is getaddrinfo for the tools' -a/-s/-b: a numeric IPv4 or IPv6
// address (goroce resolves no names: its tools run where no DNS is asked).
func ParseHost(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if s == "localhost" {
			return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
		}
		return netip.Addr{}, errors.New("Name or service not known")
	}
	return a.Unmap(), nil
}

// CMEvent is the rdma_cm event and status a connection error stands for,
// as librdmacm reports them (event->status): a REJ is
// RDMA_CM_EVENT_REJECTED with the reject reason, no answer is
// RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT, anything else (the address or
// route could not be resolved, the QP could not be moved)
// RDMA_CM_EVENT_ADDR_ERROR or RDMA_CM_EVENT_CONNECT_ERROR.
func CMEvent(err error) (event string, status int) {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		return "RDMA_CM_EVENT_REJECTED", int(rej.Reason)
	case errors.Is(err, cm.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return "RDMA_CM_EVENT_ADDR_ERROR", -int(syscall.EHOSTUNREACH)
	}
	return "RDMA_CM_EVENT_CONNECT_ERROR", -int(syscall.ECONNREFUSED)
}

// DialRetry is cm.Dial. Without a deadline on ctx it tries once, as the C
// tools do; with one (--timeout) a refused connection (nobody listens yet:
// REJ invalid service ID) is retried until the deadline, so that a script
// may start both ends at once.
func DialRetry(ctx context.Context, dev *qp.Device, addr netip.AddrPort, opts cm.Options) (*cm.Conn, error) {
	return RetryRefused(ctx, func() (*cm.Conn, error) { return cm.Dial(ctx, dev, addr.String(), opts) })
}

// RetryRefused calls dial once without a deadline on ctx; with one, again
// every 100 ms while its error is cm.ErrConnRefused, until the deadline.
func RetryRefused[T any](ctx context.Context, dial func() (T, error)) (T, error) {
	_, retry := ctx.Deadline()
	for {
		c, err := dial()
		if err == nil || !retry || !errors.Is(err, cm.ErrConnRefused) {
			return c, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DialUDRetry is cm.DialUD with DialRetry's retries.
func DialUDRetry(ctx context.Context, dev *qp.Device, addr netip.AddrPort, opts cm.Options) (*cm.UDEndpoint, error) {
	_, retry := ctx.Deadline()
	for {
		e, err := cm.DialUD(ctx, dev, addr.String(), opts)
		if err == nil || !retry || !errors.Is(err, cm.ErrConnRefused) {
			return e, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", context.Cause(ctx), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CMAddr is an rdma_cm listener's address as a net.Addr (for
// Env.Listening).
type CMAddr netip.AddrPort

func (a CMAddr) Network() string { return "rdma_cm" }
func (a CMAddr) String() string  { return netip.AddrPort(a).String() }
