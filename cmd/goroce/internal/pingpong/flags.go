package pingpong

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
	"github.com/goroce/goroce/qp"
)

// Common are the options the rdma-core pingpong examples share, with the
// same letters, long names, defaults and checks (rc_pingpong.c and
// srq_pingpong.c), and the positional host: empty means "be the server".
type Common struct {
	Port     int    // -p, --port (18515)
	IBDev    string // -d, --ib-dev (first device)
	IBPort   int    // -i, --ib-port (1)
	Size     uint32 // -s, --size (4096)
	MTU      int    // -m, --mtu path MTU in bytes: 256, 512, 1024, 2048 or 4096 (1024)
	RxDepth  uint32 // -r, --rx-depth receives posted at a time (500)
	Iters    uint32 // -n, --iters (1000)
	SL       int    // -l, --sl service level (0)
	Events   bool   // -e, --events sleep on CQ events instead of polling
	GIDIndex int    // -g, --gid-idx local GID index (-1: none; required on RoCE)
	Host     string // server to connect to; "" for the server role
}

// DefaultCommon returns the examples' defaults.
func DefaultCommon() Common {
	return Common{Port: DefaultPort, IBPort: 1, Size: 4096, MTU: 1024, RxDepth: 500, Iters: 1000, GIDIndex: -1}
}

// Flags is ibv_rc_pingpong's command line (rc_pingpong.c main, getopt_long
// string "p:d:i:s:m:r:n:l:eg:oOPtcjN").
type Flags struct {
	Common
	ODP         bool // -o, --odp
	ImplicitODP bool // -O, --iodp (implies -o)
	Prefetch    bool // -P, --prefetch (needs -o)
	Timestamps  bool // -t, --ts
	Check       bool // -c, --chk validate the received buffer
	DM          bool // -j, --dm device memory
	NewSend     bool // -N, --new_send
	// SRQ is goroce ud_pingpong's --srq (no letter; ibv_ud_pingpong has
	// none): the UD QP takes its receives from a shared receive queue.
	SRQ bool
}

// DefaultFlags returns the defaults of rc_pingpong.c main.
func DefaultFlags() Flags { return Flags{Common: DefaultCommon()} }

// ErrUsage is wrapped by every ParseFlags and ParseCommon error (the tools
// print usage and exit 2 on these). Its text is only "usage": the tools
// print their own "goroce NAME: " prefix.
var ErrUsage = errors.New("usage")

// Both registers an option under its short and its long name.
type Both func(short, long string, reg func(name string))

// ParseCommon parses args (without the program name) like the examples'
// getopt_long loops into c, whose fields hold the defaults: short options
// with attached or separate values ("-g1", "-g 1"), clusters of switches
// ("-ec"), the long names ("--gid-idx=1", "--gid-idx 1") and their
// unambiguous prefixes, numbers in C's strtoul base 0 (decimal, 0x hex, 0
// octal), options before or after the host, and "--" to end options. more
// registers the tool's own options on fs. The common values are checked as
// the tools check them, and a little more strictly (a bad MTU or a
// non-number is an error here, where C would silently use garbage).
func ParseCommon(c *Common, args []string, more func(fs *flag.FlagSet, both Both)) error {
	return parseCommon(c, args, true, more)
}

// parseCommon is ParseCommon, with -m/--mtu only when mtu is set
// (ud_pingpong has none).
func parseCommon(c *Common, args []string, mtu bool, more func(fs *flag.FlagSet, both Both)) error {
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	size, rx, iters := uint(c.Size), uint(c.RxDepth), uint(c.Iters)
	both := func(short, long string, reg func(name string)) { reg(short); reg(long) }
	both("p", "port", func(n string) { fs.IntVar(&c.Port, n, c.Port, "listen on/connect to port") })
	both("d", "ib-dev", func(n string) { fs.StringVar(&c.IBDev, n, c.IBDev, "IB device") })
	both("i", "ib-port", func(n string) { fs.IntVar(&c.IBPort, n, c.IBPort, "port of the IB device") })
	both("s", "size", func(n string) { fs.UintVar(&size, n, size, "message size") })
	if mtu {
		both("m", "mtu", func(n string) { fs.IntVar(&c.MTU, n, c.MTU, "path MTU") })
	}
	both("r", "rx-depth", func(n string) { fs.UintVar(&rx, n, rx, "receives to post at a time") })
	both("n", "iters", func(n string) { fs.UintVar(&iters, n, iters, "number of exchanges") })
	both("l", "sl", func(n string) { fs.IntVar(&c.SL, n, c.SL, "service level") })
	both("e", "events", func(n string) { fs.BoolVar(&c.Events, n, false, "sleep on CQ events") })
	both("g", "gid-idx", func(n string) { fs.IntVar(&c.GIDIndex, n, c.GIDIndex, "local port GID index") })
	if more != nil {
		more(fs, both)
	}

	flagArgs, pos, err := getopt.Rewrite(fs, args)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if err := fs.Parse(flagArgs); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch {
	case len(pos) > 1:
		return fmt.Errorf("%w: more than one host: %q", ErrUsage, pos)
	case len(pos) == 1:
		c.Host = pos[0]
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("%w: port %d out of range", ErrUsage, c.Port)
	}
	if c.IBPort < 1 {
		return fmt.Errorf("%w: IB port %d < 1", ErrUsage, c.IBPort)
	}
	if qp.MTUFromBytes(c.MTU) == 0 { // pp_mtu_to_enum
		return fmt.Errorf("%w: MTU %d is not one of 256, 512, 1024, 2048, 4096", ErrUsage, c.MTU)
	}
	const max32 = 1<<32 - 1
	if size > max32 || rx > max32 || iters > max32 {
		return fmt.Errorf("%w: size, rx-depth or iters above 2^32-1", ErrUsage)
	}
	c.Size, c.RxDepth, c.Iters = uint32(size), uint32(rx), uint32(iters)
	return nil
}

// ParseFlags parses args (without the program name) like ibv_rc_pingpong
// (see ParseCommon), with rc_pingpong's own options and checks.
func ParseFlags(args []string) (Flags, error) {
	f := DefaultFlags()
	err := ParseCommon(&f.Common, args, func(fs *flag.FlagSet, both Both) {
		both("o", "odp", func(n string) { fs.BoolVar(&f.ODP, n, false, "on demand paging") })
		both("O", "iodp", func(n string) { fs.BoolVar(&f.ImplicitODP, n, false, "implicit on demand paging") })
		both("P", "prefetch", func(n string) { fs.BoolVar(&f.Prefetch, n, false, "prefetch an ODP MR") })
		both("t", "ts", func(n string) { fs.BoolVar(&f.Timestamps, n, false, "CQE timestamps") })
		both("c", "chk", func(n string) { fs.BoolVar(&f.Check, n, false, "validate received buffer") })
		both("j", "dm", func(n string) { fs.BoolVar(&f.DM, n, false, "device memory") })
		both("N", "new_send", func(n string) { fs.BoolVar(&f.NewSend, n, false, "new post send WR API") })
	})
	if err != nil {
		return Flags{}, err
	}
	if f.ImplicitODP {
		f.ODP = true
	}
	if f.ODP && f.DM {
		return Flags{}, fmt.Errorf("%w: DM memory region can't be on demand", ErrUsage)
	}
	if !f.ODP && f.Prefetch {
		return Flags{}, fmt.Errorf("%w: prefetch is valid only with on-demand memory region", ErrUsage)
	}
	return f, nil
}
