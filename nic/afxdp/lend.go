//go:build linux

package afxdp

import (
	"github.com/goroce/goroce/nic"
	"golang.org/x/sys/unix"
)

var _ nic.RxLender = (*Link)(nil)

// LendRx implements nic.RxLender: with on, ReadBatch, TryReadBatch and
// WaitReadBatch set bufs[i] to the frame in its UMEM chunk instead of
// copying it, and the chunks go back to the fill ring at the start of the
// next read (or at ReleaseRx). A multi-buffer link does not lend (its
// frames may span chunks) and returns false. With on false it gives the
// lent chunks back and reads copy again.
func (l *Link) LendRx(on bool) bool {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if !on {
		l.giveBack()
		l.lend = false
		return true
	}
	if l.multiBuf || l.c.Closed() {
		return false
	}
	if l.lent == nil {
		l.lent = make([]uint64, 0, max(l.batch, 64))
	}
	l.lend = true
	return true
}

// ReleaseRx implements nic.RxLender: the chunks the last read lent go back
// to the fill ring.
func (l *Link) ReleaseRx() {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.giveBack()
}

// giveBack puts the lent chunks on the fill ring (rxMu held). The ring has
// a slot for every receive chunk, and a lent one is in none, so they fit;
// after Close the UMEM is gone and there is nothing to give back to.
func (l *Link) giveBack() {
	n := uint32(len(l.lent))
	if n == 0 {
		return
	}
	if !l.c.Closed() && l.fill.descs != nil {
		fn := l.fill.free(n)
		for i := range fn {
			l.fill.descs[(l.fill.prod+i)&l.fill.mask] = l.lent[i]
		}
		l.fill.submit(fn)
		if l.needWakeup && l.fill.needWakeup() {
			rxWakeup(l.fd)
			l.c.Wakeups.Add(1)
		}
	}
	l.lent = l.lent[:0]
}

// lendFrames is receive in lending mode (rxMu held, the lent chunks given
// back): bufs[i] becomes the frame of the i-th of the avail descriptors
// ready on the RX ring, in its chunk (length and capacity the frame's),
// and the chunk is kept in lent. A descriptor out of the UMEM or part of a
// multi-buffer frame (neither happens on a single-buffer socket) is
// dropped, counted, and its chunk given back.
func (l *Link) lendFrames(avail uint32, bufs [][]byte, sizes []int) int {
	got, bytes, bad := 0, 0, uint64(0)
	var used uint32
	for used < avail && got < len(bufs) {
		d := l.rx.descs[(l.rx.cons+used)&l.rx.mask]
		used++
		end := d.Addr + uint64(d.Len)
		if d.Options&unix.XDP_PKT_CONTD != 0 || end > uint64(len(l.umem)) || d.Len == 0 {
			if l.fill.free(1) == 1 {
				l.fill.descs[l.fill.prod&l.fill.mask] = d.Addr & l.frameMask
				l.fill.submit(1)
			}
			bad++
			continue
		}
		bufs[got] = l.umem[d.Addr:end:end]
		sizes[got] = int(d.Len)
		l.lent = append(l.lent, d.Addr&l.frameMask)
		bytes += int(d.Len)
		got++
	}
	l.rx.release(used)
	if bad > 0 {
		l.c.RxDrops.Add(bad)
	}
	l.c.RxFrames.Add(uint64(got))
	l.c.RxBytes.Add(uint64(bytes))
	return got
}
