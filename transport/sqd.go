package transport

// SQDrained reports, once per entry into SQD, that the send queue has
// drained: every send WR the requester had started before the QP entered
// SQD (or continued in SQD: a message partly sent is finished) has
// completed, and the next one, if any, has not started. That is rxe's
// condition for IB_EVENT_SQ_DRAINED (rxe_req.c req_check_sq_drain_done: the
// requester's WQE is the consumer's and still posted; rxe_comp.c
// comp_check_sq_drain_done: comp.psn == req.psn), checked after each call
// into the engine. Like rxe it does not depend on EN_SQD_ASYNC_NOTIFY.
func (q *QP) SQDrained() bool {
	if !q.sqDraining || q.attr.State != StateSQD {
		return false
	}
	sq := &q.sq
	if sq.head != sq.tail && (sq.req != sq.head || sq.at(sq.head).state != wqePosted) {
		return false
	}
	q.sqDraining = false
	return true
}
