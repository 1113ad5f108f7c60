package qp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goroce/goroce/transport"
)

// ErrCQOverrun is returned by Poll once completions were lost because the
// CQ was full, and by posts to the QPs using that CQ. Like rxe's CQ (and
// IBTA C11-25), an overrun CQ is in the error state for good, and every QP
// that uses it was moved to ERR (IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL).
var ErrCQOverrun = errors.New("qp: completion queue overrun")

// CQ is a completion queue. Poll never blocks; Wait blocks until a
// completion is available or the context ends.
type CQ struct {
	dev     *Device // the device that created it: busy-poll mode drives it
	mu      sync.Mutex
	ring    []WC
	head, n int
	overrun bool

	armed         bool // ReqNotify was called and no event fired yet
	solicitedOnly bool
	event         chan struct{}

	// Goroutines sleeping in Wait, and their wake-up (cap 1): a
	// completion signals only when one is registered, and a woken waiter
	// passes the signal on when entries are left for another.
	waiters int
	wake    chan struct{}
	// passive: Wait never drives the device (the GSI's goroutine, which
	// would otherwise keep the link for good; selfdrive.go).
	passive bool
}

// CreateCQ creates a completion queue of at least cqe entries.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe <= 0 || cqe > 1<<20 {
		return nil, fmt.Errorf("qp: create CQ: cqe must be 1..1048576: %w", ErrInvalidArgument)
	}
	if d.isClosed() {
		return nil, ErrClosed
	}
	return &CQ{dev: d, ring: make([]WC, cqe), event: make(chan struct{}, 1), wake: make(chan struct{}, 1)}, nil
}

// cqSink is the engines' view of a CQ: its Complete implements
// transport.CompletionQueue. It is a separate type so that the callback,
// which relies on the device lock the engines run under, is not part of
// CQ's public API.
type cqSink CQ

var _ transport.CompletionQueue = (*cqSink)(nil)

// sink returns the CQ as the engines' completion queue.
func (cq *CQ) sink() *cqSink { return (*cqSink)(cq) }

// Complete implements transport.CompletionQueue (the device lock held).
func (s *cqSink) Complete(wc *transport.WC) { (*CQ)(s).complete((*WC)(wc)) }

// complete adds a completion (called by the engines through cqSink, with
// the device lock held). On a full CQ the completion is lost and the CQ
// goes to the error state (ErrCQOverrun).
func (cq *CQ) complete(wc *WC) {
	cq.dev.drv.completed(cq) // a goroutine driving the link for cq looks again
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.n == len(cq.ring) {
		if !cq.overrun {
			cq.overrun = true
			cq.dev.call.failedCQs = append(cq.dev.call.failedCQs, cq)
			cq.signal()
		}
		return
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	cq.signal()
	if cq.armed && (!cq.solicitedOnly || wc.Flags&WCSolicited != 0 || wc.Status != 0) {
		cq.armed = false
		select {
		case cq.event <- struct{}{}:
		default:
		}
	}
}

// signal wakes a goroutine sleeping in Wait, if one is (cq.mu held).
func (cq *CQ) signal() {
	if cq.waiters > 0 {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
	}
}

// Poll moves up to len(wcs) completions into wcs (ibv_poll_cq). On a
// busy-poll device it first drives the device (Device.Poll).
func (cq *CQ) Poll(wcs []WC) (int, error) {
	cq.dev.drv.pollCQ()
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.take(wcs)
}

// take moves completions into wcs (cq.mu held).
func (cq *CQ) take(wcs []WC) (int, error) {
	k := 0
	for k < len(wcs) && cq.n > 0 {
		wcs[k] = cq.ring[cq.head]
		cq.head = (cq.head + 1) % len(cq.ring)
		cq.n--
		k++
	}
	if cq.overrun {
		return k, ErrCQOverrun
	}
	return k, nil
}

// failed reports whether the CQ overran (its error state).
func (cq *CQ) failed() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.overrun
}

// ReqNotify arms the CQ for one event (ibv_req_notify_cq): the next
// completion (or, with solicitedOnly, the next solicited or error receive
// completion) signals WaitEvent.
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	cq.mu.Lock()
	cq.armed, cq.solicitedOnly = true, solicitedOnly
	cq.mu.Unlock()
}

// WaitEvent blocks until an armed notification fires (ibv_get_cq_event).
// On a busy-poll device it spins, driving the device, instead.
func (cq *CQ) WaitEvent(ctx context.Context) error {
	return cq.dev.drv.waitEvent(ctx, cq)
}

// sleepEvent is WaitEvent where the device runs without the caller.
func (cq *CQ) sleepEvent(ctx context.Context) error {
	select {
	case <-cq.event:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait polls, and when the CQ is empty sleeps until a completion arrives;
// it returns at least one completion or the context's error. It leaves the
// ReqNotify/WaitEvent notification alone. On a
// busy-poll device it never sleeps: it spins on Poll (driving the device,
// yielding the processor between looks) and so burns a core while it waits.
// An empty wcs could never receive a completion: Wait returns an error
// wrapping ErrInvalidArgument at once.
func (cq *CQ) Wait(ctx context.Context, wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, fmt.Errorf("qp: CQ.Wait: no room for a completion (empty wcs): %w", ErrInvalidArgument)
	}
	return cq.dev.drv.waitCQ(ctx, cq, wcs)
}

// Interrupt makes a goroutine waiting in Wait on cq look at its context
// (and whatever else it waits for) again now. A waiter on a self-driving
// device (ModeThreaded on a waitable link) parked on the link itself is
// woken by its context's end too (a context.AfterFunc the device keeps for
// the last context a waiter used); Interrupt wakes it for a reason its
// context does not carry. Elsewhere it does nothing: a sleeping waiter
// watches its context.
func (cq *CQ) Interrupt() {
	d := cq.dev
	d.mu.Lock()
	if !d.closed {
		d.drv.completed(cq)
	}
	d.mu.Unlock()
}

// sleepWait is CQ.Wait where the caller need not drive the device: it
// sleeps until a completion arrives, or, with empty set (self-driving
// waiters, selfdrive.go), calls empty to wait while the CQ is empty (cq.mu
// held, and held again on return).
func (cq *CQ) sleepWait(ctx context.Context, wcs []WC, empty func(context.Context, *CQ) error) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for {
		if n, err := cq.take(wcs); n > 0 || err != nil {
			if cq.n > 0 && cq.waiters > 0 {
				cq.signal() // entries left: another waiter's turn
			}
			return n, err
		}
		if empty != nil {
			if err := empty(ctx, cq); err != nil {
				return 0, err
			}
			continue
		}
		cq.waiters++
		cq.mu.Unlock()
		var err error
		select {
		case <-cq.wake:
		case <-ctx.Done():
			err = ctx.Err()
		}
		cq.mu.Lock()
		cq.waiters--
		if err != nil {
			return 0, err
		}
	}
}
