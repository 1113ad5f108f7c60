//go:build linux

package interop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Endpoint runs one side of a cell: rxe in a VM, or goroce on the host side.
type Endpoint interface {
	Impl() string // "rxe" or "goroce"
	Label() string
	IP() netip.Addr
	// Start starts the tool; an invalid peer makes it a server.
	Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error)
	// WaitListen waits until something listens on TCP port (the server is
	// ready), giving up early when p has ended.
	WaitListen(port int, p Proc, timeout time.Duration) error
}

// Proc is a running tool.
type Proc interface {
	Wait(timeout time.Duration) Result
	Kill()
	Running() bool
	// Interrupt sends SIGINT (to the whole job in a VM).
	Interrupt() error
}

// VMEndpoint is a stock tool in a VM.
type VMEndpoint struct {
	H  *Harness
	VM int
	// AsGoroce labels it "goroce" (the VM↔VM self-test of the runner).
	AsGoroce bool
}

func (e VMEndpoint) Impl() string {
	if e.AsGoroce {
		return "goroce"
	}
	return "rxe"
}

func (e VMEndpoint) Label() string { return fmt.Sprintf("rxe (vm%d %s)", e.VM, e.IP()) }

func (e VMEndpoint) IP() netip.Addr { return e.H.VMIP(e.VM) }

// ShellQuote quotes s for bash when it holds anything but safe characters.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/+%@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (e VMEndpoint) Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error) {
	if tool.CM != nil {
		return e.startCM(tool, args, peer)
	}
	words := append([]string{tool.RXE, tool.GIDFlag, "1"}, args...)
	if peer.IsValid() {
		words = append(words, peer.String())
	}
	for i, w := range words {
		words[i] = ShellQuote(w)
	}
	return vmProc{e.H.Start(e.VM, strings.Join(words, " "))}, nil
}

// cmWords is an rdma_cm tool's command line: the role, the address flag
// with the server's address (its own on the server), the cell's flags,
// and for perftest the GID flag and the positional host.
func cmWords(tool Tool, name string, args []string, self, peer netip.Addr) []string {
	c := tool.CM
	words := []string{name}
	if tool.GIDFlag != "" {
		words = append(words, tool.GIDFlag, "1")
	}
	if peer.IsValid() {
		words = append(words, c.ClientArgs...)
		if c.ClientAddrFlag != "" {
			words = append(words, c.ClientAddrFlag, peer.String())
		}
	} else {
		words = append(words, c.ServerArgs...)
		if c.ServerAddrFlag != "" {
			words = append(words, c.ServerAddrFlag, self.String())
		}
	}
	words = append(words, args...)
	if peer.IsValid() && c.ClientAddrFlag == "" {
		words = append(words, peer.String())
	}
	return words
}

// cmClientRetries bounds the stock client's attempts while the server is
// not listening yet (0.25 s apart).
const cmClientRetries = 60

// startCM starts a stock rdma_cm tool; a client is retried while its
// output says the connection was refused (CMTool.Refused).
func (e VMEndpoint) startCM(tool Tool, args []string, peer netip.Addr) (Proc, error) {
	words := cmWords(tool, tool.RXE, args, e.IP(), peer)
	for i, w := range words {
		words[i] = ShellQuote(w)
	}
	cmd := strings.Join(words, " ")
	if peer.IsValid() {
		// Each attempt's output goes to a file; the last one is shown.
		cmd = fmt.Sprintf("for i in $(seq %d); do %s > /tmp/cm.out 2>&1; rc=$?; "+
			"if [ $rc -eq 0 ] || ! grep -Eq %s /tmp/cm.out; then break; fi; sleep 0.25; done; cat /tmp/cm.out; exit $rc",
			cmClientRetries, cmd, ShellQuote(tool.CM.Refused))
	}
	return vmProc{e.H.Start(e.VM, cmd)}, nil
}

func (e VMEndpoint) WaitListen(port int, p Proc, timeout time.Duration) error {
	return e.H.WaitListen(e.VM, port, timeout)
}

// cmListenWaiter is an endpoint that can tell when its rdma_cm server
// listens.
type cmListenWaiter interface {
	WaitCMListen(tool Tool, timeout time.Duration) error
}

func (e VMEndpoint) WaitCMListen(tool Tool, timeout time.Duration) error {
	return e.H.WaitCMListen(e.VM, tool.RXE, timeout)
}

type vmProc struct{ *Job }

func (p vmProc) Running() bool { return p.Job.Running() }

func (p vmProc) Interrupt() error { return p.Job.Signal("INT") }

// GoroceEndpoint is goroce's tool in the host namespace on HostIface.
type GoroceEndpoint struct {
	H   *Harness
	Bin string
	// Queues, when above 1, runs the goroce tools on that many queues of
	// the host interface (GOROCE_QUEUES; the harness needs
	// Config.HostQueues as many), unless a cell picks a backend other
	// than AF_XDP.
	Queues int
}

func (e GoroceEndpoint) Impl() string { return "goroce" }

func (e GoroceEndpoint) Label() string { return fmt.Sprintf("goroce (%s %s)", e.H.HostIface(), e.IP()) }

func (e GoroceEndpoint) IP() netip.Addr { return e.H.HostIP() }

func (e GoroceEndpoint) Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error) {
	argv := append([]string{e.Bin, tool.Goroce, "-d", e.H.HostIface(), tool.GIDFlag, "1"}, args...)
	if peer.IsValid() {
		argv = append(argv, peer.String())
	}
	if c := tool.CM; c != nil {
		dev := c.DevFlag
		if dev == "" {
			dev = "-d"
		}
		argv = append([]string{e.Bin}, cmWords(tool, tool.Goroce, args, e.IP(), peer)...)
		argv = append(argv[:2], append([]string{dev, e.H.HostIface()}, argv[2:]...)...)
		if peer.IsValid() {
			// Retry a refused connection while the server starts.
			argv = append(argv[:2], append([]string{"--timeout", "120"}, argv[2:]...)...)
		}
	}
	if e.Queues > 1 && !slices.ContainsFunc(env, func(v string) bool {
		return strings.HasPrefix(v, "GOROCE_BACKEND=") && v != "GOROCE_BACKEND=afxdp" && v != "GOROCE_BACKEND=auto"
	}) {
		env = append(env[:len(env):len(env)], "GOROCE_QUEUES="+strconv.Itoa(e.Queues))
	}
	if len(env) > 0 {
		argv = append(append([]string{"env"}, env...), argv...)
	}
	p, err := e.H.HostStart(argv[0], argv[1:]...)
	if err != nil {
		return nil, err
	}
	return hostProc{p}, nil
}

type hostProc struct{ *HostProc }

// Interrupt signals the tool itself: `ip netns exec` and `env` exec it.
func (p hostProc) Interrupt() error { return p.Cmd.Process.Signal(syscall.SIGINT) }

func (p hostProc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// WaitListen polls the host namespace's TCP tables (/proc/thread-self/net
// on a thread inside it) for a listener on port.
func (e GoroceEndpoint) WaitListen(port int, p Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var found bool
		err := e.H.HostDo(func() error {
			var err error
			found, err = tcpListening(port)
			return err
		})
		switch {
		case err != nil:
			return err
		case found:
			return nil
		case !p.Running():
			return fmt.Errorf("interop: goroce server ended before listening on TCP port %d", port)
		case time.Now().After(deadline):
			return fmt.Errorf("interop: nothing listens on TCP port %d in %s after %v", port, e.H.HostNS(), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tcpListening reads the calling thread's namespace's TCP tables.
func tcpListening(port int) (bool, error) {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return false, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				return true, nil
			}
		}
	}
	return false, nil
}
