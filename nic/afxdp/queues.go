//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"sync"
)

// steering is the XDP program, its bpf_link and the socket map that the
// sockets of OpenQueues share: one program per interface, which redirects
// each frame to the socket of the queue it arrived on (rx_queue_index is
// the map's key).
type steering struct {
	mu   sync.Mutex
	refs int
}

// release drops one socket's reference and reports whether it was the
// last.
func (s *steering) release() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs--
	return s.refs == 0
}

// OpenQueues opens an AF_XDP socket on each of the queues 0..n-1 of the
// interface ifname, with one steering program and one socket map for all
// of them: the program redirects a RoCEv2 frame to the socket of the queue
// it arrived on (its rx_queue_index), as Open's does for one queue. Each
// link is a nic.Link of its own (its own UMEM, rings and counters);
// closing one removes its queue from the map, closing the last detaches
// the program. The interface must have n receive queues (a veth made with
// numrxqueues n, a NIC's combined channels: ethtool -L). n is at most 64.
func OpenQueues(ifname string, n int, opts Options) (_ []*Link, err error) {
	if n < 1 || n > xskMapEntries {
		return nil, fmt.Errorf("afxdp: %d queues: must be in [1, %d]", n, xskMapEntries)
	}
	first, err := Open(ifname, 0, opts)
	if err != nil {
		return nil, err
	}
	links := []*Link{first}
	if n == 1 {
		return links, nil
	}
	first.shared = &steering{refs: 1}
	defer func() {
		if err != nil {
			var errs []error
			for _, l := range links {
				errs = append(errs, l.Close())
			}
			if cerr := errors.Join(errs...); cerr != nil {
				err = fmt.Errorf("%w (closing the queues opened: %v)", err, cerr)
			}
		}
	}()
	if err := opts.fill(); err != nil {
		return nil, err
	}
	for q := 1; q < n; q++ {
		l, err := first.openQueue(q, opts)
		if err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// openQueue opens the socket of queue queue next to first's, sharing its
// program and map (OpenQueues; opts filled).
func (first *Link) openQueue(queue int, opts Options) (_ *Link, err error) {
	l := &Link{
		ifname:    first.ifname,
		ifindex:   first.ifindex,
		queue:     queue,
		hw:        first.hw,
		mode:      first.mode,
		mtu:       first.mtu,
		maxTx:     first.maxTx,
		batch:     opts.BatchSize,
		busy:      max(opts.BusyPoll, 0),
		fd:        -1,
		efd:       -1,
		txfd:      -1,
		frameSize: uint32(opts.FrameSize),
		frameMask: ^uint64(opts.FrameSize - 1),
	}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	if err := l.setupSocket(opts); err != nil {
		return nil, err
	}
	sgErr, err := l.bind(opts, first.multiBuf)
	if err != nil {
		return nil, err
	}
	if first.multiBuf && !l.multiBuf {
		return nil, opError("bind", fmt.Errorf("queue %d: no multi-buffer socket where queue 0 has one: %w", queue, sgErr))
	}
	l.zeroCopy = l.readZeroCopy()
	l.splitTx(opts)
	if err := l.initWait(); err != nil {
		return nil, err
	}
	first.shared.mu.Lock()
	first.shared.refs++
	first.shared.mu.Unlock()
	l.shared, l.xsks, l.prog, l.lnk = first.shared, first.xsks, first.prog, first.lnk
	if err := l.xsks.Put(uint32(queue), uint32(l.fd)); err != nil {
		return nil, opError("XSKMAP update", err)
	}
	opts.Logger.Info("afxdp: queue socket bound", "ifname", l.ifname, "queue", queue, "mode", l.mode,
		"zerocopy", l.zeroCopy, "multi_buffer", l.multiBuf, "mtu", l.mtu)
	return l, nil
}
