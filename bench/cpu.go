//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of /proc/stat's counters (USER_HZ, 100 on every
// Linux architecture Go supports).
const userHZ = 100

// cpuTimes is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	user, nice, system, idle, iowait, irq, softirq, steal uint64
}

// busy is the time some CPU was doing work: everything but idle and iowait.
// guest and guest_nice are already inside user and nice.
func (c cpuTimes) busy() uint64 {
	return c.user + c.nice + c.system + c.irq + c.softirq + c.steal
}

// parseProcStat reads the aggregate cpu line of a /proc/stat text.
func parseProcStat(text string) (cpuTimes, error) {
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return cpuTimes{}, fmt.Errorf("/proc/stat: short cpu line %q", line)
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: field %d of the cpu line: %w", i+1, err)
			}
			v[i] = n
		}
		return cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, nil
	}
	return cpuTimes{}, errors.New("/proc/stat: no aggregate cpu line")
}

// cpuMark is a point in time for the CPU accounting of a cell: the
// whole machine's busy ticks and this process's user+system time.
type cpuMark struct {
	machine cpuTimes
	proc    time.Duration
	csw     int64 // this process's context switches, voluntary + involuntary
	wall    time.Time
	err     error
}

func markCPU() cpuMark {
	m := cpuMark{wall: time.Now()}
	m.proc, m.csw = procCPU()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		m.err = err
		return m
	}
	m.machine, m.err = parseProcStat(string(b))
	return m
}

// cpuUse is what a cell cost between two marks.
type cpuUse struct {
	machine float64 // whole-machine busy CPU-seconds
	proc    float64 // this process's CPU-seconds (user + system)
	csw     int64   // this process's context switches (getrusage nvcsw + nivcsw)
	wall    float64 // seconds
}

func (m cpuMark) since(start cpuMark) (cpuUse, error) {
	if m.err != nil {
		return cpuUse{}, m.err
	}
	if start.err != nil {
		return cpuUse{}, start.err
	}
	return cpuUse{
		machine: float64(m.machine.busy()-start.machine.busy()) / userHZ,
		proc:    (m.proc - start.proc).Seconds(),
		csw:     m.csw - start.csw,
		wall:    m.wall.Sub(start.wall).Seconds(),
	}, nil
}

// procCPU is this process's user + system CPU time and its context
// switches, voluntary and involuntary (getrusage RUSAGE_SELF).
func procCPU() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Nvcsw) + int64(ru.Nivcsw)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// machineState is the header of the report: what the numbers were
// measured on.
type machineState struct {
	kernel, cpuModel string
	cpus, maxprocs   int
	goVersion        string
}

func readMachine() machineState {
	s := machineState{cpus: runtime.NumCPU(), maxprocs: runtime.GOMAXPROCS(0), goVersion: runtime.Version(),
		kernel: "?", cpuModel: "?"}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		s.kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				s.cpuModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return s
}
