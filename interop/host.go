//go:build linux

package interop

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// HostProc is a process started with HostStart in the host namespace.
type HostProc struct {
	Cmd    *exec.Cmd
	h      *Harness
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	err    error
	start  time.Time
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// HostStart starts name with args in the host namespace (where a goroce
// endpoint talks to the VMs), collecting its output. The process is killed
// by its PID when the harness closes if it is still running.
func (h *Harness) HostStart(name string, args ...string) (*HostProc, error) {
	p := &HostProc{h: h, done: make(chan struct{}), start: time.Now()}
	p.Cmd = h.HostExec(name, args...)
	p.Cmd.Stdout = syncWriter{&p.mu, &p.stdout}
	p.Cmd.Stderr = syncWriter{&p.mu, &p.stderr}
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("interop: harness closed")
	}
	if err := p.Cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	h.procs = append(h.procs, p)
	return p, nil
}

// Wait waits for the process to end, at most timeout, then kills it
// (Result.Err = ErrTimeout). Result.VM is -1.
func (p *HostProc) Wait(timeout time.Duration) Result {
	var err error
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		err = ErrTimeout
	}
	code := p.Cmd.ProcessState.ExitCode()
	p.mu.Lock()
	defer p.mu.Unlock()
	return Result{VM: -1, Cmd: strings.Join(p.Cmd.Args[4:], " "), Stdout: p.stdout.String(),
		Stderr: p.stderr.String(), ExitCode: code, Err: err, Elapsed: time.Since(p.start)}
}

// Kill sends SIGKILL to the process and waits for it.
func (p *HostProc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Kill()
	<-p.done
}

// Output returns what the process has written so far (stdout, then stderr).
func (p *HostProc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

// HostWaitListen waits until a TCP socket listens on port in the host
// namespace (a goroce server started with HostStart is ready for a VM's
// client), at most timeout. It reads /proc/thread-self/net/tcp{,6} from a
// thread inside the namespace, so it does not connect (the stock tools'
// servers accept exactly one connection).
func (h *Harness) HostWaitListen(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var found bool
		err := h.HostDo(func() error {
			for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
				b, err := os.ReadFile(f)
				if err != nil {
					continue // no IPv6
				}
				if listensOn(string(b), port) {
					found = true
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("interop: nothing listens on TCP port %d in %s after %v", port, h.hostNS, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listensOn reports whether a /proc/net/tcp table has a socket in state
// LISTEN (0A) on local port port.
func listensOn(table string, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}
