package transport

import (
	"errors"
	"fmt"
)

// MaxSRQWR bounds an SRQ's max_wr, as the QP's queues are bounded.
const MaxSRQWR = 1 << 16

// ErrSRQBusy is returned when an SRQ is destroyed while QPs still use it
// (ib core's ib_destroy_srq_user: EBUSY while usecnt is not zero).
var ErrSRQBusy = errors.New("SRQ in use by a QP")

// SRQConfig are the creation attributes of a shared receive queue
// (struct ibv_srq_init_attr).
type SRQConfig struct {
	MaxWR  int // receive WRs outstanding, 1..MaxSRQWR
	MaxSGE int // SGEs per WR, 1..MaxSGE (0: 1, rxe's RXE_MIN_SRQ_SGE)
	// Limit arms the limit event at creation, as rxe's rxe_srq_from_init
	// takes srq_limit from the init attributes (0: not armed). The QP
	// whose responder takes a WQE and leaves fewer than the armed limit
	// reports it (EventSRQLimit).
	Limit uint32
}

// SRQAttr are an SRQ's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int
	MaxSGE int
	Limit  uint32
}

// SRQAttrMask selects what SRQ.Modify changes (enum ibv_srq_attr_mask).
type SRQAttrMask uint32

const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize
	SRQAttrLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm the limit event
)

// SRQ is a shared receive queue (rxe_srq.c): one ring of receive WQEs
// that the responders of every QP created on it consume in posting order.
// A responder takes a WQE when a message that needs one starts (rxe
// get_srq_wqe: the WQE is copied out of the queue at once) and keeps it
// until the message completes. Like QP it has no lock: the owner
// serialises every call on it and on the QPs that use it.
//
// The SRQ knows nothing of the transport service: a responder of any QP
// type takes WQEs with take.
type SRQ struct {
	ring       []recvWQE
	head, tail uint64
	maxSGE     int
	limit      uint32
}

// NewSRQ creates a shared receive queue (rxe_srq_chk_init, rxe_srq_from_init).
func NewSRQ(cfg SRQConfig) (*SRQ, error) {
	if cfg.MaxWR <= 0 || cfg.MaxWR > MaxSRQWR {
		return nil, fmt.Errorf("transport: create SRQ: max_wr %d not in 1..%d: %w", cfg.MaxWR, MaxSRQWR, ErrInvalidArgument)
	}
	if cfg.MaxSGE < 0 || cfg.MaxSGE > MaxSGE {
		return nil, fmt.Errorf("transport: create SRQ: max_sge %d not in 1..%d: %w", cfg.MaxSGE, MaxSGE, ErrInvalidArgument)
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	return &SRQ{ring: make([]recvWQE, cfg.MaxWR), maxSGE: cfg.MaxSGE, limit: cfg.Limit}, nil
}

// Attr returns the attributes (ibv_query_srq): the limit reads 0 once the
// limit event fired.
func (s *SRQ) Attr() SRQAttr {
	return SRQAttr{MaxWR: len(s.ring), MaxSGE: s.maxSGE, Limit: s.limit}
}

// Len returns how many receive WRs are posted and not yet taken.
func (s *SRQ) Len() int { return int(s.tail - s.head) }

// Modify resizes the queue and arms the limit (ibv_modify_srq), with
// rxe's checks (rxe_srq_chk_attr): max_wr in 1..MaxSRQWR and not below an
// armed limit, nor below the WRs posted (rxe_queue_resize); the limit not
// above max_wr. The limit is checked against the size after a resize in
// the same call.
func (s *SRQ) Modify(a SRQAttr, mask SRQAttrMask) error {
	if mask&^(SRQAttrMaxWR|SRQAttrLimit) != 0 {
		return fmt.Errorf("transport: modify SRQ: mask %#x has unknown bits: %w", uint32(mask), ErrInvalidArgument)
	}
	size := len(s.ring)
	if mask&SRQAttrMaxWR != 0 {
		if a.MaxWR <= 0 || a.MaxWR > MaxSRQWR {
			return fmt.Errorf("transport: modify SRQ: max_wr %d not in 1..%d: %w", a.MaxWR, MaxSRQWR, ErrInvalidArgument)
		}
		if s.limit != 0 && uint32(a.MaxWR) < s.limit {
			return fmt.Errorf("transport: modify SRQ: max_wr %d below the armed limit %d: %w", a.MaxWR, s.limit, ErrInvalidArgument)
		}
		if a.MaxWR < s.Len() {
			return fmt.Errorf("transport: modify SRQ: max_wr %d below the %d WRs posted: %w", a.MaxWR, s.Len(), ErrInvalidArgument)
		}
		size = a.MaxWR
	}
	if mask&SRQAttrLimit != 0 && a.Limit > uint32(size) {
		return fmt.Errorf("transport: modify SRQ: srq_limit %d > max_wr %d: %w", a.Limit, size, ErrInvalidArgument)
	}
	if size != len(s.ring) {
		ring := make([]recvWQE, size)
		n := s.Len()
		for i := range n {
			ring[i] = s.ring[(s.head+uint64(i))%uint64(len(s.ring))]
		}
		s.ring, s.head, s.tail = ring, 0, uint64(n)
	}
	if mask&SRQAttrLimit != 0 {
		s.limit = a.Limit
	}
	return nil
}

// Post queues a receive work request (ibv_post_srq_recv; rxe
// post_one_recv: too many SGEs is EINVAL, a full queue ENOMEM).
func (s *SRQ) Post(wr *RecvWR) error {
	if len(wr.SGL) > s.maxSGE {
		return fmt.Errorf("post SRQ recv: %d SGEs > max_sge %d: %w", len(wr.SGL), s.maxSGE, ErrInvalidArgument)
	}
	if s.Len() >= len(s.ring) {
		return fmt.Errorf("post SRQ recv: %d WRs outstanding: %w", len(s.ring), ErrQueueFull)
	}
	s.ring[s.tail%uint64(len(s.ring))].fill(wr)
	s.tail++
	return nil
}

// take moves the oldest posted WQE into w (rxe get_srq_wqe). When fewer
// than the armed limit remain, the limit disarms and take reports it
// (limit): the event fires once per arming.
func (s *SRQ) take(w *recvWQE) (ok, limit bool) {
	if s.head == s.tail {
		return false, false
	}
	*w = s.ring[s.head%uint64(len(s.ring))]
	s.head++
	if s.limit != 0 && uint32(s.Len()) < s.limit {
		s.limit = 0
		limit = true
	}
	return true, limit
}

// fill copies wr into the WQE.
func (w *recvWQE) fill(wr *RecvWR) {
	w.wrID = wr.WRID
	w.nsge = copy(w.sgl[:], wr.SGL)
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	w.length = uint32(min(n, MaxMessageLen))
}

// The responder's receive WQEs come from its own receive queue or, on a
// QP created with an SRQ, from the SRQ: a message that needs one takes it
// (recvReady), the packets place data through recvHead, and the message's
// completion gives it up (recvPop).

// recvReady reports whether a receive WQE is there for a message that
// starts now; from an SRQ it takes it.
func (r *responder) recvReady() bool {
	s := r.qp.cfg.SRQ
	if s == nil {
		return r.rqHead != r.rqTail
	}
	if !r.srqHeld {
		var limit bool
		r.srqHeld, limit = s.take(&r.srqWQE)
		if limit {
			r.qp.emit(Event{Kind: EventSRQLimit})
		}
	}
	return r.srqHeld
}

// recvHeld reports whether a receive WQE is there to complete.
func (r *responder) recvHeld() bool {
	if r.qp.cfg.SRQ != nil {
		return r.srqHeld
	}
	return r.rqHead < r.rqTail
}

// recvHead returns the WQE of the current message.
func (r *responder) recvHead() *recvWQE {
	if r.qp.cfg.SRQ != nil {
		return &r.srqWQE
	}
	return &r.rq[r.rqHead%uint64(len(r.rq))]
}

// recvPop gives up the WQE of the current message once it completed.
func (r *responder) recvPop() {
	if r.qp.cfg.SRQ != nil {
		r.srqHeld = false
		return
	}
	r.rqHead++
}

// flushSRQ completes the WQE a QP on an SRQ took for a message it did not
// finish with WR_FLUSH_ERR, and only that one: the WQEs still in the SRQ
// stay there for the other QPs. rxe's check_resource does the same in the
// error state (resp.wqe, the copied SRQ WQE, completes with
// IB_WC_WR_FLUSH_ERR; with an SRQ nothing else is drained).
func (r *responder) flushSRQ() {
	if !r.srqHeld {
		return
	}
	r.srqHeld = false
	wc := WC{WRID: r.srqWQE.wrID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: r.qp.cfg.QPN}
	r.qp.recvCompletion(&wc)
}
