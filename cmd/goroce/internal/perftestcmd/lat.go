package perftestcmd

import (
	"context"
	"fmt"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// The latency tests' traffic loops (perftest_resources.c run_iter_lat_*):
// strict ping-pong of one message at a time, one sample per iteration.

// latWrite is run_iter_lat_write: both sides RDMA WRITE size bytes to the
// peer's vaddr, the last byte carrying the iteration count; each waits for
// the peer's count in its own target area before writing the next. The
// server writes first (write_lat.pcap: 198.18.0.11 sends the first WRITE).
//
// The C tool spins on the byte (volatile). Here the byte is read only once
// the responder's expected PSN shows the whole WRITE executed (QP.Query
// takes the device lock the write ran under), so the read does not race
// the device, and the peer cannot write again before we answer. With -e
// on a sleeping device the wait sleeps in MR.WaitWrite (a goroce
// extension: the device wakes it when a WRITE lands in the MR) instead of
// spinning; the wire and the peer do not change.
func (r *runner) latWrite(p *tool.Poller, size uint64, peer []perftest.KeyMsg) ([]float64, error) {
	sleep := p.Events && r.dev.Mode() != qp.ModeBusyPoll
	iters := r.f.Iters
	var sge [1]qp.SGE
	wr := r.sendWR(0, size, peer[0], &sge)
	q := r.qps[0]
	postOff := size - 1
	pollOff := uint64(len(r.qps))*r.buffSize + size - 1
	npkts := uint32(max((size+uint64(r.neg.MTU.Bytes())-1)/uint64(r.neg.MTU.Bytes()), 1))
	tposted := make([]time.Duration, iters)
	start := time.Now()
	var wc [1]qp.WC
	var scnt, ccnt, rcnt uint64
	for scnt < iters || ccnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && r.server) {
			rcnt++
			r.peerPSN = r.peerPSN.Add(npkts)
			for spins := 1; ; spins++ {
				seen := r.mr.Writes() // before the look: a WRITE after it moves the count
				if q.Query().RQPSN.Diff(r.peerPSN) >= 0 {
					break
				}
				if sleep {
					if _, err := r.mr.WaitWrite(p.Ctx, seen); err != nil {
						if p.Ctx.Err() != nil {
							err = context.Cause(p.Ctx)
						}
						return nil, fmt.Errorf("waiting for the peer's WRITE %d: %w", rcnt, err)
					}
					continue
				}
				r.dev.Poll() // drives a busy-poll device; nothing in the normal mode
				if err := p.IdleWait(spins); err != nil {
					return nil, fmt.Errorf("waiting for the peer's WRITE %d: %w", rcnt, err)
				}
			}
			p.Watch.Tick()
			if got := r.buf[pollOff]; got != byte(rcnt) {
				return nil, fmt.Errorf("WRITE %d from the peer ended with %d, not its count", rcnt, got)
			}
		}
		if scnt < iters {
			tposted[scnt] = time.Since(start)
			scnt++
			r.buf[postOff] = byte(scnt)
			if err := q.PostSend(&wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if ccnt < iters {
			if _, err := p.Poll(r.scq, wc[:]); err != nil {
				return nil, fmt.Errorf("poll CQ failed: %w", err)
			}
			if wc[0].Status != qp.WCSuccess {
				return nil, completionError(r.side(), &wc[0], int64(scnt), int64(ccnt))
			}
			ccnt++
		}
	}
	return latSamples(tposted, 2), nil
}

// latSend is run_iter_lat_send: the client sends first; each side waits
// for the peer's message, reposts the receive while more are due, and
// answers. Every SEND is signalled and awaited (the C tool asks for one
// completion per cq_mod; with tx_depth 1 that is the same ping-pong).
func (r *runner) latSend(p *tool.Poller, size uint64) ([]float64, error) {
	iters := r.f.Iters
	var sge [1]qp.SGE
	wr := r.sendWR(0, size, perftest.KeyMsg{}, &sge)
	q := r.qps[0]
	rxDepth := uint64(r.sizePerQP())
	tposted := make([]time.Duration, iters)
	start := time.Now()
	var wc [1]qp.WC
	var scnt, rcnt uint64
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !r.server) {
			if _, err := p.Poll(r.rcq, wc[:]); err != nil {
				return nil, fmt.Errorf("poll CQ failed: %w", err)
			}
			if wc[0].Status != qp.WCSuccess {
				return nil, completionError(r.side(), &wc[0], int64(scnt), int64(rcnt))
			}
			rcnt++
			if rcnt+rxDepth <= iters {
				id := int(wc[0].WRID)
				if id >= len(r.qps) {
					return nil, fmt.Errorf("completion for unknown wr_id %d", wc[0].WRID)
				}
				if err := r.postRecv(id); err != nil {
					return nil, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if scnt < iters {
			tposted[scnt] = time.Since(start)
			scnt++
			if err := q.PostSend(&wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if _, err := p.Poll(r.scq, wc[:]); err != nil {
				return nil, fmt.Errorf("poll on Send CQ failed: %w", err)
			}
			if wc[0].Status != qp.WCSuccess {
				return nil, completionError(r.side(), &wc[0], int64(scnt), int64(scnt))
			}
		}
	}
	return latSamples(tposted, 2), nil
}

// latReadAtomic is run_iter_lat for READ and atomics: one operation at a
// time to the peer's vaddr, each awaited.
func (r *runner) latReadAtomic(p *tool.Poller, size uint64, peer []perftest.KeyMsg) ([]float64, error) {
	iters := r.f.Iters
	var sge [1]qp.SGE
	wr := r.sendWR(0, size, peer[0], &sge)
	q := r.qps[0]
	tposted := make([]time.Duration, iters)
	start := time.Now()
	var wc [1]qp.WC
	for scnt := range iters {
		tposted[scnt] = time.Since(start)
		if err := q.PostSend(&wr); err != nil {
			return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if _, err := p.Poll(r.scq, wc[:]); err != nil {
			return nil, fmt.Errorf("poll CQ failed: %w", err)
		}
		if wc[0].Status != qp.WCSuccess {
			return nil, completionError(r.side(), &wc[0], int64(scnt+1), int64(scnt))
		}
	}
	return latSamples(tposted, 1), nil
}

// latSamples is print_report_lat's delta[i] = tposted[i+1] - tposted[i] in
// microseconds, divided by the round-trip factor (2 for the ping-pongs).
func latSamples(tposted []time.Duration, rtt float64) []float64 {
	if len(tposted) < 2 {
		return nil
	}
	s := make([]float64, len(tposted)-1)
	for i := range s {
		s[i] = float64(tposted[i+1]-tposted[i]) / float64(time.Microsecond) / rtt
	}
	return s
}
