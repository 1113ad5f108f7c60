package main

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

const tcpPort = 5201

// tcpConns returns a connected pair of TCP sockets, the client in A and
// the server side in B, over the veth.
func tcpConns(pair *netns.Pair) (client, server net.Conn, err error) {
	var ln net.Listener
	if err := pair.Do(netns.B, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(pair.B.Addr, tcpPort).String())
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
		client, err = net.DialTimeout("tcp", netip.AddrPortFrom(pair.B.Addr, tcpPort).String(), 3*time.Second)
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
		return nil, nil, fmt.Errorf("accept timed out")
	}
	return client, server, nil
}

// tcpStream sends 64 KiB writes A→B over one connection for lim and
// returns the receiver's goodput in bit/s.
func tcpStream(pair *netns.Pair, lim limit) (float64, error) {
	c, s, err := tcpConns(pair)
	if err != nil {
		return 0, err
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
	start := time.Now()
	for i := 0; i < lim.n && time.Since(start) < lim.d; i++ {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			return 0, err
		}
	}
	c.Close()
	select {
	case r := <-res:
		return float64(r.n) * 8 / r.end.Sub(start).Seconds(), nil
	case <-time.After(stallTime):
		s.Close()
		return 0, fmt.Errorf("receiver did not finish")
	}
}

// tcpPingPong measures 64-byte request/response round trips over one
// connection (Go sets TCP_NODELAY), blocking reads.
func tcpPingPong(pair *netns.Pair, lim limit) (latency, error) {
	c, s, err := tcpConns(pair)
	if err != nil {
		return latency{}, err
	}
	defer c.Close()
	go func() {
		defer s.Close()
		b := make([]byte, 64)
		for {
			if _, err := io.ReadFull(s, b); err != nil {
				return
			}
			if _, err := s.Write(b); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 64)
	var rtts []time.Duration
	start := time.Now()
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		c.SetDeadline(t0.Add(stallTime))
		if _, err := c.Write(b); err != nil {
			return latency{}, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return latency{}, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	return summarize(rtts), nil
}
