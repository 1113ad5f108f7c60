package transport

import (
	"fmt"

	"github.com/goroce/goroce/memreg"
)

// Memory windows in the engine (rxe_req.c rxe_do_local_ops, rxe_resp.c
// check_rkey). The window state itself lives in memreg (memreg/mw.go).
//
//   - BIND_MW is a local operation of the send queue: the requester runs it
//     when it reaches the WQE, in posting order (every earlier WQE has had
//     its packets sent, not necessarily acknowledged), honouring SendFence
//     like any other WQE. A failed bind completes the WR with MW_BIND_ERR and
//     moves the QP to ERR (rxe_requester's err path: rxe_qp_error).
//   - LOCAL_INV of a type 2 window is the LOCAL_INV of an MR (requester.go
//     localInvalidate; memreg dispatches on the key's index), and so is a
//     peer's SEND_WITH_INV (responder.go execSend).
//   - Every RETH/AtomicETH goes through QP.remote, which passes the QP's
//     identity so that a type 2 window answers only the QP that bound it.

// BindInfo is the bind of a BIND_MW work request: the window's current
// rkey, the new rkey (its key byte is taken, the index stays the window's),
// and the MR range and rights the window gets (struct ibv_send_wr bind_mw
// as rxe's kernel WQE carries it: mw_rkey, rkey, mr_lkey, addr, length,
// access).
type BindInfo = memreg.Bind

// validateBindMW is rdma-core's rxe validate_send_wr for IBV_WR_BIND_MW: no
// SGEs, no data, no immediate (EINVAL).
func validateBindMW(wr *SendWR, length uint64) error {
	if len(wr.SGL) != 0 || length != 0 || wr.Imm != 0 {
		return fmt.Errorf("post send: BIND_MW carries no SGEs, data or immediate: %w", ErrInvalidArgument)
	}
	return nil
}

// bindMW executes a BIND_MW WQE (rxe_do_local_ops → rxe_bind_mw). It
// reports false when the bind failed; the QP is in ERR then.
func (r *requester) bindMW(w *sendWQE) bool {
	cfg := &r.qp.cfg
	if err := cfg.MRs.BindMW(w.wr.BindMW, cfg.PD, r.qp); err != nil {
		r.comp.fail(w, WCMWBindErr)
		return false
	}
	w.state = wqeComplete
	w.status = WCSuccess
	return true
}

// remote resolves an rkey for a request arriving on q (rxe check_rkey: an
// MR, or a memory window bound for this QP).
func (q *QP) remote(rkey uint32, need memreg.Access, va uint64, length uint32) ([]byte, error) {
	return q.cfg.MRs.RemoteQP(rkey, q.cfg.PD, q, need, va, length)
}
