//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
)

// The raw sleeping ping-pong: the floor of a sleeping round trip on a
// backend. Each end writes one 8-byte RDMA WRITE ONLY frame and parks in
// the Go runtime's netpoller (nic.Waiter.WaitReadBatch) until the answer
// is there, as a sleeping goroce device's reader does, with no transport
// work at all; B's end runs in a process of its own (bench -child
// peer-raw-sleep), as the lat cell's does. Next to goroce's sleeping round
// trip and the Go TCP ping-pong, it separates what the backend's wake-up
// path costs from what goroce adds.

//
// With frames 2 each end sends two frames in one WriteBatch, as write_lat's
// hop carries the WRITE and the ACK of the peer's, and answers once it
// has both: the floor of that hop, whose receiver may be woken by the
// first frame before the second is sent (in the shared placement the
// woken end preempts the sender between the two).

// rawSleepRTTPeer measures the raw sleeping ping-pong of frames frames
// each way between namespaces A (this process) and B (a child).
func rawSleepRTTPeer(pair *netns.Pair, backend string, frames int, lim limit) ([]time.Duration, error) {
	child := "peer-raw-sleep"
	if frames == 2 {
		child = "peer-raw-sleep2"
	}
	e, err := openRawPeer(pair, backend, frames, 8, child)
	if err != nil {
		return nil, err
	}
	defer e.close()
	l, req := e.l, e.req
	w, ok := waiter(l)
	if !ok {
		return nil, errors.New("the backend link cannot wait in the netpoller (no nic.Waiter)")
	}
	bufs, sizes := [][]byte{make([]byte, l.MTU()+64), make([]byte, l.MTU()+64)}, []int{0, 0}
	rtts := make([]time.Duration, 0, min(lim.n, 1<<20))
	start := time.Now()
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if _, err := l.WriteBatch(req); err != nil {
			return nil, err
		}
		// A frame lost in the veth backlog would wait forever: bound it.
		if err := w.SetWaitDeadline(t0.Add(stallTime)); err != nil {
			return nil, err
		}
		for got := 0; got < len(req); {
			n, err := w.WaitReadBatch(bufs[:len(req)-got], sizes)
			if err != nil {
				return nil, fmt.Errorf("no response: %w", err)
			}
			got += n
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// rawSleepEcho is the raw sleeping ping-pong's far end (peer-raw-sleep,
// peer-raw-sleep2; rawPeer): it parks in w's WaitReadBatch until it holds
// frames frames and sends them back with their addresses swapped in one
// WriteBatch, until stop.
func rawSleepEcho(l nic.Link, w nic.Waiter, frames int, stop *atomic.Bool) error {
	bufs, sizes := make([][]byte, frames), make([]int, frames)
	for i := range bufs {
		bufs[i] = make([]byte, l.MTU()+64)
	}
	out := make([][]byte, frames)
	got := 0
	for !stop.Load() {
		n, err := w.WaitReadBatch(bufs[got:], sizes[got:])
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return err
		}
		if got += n; got < frames {
			continue
		}
		if err := echoBack(l, bufs, sizes, out); err != nil {
			return err
		}
		got = 0
	}
	return nil
}
