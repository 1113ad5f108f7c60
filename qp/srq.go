package qp

import (
	"errors"
	"fmt"
	"slices"

	"github.com/goroce/goroce/transport"
)

// SRQInitAttr are the creation attributes of a shared receive queue
// (struct ibv_srq_init_attr's attr).
type SRQInitAttr struct {
	// MaxWR receive WRs may be outstanding (1..MaxSRQWR), each with up to
	// MaxSGE scatter/gather elements (0: 1).
	MaxWR, MaxSGE int
	// Limit arms the limit event at creation, as on rxe (0: not armed).
	Limit uint32
}

// SRQAttr are an SRQ's attributes (struct ibv_srq_attr): Limit is the
// armed limit, 0 when not armed (the event fired, or never armed).
type SRQAttr = transport.SRQAttr

// SRQAttrMask selects what SRQ.Modify changes (enum ibv_srq_attr_mask).
type SRQAttrMask = transport.SRQAttrMask

const (
	SRQAttrMaxWR = transport.SRQAttrMaxWR // IBV_SRQ_MAX_WR: resize the queue
	SRQAttrLimit = transport.SRQAttrLimit // IBV_SRQ_LIMIT: arm the limit event
)

// MaxSRQWR bounds SRQInitAttr.MaxWR.
const MaxSRQWR = transport.MaxSRQWR

// ErrSRQBusy is wrapped by SRQ.Destroy's error while QPs use the SRQ
// (EBUSY, as ib core's ib_destroy_srq_user).
var ErrSRQBusy = transport.ErrSRQBusy

// ErrSRQDestroyed is returned by the calls on an SRQ after SRQ.Destroy.
var ErrSRQDestroyed = errors.New("qp: SRQ destroyed")

// ErrSRQFailed is returned by PostRecv, Modify and Query on an SRQ in the error
// state (after EventSRQErr: its device failed).
var ErrSRQFailed = errors.New("qp: SRQ in the error state")

// SRQ is a shared receive queue (ibv_srq): the QPs created with it in
// InitAttr.SRQ take their receive WRs from it, in posting order, whichever
// QP the message arrives on; the completion goes to that QP's receive CQ
// and names it in WC.QPNum. An empty SRQ answers a SEND with an RNR NAK,
// as an empty receive queue does.
//
// RC and UD QPs can share it. A UD datagram takes one WR; one that an
// empty SRQ cannot take is dropped, and one longer than the WR's buffer
// (the 40-byte GRH area included) completes that WR with
// WCRemInvReqErr, the QP going on (rxe's class E for UD on an SRQ).
//
// When a message takes a WR and fewer than the armed limit remain, the
// device raises EventSRQLimitReached (AsyncEvent.SRQ) and disarms the
// limit; Modify with SRQAttrLimit arms it again.
//
// The receive buffers are checked against the PD of the QP a message
// arrives on, as rxe's responder does (copy_data with qp->pd). The SRQ
// lives under its device's mutex, like the QPs that use it: every call
// takes it.
type SRQ struct {
	dev       *Device
	pd        *PD
	eng       *transport.SRQ
	users     int  // QPs created on it and not destroyed, under dev.mu
	destroyed bool // under dev.mu
	failed    bool // in the error state (EventSRQErr), under dev.mu
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(a SRQInitAttr) (*SRQ, error) {
	d := pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	s := &SRQ{dev: d, pd: pd}
	eng, err := transport.NewSRQ(transport.SRQConfig{MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, Limit: a.Limit})
	if err != nil {
		return nil, fmt.Errorf("qp: %w", err)
	}
	s.eng = eng
	d.tab.srqs = append(d.tab.srqs, s)
	return s, nil
}

// PD returns the protection domain the SRQ was created in.
func (s *SRQ) PD() *PD { return s.pd }

// usable returns why s takes no more calls, or nil (d.mu held).
func (s *SRQ) usable() error {
	if s.dev.closed {
		return ErrClosed
	}
	if s.destroyed {
		return ErrSRQDestroyed
	}
	if s.failed {
		return ErrSRQFailed
	}
	return nil
}

// PostRecv posts a receive work request to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return s.eng.Post(wr.engine())
}

// PostRecvList posts a list of receive work requests under one lock. It
// returns how many were posted; on an error, wrs[n] is the request that
// failed (ibv_post_srq_recv's bad_wr).
func (s *SRQ) PostRecvList(wrs []RecvWR) (int, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.usable(); err != nil {
		return 0, err
	}
	for i := range wrs {
		if err := s.eng.Post(wrs[i].engine()); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// Modify resizes the SRQ (SRQAttrMaxWR; not below the WRs posted nor the
// armed limit) and arms the limit event (SRQAttrLimit; 0 disarms), with
// rxe's checks (ibv_modify_srq).
func (s *SRQ) Modify(a SRQAttr, mask SRQAttrMask) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.eng.Modify(a, mask); err != nil {
		return fmt.Errorf("qp: %w", err)
	}
	return nil
}

// Query returns the attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.usable(); err != nil {
		return SRQAttr{}, err
	}
	return s.eng.Attr(), nil
}

// Destroy removes the SRQ (ibv_destroy_srq). It fails with ErrSRQBusy
// while a QP created on it is not destroyed, and with ErrSRQDestroyed the
// second time. The WRs still posted are dropped without completions.
func (s *SRQ) Destroy() error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.destroyed {
		return ErrSRQDestroyed
	}
	if s.users > 0 {
		return fmt.Errorf("qp: destroy SRQ: %d QPs use it: %w", s.users, ErrSRQBusy)
	}
	s.destroyed = true
	d.tab.srqs = slices.DeleteFunc(d.tab.srqs, func(x *SRQ) bool { return x == s })
	return nil
}

// srqEngine checks InitAttr.SRQ for a QP about to be created on device d
// and returns its engine, nil without one (d.mu held).
func (ia *InitAttr) srqEngine(d *Device) (*transport.SRQ, error) {
	s := ia.SRQ
	if s == nil {
		return nil, nil
	}
	if s.dev != d {
		return nil, fmt.Errorf("qp: create QP: an SRQ of another device: %w", ErrInvalidArgument)
	}
	if s.destroyed {
		return nil, fmt.Errorf("qp: create QP: %w", ErrSRQDestroyed)
	}
	return s.eng, nil
}
