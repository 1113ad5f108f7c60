//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// tcpConns returns a connected pair of TCP sockets, the client in A and
// the server side in B, over the veth.
func tcpConns(pair *netns.Pair) (client, server net.Conn, err error) {
	var ln net.Listener
	if err := pair.Do(netns.B, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(pair.B.Addr, 0).String())
		return err
	}); err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	accErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accErr <- err
			return
		}
		acc <- c
	}()
	if err := pair.Do(netns.A, func() error {
		var err error
		client, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		return err
	}); err != nil {
		return nil, nil, err
	}
	select {
	case server = <-acc:
	case err := <-accErr:
		client.Close()
		return nil, nil, err
	case <-time.After(3 * time.Second):
		client.Close()
		return nil, nil, errors.New("accept timed out")
	}
	return client, server, nil
}

type tcpRate struct {
	bytes   int64
	elapsed time.Duration
	cpu     cpuUse
	cpuErr  error
	kcpu    float64 // kernel threads' CPU-seconds meanwhile (connStream: kthreadCPU)
}

func (t tcpRate) bitsPerSec() float64 { return float64(t.bytes) * 8 / t.elapsed.Seconds() }

// tcpStream sends 64 KiB writes A→B over one connection for lim and
// returns what the receiver got, and the CPU the cell cost.
func tcpStream(pair *netns.Pair, lim limit) (tcpRate, error) {
	return connStream(func() (net.Conn, net.Conn, error) { return tcpConns(pair) }, lim)
}

// tcpPingPong measures 64-byte request/response round trips over one
// connection (Go sets TCP_NODELAY) with blocking reads: each side's
// goroutine parks in the netpoller until its data arrives. Both ends run
// in this process (-lat-peer goroutine).
func tcpPingPong(pair *netns.Pair, lim limit, ready func()) ([]time.Duration, error) {
	c, s, err := tcpConns(pair)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	go echo(s)
	return tcpClientLoop(c, lim, ready)
}

// tcpPingPongPeer is tcpPingPong with the echo end in a process of its own
// (bench -child peer-tcp in namespace B).
func tcpPingPongPeer(pair *netns.Pair, lim limit, ready func()) ([]time.Duration, error) {
	peer, err := startPeer(pair, "-child", "peer-tcp")
	if err != nil {
		return nil, err
	}
	defer peer.finish()
	l, ok := peer.lines.next(10 * time.Second)
	var port uint16
	if !ok {
		return nil, errors.New("the peer process did not start")
	}
	if _, err := fmt.Sscanf(l, "port %d", &port); err != nil {
		return nil, fmt.Errorf("peer: %s", l)
	}
	var c net.Conn
	if err := pair.Do(netns.A, func() error {
		var err error
		c, err = net.DialTimeout("tcp", netip.AddrPortFrom(pair.B.Addr, port).String(), 3*time.Second)
		return err
	}); err != nil {
		return nil, err
	}
	defer c.Close()
	return tcpClientLoop(c, lim, ready)
}

// echo returns every 64 bytes it reads from s until s fails, and closes it.
func echo(s net.Conn) {
	defer s.Close()
	b := make([]byte, 64)
	s.SetDeadline(time.Now().Add(time.Minute))
	for {
		if _, err := io.ReadFull(s, b); err != nil {
			return
		}
		if _, err := s.Write(b); err != nil {
			return
		}
	}
}

// tcpClientLoop is the timed end of the ping-pong: write 64 bytes, read
// 64 back. ready, when set, runs first and may block (the syscalls
// cell's child waits there for its tracer).
func tcpClientLoop(c net.Conn, lim limit, ready func()) ([]time.Duration, error) {
	b := make([]byte, 64)
	rtts := make([]time.Duration, 0, min(lim.n, 1<<20))
	if ready != nil {
		ready()
	}
	start := time.Now()
	c.SetDeadline(start.Add(lim.d + stallTime))
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return nil, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// iperf3Port is the port of the iperf3 server inside namespace B.
const iperf3Port = 5201

// iperf3Stream runs one iperf3 TCP stream A→B for d (whole seconds, at
// least one) and returns the receiver's bit/s from its JSON report. Both
// processes are started here and killed by their PIDs if they overrun.
func iperf3Stream(pair *netns.Pair, path string, d time.Duration) (float64, error) {
	secs := max(int((d+time.Second/2)/time.Second), 1)
	srv := pair.Command(netns.B, path, "-s", "-1", "-B", pair.B.Addr.String(), "-p", strconv.Itoa(iperf3Port))
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	var out bytes.Buffer
	var err error
	for try := 0; try < 20; try++ { // the server needs a moment to listen
		time.Sleep(100 * time.Millisecond)
		out.Reset()
		cli := pair.Command(netns.A, path, "-c", pair.B.Addr.String(), "-p", strconv.Itoa(iperf3Port),
			"-t", strconv.Itoa(secs), "-J", "--connect-timeout", "2000")
		cli.Stdout = &out
		if err = cli.Start(); err != nil {
			return 0, err
		}
		timer := time.AfterFunc(time.Duration(secs)*time.Second+10*time.Second, func() { cli.Process.Kill() })
		err = cli.Wait()
		timer.Stop()
		if err == nil {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("iperf3 client: %w", err)
	}
	return parseIperf3(out.Bytes())
}

// parseIperf3 takes the receiver's bit/s from iperf3 -J output.
func parseIperf3(b []byte) (float64, error) {
	var rep struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return 0, fmt.Errorf("iperf3 -J output: %w", err)
	}
	if rep.Error != "" {
		return 0, errors.New("iperf3: " + rep.Error)
	}
	if rep.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("iperf3 reported no received bytes")
	}
	return rep.End.SumReceived.BitsPerSecond, nil
}

func lookIperf3() string {
	p, err := exec.LookPath("iperf3")
	if err != nil {
		return ""
	}
	return p
}
