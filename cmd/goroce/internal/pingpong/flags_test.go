package pingpong

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/qp"
)

func TestParseFlags(t *testing.T) {
	def := DefaultFlags()
	cases := []struct {
		args string
		want func(f *Flags)
	}{
		{"", func(f *Flags) {}},
		// The command lines of the captures (testdata/rxe/rc_pingpong*.log).
		{"-d rxe0 -g 1 -n 50", func(f *Flags) { f.IBDev, f.GIDIndex, f.Iters = "rxe0", 1, 50 }},
		{"-d rxe0 -g 1 -n 50 -s 512 198.18.0.11", func(f *Flags) {
			f.IBDev, f.GIDIndex, f.Iters, f.Size, f.Host = "rxe0", 1, 50, 512, "198.18.0.11"
		}},
		// GNU getopt permutes: the host may come first.
		{"198.18.0.11 -g1 -n50", func(f *Flags) { f.Host, f.GIDIndex, f.Iters = "198.18.0.11", 1, 50 }},
		{"--gid-idx=3 --iters 7 --ib-dev=mlx5_0 --port 9999", func(f *Flags) {
			f.GIDIndex, f.Iters, f.IBDev, f.Port = 3, 7, "mlx5_0", 9999
		}},
		{"--gid 2 --rx 10", func(f *Flags) { f.GIDIndex, f.RxDepth = 2, 10 }}, // unambiguous prefixes
		{"-ec -l 3 -i 2 -m 4096 -r 16", func(f *Flags) {
			f.Events, f.Check, f.SL, f.IBPort, f.MTU, f.RxDepth = true, true, 3, 2, 4096, 16
		}},
		{"-eg1", func(f *Flags) { f.Events, f.GIDIndex = true, 1 }},
		{"-s 0x1000 -n 010", func(f *Flags) { f.Size, f.Iters = 4096, 8 }}, // strtoul base 0
		{"-O -P -t -N", func(f *Flags) {
			f.ODP, f.ImplicitODP, f.Prefetch, f.Timestamps, f.NewSend = true, true, true, true, true
		}},
		{"-j", func(f *Flags) { f.DM = true }},
		{"-- host", func(f *Flags) { f.Host = "host" }},
	}
	for _, c := range cases {
		got, err := ParseFlags(strings.Fields(c.args))
		if err != nil {
			t.Errorf("ParseFlags(%q): %v", c.args, err)
			continue
		}
		want := def
		c.want(&want)
		if got != want {
			t.Errorf("ParseFlags(%q) =\n%+v\nwant\n%+v", c.args, got, want)
		}
	}
	bad := []string{
		"-x", "--nope", "-m 1000", "-m", "-p 70000", "-i 0", "a b", "-P", "-o -j", "-n -1", "-s 0x100000000", "--g 1", "-g", "--port",
	}
	for _, b := range bad {
		if _, err := ParseFlags(strings.Fields(b)); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseFlags(%q) = %v, want ErrUsage", b, err)
		}
	}
}

// TestMTUEnum: the -m sizes map to the IBV_MTU_* values as
// pp_mtu_to_enum does.
func TestMTUEnum(t *testing.T) {
	for bytes, want := range map[int]qp.MTU{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 1500: 0, 0: 0} {
		if got := qp.MTUFromBytes(bytes); got != want {
			t.Errorf("MTUFromBytes(%d) = %d, want %d", bytes, got, want)
		}
	}
}
