package perftestcmd

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// bwBi is run_iter_bi, send_bw's bidirectional loop: each side keeps up to
// tx_depth SENDs outstanding per QP while it takes the peer's SENDs on its
// receive queues, reposting each receive while more messages are due. The
// server sends nothing before the client's first message has arrived. The
// report is of our own SENDs (their posts and completions, the peak
// included); a timed run (-D) counts the receives too, as the C loop adds
// both to its iteration count.
func (r *runner) bwBi(p *tool.Poller, size uint64, peer []perftest.KeyMsg) (perftest.BWReport, error) {
	f := r.f
	nq := len(r.qps)
	duration := f.Duration > 0
	iters := int64(f.Iters)
	txDepth, cqMod := int64(f.TxDepth), int64(max(f.CQMod, 1))
	rxDepth := int64(r.sizePerQP())
	postList := int64(max(f.PostList, 1))
	wrs := make([]qp.SendWR, nq)
	sges := make([][1]qp.SGE, nq)
	locBase := make([]uint64, nq)
	for i := range nq {
		wrs[i] = r.sendWR(i, size, peer[i], &sges[i])
		locBase[i] = sges[i][0].Addr
	}
	var tmpl [][]qp.SendWR
	var tmplSGE [][]qp.SGE
	if postList > 1 {
		tmpl, tmplSGE = r.postListWRs(wrs, sges, size, cqMod, postList)
	}
	cycling := size <= r.cycle/2
	scnt, ccnt := make([]int64, nq), make([]int64, nq)
	posted := make([]int64, nq) // receives posted per QP (posted_per_qp, rx_depth to start with)
	for i := range posted {
		posted[i] = rxDepth
	}
	tot := iters * int64(nq)
	var tposted, tcompleted []int64
	if !duration {
		tposted, tcompleted = make([]int64, tot), make([]int64, tot)
		for i := range tcompleted {
			tcompleted[i] = -1
		}
	}
	list, listSGE := make([]qp.SendWR, txDepth), make([]qp.SGE, txDepth)
	var wcs [16]qp.WC
	var totscnt, totccnt, totrcnt, counted int64
	beforeFirstRx := r.server
	start := time.Now()
	var deadline time.Time
	if !beforeFirstRx {
		deadline = start.Add(time.Duration(f.Duration) * time.Second)
	}
	spins := 0
	for {
		if duration {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				break
			}
		} else if totccnt >= tot && totrcnt >= tot {
			break
		}
		progress := false
		for idx, q := range r.qps {
			if beforeFirstRx {
				break
			}
			w := &wrs[idx]
			k := 0
			for (duration || scnt[idx] < iters) && scnt[idx]-ccnt[idx]+postList <= txDepth {
				if !duration {
					tposted[totscnt] = int64(time.Since(start))
				}
				if postList > 1 {
					for j := range tmpl[idx] {
						listSGE[k] = tmplSGE[idx][j]
						list[k] = tmpl[idx][j]
						list[k].SGL = listSGE[k : k+1]
						k++
					}
				} else {
					if cqMod > 1 && scnt[idx]%cqMod == 0 && (duration || scnt[idx] != iters-1) {
						w.Flags &^= qp.SendSignaled
					}
					listSGE[k] = sges[idx][0]
					list[k] = *w
					list[k].SGL = listSGE[k : k+1]
					k++
					if cycling {
						r.increaseAddr(&sges[idx][0].Addr, size, uint64(scnt[idx]), locBase[idx])
					}
				}
				scnt[idx] += postList
				totscnt += postList
				if postList == 1 && (scnt[idx]%cqMod == cqMod-1 || (!duration && scnt[idx] == iters-1)) {
					w.Flags |= qp.SendSignaled
				}
			}
			if k > 0 {
				progress = true
				if n, err := q.PostSendList(list[:k]); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", idx, scnt[idx]-int64(k-n), err)
				}
			}
		}
		n, err := p.TryPoll(r.rcq, wcs[:])
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("poll CQ failed: %w", err)
		}
		if n > 0 {
			progress = true
			if beforeFirstRx {
				beforeFirstRx = false
				deadline = time.Now().Add(time.Duration(f.Duration) * time.Second)
			}
		}
		for i := range n {
			wc := &wcs[i]
			if wc.Status != qp.WCSuccess {
				return perftest.BWReport{}, fmt.Errorf("Completion with error at %s:\n Failed status %d (%v): wr_id %d syndrom 0x0\n rcnt=%d",
					r.side(), wc.Status, wc.Status, wc.WRID, totrcnt)
			}
			id := int(wc.WRID)
			if id >= nq {
				return perftest.BWReport{}, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			totrcnt++
			counted++
			if duration || posted[id]+1 <= iters {
				if err := r.postRecv(id); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", id, totrcnt, err)
				}
				posted[id]++
				if cycling {
					r.increaseAddr(&r.rsge[id][0].Addr, size, uint64(posted[id]), r.rxBase[id])
				}
			}
		}
		n, err = p.TryPoll(r.scq, wcs[:])
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := range n {
			progress = true
			wc := &wcs[i]
			if wc.Status != qp.WCSuccess {
				return perftest.BWReport{}, completionError(r.side(), wc, totscnt, totccnt)
			}
			if id := int(wc.WRID); id < nq {
				ccnt[id] += cqMod
			}
			totccnt += cqMod
			counted += cqMod
			if !duration {
				now := int64(time.Since(start))
				if totccnt >= tot {
					tcompleted[tot-1] = now
				} else {
					tcompleted[totccnt-1] = now
				}
			}
		}
		if progress {
			spins = 0
			continue
		}
		spins++
		if err := p.IdleWait(spins); err != nil {
			return perftest.BWReport{}, err
		}
	}
	if duration {
		return perftest.NewBWReport(size, uint64(counted), time.Duration(f.Duration)*time.Second, 0, f.ReportGbits), nil
	}
	total := time.Duration(tcompleted[tot-1] - tposted[0])
	return perftest.NewBWReport(size, uint64(tot), total, peakDelta(tposted, tcompleted, cqMod, postList), f.ReportGbits), nil
}

// infinite is the reporting side of --run_infinitely
// (handle_signal_print_thread, print_bw_infinite_mode): every -D seconds a
// table line of what completed since the previous one, without a peak,
// until interrupted (runner.stop) or, where the peer's end is what ends
// the run (a bidirectional or send test), until the peer closes the
// exchange.
type infinite struct {
	r          *runner
	size       uint64
	factor     int // run_inf_bi_factor
	period     time.Duration
	last, next time.Time
	lastIters  int64
	report     perftest.BWReport
	stopped    atomic.Bool
	peerGone   atomic.Bool
	unhook     func() bool
	watching   bool          // a goroutine waits for the peer to close the exchange
	gone       chan struct{} // closed when it did
}

// peerGrace is how long a failed traffic phase waits to learn that the
// peer ended the run (its QPs destroyed after it closed the exchange, ours
// see retries exhausted).
const peerGrace = 3 * time.Second

// excuse turns err, a failure of the traffic, into the end of the run when
// the peer has closed the exchange: the peer was interrupted and took its
// QPs with it.
func (in *infinite) excuse(err error) (perftest.BWReport, error) {
	if in.watching {
		select {
		case <-in.gone:
			return in.finish()
		case <-time.After(peerGrace):
		}
	}
	return perftest.BWReport{}, err
}

// infinite returns the reporter of this traffic phase, nil without
// --run_infinitely.
func (r *runner) infinite() *infinite {
	if !r.f.RunInf {
		return nil
	}
	in := &infinite{r: r, size: r.f.Size, factor: 1, period: time.Duration(r.f.ReportPeriod()) * time.Second,
		gone: make(chan struct{})}
	r.inf = in
	if r.f.Bidir && r.verb != perftest.Send {
		in.factor = 2
	}
	stop := r.stop
	if stop == nil {
		stop = context.Background()
	}
	in.unhook = context.AfterFunc(stop, func() { in.stopped.Store(true) })
	if r.f.Bidir || r.verb == perftest.Send {
		// Nothing is exchanged during the traffic: a read returns only when
		// the peer is gone (or when we close the connection at the end).
		go func() {
			var b [1]byte
			r.conn.Read(b[:])
			in.peerGone.Store(true)
			in.stopped.Store(true)
			close(in.gone)
		}()
		in.watching = true
	}
	return in
}

func (in *infinite) begin(t time.Time) {
	if in != nil {
		in.last, in.next = t, t.Add(in.period)
	}
}

func (in *infinite) ended() bool { return in.stopped.Load() }

// maybeReport prints the period's line once the period is over; iters is
// the count of completed messages so far.
func (in *infinite) maybeReport(iters int64) {
	now := time.Now()
	if now.Before(in.next) {
		return
	}
	r := in.r
	in.report = perftest.NewBWReportFactor(in.size, uint64(iters-in.lastIters), now.Sub(in.last), in.factor, r.f.ReportGbits)
	r.printBW(in.report, nil)
	in.lastIters, in.last = iters, now
	in.next = time.Now().Add(in.period)
}

// finish ends the phase. A write/read/atomic_bw client goes on with the
// test's last exchanges (the reports, with its last period's, and the
// close), as upstream's does after SIGINT; otherwise nothing more is
// exchanged.
func (in *infinite) finish() (perftest.BWReport, error) {
	in.unhook()
	r := in.r
	if !r.f.Bidir && r.verb != perftest.Send && !r.server && !in.peerGone.Load() {
		return in.report, nil
	}
	return in.report, errInfiniteEnd
}
