package democmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
)

func runDemo(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(tool.Env{Stdout: &o, Stderr: &e}, args)
	return code, o.String(), e.String()
}

// TestRun runs the demo on the in-memory link, clean and with every kind
// of fault, and checks that each operation reports ok.
func TestRun(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "9"},
		{"-n", "9", "--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--corrupt", "0.02", "--seed", "3"},
		{"-n", "7", "--mtu", "9000"},
		{"-n", "7", "--mtu", "336"},
	} {
		code, out, errOut := runDemo(args...)
		if code != 0 || strings.Count(out, "  ok\n") != 8 || errOut != "" {
			t.Errorf("demo %q: exit %d\n%s%s", args, code, out, errOut)
		}
	}
}

// TestFlagErrors: values the demo cannot run with exit 2 with a message
// naming the flag, before any device exists.
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--loss", "-1"}, "--loss -1: want a probability between 0 and 1"},
		{[]string{"--loss", "1.5"}, "--loss 1.5"},
		{[]string{"--dup", "5"}, "--dup 5: want a probability between 0 and 1"},
		{[]string{"--reorder", "-0.1"}, "--reorder -0.1"},
		{[]string{"--corrupt", "NaN"}, "--corrupt NaN"},
		{[]string{"--mtu", "10"}, "--mtu 10: want a link MTU between 336 and 65535"},
		{[]string{"--mtu", "335"}, "--mtu 335"},
		{[]string{"--mtu", "70000"}, "--mtu 70000"},
		{[]string{"-n", "0"}, "-n 0: want at least one message"},
		{[]string{"-n", "-3"}, "-n -3"},
		{[]string{"--netns", "--link", "udp", "--loss", "2"}, "--loss 2"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		code, out, errOut := runDemo(c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("demo %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// TestHelp: -h lists the flags and succeeds.
func TestHelp(t *testing.T) {
	code, _, errOut := runDemo("-h")
	if code != 0 || !strings.Contains(errOut, "-loss") || !strings.Contains(errOut, "-mtu") {
		t.Errorf("exit %d, %q", code, errOut)
	}
}
