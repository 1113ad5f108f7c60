package udaddycmd

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// The lines udaddy prints (testdata/rxe/udaddy.log).
const (
	serverLines = `udaddy: starting server
receiving data transfers
sending replies
data transfers complete
test complete
return status 0
`
	clientLines = `udaddy: starting client
udaddy: connecting
initiating data transfers
receiving data transfers
data transfers complete
test complete
return status 0
`
)

// TestUdaddyMem runs goroce udaddy against itself over the in-memory link:
// SIDR through package cm, the datagrams with the sender's QPN as
// immediate, the server's replies over AHs made from the GRHs.
func TestUdaddyMem(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"c3", []string{"-c", "3", "-C", "5", "-S", "1000"}},
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

// TestUdaddyMTU: a datagram larger than the active MTU is refused before
// anything is sent, as verify_test_params does.
func TestUdaddyMTU(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out strings.Builder
	code := Run(tool.Env{Stdout: &out, Stderr: &out, Open: open}, []string{"--dev", "b", "-s", "198.18.0.1", "-S", "5000"})
	if code != 234 || !strings.Contains(out.String(), "udaddy: message_size 5000 is larger than active mtu 1024") ||
		!strings.HasSuffix(out.String(), "return status -22\n") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}
