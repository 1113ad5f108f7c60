//go:build linux

package interop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// debugJobs logs every job's duration (GOROCE_INTEROP_DEBUG=1).
var debugJobs = os.Getenv("GOROCE_INTEROP_DEBUG") != ""

// ErrTimeout is Result.Err when a job outlived its timeout (it was killed).
var ErrTimeout = errors.New("interop: job timed out")

// ErrVMExited is Result.Err when the VM's qemu exited before the job ended.
var ErrVMExited = errors.New("interop: VM exited")

// Result is the outcome of a job run in a VM.
type Result struct {
	VM       int
	Cmd      string
	Stdout   string
	Stderr   string
	ExitCode int // -1 when the job did not end by itself (Err is set)
	Err      error
	Elapsed  time.Duration
}

// OK reports whether the job ended by itself with status 0.
func (r Result) OK() bool { return r.Err == nil && r.ExitCode == 0 }

// Output is stdout followed by stderr.
func (r Result) Output() string { return r.Stdout + r.Stderr }

func (r Result) String() string {
	status := "exit " + strconv.Itoa(r.ExitCode)
	if r.Err != nil {
		status = r.Err.Error()
	}
	return fmt.Sprintf("VM %d $ %s\n[%s after %.1fs]\n--- stdout ---\n%s--- stderr ---\n%s",
		r.VM, r.Cmd, status, r.Elapsed.Seconds(), r.Stdout, r.Stderr)
}

// Check fails t (without stopping it) when the job did not succeed, logging
// its output, and returns r.
func (r Result) Check(t testing.TB) Result {
	t.Helper()
	if !r.OK() {
		t.Errorf("interop: job failed:\n%s", r)
	}
	return r
}

// Job is a job started with Start.
type Job struct {
	h     *Harness
	v     *vm
	id    string
	dir   string
	cmd   string
	start time.Time
	done  bool
	res   Result
}

// Run runs cmd with bash in VM vm (cwd /tmp, stdin /dev/null) and waits for
// it to end, at most timeout; a job still running then is killed with its
// whole session and Result.Err is ErrTimeout.
func (h *Harness) Run(vm int, cmd string, timeout time.Duration) Result {
	return h.Start(vm, cmd).Wait(timeout)
}

// Start starts cmd with bash in VM vm and returns at once (the VM's job
// daemon picks it up within 50–250 ms). Errors appear in Wait's Result.
func (h *Harness) Start(vm int, cmd string) *Job {
	j := &Job{h: h, cmd: cmd, start: time.Now()}
	if vm < 0 || vm >= len(h.vms) {
		j.finish(-1, fmt.Errorf("interop: no VM %d", vm))
		return j
	}
	j.v = h.vm(vm)
	j.res.VM = vm
	j.id = fmt.Sprintf("j%05d", j.v.nextJob.Add(1))
	j.dir = filepath.Join(j.v.share, "run", j.id)
	tmp := filepath.Join(j.v.share, "new", j.id+".tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		j.finish(-1, err)
		return j
	}
	if err := os.WriteFile(filepath.Join(tmp, "cmd"), []byte(cmd+"\n"), 0o644); err != nil {
		j.finish(-1, err)
		return j
	}
	if err := os.Rename(tmp, filepath.Join(j.v.share, "new", j.id)); err != nil {
		j.finish(-1, err)
	}
	return j
}

func (j *Job) finish(code int, err error) {
	if debugJobs && j.v != nil {
		j.h.t.Logf("interop: VM %d job %s: %q ended after %.2fs (exit %d, err %v)", j.v.idx, j.id, j.cmd, time.Since(j.start).Seconds(), code, err)
	}
	j.done = true
	j.res.Cmd = j.cmd
	j.res.ExitCode = code
	j.res.Err = err
	j.res.Elapsed = time.Since(j.start)
	if j.dir != "" {
		out, _ := os.ReadFile(filepath.Join(j.dir, "out"))
		errOut, _ := os.ReadFile(filepath.Join(j.dir, "err"))
		j.res.Stdout, j.res.Stderr = string(out), string(errOut)
	}
}

// Wait waits for the job to end, at most timeout from now, then kills it
// (Result.Err = ErrTimeout). Calling Wait again returns the same Result.
func (j *Job) Wait(timeout time.Duration) Result {
	if j.done {
		return j.res
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if code, ok := j.exitCode(); ok {
			j.finish(code, nil)
			return j.res
		}
		if time.Now().After(deadline) {
			j.Kill()
			j.finish(-1, ErrTimeout)
			return j.res
		}
		select {
		case <-j.v.exited:
			j.finish(-1, fmt.Errorf("%w: %v", ErrVMExited, j.v.waitErr))
			return j.res
		case <-tick.C:
		}
	}
}

// Running reports whether the job has not ended yet.
func (j *Job) Running() bool {
	if j.done {
		return false
	}
	_, ok := j.exitCode()
	return !ok
}

// Stdout returns what the job has written to stdout so far.
func (j *Job) Stdout() string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "out"))
	return string(b)
}

func (j *Job) exitCode() (int, bool) {
	b, err := os.ReadFile(filepath.Join(j.dir, "rc"))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return code, true
}

// Kill kills the job's whole session in the VM (SIGKILL) and waits up to 10 s
// for it to be reaped. The job's Wait then reports its exit status (137).
func (j *Job) Kill() {
	if j.done || j.v == nil {
		return
	}
	// The job may not have been picked up yet: wait for its pid (bounded).
	var pid int
	for i := 0; i < 100; i++ {
		if b, err := os.ReadFile(filepath.Join(j.dir, "pid")); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pid = p
				break
			}
		}
		if _, ok := j.exitCode(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid <= 1 {
		return
	}
	k := j.h.Start(j.v.idx, fmt.Sprintf("kill -KILL -- -%d 2>/dev/null; exit 0", pid))
	k.Wait(10 * time.Second)
	for i := 0; i < 100; i++ {
		if _, ok := j.exitCode(); ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Signal sends signal sig (a name for kill: "INT", "TERM") to the job's
// whole session in the VM, as a terminal's ^C reaches every process of
// the foreground job.
func (j *Job) Signal(sig string) error {
	if j.done || j.v == nil {
		return fmt.Errorf("interop: job %s is not running", j.id)
	}
	b, err := os.ReadFile(filepath.Join(j.dir, "pid"))
	if err != nil {
		return fmt.Errorf("interop: job %s has no pid yet: %w", j.id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("interop: job %s: bad pid %q", j.id, b)
	}
	if res := j.h.Run(j.v.idx, fmt.Sprintf("kill -%s -- -%d", sig, pid), 30*time.Second); !res.OK() {
		return fmt.Errorf("interop: kill -%s job %s: %s", sig, j.id, res)
	}
	return nil
}

// WaitCMListen waits until a process named comm listens through rdma_cm
// in VM vm (a cm_id in state LISTEN, from `rdma resource show cm_id`), at
// most timeout. An rdma_cm server has no TCP socket to wait for, and a
// client that comes too early is rejected (REJ reason 8, or SIDR_REP "no
// such service"); a stock perftest client then crashes in its error path,
// and its retry has been seen to wedge the server for good (ib_send_bw -R
// between two rxe VMs on a loaded machine).
func (h *Harness) WaitCMListen(vm int, comm string, timeout time.Duration) error {
	secs := int(timeout/time.Second) + 1
	// comm is the kernel's 15-byte task name.
	if len(comm) > 15 {
		comm = comm[:15]
	}
	script := fmt.Sprintf(`end=$((SECONDS+%d))
while [ $SECONDS -lt $end ]; do
	rdma resource show cm_id 2>/dev/null | grep -F ' state LISTEN ' | grep -Fq %s && exit 0
	sleep 0.1
done
exit 1`, secs, ShellQuote(" comm "+comm+" "))
	r := h.Run(vm, script, timeout+10*time.Second)
	if !r.OK() {
		return fmt.Errorf("interop: no rdma_cm listener of %s in VM %d after %v: %v", comm, vm, timeout, r.Err)
	}
	return nil
}

// WaitListen waits until a TCP socket listens on port in VM vm (a server
// started with Start is ready for its client), at most timeout.
func (h *Harness) WaitListen(vm, port int, timeout time.Duration) error {
	secs := int(timeout/time.Second) + 1
	// netstat from busybox; both tcp and tcp6 listeners count.
	script := fmt.Sprintf(`end=$((SECONDS+%d))
while [ $SECONDS -lt $end ]; do
	netstat -ltn 2>/dev/null | awk '{print $4}' | grep -q ':%d$' && exit 0
	sleep 0.1
done
exit 1`, secs, port)
	r := h.Run(vm, script, timeout+10*time.Second)
	if !r.OK() {
		return fmt.Errorf("interop: nothing listens on TCP port %d in VM %d: %v", port, vm, r.Err)
	}
	return nil
}
