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

// rawSleepRTTPeer measures the raw sleeping ping-pong between namespaces A
// (this process) and B (a child).
func rawSleepRTTPeer(pair *netns.Pair, backend string, lim limit) ([]time.Duration, error) {
	e, err := openRawPeer(pair, backend, 1, "peer-raw-sleep")
	if err != nil {
		return nil, err
	}
	defer e.close()
	l, req := e.l, e.req
	w, ok := waiter(l)
	if !ok {
		return nil, errors.New("the backend link cannot wait in the netpoller (no nic.Waiter)")
	}
	bufs, sizes := [][]byte{make([]byte, l.MTU()+64)}, []int{0}
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
		n, err := w.WaitReadBatch(bufs, sizes)
		if err != nil {
			return nil, fmt.Errorf("no response: %w", err)
		}
		if n > 0 {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, nil
}

// rawSleepEcho is the raw sleeping ping-pong's far end (peer-raw-sleep,
// rawPeer): it parks in w's WaitReadBatch and sends every frame back with
// its addresses swapped, until stop.
func rawSleepEcho(l nic.Link, w nic.Waiter, stop *atomic.Bool) error {
	bufs, sizes := [][]byte{make([]byte, l.MTU()+64)}, []int{0}
	out := make([][]byte, 1)
	for !stop.Load() {
		n, err := w.WaitReadBatch(bufs, sizes)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return err
		}
		for i := range n {
			out[0] = bufs[i][:sizes[i]]
			swapAddrs(out[0])
			if _, err := l.WriteBatch(out); err != nil {
				return err
			}
		}
	}
	return nil
}
