//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysCounter counts this process's system calls of a few kinds, every
// thread's, with perf tracepoint counters (syscalls:sys_enter_*,
// raw_syscalls:sys_enter), one per thread and event: the nvmeof cell
// prints them per I/O beside the link's frames and kicks. A thread
// created after a snapshot is counted from the next one on (snap opens
// counters for the threads it finds); the Go runtime's threads are all
// there once the cell's setup ran. Without tracefs or the permission the
// counter is off (snap returns nil and the cell prints nothing).
type sysCounter struct {
	mu    sync.Mutex
	names []string
	ids   []uint64
	fds   map[int][]int // tid → one fd per event
	off   bool
}

// sysEvents are the calls counted: everything, and the ones that tell
// where a 4 KiB I/O's system calls go (sendto: AF_XDP's kicks; epoll_pwait:
// the Go runtime's network poller, where a sleeping link's reader waits;
// futex: thread wake-ups and sleeps; nanosleep and sched_yield: the
// runtime's spinning).
var sysEvents = []string{"raw_syscalls/sys_enter", "syscalls/sys_enter_sendto", "syscalls/sys_enter_epoll_pwait",
	"syscalls/sys_enter_futex", "syscalls/sys_enter_nanosleep", "syscalls/sys_enter_sched_yield"}

func newSysCounter() *sysCounter {
	c := &sysCounter{fds: map[int][]int{}}
	for _, e := range sysEvents {
		b, err := os.ReadFile("/sys/kernel/tracing/events/" + e + "/id")
		if err != nil {
			b, err = os.ReadFile("/sys/kernel/debug/tracing/events/" + e + "/id")
		}
		if err != nil {
			c.off = true
			return c
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			c.off = true
			return c
		}
		name := e[strings.LastIndexByte(e, '/')+1:]
		name = strings.TrimPrefix(strings.TrimPrefix(name, "sys_enter_"), "sys_")
		if name == "enter" {
			name = "all"
		}
		c.names, c.ids = append(c.names, name), append(c.ids, id)
	}
	return c
}

// sysSnap is the counts at one moment, one per sysEvents entry, and the
// Go scheduler's sampled count of goroutines that stopped running (a
// block, a hand-off or a yield) and ran again (schedCount).
type sysSnap struct {
	n      []uint64
	sched  uint64
	counts bool
}

// snap opens counters for threads not seen yet and reads them all.
func (c *sysCounter) snap() sysSnap {
	s := sysSnap{sched: schedCount()}
	if c == nil || c.off {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return s
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ok := c.fds[tid]; ok {
			continue
		}
		fds := make([]int, 0, len(c.ids))
		for _, id := range c.ids {
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if err != nil {
				for _, f := range fds {
					unix.Close(f)
				}
				fds = nil
				break
			}
			fds = append(fds, fd)
		}
		if fds == nil {
			if len(c.fds) == 0 {
				c.off = true // no permission or no tracepoints: off
				return s
			}
			continue // the thread ended meanwhile
		}
		c.fds[tid] = fds
	}
	s.n, s.counts = make([]uint64, len(c.ids)), true
	var b [8]byte
	for _, fds := range c.fds {
		for i, fd := range fds {
			if n, err := unix.Read(fd, b[:]); err == nil && n == 8 {
				s.n[i] += *(*uint64)(unsafe.Pointer(&b[0]))
			}
		}
	}
	return s
}

func (c *sysCounter) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fds := range c.fds {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	c.fds = map[int][]int{}
}

// perOp formats s−s0 per operation.
func (c *sysCounter) perOp(s, s0 sysSnap, ops int64) string {
	m := float64(max(ops, 1))
	out := fmt.Sprintf("; goroutine switches ~%.2f", float64(s.sched-s0.sched)*gTrackingPeriod/m)
	if !s.counts || !s0.counts || len(s.n) != len(s0.n) {
		return out
	}
	out += "; syscalls"
	for i, name := range c.names {
		out += fmt.Sprintf(" %s %.3f", name, float64(s.n[i]-s0.n[i])/m)
	}
	return out
}

// gTrackingPeriod is the Go runtime's sampling of scheduling latencies:
// one goroutine's transition out of running in 8 is tracked and counted
// in /sched/latencies:seconds when it runs again (runtime2.go).
const gTrackingPeriod = 8

// schedCount is the number of sampled times the Go scheduler started running a
// goroutine that was runnable (the count of /sched/latencies:seconds).
func schedCount() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, b := range s[0].Value.Float64Histogram().Counts {
		n += b
	}
	return n
}
