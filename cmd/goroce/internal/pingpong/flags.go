package pingpong

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/goroce/goroce/cmd/goroce/internal/getopt"
)

// Flags is ibv_rc_pingpong's command line (rc_pingpong.c main, getopt_long
// string "p:d:i:s:m:r:n:l:eg:oOPtcjN"). Host is the optional positional
// server name: empty means "be the server".
type Flags struct {
	Port        int    // -p, --port (18515)
	IBDev       string // -d, --ib-dev (first device)
	IBPort      int    // -i, --ib-port (1)
	Size        uint32 // -s, --size (4096)
	MTU         int    // -m, --mtu path MTU in bytes: 256, 512, 1024, 2048 or 4096 (1024)
	RxDepth     uint32 // -r, --rx-depth receives posted at a time (500)
	Iters       uint32 // -n, --iters (1000)
	SL          int    // -l, --sl service level (0)
	Events      bool   // -e, --events sleep on CQ events instead of polling
	GIDIndex    int    // -g, --gid-idx local GID index (-1: none; required on RoCE)
	ODP         bool   // -o, --odp
	ImplicitODP bool   // -O, --iodp (implies -o)
	Prefetch    bool   // -P, --prefetch (needs -o)
	Timestamps  bool   // -t, --ts
	Check       bool   // -c, --chk validate the received buffer
	DM          bool   // -j, --dm device memory
	NewSend     bool   // -N, --new_send
	Host        string // server to connect to; "" for the server role
}

// DefaultFlags returns the defaults of rc_pingpong.c main.
func DefaultFlags() Flags {
	return Flags{Port: DefaultPort, IBPort: 1, Size: 4096, MTU: 1024, RxDepth: 500, Iters: 1000, GIDIndex: -1}
}

// ErrUsage is wrapped by every ParseFlags error (the tool prints usage and
// exits 1 on these).
var ErrUsage = errors.New("pingpong: usage")

// ParseFlags parses args (without the program name) like ibv_rc_pingpong:
// short options with attached or separate values ("-g1", "-g 1"), clusters
// of switches ("-ec"), the long names ("--gid-idx=1", "--gid-idx 1"),
// numbers in C's strtoul base 0 (decimal, 0x hex, 0 octal), options before
// or after the host, and "--" to end options. Values are checked as the tool
// checks them, and a little more strictly (a bad MTU or a non-number is an
// error here, where C would silently use garbage).
func ParseFlags(args []string) (Flags, error) { return parseFlags(args, DefaultFlags(), false) }

// parseFlags parses the options of rc_pingpong, or with ud those of
// ud_pingpong, which has no -m and none of the ODP, timestamp, DM and
// new-send switches ("p:d:i:s:r:n:l:eg:c").
func parseFlags(args []string, f Flags, ud bool) (Flags, error) {
	name := "ibv_rc_pingpong"
	if ud {
		name = "ibv_ud_pingpong"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var size, rx, iters uint
	size, rx, iters = uint(f.Size), uint(f.RxDepth), uint(f.Iters)
	both := func(short, long string, reg func(name string)) { reg(short); reg(long) }
	both("p", "port", func(n string) { fs.IntVar(&f.Port, n, f.Port, "listen on/connect to port") })
	both("d", "ib-dev", func(n string) { fs.StringVar(&f.IBDev, n, f.IBDev, "IB device") })
	both("i", "ib-port", func(n string) { fs.IntVar(&f.IBPort, n, f.IBPort, "port of the IB device") })
	both("s", "size", func(n string) { fs.UintVar(&size, n, size, "message size") })
	if !ud {
		both("m", "mtu", func(n string) { fs.IntVar(&f.MTU, n, f.MTU, "path MTU") })
	}
	both("r", "rx-depth", func(n string) { fs.UintVar(&rx, n, rx, "receives to post at a time") })
	both("n", "iters", func(n string) { fs.UintVar(&iters, n, iters, "number of exchanges") })
	both("l", "sl", func(n string) { fs.IntVar(&f.SL, n, f.SL, "service level") })
	both("e", "events", func(n string) { fs.BoolVar(&f.Events, n, false, "sleep on CQ events") })
	both("g", "gid-idx", func(n string) { fs.IntVar(&f.GIDIndex, n, f.GIDIndex, "local port GID index") })
	both("c", "chk", func(n string) { fs.BoolVar(&f.Check, n, false, "validate received buffer") })
	if !ud {
		both("o", "odp", func(n string) { fs.BoolVar(&f.ODP, n, false, "on demand paging") })
		both("O", "iodp", func(n string) { fs.BoolVar(&f.ImplicitODP, n, false, "implicit on demand paging") })
		both("P", "prefetch", func(n string) { fs.BoolVar(&f.Prefetch, n, false, "prefetch an ODP MR") })
		both("t", "ts", func(n string) { fs.BoolVar(&f.Timestamps, n, false, "CQE timestamps") })
		both("j", "dm", func(n string) { fs.BoolVar(&f.DM, n, false, "device memory") })
		both("N", "new_send", func(n string) { fs.BoolVar(&f.NewSend, n, false, "new post send WR API") })
	}

	flagArgs, pos, err := getopt.Rewrite(fs, args)
	if err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if err := fs.Parse(flagArgs); err != nil {
		return Flags{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	switch {
	case len(pos) > 1:
		return Flags{}, fmt.Errorf("%w: more than one host: %q", ErrUsage, pos)
	case len(pos) == 1:
		f.Host = pos[0]
	}
	if f.Port < 0 || f.Port > 65535 {
		return Flags{}, fmt.Errorf("%w: port %d out of range", ErrUsage, f.Port)
	}
	if f.IBPort < 1 {
		return Flags{}, fmt.Errorf("%w: IB port %d < 1", ErrUsage, f.IBPort)
	}
	switch f.MTU {
	case 256, 512, 1024, 2048, 4096:
	default:
		return Flags{}, fmt.Errorf("%w: MTU %d is not one of 256, 512, 1024, 2048, 4096", ErrUsage, f.MTU)
	}
	const max32 = 1<<32 - 1
	if size > max32 || rx > max32 || iters > max32 {
		return Flags{}, fmt.Errorf("%w: size, rx-depth or iters above 2^32-1", ErrUsage)
	}
	f.Size, f.RxDepth, f.Iters = uint32(size), uint32(rx), uint32(iters)
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

// MTUEnum is pp_mtu_to_enum: the IBV_MTU_* value of a size in bytes
// (256 → 1 … 4096 → 5), 0 for anything else.
func MTUEnum(bytes int) int {
	switch bytes {
	case 256:
		return 1
	case 512:
		return 2
	case 1024:
		return 3
	case 2048:
		return 4
	case 4096:
		return 5
	}
	return 0
}
