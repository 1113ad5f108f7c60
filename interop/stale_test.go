//go:build linux

package interop

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// TestCleanStale: of four namespaces named like harnesses of a dead process,
// each with a process inside, cleanStale deletes only the one whose marker
// says it is of this PID namespace and its owner is dead, and kills the
// process inside it; the one marked by another PID namespace, the one marked
// by this live process and the unmarked one keep their namespace and their
// process. No VM is needed.
func TestCleanStale(t *testing.T) {
	netns.RequireRoot(t)
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Skipf("no PID namespace inode: %v", err)
	}
	markers := t.TempDir()
	dead := 1<<22 + 2000 + os.Getpid() // above the kernel's hard pid_max
	cases := []struct {
		suffix string
		marker string // "" for none, "self" for netns.MarkOwned
		swept  bool
	}{
		{"dead", fmt.Sprintf("%d 1 %d\n", dead, st.Ino), true},
		{"foreign", fmt.Sprintf("%d 1 %d\n", dead, st.Ino+1), false},
		{"live", "self", false},
		{"unmarked", "", false},
	}
	procs := make([]*exec.Cmd, len(cases))
	for i, c := range cases {
		ns := fmt.Sprintf("goroce-ix-%d-%s", dead, c.suffix)
		if err := ip("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		switch c.marker {
		case "":
		case "self":
			if err := netns.MarkOwned(markers, ns); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(filepath.Join(markers, ns), []byte(c.marker), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// ip netns exec execs sleep: the PID is sleep's.
		cmd := exec.Command("ip", "netns", "exec", ns, "sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	// Wait until each process has entered its namespace (ip netns pids lists it).
	for i, c := range cases {
		ns := fmt.Sprintf("goroce-ix-%d-%s", dead, c.suffix)
		for try := 0; ; try++ {
			out, err := exec.Command("ip", "netns", "pids", ns).Output()
			if err != nil {
				t.Fatal(err)
			}
			if string(out) == fmt.Sprintf("%d\n", procs[i].Process.Pid) {
				break
			}
			if try == 1000 {
				t.Fatalf("%s: process %d not inside after %d looks (ip netns pids: %q)", ns, procs[i].Process.Pid, try, out)
			}
		}
	}

	cleanStale(markers, "/run/netns")

	for i, c := range cases {
		ns := fmt.Sprintf("goroce-ix-%d-%s", dead, c.suffix)
		_, err := os.Stat(filepath.Join("/run/netns", ns))
		alive := running(procs[i].Process.Pid)
		if c.swept {
			if !os.IsNotExist(err) {
				t.Errorf("%s: stale namespace not deleted (%v)", ns, err)
			}
			procs[i].Wait() // returns at once if cleanStale killed it, after 30 s if not
			if ws, ok := procs[i].ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("%s: process not killed: %v", ns, procs[i].ProcessState)
			}
			if _, err := os.Stat(filepath.Join(markers, ns)); !os.IsNotExist(err) {
				t.Errorf("%s: marker left (%v)", ns, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: namespace deleted: %v", ns, err)
		}
		if !alive {
			t.Errorf("%s: process %d killed", ns, procs[i].Process.Pid)
		}
	}
}

// running reports whether process pid exists and is not a zombie (a killed
// child stays one until Wait).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
