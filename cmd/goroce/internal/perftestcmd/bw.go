package perftestcmd

import (
	"fmt"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// The bandwidth tests' traffic loops (perftest_resources.c run_iter_bw,
// run_iter_bw_server) and the peak of their report.

// bwClient is run_iter_bw: keep up to tx_depth messages outstanding on
// each QP, ask for a completion every cq_mod of them (and for the last),
// and time every post and every completion for the peak. With -l the
// unit of posting is a fixed list of post_list WRs (ctx_set_send_wqes: the
// addresses step inside the list and stay put from one post to the next;
// every cq_mod-th WR of the list is signalled), timed once per list.
func (r *runner) bwClient(p *tool.Poller, size uint64, peer []perftest.KeyMsg) (perftest.BWReport, error) {
	f := r.f
	nq := len(r.qps)
	inf := r.infinite()
	duration := f.Duration > 0 || inf != nil
	iters := int64(f.Iters)
	txDepth, cqMod := int64(f.TxDepth), int64(max(f.CQMod, 1))
	wrs := make([]qp.SendWR, nq)
	sges := make([][1]qp.SGE, nq)
	locBase, remBase := make([]uint64, nq), make([]uint64, nq)
	for i := range nq {
		wrs[i] = r.sendWR(i, size, peer[i], &sges[i])
		locBase[i], remBase[i] = sges[i][0].Addr, wrs[i].RemoteAddr
	}
	cycling := size <= r.cycle/2
	scnt, ccnt := make([]int64, nq), make([]int64, nq)
	tot := iters * int64(nq)
	var tposted, tcompleted []int64
	if !duration {
		tposted, tcompleted = make([]int64, tot), make([]int64, tot)
		for i := range tcompleted {
			tcompleted[i] = -1
		}
	}
	postList := int64(max(f.PostList, 1))
	var tmpl [][]qp.SendWR
	var tmplSGE [][]qp.SGE
	if postList > 1 {
		tmpl, tmplSGE = r.postListWRs(wrs, sges, size, cqMod, postList)
	}
	list, listSGE := make([]qp.SendWR, txDepth), make([]qp.SGE, txDepth)
	var wcs [16]qp.WC // CTX_POLL_BATCH
	var totscnt, totccnt int64
	start := time.Now()
	deadline := start.Add(time.Duration(f.Duration) * time.Second)
	inf.begin(start)
	for {
		if inf != nil {
			if inf.ended() {
				break
			}
			inf.maybeReport(totccnt)
		} else if duration {
			if !time.Now().Before(deadline) {
				break
			}
		} else if totscnt >= tot && totccnt >= tot {
			break
		}
		posted := false
		for idx, q := range r.qps {
			w := &wrs[idx]
			// Every WR the window allows goes into one list, posted with one
			// PostSendList: one batch write to the link instead of one per WR
			// (perftest posts them one ibv_post_send at a time; a NIC's
			// doorbell is cheap, a system call is not).
			k := 0
			for postList > 1 && (duration || scnt[idx] < iters) && scnt[idx]-ccnt[idx]+postList <= txDepth {
				if !duration {
					tposted[totscnt] = int64(time.Since(start))
				}
				for j := range tmpl[idx] {
					listSGE[k] = tmplSGE[idx][j]
					list[k] = tmpl[idx][j]
					list[k].SGL = listSGE[k : k+1]
					k++
				}
				posted = true
				scnt[idx] += postList
				totscnt += postList
			}
			for postList == 1 && (duration || scnt[idx] < iters) && scnt[idx]-ccnt[idx] < txDepth {
				if cqMod > 1 && scnt[idx]%cqMod == 0 && (duration || scnt[idx] != iters-1) {
					w.Flags &^= qp.SendSignaled
				}
				if !duration {
					tposted[totscnt] = int64(time.Since(start))
				}
				listSGE[k] = sges[idx][0]
				list[k] = *w
				list[k].SGL = listSGE[k : k+1]
				k++
				posted = true
				if cycling {
					r.increaseAddr(&sges[idx][0].Addr, size, uint64(scnt[idx]), locBase[idx])
					if r.verb != perftest.Send {
						r.increaseAddr(&w.RemoteAddr, size, uint64(scnt[idx]), remBase[idx])
					}
				}
				scnt[idx]++
				totscnt++
				if scnt[idx]%cqMod == cqMod-1 || (!duration && scnt[idx] == iters-1) {
					w.Flags |= qp.SendSignaled
				}
			}
			if k > 0 {
				if n, err := q.PostSendList(list[:k]); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", idx, scnt[idx]-int64(k-n), err)
				}
			}
		}
		if !duration && totccnt >= tot {
			continue
		}
		// With nothing posted the loop can only wait for completions; the
		// C loop spins, p.poll spins a little and then sleeps on the CQ.
		var n int
		var err error
		if posted {
			n, err = p.TryPoll(r.scq, wcs[:])
		} else {
			n, err = p.Poll(r.scq, wcs[:])
		}
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("poll CQ failed: %w", err)
		}
		for i := range n {
			wc := &wcs[i]
			if wc.Status != qp.WCSuccess {
				return perftest.BWReport{}, completionError(r.side(), wc, totscnt, totccnt)
			}
			if id := int(wc.WRID); id < nq {
				ccnt[id] += cqMod
			}
			totccnt += cqMod
			if !duration {
				now := int64(time.Since(start))
				if totccnt >= tot-1 {
					tcompleted[tot-1] = now
				} else {
					tcompleted[totccnt-1] = now
				}
			}
		}
	}
	if inf != nil {
		return inf.finish()
	}
	if duration {
		return perftest.NewBWReport(size, uint64(totccnt), time.Duration(f.Duration)*time.Second, 0, f.ReportGbits), nil
	}
	total := time.Duration(tcompleted[tot-1] - tposted[0])
	return perftest.NewBWReport(size, uint64(tot), total, peakDelta(tposted, tcompleted, cqMod, postList), f.ReportGbits), nil
}

// postListWRs is ctx_set_send_wqes with post_list > 1: per QP a list of
// postList copies of the QP's WR, each one INC further than the previous
// when the size allows cycling, every cqMod-th signalled.
func (r *runner) postListWRs(wrs []qp.SendWR, sges [][1]qp.SGE, size uint64, cqMod, postList int64) ([][]qp.SendWR, [][]qp.SGE) {
	cycling := size <= r.cycle/2
	tmpl, tmplSGE := make([][]qp.SendWR, len(wrs)), make([][]qp.SGE, len(wrs))
	for i := range wrs {
		tmpl[i], tmplSGE[i] = make([]qp.SendWR, postList), make([]qp.SGE, postList)
		locBase, remBase := sges[i][0].Addr, wrs[i].RemoteAddr
		for j := range postList {
			tmplSGE[i][j] = sges[i][0]
			w := wrs[i]
			if j > 0 {
				tmplSGE[i][j].Addr = tmplSGE[i][j-1].Addr
				w.RemoteAddr = tmpl[i][j-1].RemoteAddr
				if cycling {
					r.increaseAddr(&tmplSGE[i][j].Addr, size, uint64(j-1), locBase)
					if r.verb != perftest.Send {
						r.increaseAddr(&w.RemoteAddr, size, uint64(j-1), remBase)
					}
				}
			}
			w.Flags &^= qp.SendSignaled
			if (j+1)%cqMod == 0 {
				w.Flags |= qp.SendSignaled
			}
			tmpl[i][j] = w
		}
	}
	return tmpl, tmplSGE
}

// peakDelta is print_report_bw's search for the peak: the smallest time
// per message over every run of messages from a post i to a completion j
// (j on the cq_mod lattice). It is quadratic like the C code; past ~10^8
// pairs only runs starting at a completion boundary are tried. With post
// lists the posts are timed once per list, every postList messages.
func peakDelta(tposted, tcompleted []int64, cqMod, postList int64) time.Duration {
	n := int64(len(tposted))
	step := postList
	if step == 1 && n*(n/cqMod+1) > 1e8 {
		step = cqMod
	}
	best := int64(-1)
	for i := int64(0); i < n; i += step {
		for j := (i+cqMod)/cqMod*cqMod - 1; j < n; j += cqMod {
			if tcompleted[j] < 0 {
				continue
			}
			t := (tcompleted[j] - tposted[i]) / (j - i + 1)
			if t > 0 && (best < 0 || t < best) {
				best = t
			}
		}
	}
	return time.Duration(max(best, 0))
}

// bwServer is run_iter_bw_server (send_bw's receiver): count the receive
// completions, repost while more messages are due, time from the first
// arrival to the last. Its report has no peak, as the tool's.
func (r *runner) bwServer(p *tool.Poller, size uint64) (perftest.BWReport, error) {
	f := r.f
	nq := len(r.qps)
	iters := int64(f.Iters)
	rxDepth := int64(r.sizePerQP())
	inf := r.infinite()
	duration := f.Duration > 0 || inf != nil
	tot := iters * int64(nq)
	rcntQ := make([]int64, nq)
	var rcnt int64
	var wcs [16]qp.WC
	var first, deadline time.Time
	cycling := size <= r.cycle/2
	spins := 0
	inf.begin(time.Now())
	for duration || rcnt < tot {
		if inf != nil {
			if inf.ended() {
				return inf.finish()
			}
			inf.maybeReport(rcnt)
		} else if duration && !first.IsZero() && !time.Now().Before(deadline) {
			break
		}
		var n int
		var err error
		if duration {
			n, err = p.TryPoll(r.rcq, wcs[:])
			if n == 0 && err == nil {
				spins++
				if err := p.IdleWait(spins); err != nil {
					return perftest.BWReport{}, err
				}
				continue
			}
		} else {
			n, err = p.Poll(r.rcq, wcs[:])
		}
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("Poll Receive CQ failed: %w", err)
		}
		if first.IsZero() {
			first = time.Now()
			deadline = first.Add(time.Duration(f.Duration) * time.Second)
		}
		for i := range n {
			wc := &wcs[i]
			if wc.Status != qp.WCSuccess {
				return perftest.BWReport{}, completionError(r.side(), wc, rcnt, rcnt)
			}
			id := int(wc.WRID)
			if id >= nq {
				return perftest.BWReport{}, fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			rcntQ[id]++
			rcnt++
			if duration || rcntQ[id]+rxDepth <= iters {
				if err := r.postRecv(id); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", id, rcntQ[id], err)
				}
				if cycling {
					r.increaseAddr(&r.rsge[id][0].Addr, size, uint64(rcntQ[id]+rxDepth), r.rxBase[id])
				}
			}
		}
	}
	return perftest.NewBWReport(size, uint64(rcnt), time.Since(first), 0, f.ReportGbits), nil
}
