// Package linkcore is what the socket backends' links (afxdp, afpacket,
// udp) share: their counters, their closed flag and the order in which
// Close tears a link down.
package linkcore

import (
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/nic"
)

// Core holds a link's counters and closing state. The zero value is a
// link that is open with all counters zero.
type Core struct {
	// The link's own counters, as nic.Stats names them.
	RxFrames, RxBytes, RxDrops, Wakeups  atomic.Uint64
	TxFrames, TxBytes, TxDrops, RingFull atomic.Uint64
	TxKicks                              atomic.Uint64

	// StatsMu orders Close's release of the socket against the reads of
	// the kernel's counters (Stats' kernel function, a backend's own
	// kernel statistics): under it, a socket Close has released is never
	// read.
	StatsMu sync.Mutex

	closed atomic.Bool
	once   sync.Once
	err    error
}

// Closed reports whether Close has begun.
func (c *Core) Closed() bool { return c.closed.Load() }

// Stats returns the counters; kernel, when set, is called under StatsMu
// and its drops are added to RxDrops and TxDrops. It runs after Close as
// well, and must then not touch the released socket.
func (c *Core) Stats(kernel func() (rxDrops, txDrops uint64)) nic.Stats {
	var kr, kt uint64
	if kernel != nil {
		c.StatsMu.Lock()
		kr, kt = kernel()
		c.StatsMu.Unlock()
	}
	return nic.Stats{
		RxFrames: c.RxFrames.Load(),
		RxBytes:  c.RxBytes.Load(),
		TxFrames: c.TxFrames.Load(),
		TxBytes:  c.TxBytes.Load(),
		RxDrops:  c.RxDrops.Load() + kr,
		TxDrops:  c.TxDrops.Load() + kt,
		RingFull: c.RingFull.Load(),
		Wakeups:  c.Wakeups.Load(),
		TxKicks:  c.TxKicks.Load(),
	}
}

// Close closes a link once: it marks it closed, calls wake, which must
// make every blocked receive and transmit call return (they see Closed),
// then takes rx and tx, the link's receive and transmit locks, so that no
// call is inside the socket any more, and StatsMu, and calls release to
// free the socket. Every call returns release's error.
func (c *Core) Close(rx, tx *sync.Mutex, wake func(), release func() error) error {
	c.once.Do(func() {
		c.closed.Store(true)
		wake()
		rx.Lock()
		tx.Lock()
		c.StatsMu.Lock()
		c.err = release()
		c.StatsMu.Unlock()
		tx.Unlock()
		rx.Unlock()
	})
	return c.err
}
