//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// The rawref cell (-rawref DIR): the independent raw AF_XDP reference
// (../shared/rawref's cmd/xsk: one socket on queue 0, a 4096-entry TX
// ring, 256 descriptors per sendto kick, XDP_MAX_TX_SKB_BUDGET 256, copy
// mode, PSN rewritten and ICRC computed per frame, frames sent straight
// from its UMEM) run on the same veth right after the raw cell's own rate
// at each frame size, so that the raw cell's strength is a ratio measured
// in the same minutes. The reference's frames are RC SEND ONLY without a
// RETH: its payload is the raw cell's plus 16 bytes, which makes the two
// frames equally long; the comparison is in frames per second.

// buildRawref builds cmd/xsk of the rawref module in dir into a temporary
// directory, or returns dir itself when it names an executable file.
func buildRawref(dir string) (bin string, cleanup func(), err error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "goroce-rawref")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(tmp, "xsk")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/xsk")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("building the rawref sender in %s: %v: %s", dir, err, out)
	}
	return bin, func() { os.RemoveAll(tmp) }, nil
}

var (
	ppsRE    = regexp.MustCompile(`\bpps=([0-9.]+)`)
	framesRE = regexp.MustCompile(`\bframes=([0-9]+)`)
)

// rawrefRate runs the reference receiver in B and sender in A for d (or n
// frames) with frames of frameLen bytes, and returns the receiver's frames
// per second and the two processes' CPU time (user + system, getrusage of
// the children) per frame received.
func rawrefRate(pair *netns.Pair, bin string, frameLen int, lim limit) (fps float64, cpuPerFrame time.Duration, err error) {
	payload := frameLen - 58 // Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4
	if payload < 0 {
		return 0, 0, fmt.Errorf("frame of %d bytes too short", frameLen)
	}
	recv := pair.Command(netns.B, bin, "-r", "-if", pair.B.Ifname, "-xdpmode", "drv", "-bind", "copy",
		"-t", (lim.d + 5*time.Second).String())
	stderr, err := recv.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	var out strings.Builder
	recv.Stdout = &out
	if err := recv.Start(); err != nil {
		return 0, 0, err
	}
	cleanup.addPID(recv.Process.Pid)
	exited := make(chan struct{})
	defer func() {
		select {
		case <-exited:
		case <-time.After(lim.d + 10*time.Second):
			syscall.Kill(recv.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		cleanup.donePID(recv.Process.Pid)
	}()
	ready := make(chan error, 1)
	go func() {
		defer func() {
			recv.Wait()
			close(exited)
		}()
		sc := bufio.NewScanner(stderr)
		sent := false
		var last string
		for sc.Scan() {
			last = sc.Text()
			if !sent && strings.Contains(last, "receiver ready") {
				ready <- nil
				sent = true
			}
		}
		if !sent {
			ready <- fmt.Errorf("rawref receiver: %s", last)
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			return 0, 0, err
		}
	case <-time.After(setupTimeout):
		return 0, 0, errors.New("rawref receiver not ready")
	}
	send := pair.Command(netns.A, bin, "-if", pair.A.Ifname, "-dstmac", pair.B.MAC.String(), "-bind", "copy",
		"-batch", "256", "-budget", "256", "-crc", "-payload", strconv.Itoa(payload),
		"-t", lim.d.String(), "-n", strconv.Itoa(lim.n))
	o, err := send.CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("rawref sender: %v: %s", err, o)
	}
	select {
	case <-exited:
	case <-time.After(lim.d + 10*time.Second):
		return 0, 0, errors.New("rawref receiver did not stop")
	}
	m, f := ppsRE.FindStringSubmatch(out.String()), framesRE.FindStringSubmatch(out.String())
	if m == nil || f == nil {
		return 0, 0, fmt.Errorf("rawref receiver printed no rate: %q (sender: %q)", out.String(), o)
	}
	fps, _ = strconv.ParseFloat(m[1], 64)
	frames, _ := strconv.ParseFloat(f[1], 64)
	if frames == 0 {
		return 0, 0, fmt.Errorf("rawref: nothing received (sender: %q)", o)
	}
	cpu := send.ProcessState.UserTime() + send.ProcessState.SystemTime() +
		recv.ProcessState.UserTime() + recv.ProcessState.SystemTime()
	return fps, time.Duration(float64(cpu) / frames), nil
}
