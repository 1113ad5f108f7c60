//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Where a round trip's two processes run. On this 2-vCPU guest a sleeping
// ping-pong whose ends share a vCPU hands over without waking one (the
// sync wake-up of the reader runs it where the writer is about to sleep),
// and one whose ends sit on different vCPUs wakes an idle vCPU at every
// hop: the Go TCP ping-pong cell took 26.4 µs p50 pinned to one CPU and
// 75.2 µs pinned to two (docs/performance.md). Left to the scheduler
// (free) a run lands in either mode, which is what made the Go TCP
// ping-pong bimodal (20 or 55 µs) between runs. The sleeping round trips
// are therefore measured in each placement of -placements, every side
// pinned the same way.
type placement struct {
	name string // free, split, shared
	a, b int    // CPUs of namespace A's process (this one) and B's; -1: the scheduler's choice
}

// suffix is the placement's part of a metric name ("" for free).
func (p placement) suffix() string {
	if p.name == "free" {
		return ""
	}
	return "@" + p.name
}

// describe says where the two ends ran, for the report.
func (p placement) describe() string {
	switch p.name {
	case "split":
		return fmt.Sprintf("A's process on CPU %d, B's on CPU %d", p.a, p.b)
	case "shared":
		return fmt.Sprintf("both processes on CPU %d", p.a)
	}
	return "the scheduler's choice"
}

// placements parses -placements against the CPUs this process may use.
func placements(list string) ([]placement, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for i := 0; i < 1024 && len(cpus) < 2; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	var out []placement
	for _, n := range strings.Split(list, ",") {
		switch n {
		case "free":
			out = append(out, placement{"free", -1, -1})
		case "shared":
			out = append(out, placement{"shared", cpus[0], cpus[0]})
		case "split":
			if len(cpus) < 2 {
				return nil, fmt.Errorf("placement split needs two CPUs, this process may use %d", len(cpus))
			}
			out = append(out, placement{"split", cpus[0], cpus[1]})
		default:
			return nil, fmt.Errorf("unknown placement %q (free, split, shared)", n)
		}
	}
	return out, nil
}

// peerCPU is the CPU startPeer pins its child to (-cpu), -1 for none; set
// by placedRTTs around a cell (cells run one at a time).
var peerCPU = -1

// placedRTTs runs the round trips f measures with this process pinned to
// p.a and the children startPeer starts meanwhile pinned to p.b, then
// unpins.
func placedRTTs(p placement, f func() ([]time.Duration, error)) ([]time.Duration, error) {
	if p.a < 0 {
		return f()
	}
	restore, err := pinProcess(p.a)
	if err != nil {
		return nil, err
	}
	peerCPU = p.b
	defer func() {
		peerCPU = -1
		restore()
	}()
	return f()
}

// pinProcess pins every thread of this process to cpu (threads made later
// inherit it from the thread that makes them), with GOMAXPROCS 1 as the
// runtime would have chosen had the process started so (taskset -c), and
// returns what undoes both.
func pinProcess(cpu int) (restore func(), err error) {
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	one.Set(cpu)
	if err := setAllThreads(&one); err != nil {
		setAllThreads(&old)
		return nil, err
	}
	procs := runtime.GOMAXPROCS(1)
	return func() {
		runtime.GOMAXPROCS(procs)
		setAllThreads(&old)
	}, nil
}

// setAllThreads sets the affinity of every thread of this process, twice
// over the task list so that a thread made during the first pass by a
// thread not yet set is caught by the second.
func setAllThreads(set *unix.CPUSet) error {
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("sched_setaffinity(%d): %w", tid, err)
			}
		}
	}
	return nil
}
