package perftestcmd

import "github.com/goroce/goroce/qp"

// --use-srq, as perftest_resources.c does it: the side that receives (a
// latency test's both sides, a BW test's server, either side with -b)
// creates one SRQ of rx_depth WRs with one SGE, creates its QPs on it and
// posts every receive there: rx_depth / num_of_qps per QP at the start
// (ctx_set_recv_wqes' size_per_qp), each WR still naming its QP's slot in
// wr_id, so the accounting per QP is the one without an SRQ. A BW client
// without -b receives nothing and has no SRQ.

// srqExists is perftest's srq_exists.
func (r *runner) srqExists() bool {
	return r.f.UseSRQ && (!r.test.BW() || r.server || r.f.Bidir)
}

// createSRQ creates the SRQ when the run has one (ctx_init).
func (r *runner) createSRQ() error {
	if !r.srqExists() {
		return nil
	}
	var err error
	r.srq, err = r.pd.CreateSRQ(qp.SRQInitAttr{MaxWR: r.f.RxDepth, MaxSGE: 1})
	return err
}

// sizePerQP is how many receives each QP's slot has posted at the start.
func (r *runner) sizePerQP() int {
	if r.f.UseSRQ {
		return r.f.RxDepth / len(r.qps)
	}
	return r.f.RxDepth
}

// postRecv posts QP id's receive request to the SRQ or to the QP.
func (r *runner) postRecv(id int) error {
	if r.srq != nil {
		return r.srq.PostRecv(&r.rwr[id])
	}
	return r.qps[id].PostRecv(&r.rwr[id])
}
