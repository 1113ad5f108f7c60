//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// Child processes. bench -child NAME runs one of:
//
//   - peer-goroce: write_lat's server end on -peer-ifname (inside the
//     namespace its parent started it in). It prints "qp QPN RKEY VADDR
//     MTU", reads "conn QPN PSN-A PSN-B RKEY VADDR GID MTU", connects,
//     runs the loop until "stop" (or stdin's end) and prints "done" or
//     "error ...".
//   - peer-raw, peer-raw2: the raw busy ping-pong's far end: opens
//     -peer-ifname's backend link, prints "ready", echoes frames (in
//     batches of two for peer-raw2) until stdin ends.
//   - raw-sink: the raw rate's receiving end on AF_XDP (rawsink.go):
//     prints "ready", reads frames until stdin ends, prints "frames N
//     first T0 last T1".
//   - peer-bw: the bw cell's responder, device B (bwpeer.go).
//   - peer-tcp: the TCP ping-pong's echo end: prints "port N", echoes one
//     connection until it closes.
//   - peer-rsock: the same over rsock on -peer-ifname (bench/rsock.go).
//   - trace-goroce, trace-tcp: the syscalls cell's traced client, with a
//     namespace pair and a peer of its own (syscalls.go).

// peerProc is a child process started by this one, inside a namespace.
type peerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *lineReader
	pid   int
}

// startPeer runs this program with args inside pair's namespace B.
func startPeer(pair *netns.Pair, args ...string) (*peerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if verbose {
		args = append(args, "-v")
	}
	if peerCPU >= 0 {
		args = append(args, "-cpu", strconv.Itoa(peerCPU))
	}
	args = append(args, afxdpFlags()...)
	if waitSpin >= 0 {
		args = append(args, "-wait-spin", waitSpin.String())
	}
	cmd := pair.Command(netns.B, exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &peerProc{cmd: cmd, stdin: stdin, lines: newLineReader(stdout), pid: cmd.Process.Pid}
	cleanup.addPID(p.pid)
	return p, nil
}

func (p *peerProc) send(format string, a ...any) error {
	_, err := fmt.Fprintf(p.stdin, format+"\n", a...)
	return err
}

// finish closes the peer's stdin and waits for it (bounded), then kills
// it by its PID.
func (p *peerProc) finish() {
	p.stdin.Close()
	if !waitBounded(p.cmd, 10*time.Second) {
		syscall.Kill(p.pid, syscall.SIGTERM)
		if !waitBounded(p.cmd, 5*time.Second) {
			syscall.Kill(p.pid, syscall.SIGKILL)
			p.cmd.Wait()
		}
	}
	cleanup.donePID(p.pid)
}

func waitBounded(cmd *exec.Cmd, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func runChild(name string, c config, ifname string, busy bool) int {
	cleanup.watchSignals()
	var err error
	switch name {
	case "peer-goroce":
		err = gorocePeer(ifname, c.backends[0], busy)
	case "peer-raw", "peer-raw2":
		frames := 1
		if name == "peer-raw2" {
			frames = 2
		}
		err = rawPeer(ifname, c.backends[0], frames, false)
	case "peer-raw-sleep", "peer-raw-sleep2":
		frames := 1
		if name == "peer-raw-sleep2" {
			frames = 2
		}
		err = rawPeer(ifname, c.backends[0], frames, true)
	case "raw-sink":
		err = rawSink(ifname, c.backends[0])
	case "peer-bw":
		err = bwPeerChild(ifname, c.backends[0])
	case "peer-tcp":
		err = tcpPeer()
	case "peer-rsock":
		err = rsockPeer(ifname, c.backends[0])
	case "trace-goroce", "trace-tcp":
		err = traceChild(strings.TrimPrefix(name, "trace-"), c)
	default:
		err = fmt.Errorf("unknown child %q", name)
	}
	if err != nil {
		fmt.Printf("error %s\n", shortErr(err))
		return 1
	}
	return 0
}

// gorocePeer is write_lat's server end (peer-goroce).
func gorocePeer(ifname, backend string, busy bool) error {
	in := newLineReader(os.Stdin)
	e, err := openEndOn(func(fn func() error) error { return fn() }, ifname, backend, busy, 2, nil)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	scq, err := e.dev.CreateCQ(16)
	if err != nil {
		return err
	}
	rcq, err := e.dev.CreateCQ(16)
	if err != nil {
		return err
	}
	q, err := e.pd.CreateQP(qp.InitAttr{SendCQ: scq, RecvCQ: rcq, Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	fmt.Printf("qp %d %d %d %d\n", q.QPN(), e.mr.RKey(), e.mr.IOVA()+half, e.dev.ActiveMTU().Bytes())
	l, ok := in.next(time.Minute)
	if !ok {
		return errors.New("no connection line")
	}
	var qpnA, psnA, psnB, rkeyA uint32
	var vaddrA uint64
	var gid string
	var mtu int
	if _, err := fmt.Sscanf(l, "conn %d %d %d %d %d %s %d", &qpnA, &psnA, &psnB, &rkeyA, &vaddrA, &gid, &mtu); err != nil {
		return fmt.Errorf("connection line %q: %w", l, err)
	}
	addr, err := netip.ParseAddr(gid)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	err = q.Connect(ctx, qp.Remote{QPN: qpnA, PSN: psnA, GID: addr, MTU: qp.MTUFromBytes(mtu)}, qp.ConnectOptions{SQPSN: psnB})
	cancel()
	if err != nil {
		return err
	}
	var stop atomic.Bool
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for l := range in.ch {
			if l == "stop" {
				break
			}
		}
		stop.Store(true)
		cancel()
	}()
	err = latLoop(ctx, latEnd{e, q, scq, busy, qp.MTUFromBytes(mtu).Bytes(), wire.PSN(psnA)}, rkeyA, vaddrA, true, nil, &stop)
	if err != nil && !errors.Is(err, errStopped) {
		return err
	}
	fmt.Println("done")
	return nil
}

// tcpPeer is the TCP ping-pong's echo end (peer-tcp).
func tcpPeer() error {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
	s, err := ln.Accept()
	if err != nil {
		return err
	}
	echo(s)
	return nil
}
