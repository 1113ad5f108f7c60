package ucmatosecmd

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// The lines cmatose prints (testdata/rxe/ucmatose.log).
const (
	serverLines = `cmatose: starting server
initiating data transfers
completing sends
receiving data transfers
data transfers complete
cmatose: disconnecting
disconnected
test complete
return status 0
`
	clientLines = `cmatose: starting client
cmatose: connecting
receiving data transfers
sending replies
data transfers complete
test complete
return status 0
`
)

// TestUcmatoseMem runs goroce ucmatose against itself over the in-memory
// link: 4 concurrent connections, 10 messages each way on each.
func TestUcmatoseMem(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"c4", []string{"-c", "4", "-C", "10"}},
		{"one-large", []string{"-S", "5000", "-C", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunCMPair(t, Run, open,
				append([]string{"--dev", "a", "-b", "198.18.0.1"}, c.args...),
				append([]string{"--dev", "b", "-s", "198.18.0.1"}, c.args...))
			if s.Code != 0 || cl.Code != 0 || s.Stdout != serverLines || cl.Stdout != clientLines {
				t.Errorf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", s.Code, s.Stdout, s.Stderr, cl.Code, cl.Stdout, cl.Stderr)
			}
		})
	}
}

func TestUcmatoseFlags(t *testing.T) {
	var out, errb strings.Builder
	f, ok := ParseFlags([]string{"-s", "198.18.0.1", "-c4", "-C", "10", "-S", "64", "-p", "9999", "-f", "ip"}, &out, &errb)
	if !ok || f.Dst != "198.18.0.1" || f.Connections != 4 || f.MessageCount != 10 || f.MessageSize != 64 || f.Port != "9999" {
		t.Errorf("%+v %v", f, ok)
	}
	if _, ok := ParseFlags([]string{"-x"}, &out, &errb); ok || !strings.HasPrefix(out.String(), "usage: ucmatose") {
		t.Errorf("-x: %v %q", ok, out.String())
	}
}
