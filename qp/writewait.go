package qp

import (
	"context"

	"github.com/goroce/goroce/memreg"
)

// Waiting for a peer's RDMA WRITE: a goroce extension.
//
// Verbs gives a responder no event for an RDMA WRITE without immediate:
// perftest's write_lat and similar programs learn of one by polling the
// last byte of the buffer. A goroce device is the NIC, so it offers one
// without changing anything on the wire: every MR counts the RDMA WRITE
// messages (with or without immediate, directly or through a memory
// window) that its device placed into it, once their last packet is in
// memory, and a goroutine can sleep until that count moves:
//
//	n := mr.Writes()
//	// … tell the peer to write …
//	n, err := mr.WaitWrite(ctx, n) // returns when Writes() > n
//
// When WaitWrite returns n the data of those n WRITEs is visible to the
// caller. It returns early with the context's error, with
// memreg.ErrDeregistered or memreg.ErrInvalid when the MR is deregistered
// or invalidated, and with an error wrapping ErrClosed when the device is
// closed. Like CQ.Wait, a waiting goroutine drives the device itself when
// nobody else reads the link (selfdrive.go); on a busy-poll device it
// spins on Device.Poll; on a manual device it only sleeps. The count costs
// one atomic add per WRITE message and nothing else when nobody waits. The
// peer cannot tell: it may be any RoCE implementation.

// spinWrite is MR.WaitWrite on a busy-poll device: drive it until the
// WRITE, the MR's failure, or the end of ctx.
func (b *busyDriver) spinWrite(ctx context.Context, mr *memreg.MR, after uint64) (uint64, error) {
	done := ctx.Done()
	for spins := 1; ; spins++ {
		b.poll()
		if c := mr.Writes(); c > after {
			return c, nil
		}
		if err := mr.WriteErr(); err != nil {
			return mr.Writes(), err
		}
		select {
		case <-done:
			return mr.Writes(), ctx.Err()
		default:
		}
		busyPause(spins)
	}
}
