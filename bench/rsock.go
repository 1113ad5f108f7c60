//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/rsock"
)

// The rsock cell: one rsock stream against one Go TCP stream, the 64-byte
// request/response round trip and HTTP/1.1 requests per second, rsock and
// TCP measured side by side on the same veth in the same run. Both ends of
// every measurement run in this process (goroutines), TCP's too.
const (
	mRsockStream = "rsock.stream"    // recordRate base: rsock
	mRsockTCP    = "rsock.tcpstream" // … Go TCP, in the same cell
	mRsockBig    = "rsock.stream1m"  // rsock with rstream's buffers (rsockBigBuffer)
	mRsockRTT    = "rsock.rtt"       // recordLat base
	mRsockTCPRTT = "rsock.tcprtt"
	mRsockHTTP   = "rsock.http.rps"
	mRsockTCPWeb = "rsock.tcphttp.rps"
	rsockPort    = 7471
	httpBody     = 64
	// rsockBigBuffer is the send and receive buffer of rstream and
	// riostream (SO_SNDBUF and SO_RCVBUF 512 KiB, doubled by rsocket).
	rsockBigBuffer = 1 << 20
)

func measureRsock(pair *netns.Pair, mtu int, b, tag string, c *config, res *results) {
	lim := func(n int) limit { return limit{c.cell, n} }
	k := func(m string) key { return key{b, mtu, m} }
	if mtu == c.latMTU() && c.latPeer == "process" {
		// The round trips first, on devices of their own: the echo's
		// process opens B's interface.
		for _, pl := range c.placements {
			// c0 is marked when the timed loop starts (tcpClientLoop's
			// ready): this end's CPU and context switches per round trip
			// leave out the setup.
			var c0 cpuMark
			ready := func() { c0 = markCPU() }
			for _, s := range []struct {
				metric string
				rtts   func() ([]time.Duration, error)
				what   string
			}{
				{mRsockTCPRTT, func() ([]time.Duration, error) { return tcpPingPongPeer(pair, lim(maxRTTs), ready) }, "Go TCP"},
				{mRsockRTT, func() ([]time.Duration, error) { return rsockPingPongPeer(pair, b, lim(maxRTTs), ready) }, "rsock"},
			} {
				runtime.GC()
				var use cpuUse
				var useErr error
				rtts, err := placedRTTs(pl, func() ([]time.Duration, error) {
					rtts, err := s.rtts()
					use, useErr = markCPU().since(c0)
					return rtts, err
				})
				recordLat(res, k(s.metric+pl.suffix()), rtts, err)
				if n := float64(len(rtts)); err == nil && useErr == nil && n > 0 {
					res.add(k(s.metric+pl.suffix()+".cpu"), use.proc*1e6/n)
					res.add(k(s.metric+pl.suffix()+".csw"), float64(use.csw)/n)
				}
				progress("%s: %s 64 B round trip (%s) %s, this end %.1f µs CPU and %.2f context switches per round trip (%v)",
					tag, s.what, pl.name, latLine(rtts), use.proc*1e6/float64(max(len(rtts), 1)), float64(use.csw)/float64(max(len(rtts), 1)), err)
			}
		}
	}
	p, err := openRDMA(pair, b, false)
	if err != nil {
		progress("%s: goroce devices: %v", tag, err)
		res.fail(k(mRsockStream+".gbps"), err)
		return
	}
	defer p.Close()
	res.addSection(section{backend: b, mtu: mtu, mode: p.a.info.Mode, pmtu: p.pmtu})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := netip.AddrPortFrom(pair.B.Addr, rsockPort).String()
	l, err := rsock.Listen(ctx, p.b.dev, addr, nil)
	if err != nil {
		res.fail(k(mRsockStream+".gbps"), err)
		return
	}
	defer l.Close()
	rsockConnsOf := func(l *rsock.Listener, o *rsock.Options) (net.Conn, net.Conn, error) {
		actx, acancel := context.WithCancel(ctx)
		defer acancel()
		acc := make(chan net.Conn, 1)
		go func() {
			s, err := l.AcceptContext(actx)
			if err != nil {
				acc <- nil
				return
			}
			acc <- s
		}()
		cl, err := rsock.Dial(ctx, p.a.dev, l.Addr().String(), o)
		if err != nil {
			acancel() // and wait: no Accept may outlive this pipe
			if s := <-acc; s != nil {
				s.Close()
			}
			return nil, nil, err
		}
		s := <-acc
		if s == nil {
			cl.Close()
			return nil, nil, errors.New("accept failed")
		}
		return cl, s, nil
	}
	rsockConns := func() (net.Conn, net.Conn, error) { return rsockConnsOf(l, nil) }
	// The stream also with rstream's buffers (its SO_SNDBUF and SO_RCVBUF
	// of 512 KiB make rsocket buffers of 1 MiB): halves of 512 KiB, so
	// the writer waits for a grant every 512 KiB instead of every 64 KiB.
	bigOpts := &rsock.Options{SendBuffer: rsockBigBuffer, RecvBuffer: rsockBigBuffer}
	lBig, err := rsock.Listen(ctx, p.b.dev, netip.AddrPortFrom(pair.B.Addr, rsockPort+2).String(), bigOpts)
	if err != nil {
		res.fail(k(mRsockBig+".gbps"), err)
		return
	}
	defer lBig.Close()
	rsockBigConns := func() (net.Conn, net.Conn, error) { return rsockConnsOf(lBig, bigOpts) }
	tcpConnsOf := func() (net.Conn, net.Conn, error) { return tcpConns(pair) }

	for _, s := range []struct {
		metric string
		conns  func() (net.Conn, net.Conn, error)
		what   string
	}{{mRsockTCP, tcpConnsOf, "Go TCP"}, {mRsockStream, rsockConns, "rsock"}, {mRsockBig, rsockBigConns, "rsock (1 MiB buffers)"}} {
		runtime.GC()
		t, err := connStream(s.conns, lim(maxStreamN))
		recordRate(res, k(""), s.metric, t.bytes, t.elapsed, t.cpu, firstErr(err, t.cpuErr), err)
		if err == nil && t.cpuErr == nil && t.bytes > 0 {
			res.add(k(s.metric+".kprocgb"), (t.cpu.proc+t.kcpu)/(float64(t.bytes)/1e9))
			res.add(k(s.metric+".cswmb"), float64(t.cpu.csw)/(float64(t.bytes)/1e6))
		}
		progress("%s: %s stream %s (%v)", tag, s.what, fmtGbit(t.bitsPerSec()/1e9), err)
	}
	if mtu == c.latMTU() && c.latPeer == "goroutine" {
		for _, s := range []struct {
			metric string
			conns  func() (net.Conn, net.Conn, error)
			what   string
		}{{mRsockTCPRTT, tcpConnsOf, "Go TCP"}, {mRsockRTT, rsockConns, "rsock"}} {
			runtime.GC()
			rtts, err := func() ([]time.Duration, error) {
				cl, sv, err := s.conns()
				if err != nil {
					return nil, err
				}
				defer cl.Close()
				go echo(sv)
				return tcpClientLoop(cl, lim(maxRTTs), nil)
			}()
			recordLat(res, k(s.metric), rtts, err)
			progress("%s: %s 64 B round trip %s (%v)", tag, s.what, latLine(rtts), err)
		}
	}
	// HTTP: one client connection, sequential GETs of a 64-byte body.
	tcpDial := func(ctx context.Context, a string) (c net.Conn, err error) {
		err = pair.Do(netns.A, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", a)
			return err
		})
		return c, err
	}
	for _, s := range []struct {
		metric string
		listen func() (net.Listener, error)
		dial   func(context.Context, string) (net.Conn, error)
		what   string
	}{
		{mRsockTCPWeb, func() (tl net.Listener, err error) {
			err = pair.Do(netns.B, func() (err error) {
				tl, err = net.Listen("tcp", netip.AddrPortFrom(pair.B.Addr, 0).String())
				return err
			})
			return tl, err
		}, tcpDial, "Go TCP"},
		{mRsockHTTP, func() (net.Listener, error) {
			return rsock.Listen(ctx, p.b.dev, netip.AddrPortFrom(pair.B.Addr, rsockPort+1).String(), nil)
		}, func(ctx context.Context, a string) (net.Conn, error) { return rsock.Dial(ctx, p.a.dev, a, nil) }, "rsock"},
	} {
		runtime.GC()
		hl, err := s.listen()
		if err != nil {
			record(res, k(s.metric), 0, err)
			continue
		}
		rps, cpu, csw, err := httpRate(hl, s.dial, lim(maxRTTs))
		record(res, k(s.metric), rps, err)
		if err == nil && cpu > 0 {
			res.add(k(s.metric+".cpu"), cpu)
			res.add(k(s.metric+".csw"), csw)
		}
		progress("%s: %s HTTP %s requests/s, %.1f µs CPU and %.2f context switches per request (%v)", tag, s.what, fmtRate(rps), cpu, csw, err)
	}
}

// connStream sends 64 KiB writes from the first conn of conns to the
// second for lim and returns what the receiver got and the CPU it cost.
func connStream(conns func() (net.Conn, net.Conn, error), lim limit) (tcpRate, error) {
	c, s, err := conns()
	if err != nil {
		return tcpRate{}, err
	}
	defer s.Close()
	type result struct {
		n   int64
		end time.Time
	}
	res := make(chan result, 1)
	go func() {
		n, _ := io.Copy(io.Discard, s)
		res <- result{n, time.Now()}
	}()
	buf := make([]byte, 64<<10)
	k0 := kthreadCPU()
	c0 := markCPU()
	start := time.Now()
	c.SetWriteDeadline(start.Add(lim.d + stallTime))
	for i := 0; i < lim.n && time.Since(start) < lim.d; i++ {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return tcpRate{}, err
		}
	}
	c.Close()
	select {
	case r := <-res:
		cpu, cpuErr := markCPU().since(c0)
		return tcpRate{bytes: r.n, elapsed: r.end.Sub(start), cpu: cpu, cpuErr: cpuErr, kcpu: kthreadCPU() - k0}, nil
	case <-time.After(stallTime):
		s.Close()
		return tcpRate{}, errors.New("receiver did not finish")
	}
}

// httpRate serves a 64-byte body on l (closing it at the end) and GETs it
// over one keep-alive connection for lim; it returns requests per second,
// and this process's CPU µs and context switches per request (both ends
// are in it) from the second request on (the first one dials).
func httpRate(l net.Listener, dial func(context.Context, string) (net.Conn, error), lim limit) (rps, cpu, csw float64, err error) {
	body := make([]byte, httpBody)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(l)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DialContext: func(ctx context.Context, _, a string) (net.Conn, error) { return dial(ctx, a) }}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: stallTime}
	url := fmt.Sprintf("http://%s/", l.Addr())
	n := 0
	start := time.Now()
	var c0 cpuMark
	for n < lim.n && time.Since(start) < lim.d {
		resp, err := client.Get(url)
		if err != nil {
			return 0, 0, 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != httpBody {
			return 0, 0, 0, fmt.Errorf("response %d: %d bytes, %v", n, len(b), err)
		}
		if n == 0 {
			c0 = markCPU()
		}
		n++
	}
	rps = float64(n) / time.Since(start).Seconds()
	if use, err := markCPU().since(c0); err == nil && n > 1 {
		cpu, csw = use.proc*1e6/float64(n-1), float64(use.csw)/float64(n-1)
	}
	return rps, cpu, csw, nil
}

// rsockPeerPort is the port the round trip's echo process listens on.
const rsockPeerPort = rsockPort + 2

// rsockPingPongPeer is the 64-byte request/response over rsock with the
// echo in a process of its own in namespace B (peer-rsock), placed as
// peerCPU says: this end on a device of its own on A's interface. ready
// runs before the timed loop.
func rsockPingPongPeer(pair *netns.Pair, backend string, lim limit, ready func()) ([]time.Duration, error) {
	a, err := openEnd(pair, netns.A, backend, false, nil)
	if err != nil {
		return nil, fmt.Errorf("side A: %w", err)
	}
	defer a.dev.Close()
	peer, err := startPeer(pair, "-child", "peer-rsock", "-backends", backend, "-peer-ifname", pair.B.Ifname)
	if err != nil {
		return nil, err
	}
	defer peer.finish()
	l, ok := peer.lines.next(setupTimeout + 5*time.Second)
	if !ok {
		return nil, errors.New("the peer process did not start")
	}
	var port uint16
	if _, err := fmt.Sscanf(l, "port %d", &port); err != nil {
		return nil, fmt.Errorf("peer: %s", strings.TrimPrefix(l, "error "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	c, err := rsock.Dial(ctx, a.dev, netip.AddrPortFrom(pair.B.Addr, port).String(), nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return tcpClientLoop(c, lim, ready)
}

// rsockPeer is the child peer-rsock: on ifname's device (inside the
// namespace it was started in) it listens for one rsock connection,
// prints "port N", and echoes 64-byte messages until the connection ends
// (or, before one came, stdin ends).
func rsockPeer(ifname, backend string) error {
	e, err := openEndOn(func(fn func() error) error { return fn() }, ifname, backend, false, 2, nil)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := rsock.Listen(ctx, e.dev, netip.AddrPortFrom(e.info.IP, rsockPeerPort).String(), nil)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Printf("port %d\n", rsockPeerPort)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	s, err := l.AcceptContext(ctx)
	if err != nil {
		return err
	}
	echo(s)
	return nil
}

// kthreadCPU is the CPU-seconds (user + system, in USER_HZ ticks) the
// machine's kernel threads have used: ksoftirqd runs the softirq work
// (a veth's NAPI, TCP's receive) that the process which raised it did not
// run itself, and kworkers some of the rest. With this process's own CPU
// (which, under tick accounting, includes the softirqs that ran while it
// was current) it is the kernel's part of a stream without the other
// tenants of a shared machine that whole-machine busy time counts.
// Softirqs run while a CPU was idle are in neither.
func kthreadCPU() float64 {
	const pfKthread = 0x00200000
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var ticks uint64
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // from field 3, state
		if len(f) < 13 {
			continue
		}
		flags, _ := strconv.ParseUint(f[6], 10, 64)
		if flags&pfKthread == 0 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		s, _ := strconv.ParseUint(f[12], 10, 64)
		ticks += u + s
	}
	return float64(ticks) / userHZ
}
