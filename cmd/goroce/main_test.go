package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// runMain runs goroce with args through the command table, its device
// opener failing the test: none of these runs may open a device.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	env := tool.Env{Stdout: &o, Stderr: &e, Open: func(_ context.Context, name string) (*qp.Device, error) {
		t.Errorf("goroce %q opened device %q", args, name)
		return nil, errors.New("no device in this test")
	}}
	code = run(env, args)
	return code, o.String(), e.String()
}

// TestCommands: every subcommand is in the table once, with a summary
// and an entry point, in the order the usage lists them.
func TestCommands(t *testing.T) {
	seen := map[string]bool{}
	for i, c := range commands {
		if c.name == "" || c.summary == "" || c.run == nil || seen[c.name] {
			t.Errorf("command %d: %+v", i, c)
		}
		if i > 0 && commands[i-1].name > c.name {
			t.Errorf("%s listed after %s", c.name, commands[i-1].name)
		}
		seen[c.name] = true
	}
	for _, name := range []string{"demo", "dump", "pingpong", "ud_pingpong", "write_bw", "read_bw", "send_bw", "atomic_bw",
		"write_lat", "read_lat", "send_lat", "atomic_lat", "rping", "ucmatose", "udaddy"} {
		if !seen[name] {
			t.Errorf("no command %s", name)
		}
	}
	if c, ok := lookup("dump"); !ok || !strings.Contains(c.summary, "RoCEv2") {
		t.Errorf("dump: %+v", c)
	}
}

// TestUsage: no command is an error, -h and help print the usage and
// succeed, an unknown command is an error.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: goroce <command>"},
		{[]string{"-h"}, 0, "usage: goroce <command>"},
		{[]string{"--help"}, 0, "usage: goroce <command>"},
		{[]string{"help"}, 0, "usage: goroce <command>"},
		{[]string{"nosuch"}, 2, `goroce: unknown command "nosuch"`},
		{[]string{"help", "nosuch"}, 2, `goroce help: unknown command "nosuch"`},
		{[]string{"help", "demo", "dump"}, 2, "usage: goroce help [command]"},
	} {
		code, out, errOut := runMain(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("goroce %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.want)
		}
	}
}

// TestHelpCommand: `goroce help CMD` is `goroce CMD -h`: the command's
// own flags, exit 0.
func TestHelpCommand(t *testing.T) {
	for _, c := range []struct{ cmd, want string }{
		{"demo", "-loss"},
		{"dump", "usage: goroce dump"},
		{"pingpong", "--rx-depth"},
		{"ud_pingpong", "ibv_ud_pingpong"},
		{"write_bw", "goroce write_bw [options] <host>"},
	} {
		code, out, errOut := runMain(t, "help", c.cmd)
		if code != 0 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("goroce help %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", c.cmd, code, out, errOut, c.want)
		}
	}
}
