// Command goroce is goroce's one tool: the demo (two endpoints in one
// process), a RoCEv2 packet dumper, ibv_rc_pingpong- and
// ibv_ud_pingpong-compatible ping-pongs, perftest-compatible benchmarks, and
// librdmacm's rping, cmatose and udaddy over goroce's connection manager.
//
// Each subcommand is a package under internal/ named after it with the
// suffix cmd (democmd, devinfocmd, dumpcmd, pingpongcmd, udpingpongcmd,
// perftestcmd, rpingcmd, ucmatosecmd, udaddycmd), whose Run takes
// a tool.Env: the outputs, the context and the device opener that main
// passes here and tests pass their own of. The protocol and format logic a
// subcommand runs on lives beside it (internal/dump, internal/pingpong,
// internal/perftest).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goroce/goroce/cmd/goroce/internal/democmd"
	"github.com/goroce/goroce/cmd/goroce/internal/devinfocmd"
	"github.com/goroce/goroce/cmd/goroce/internal/dumpcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/mckeycmd"
	"github.com/goroce/goroce/cmd/goroce/internal/nvmecmd"
	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/perftestcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/pingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/probecmd"
	"github.com/goroce/goroce/cmd/goroce/internal/rcopycmd"
	"github.com/goroce/goroce/cmd/goroce/internal/rpingcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/rstreamcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/srqpingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/ucmatosecmd"
	"github.com/goroce/goroce/cmd/goroce/internal/ucpingpongcmd"
	"github.com/goroce/goroce/cmd/goroce/internal/udaddycmd"
	"github.com/goroce/goroce/cmd/goroce/internal/udpingpongcmd"
)

type command struct {
	name    string
	summary string
	run     func(env tool.Env, args []string) int // returns the exit code
}

// commands are goroce's subcommands, in the order the usage lists them.
var commands = []command{
	perftestCommand(perftest.AtomicBW),
	perftestCommand(perftest.AtomicLat),
	{"demo", democmd.Summary, democmd.Run},
	{"devinfo", devinfocmd.Summary, devinfocmd.Run},
	{"dump", dumpcmd.Summary, dumpcmd.Run},
	{"mckey", mckeycmd.Summary, mckeycmd.Run},
	{"nvme", nvmecmd.HostSummary, nvmecmd.RunHost},
	{"nvmet", nvmecmd.TargetSummary, nvmecmd.RunTarget},
	{"pingpong", pingpongcmd.Summary, pingpongcmd.Run},
	{"probe", probecmd.Summary, probecmd.Run},
	{"rcopy", rcopycmd.Summary, rcopycmd.Run},
	perftestCommand(perftest.ReadBW),
	perftestCommand(perftest.ReadLat),
	{"riostream", rstreamcmd.IOSummary, rstreamcmd.RunIO},
	{"rping", rpingcmd.Summary, rpingcmd.Run},
	{"rstream", rstreamcmd.Summary, rstreamcmd.Run},
	perftestCommand(perftest.SendBW),
	perftestCommand(perftest.SendLat),
	{"srq_pingpong", srqpingpongcmd.Summary, srqpingpongcmd.Run},
	{"uc_pingpong", ucpingpongcmd.Summary, ucpingpongcmd.Run},
	{"ucmatose", ucmatosecmd.Summary, ucmatosecmd.Run},
	{"ud_pingpong", udpingpongcmd.Summary, udpingpongcmd.Run},
	{"udaddy", udaddycmd.Summary, udaddycmd.Run},
	{"version", versionSummary, runVersion},
	perftestCommand(perftest.WriteBW),
	perftestCommand(perftest.WriteLat),
}

func perftestCommand(t perftest.Test) command {
	return command{t.String(), perftestcmd.Summary(t), perftestcmd.Command(t)}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: goroce <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'goroce <command> -h' for a command's flags.\n")
}

func main() {
	os.Exit(run(tool.DefaultEnv(), os.Args[1:]))
}

// run runs the command that args name and returns the exit code: 0
// success, 1 failure, 2 a usage error (a missing or unknown command
// included) — tool.ExitOK, ExitFailure, ExitUsage, for every subcommand.
// A subcommand's other status (a C tool's errno or -1, as cmatose
// returns) is a failure: 1. `goroce help CMD` is `goroce CMD -h`.
func run(env tool.Env, args []string) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help":
		usage(env.Stderr)
		return 0
	case "help":
		switch len(args) {
		case 1:
			usage(env.Stderr)
			return 0
		case 2:
			c, ok := lookup(args[1])
			if !ok {
				fmt.Fprintf(env.Stderr, "goroce help: unknown command %q\n\n", args[1])
				usage(env.Stderr)
				return 2
			}
			return c.run(env, []string{"-h"})
		default:
			fmt.Fprintf(env.Stderr, "usage: goroce help [command]\n")
			return 2
		}
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(env.Stderr, "goroce: unknown command %q\n\n", args[0])
		usage(env.Stderr)
		return 2
	}
	switch code := c.run(env, args[1:]); code {
	case tool.ExitOK, tool.ExitFailure, tool.ExitUsage:
		return code
	default:
		return tool.ExitFailure
	}
}
