//go:build linux

package interop

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// failed collects, for the end of the run, one short line per failure:
// CI shows only the head and the tail of a long run's output, and the
// failing cell's own log lines sit in the middle of it.
var failed struct {
	mu    sync.Mutex
	lines []string
}

// noteFailure records a failure of t for the end-of-run list.
func noteFailure(t testing.TB, format string, a ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, a...))
	if len(msg) > 2000 {
		msg = msg[:1000] + "\n[…]\n" + msg[len(msg)-1000:]
	}
	failed.mu.Lock()
	failed.lines = append(failed.lines, t.Name()+": "+msg)
	failed.mu.Unlock()
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = append([]string{"[…]"}, l[len(l)-n:]...)
	}
	return strings.Join(l, "\n")
}

// noteJob records a failed job's command, status and the tail of its output.
func noteJob(t testing.TB, r Result) {
	if r.OK() {
		return
	}
	status := fmt.Sprintf("exit %d", r.ExitCode)
	if r.Err != nil {
		status = r.Err.Error()
	}
	noteFailure(t, "VM %d $ %s [%s after %.1fs]\n  stdout: %s\n  stderr: %s", r.VM, r.Cmd, status, r.Elapsed.Seconds(),
		strings.ReplaceAll(tailLines(r.Stdout, 12), "\n", "\n    "), strings.ReplaceAll(tailLines(r.Stderr, 12), "\n", "\n    "))
}

func TestMain(m *testing.M) {
	code := m.Run()
	failed.mu.Lock()
	if len(failed.lines) > 0 {
		fmt.Printf("interop: %d failure(s), repeated here from the log above:\n", len(failed.lines))
		for _, l := range failed.lines {
			fmt.Printf("  %s\n", strings.ReplaceAll(l, "\n", "\n    "))
		}
	}
	failed.mu.Unlock()
	os.Exit(code)
}
