//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The syscalls cell: bench runs itself with -child goroce|tcp. The child
// makes a namespace pair of its own, sets the round trip up, prints
// "ready" and waits for a line on stdin; the parent attaches
// `strace -f -c -p PID` (every thread), sends the line, and the child runs
// the timed loop, prints "done N" (N round trips) and waits for stdin to
// close. The parent then stops strace (SIGINT: it detaches and writes its
// summary) and lets the child clean up. Only the timed loop, and the
// moments around it, are counted.

// childTime bounds the child's traced loop (strace slows it down).
const childTime = 20 * time.Second

// traceChild is the traced client (trace-goroce, trace-tcp): a namespace
// pair of its own, the round trip's peer in a process of its own (or a
// goroutine with -lat-peer goroutine), "ready", a line from stdin, the
// loop, "done N", and stdin's end.
func traceChild(what string, c config) error {
	in := newLineReader(os.Stdin)
	pair, err := newPair(c.latMTU(), "goroce-bench-c")
	if err != nil {
		return err
	}
	defer cleanup.closePair(pair)
	ready := func() {
		fmt.Println("ready")
		in.next(30 * time.Second)
	}
	lim := limit{childTime, c.sysN}
	var rtts []time.Duration
	inproc := c.latPeer == "goroutine"
	switch {
	case what == "tcp" && inproc:
		rtts, err = tcpPingPong(pair, lim, ready)
	case what == "tcp":
		rtts, err = tcpPingPongPeer(pair, lim, ready)
	case inproc:
		p, e := openRDMA(pair, c.backends[0], false)
		if e != nil {
			return e
		}
		defer p.Close()
		rtts, err = writeLat(p, lim, ready)
	default:
		rtts, err = writeLatPeer(pair, c.backends[0], false, lim, ready, nil)
	}
	if err != nil {
		return err
	}
	fmt.Printf("done %d\n", len(rtts))
	for {
		if _, ok := in.next(30 * time.Second); !ok {
			return nil
		}
	}
}

func measureSyscalls(mtu int, c *config, res *results) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		res.fail(key{"tcp", mtu, mSysTCP}, errors.New("strace is not installed"))
		for _, b := range c.backends {
			res.fail(key{b, mtu, mSysGoroce}, errors.New("strace is not installed"))
		}
		return
	}
	type job struct {
		what, backend string
		k             key
	}
	jobs := []job{{"tcp", c.backends[0], key{"tcp", mtu, mSysTCP}}}
	for _, b := range c.backends {
		jobs = append(jobs, job{"goroce", b, key{b, mtu, mSysGoroce}})
	}
	for _, b := range c.backends {
		res.addSection(section{backend: b, mtu: mtu})
	}
	for _, j := range jobs {
		per, top, err := straceChild(strace, j.what, j.backend, c.latPeer, mtu, c.sysN)
		record(res, j.k, per, err)
		if err == nil {
			res.note(j.k, top)
		}
		progress("syscalls %s %s: %.2f per round trip: %s (%v)", j.what, j.backend, per, top, err)
	}
}

// straceChild runs one child under strace and returns system calls per
// round trip and the largest few, per round trip.
func straceChild(strace, what, backend, latPeer string, mtu, n int) (float64, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, "", err
	}
	dir, err := os.MkdirTemp("", "goroce-bench-strace")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "summary")

	cmd := exec.Command(exe, "-child", "trace-"+what, "-backends", backend, "-mtus", strconv.Itoa(mtu), "-syscall-n", strconv.Itoa(n),
		"-lat-peer", latPeer)
	if verbose {
		cmd.Args = append(cmd.Args, "-v")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	pid := cmd.Process.Pid
	cleanup.addPID(pid)
	defer func() {
		stdin.Close()
		if !waitBounded(cmd, 15*time.Second) {
			syscall.Kill(pid, syscall.SIGTERM)
			if !waitBounded(cmd, 5*time.Second) {
				syscall.Kill(pid, syscall.SIGKILL)
				cmd.Wait()
			}
		}
		cleanup.donePID(pid)
	}()
	lines := newLineReader(stdout)
	if l, ok := lines.next(60 * time.Second); !ok || l != "ready" {
		return 0, "", fmt.Errorf("child did not get ready: %q", l)
	}

	tr := exec.Command(strace, "-f", "-c", "-o", out, "-p", strconv.Itoa(pid))
	trErr, err := tr.StderrPipe()
	if err != nil {
		return 0, "", err
	}
	if err := tr.Start(); err != nil {
		return 0, "", err
	}
	tpid := tr.Process.Pid
	cleanup.addPID(tpid)
	stopTrace := func() {
		syscall.Kill(tpid, syscall.SIGINT)
		if !waitBounded(tr, 10*time.Second) {
			syscall.Kill(tpid, syscall.SIGKILL)
			tr.Wait()
		}
		cleanup.donePID(tpid)
	}
	trLines := newLineReader(trErr)
	attached := false
	for t0 := time.Now(); !attached && time.Since(t0) < 10*time.Second; {
		l, ok := trLines.next(10 * time.Second)
		if !ok {
			break
		}
		attached = strings.Contains(l, "attached")
	}
	go io.Copy(io.Discard, trErr)
	if !attached {
		stopTrace()
		return 0, "", errors.New("strace did not attach")
	}
	time.Sleep(300 * time.Millisecond) // every thread
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		stopTrace()
		return 0, "", err
	}
	l, ok := lines.next(childTime + 60*time.Second)
	stopTrace()
	var rts int
	if !ok {
		return 0, "", errors.New("child did not finish")
	}
	if _, err := fmt.Sscanf(l, "done %d", &rts); err != nil || rts <= 0 {
		return 0, "", fmt.Errorf("child: %s", l)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return 0, "", err
	}
	calls, err := parseStraceSummary(string(b))
	if err != nil {
		return 0, "", err
	}
	total, top := perRoundTrip(calls, rts, 4)
	return total, top, nil
}

// parseStraceSummary reads the table of `strace -c`: per system call, the
// number of calls (the column after usecs/call; the errors column may be
// empty). The total line is left out.
func parseStraceSummary(text string) (map[string]int, error) {
	calls := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(text))
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "---") {
			continue
		}
		if f[0] == "%" {
			header = true
			continue
		}
		if !header || len(f) < 5 {
			continue
		}
		name := f[len(f)-1]
		if name == "total" {
			continue
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("strace summary line %q: %w", sc.Text(), err)
		}
		calls[name] += n
	}
	if !header {
		return nil, errors.New("no strace -c summary table")
	}
	return calls, nil
}

// perRoundTrip is the total per round trip and the largest k calls,
// "name 1.2, name 0.9".
func perRoundTrip(calls map[string]int, rts, k int) (float64, string) {
	type nc struct {
		name string
		n    int
	}
	var all []nc
	total := 0
	for name, n := range calls {
		all = append(all, nc{name, n})
		total += n
	}
	slices.SortFunc(all, func(a, b nc) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.name, b.name)
	})
	var parts []string
	for _, c := range all[:min(k, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", c.name, float64(c.n)/float64(rts)))
	}
	return float64(total) / float64(rts), strings.Join(parts, ", ")
}
