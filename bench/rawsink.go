//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// rateSink is rate with B's end in a process of its own (bench -child
// raw-sink, started in namespace B), the shape of the raw reference
// (rawref.go): a sending process and a receiving process, so that on a
// loaded machine each gets the scheduler's share a process gets, and the
// receiver's copies do not compete with the sender for this process's
// GOMAXPROCS. As the reference's receiver does, the sink times its own
// frames: the rate is its count over the time from its first frame to its
// last. The CPU covers both processes (this one's from getrusage around
// the sending; the sink's user+system time when it has exited).
func rateSink(pair *netns.Pair, backend string, payload int, lim limit) (rawRate, error) {
	e, err := openRawPeer(pair, backend, 0, payload, "raw-sink")
	if err != nil {
		return rawRate{}, err
	}
	l, batch, peer := e.l, e.req, e.peer
	finished := false
	defer func() {
		if !finished {
			peer.finish()
		}
		l.Close()
	}()
	c0 := markCPU()
	sent, err := sendFor(l, batch, lim)
	if err != nil {
		return rawRate{}, err
	}
	cpu, cpuErr := markCPU().since(c0)
	if verbose {
		st := l.Stats()
		progress("raw sink rate: sent %d frames, %d kicks, transmit ring or chunks full %d times", sent, st.Wakeups, st.RingFull)
	}
	time.Sleep(300 * time.Millisecond) // the last frames reach the sink
	peer.finish()
	finished = true
	line, ok := peer.lines.next(time.Second)
	var frames uint64
	var first, last int64
	if !ok {
		return rawRate{}, errors.New("raw sink printed no count")
	}
	if _, err := fmt.Sscanf(line, "frames %d first %d last %d", &frames, &first, &last); err != nil {
		return rawRate{}, fmt.Errorf("raw sink: %s", strings.TrimPrefix(line, "error "))
	}
	if frames < 2 || last <= first {
		return rawRate{}, errors.New("nothing received")
	}
	if st := peer.cmd.ProcessState; st != nil {
		cpu.proc += (st.UserTime() + st.SystemTime()).Seconds()
	} else {
		cpuErr = firstErr(cpuErr, errors.New("raw sink: no CPU time"))
	}
	return rawRate{frames: frames, sent: sent, frameLen: len(batch[0]), payload: payload,
		elapsed: time.Duration(last - first), cpu: cpu, cpuErr: cpuErr}, nil
}

// rawSink is the raw-sink child: it reads frames on ifname's backend link
// until stdin ends, then prints "frames N first T0 last T1" (the count, and
// the Unix nanosecond times of the reads that returned the first and the
// last of them).
func rawSink(ifname, backend string) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	l, _, err := qp.OpenInterfaceLink(ctx, ifname, rawLinkOptions(ifname, backend))
	cancel()
	if err != nil {
		return err
	}
	// Frames are counted where the link received them (nic.RxLender: the
	// AF_XDP UMEM), as the reference counts them in place, and as goroce's
	// devices read them: no copy out.
	if r, ok := unwrapTo[nic.RxLender](l, nil); ok {
		r.LendRx(true)
	}
	in := newLineReader(os.Stdin)
	var stopped atomic.Bool
	go func() {
		for range in.ch {
		}
		stopped.Store(true)
		l.Close() // ends ReadBatch
	}()
	bufs := make([][]byte, l.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, l.MTU()+64)
	}
	sizes := make([]int, len(bufs))
	fmt.Println("ready")
	var frames uint64
	var first, last int64
	for {
		n, err := l.ReadBatch(bufs, sizes)
		if n > 0 {
			now := time.Now().UnixNano()
			if frames == 0 {
				first = now
			}
			frames += uint64(n)
			last = now
		}
		if err != nil {
			if stopped.Load() {
				break
			}
			return err
		}
	}
	fmt.Printf("frames %d first %d last %d\n", frames, first, last)
	return nil
}
