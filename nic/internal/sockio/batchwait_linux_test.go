//go:build linux

package sockio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"golang.org/x/sys/unix"
)

// inPoller reports whether any epoll instance of this process has the
// socket fd refers to in its interest list (/proc/self/fdinfo of each
// eventpoll descriptor lists its targets' inode numbers).
func inPoller(t *testing.T, fd int) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(" ino:%x ", st.Ino)
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range fds {
		if l, err := os.Readlink(p); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + filepath.Base(p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if strings.HasPrefix(line, "tfd:") && strings.Contains(line+" ", ino) {
				found = true
			}
		}
	}
	return found
}

func socketPair(t *testing.T) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func recvLook(fd int) func(bufs [][]byte, sizes []int) (int, error) {
	return func(bufs [][]byte, sizes []int) (int, error) {
		n, _, err := unix.Recvfrom(fd, bufs[0], unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		sizes[0] = n
		return 1, nil
	}
}

// TestBatchWaitRegistersLazily: Init leaves the socket out of the runtime
// poller (a link only ever polled must not wake the scheduler's idle
// thread at each readiness edge); the first SetDeadline or Wait puts it
// in, a wait then receives what the peer sends, and Close takes it out.
func TestBatchWaitRegistersLazily(t *testing.T) {
	for _, first := range []string{"SetDeadline", "Wait"} {
		t.Run(first, func(t *testing.T) {
			a, b := socketPair(t)
			var w BatchWait
			closed := false
			if err := w.Init(a, "test", recvLook(a), func() bool { return closed }); err != nil {
				t.Fatal(err)
			}
			if inPoller(t, a) {
				t.Fatal("the socket is in the runtime poller after Init")
			}
			bufs, sizes := [][]byte{make([]byte, 64)}, []int{0}
			switch first {
			case "SetDeadline":
				if err := w.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
			case "Wait":
				if err := w.SetDeadline(time.Now().Add(-time.Second)); err != nil {
					t.Fatal(err)
				}
				if _, _, err := w.Wait(bufs, sizes); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Wait past the deadline: %v", err)
				}
				w.SetDeadline(time.Now().Add(10 * time.Second))
			}
			if !inPoller(t, a) {
				t.Fatalf("the socket is not in the runtime poller after %s", first)
			}
			go func() {
				time.Sleep(10 * time.Millisecond)
				unix.Write(b, []byte("frame"))
			}()
			n, _, err := w.Wait(bufs, sizes)
			if err != nil || n != 1 || string(bufs[0][:sizes[0]]) != "frame" {
				t.Fatalf("Wait: %d frames, %v, %q", n, err, bufs[0][:sizes[0]])
			}
			closed = true
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if inPoller(t, a) {
				t.Fatal("the socket is still in the runtime poller after Close")
			}
		})
	}
}

// TestBatchWaitClosedBeforeUse: a BatchWait closed before any wait never
// registers the socket, and its Wait and SetDeadline report nic.ErrClosed.
func TestBatchWaitClosedBeforeUse(t *testing.T) {
	a, _ := socketPair(t)
	var w BatchWait
	if err := w.Init(a, "test", recvLook(a), func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.SetDeadline(time.Now()); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("SetDeadline after Close: %v", err)
	}
	if _, _, err := w.Wait([][]byte{make([]byte, 8)}, []int{0}); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if inPoller(t, a) {
		t.Fatal("a closed BatchWait registered the socket")
	}
}

// TestBatchWaitInitRefusesUnpollable: a descriptor epoll refuses (a
// regular file) fails at Init, as before the registration was deferred.
func TestBatchWaitInitRefusesUnpollable(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w BatchWait
	if err := w.Init(int(f.Fd()), "file", recvLook(int(f.Fd())), func() bool { return false }); err == nil {
		t.Fatal("Init accepted a regular file")
	}
}
