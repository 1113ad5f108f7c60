package qp

// Asynchronous events (ibv_get_async_event).
//
// What raises what, and where the rule comes from:
//
//   - EventCQErr: a CQ overran (rxe_cq_post raises IB_EVENT_CQ_ERR), then
//     EventQPFatal for each QP using it, which goes to ERR (IBTA C11-25).
//   - EventQPReqErr, EventQPAccessErr, EventQPFatal: the responder NAKed a
//     request with INVALID_REQUEST, REMOTE_ACCESS_ERROR or
//     REMOTE_OPERATIONAL_ERROR and moved its QP to ERR (IBTA 11.6.3.1,
//     "Invalid Request / Local Access Violation / Local Work Queue
//     Catastrophic" affiliated errors; mlx5 raises them). rxe raises none
//     of these: its rxe_qp_error (called from the completer's COMPST_ERROR
//     and the responder's RESPST_ERROR) only sets IB_QPS_ERR and schedules
//     the tasks. Requester-side failures (retry exceeded, a NAK received)
//     are reported by the error completion alone, as IBTA, rxe and mlx5 do;
//     so is the class J error of a SEND_WITH_INVALIDATE with a bad rkey.
//   - EventCommEst: a QP in RTR accepted its first packet (IBTA 11.6.3.1;
//     rdmavt's rvt_comm_est, qib, hfi1). rxe does not raise it.
//   - EventPortActive, EventPortErr: the interface of a device opened with
//     OpenInterface went up or down (rxe_port_up / rxe_port_down in
//     rxe_net.c raise IB_EVENT_PORT_ACTIVE / IB_EVENT_PORT_ERR on
//     NETDEV_UP / NETDEV_DOWN and carrier changes). Linux only (netlink).
//   - EventDeviceFatal: the link's receive path failed for good while the
//     device was open.
//   - EventSQDrained: a QP moved to SQD has no send WR in progress any
//     more, once per entry into SQD (the engine's EventSQDrained; rxe_req.c
//     req_check_sq_drain_done, rxe_comp.c comp_check_sq_drain_done).
//   - EventSRQLimitReached: a message took a WR from an SRQ and fewer than
//     its armed limit remain (rxe get_srq_wqe raises
//     IB_EVENT_SRQ_LIMIT_REACHED and sets the limit to 0); once per arming.
//
//   - EventQPLastWQEReached: a QP created on an SRQ entered ERR, however
//     it got there (an error, ibv_modify_qp to ERR, its CQ overrun, its
//     SRQ failing), after the WQE it held from the SRQ completed with
//     WR_FLUSH_ERR: it takes no more WQEs from the SRQ, so the application
//     may destroy it without losing any (IBTA 11.6.3, o11-5.2.5). Once per
//     entry into ERR. rxe raises it when its responder runs in ERR on a QP
//     with an SRQ (rxe_resp.c flush_recv_queue, since Linux 6.4); so do
//     mlx5, cxgb4 and rdmavt.
//   - EventSRQErr: an SRQ failed (IBTA's SRQ catastrophic error; mlx5,
//     hns and qedr raise it from a hardware SRQ_CATAS_ERROR, rxe never).
//     The only way a goroce SRQ fails is its device failing: when the
//     link's receive path ends or its interface is deleted (DEVICE_FATAL),
//     every SRQ not destroyed
//     raises SRQ_ERR, the QPs on it go to ERR (each raising LAST_WQE_REACHED,
//     IBTA 10.2.9.5: no QP receives from an SRQ in error) and PostRecv on it
//     fails with ErrSRQFailed.
//
// The QP events (QP_FATAL, QP_REQ_ERR and QP_ACCESS_ERR of a NAK sent,
// COMM_EST, SQ_DRAINED, SRQ_LIMIT_REACHED, QP_LAST_WQE_REACHED) are the
// engine's: it reports them through its event sink (transport.EventSink)
// during the call that caused them, and qpHooks.Event maps them. The
// others are the device's own, raised where they happen.
//
// EventPathMig and EventPathMigErr do not apply (goroce has no alternate
// path: APM is not implemented, like rxe, whose IB_DEVICE_AUTO_PATH_MIG
// flag is set but which has no migration logic).

import (
	"context"
	"errors"
	"sync"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// AsyncEventType is an asynchronous event type; the values are
// libibverbs' enum ibv_event_type, String gives its name without the
// IBV_EVENT_ prefix.
type AsyncEventType int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=AsyncEventType -linecomment -output=events_string.go

const (
	EventCQErr            AsyncEventType = 0  // CQ_ERR
	EventQPFatal          AsyncEventType = 1  // QP_FATAL
	EventQPReqErr         AsyncEventType = 2  // QP_REQ_ERR
	EventQPAccessErr      AsyncEventType = 3  // QP_ACCESS_ERR
	EventCommEst          AsyncEventType = 4  // COMM_EST
	EventSQDrained        AsyncEventType = 5  // SQ_DRAINED
	EventPathMig          AsyncEventType = 6  // PATH_MIG
	EventPathMigErr       AsyncEventType = 7  // PATH_MIG_ERR
	EventDeviceFatal      AsyncEventType = 8  // DEVICE_FATAL
	EventPortActive       AsyncEventType = 9  // PORT_ACTIVE
	EventPortErr          AsyncEventType = 10 // PORT_ERR
	EventLIDChange        AsyncEventType = 11 // LID_CHANGE
	EventPKeyChange       AsyncEventType = 12 // PKEY_CHANGE
	EventSMChange         AsyncEventType = 13 // SM_CHANGE
	EventSRQErr           AsyncEventType = 14 // SRQ_ERR
	EventSRQLimitReached  AsyncEventType = 15 // SRQ_LIMIT_REACHED
	EventQPLastWQEReached AsyncEventType = 16 // QP_LAST_WQE_REACHED
	EventClientReregister AsyncEventType = 17 // CLIENT_REREGISTER
	EventGIDChange        AsyncEventType = 18 // GID_CHANGE
	EventWQFatal          AsyncEventType = 19 // WQ_FATAL
)

// AsyncEvent is one asynchronous event (struct ibv_async_event): its type
// and the object it concerns.
type AsyncEvent struct {
	Type AsyncEventType
	// QP is the queue pair of the QP events (QP_FATAL, QP_REQ_ERR,
	// QP_ACCESS_ERR, COMM_EST, SQ_DRAINED, QP_LAST_WQE_REACHED).
	QP *QP
	// CQ is the completion queue of CQ_ERR, and the overrun CQ that made a
	// QP fatal (QP_FATAL after CQ_ERR).
	CQ *CQ
	// SRQ is the shared receive queue of SRQ_LIMIT_REACHED and SRQ_ERR.
	SRQ *SRQ
	// Port is the port number of PORT_ACTIVE and PORT_ERR (always 1).
	Port int
	// Syndrome is the NAK the responder sent for QP_REQ_ERR,
	// QP_ACCESS_ERR and a responder's QP_FATAL.
	Syndrome wire.Syndrome
	// Err is the link's error (DEVICE_FATAL).
	Err error
	// Dropped is how many events the device discarded, because its queue
	// was full, since the event returned before this one.
	Dropped uint64
}

// AsyncEventQueueLen bounds a device's queue of undelivered events. The
// engines never wait for a reader: past this many, events are dropped and
// counted (AsyncEvent.Dropped, Device.DroppedAsyncEvents).
const AsyncEventQueueLen = 256

// AsyncEvent returns the device's next asynchronous event, blocking until
// there is one, the context ends or the device is closed (ErrClosed, once
// the events queued before Close were returned). It is the Go form of
// ibv_get_async_event; there is nothing to acknowledge.
//
// It blocks rather than handing out a channel for the reasons CQ.Wait
// does: the device keeps a bounded queue it owns (so overflow is counted
// and reported, not a blocked sender), Close ends every wait with
// ErrClosed without a channel close racing the engines, and a context
// bounds each wait. A program that wants a channel runs this in a
// goroutine.
//
// Events are raised while the device is driven: on a busy-poll device only
// while someone polls it.
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	q := &d.ev.queue
	for {
		if ev, ok := q.pop(); ok {
			return ev, nil
		}
		select {
		case <-q.wait():
		case <-d.done:
			if ev, ok := q.pop(); ok {
				return ev, nil
			}
			return AsyncEvent{}, ErrClosed
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		}
	}
}

// DroppedAsyncEvents returns how many events were discarded since the
// device opened because the queue was full.
func (d *Device) DroppedAsyncEvents() uint64 {
	q := &d.ev.queue
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// eventState is the device's async-event machinery.
type eventState struct {
	queue asyncQueue
	// The port as the interface watcher last saw it, under d.mu. A device
	// on no interface (OpenMemoryPair, Open) has an always active port.
	portWatched bool
	portDown    bool // not up with carrier: PORT_DOWN
	ifDown      bool // administratively down (phys_state DISABLED, not POLLING)
}

// setPort records the port's state at open (no event).
func (e *eventState) setPort(active, up bool) {
	e.portWatched, e.portDown, e.ifDown = true, !active, !up
}

// portState records the interface's state and raises PORT_ACTIVE or
// PORT_ERR on a change (counting link_downed, as rxe_port_down does).
func (d *Device) portState(active, up bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := !d.ev.portDown
	d.ev.portDown, d.ev.ifDown = !active, !up
	switch {
	case d.closed || was == active:
	case active:
		d.raise(AsyncEvent{Type: EventPortActive, Port: 1})
	default:
		d.stats.counters[CntLinkDowned]++
		d.raise(AsyncEvent{Type: EventPortErr, Port: 1})
	}
}

// portGone raises DEVICE_FATAL for a deleted interface.
func (d *Device) portGone() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if !d.ev.portDown {
		d.ev.portDown = true
		d.stats.counters[CntLinkDowned]++
		d.raise(AsyncEvent{Type: EventPortErr, Port: 1})
	}
	d.ev.ifDown = true
	d.raise(AsyncEvent{Type: EventDeviceFatal, Err: errInterfaceGone})
	d.failSRQs()
}

var errInterfaceGone = errors.New("qp: the network interface was deleted")

// asyncQueue is a bounded FIFO of events. push never blocks; its own
// lock is a leaf (taken under d.mu or none).
type asyncQueue struct {
	mu      sync.Mutex
	ring    []AsyncEvent
	head, n int
	dropped uint64 // total
	lost    uint64 // since the last event handed out
	ready   chan struct{}
}

func (q *asyncQueue) wait() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready == nil {
		q.ready = make(chan struct{}, 1)
	}
	return q.ready
}

func (q *asyncQueue) push(ev AsyncEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ring == nil {
		q.ring = make([]AsyncEvent, AsyncEventQueueLen)
	}
	if q.n == len(q.ring) {
		q.dropped++
		q.lost++
		return
	}
	q.ring[(q.head+q.n)%len(q.ring)] = ev
	q.n++
	if q.ready == nil {
		q.ready = make(chan struct{}, 1)
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *asyncQueue) pop() (AsyncEvent, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return AsyncEvent{}, false
	}
	ev := q.ring[q.head]
	q.ring[q.head] = AsyncEvent{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	ev.Dropped, q.lost = q.lost, 0
	if q.n > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return ev, true
}

// raise queues ev for AsyncEvent.
func (d *Device) raise(ev AsyncEvent) { d.ev.queue.push(ev) }

// public converts the device core's event record.
func (ev asyncEvent) public() AsyncEvent {
	t := EventCQErr
	if ev.kind == eventQPFatal {
		t = EventQPFatal
	}
	return AsyncEvent{Type: t, QP: ev.qp, CQ: ev.cq}
}

// qpHooks sit between one QP's engine and the device. As the engine's
// transport.Output they forward its frames to the device's transmit batch
// (and loop a multicast datagram back to the device's own members); as its
// transport.EventSink they turn its events into AsyncEvents (Event, the
// one place that does).
type qpHooks struct {
	d   *Device
	out transport.Output
	eng *transport.QP
	q   *QP
	buf []byte
}

// qpHooks returns the hooks for a QP about to be created (d.mu held);
// attach completes them once its engine and QP exist.
func (d *Device) qpHooks() *qpHooks {
	return &qpHooks{d: d, out: &d.tx}
}

func (h *qpHooks) attach(eng *transport.QP, q *QP) { h.eng, h.q = eng, q }

// Frame implements transport.Output.
func (h *qpHooks) Frame() []byte {
	h.buf = h.out.Frame()
	return h.buf
}

// Send implements transport.Output.
func (h *qpHooks) Send(n int) {
	h.out.Send(n)
	if h.buf[0]&1 != 0 && len(h.d.mc.groups) > 0 {
		h.d.loopMcast(h.eng.QPN(), h.buf[:n]) // a group's datagram (mcast.go)
	}
}

// Event implements transport.EventSink: it maps the engine's events to
// the application's AsyncEvents (d.mu held: the engine is only called
// under it). An error is an affiliated event only when IBTA names one
// (its class: the responder NAKed a request with INVALID_REQUEST,
// REMOTE_ACCESS_ERROR or REMOTE_OPERATIONAL_ERROR); the requester's
// errors, and UC's and UD's, are reported by their completion alone.
func (h *qpHooks) Event(ev transport.Event) {
	q, d := h.q, h.d
	if q == nil || q.destroyed {
		return
	}
	switch ev.Kind {
	case transport.EventError:
		var t AsyncEventType
		switch ev.Class {
		case transport.ErrorRequest:
			t = EventQPReqErr
		case transport.ErrorAccess:
			t = EventQPAccessErr
		case transport.ErrorFatal:
			t = EventQPFatal
		default:
			return
		}
		d.raise(AsyncEvent{Type: t, QP: q, Syndrome: ev.Syndrome})
	case transport.EventCommEst:
		d.raise(AsyncEvent{Type: EventCommEst, QP: q})
	case transport.EventSQDrained:
		d.raise(AsyncEvent{Type: EventSQDrained, QP: q})
	case transport.EventSRQLimit:
		if q.srq != nil {
			d.raise(AsyncEvent{Type: EventSRQLimitReached, SRQ: q.srq})
		}
	case transport.EventLastWQE:
		d.raise(AsyncEvent{Type: EventQPLastWQEReached, QP: q})
	}
}

// linkFailed raises DEVICE_FATAL when the link's receive path ended with
// err while the device was still open.
func (d *Device) linkFailed(err error) {
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.raise(AsyncEvent{Type: EventDeviceFatal, Err: err})
		d.failSRQs()
	}
	d.unlock()
}

// failSRQs puts every SRQ of the failed device into the error state
// (d.mu held): SRQ_ERR, then its QPs to ERR, each raising
// QP_LAST_WQE_REACHED.
func (d *Device) failSRQs() {
	now := d.now()
	for _, s := range d.tab.srqs {
		if s.destroyed || s.failed {
			continue
		}
		s.failed = true
		d.raise(AsyncEvent{Type: EventSRQErr, SRQ: s})
		for _, q := range d.tab.qpList {
			if q.srq == s && q.eng.State() != StateErr && q.eng.State() != StateReset {
				q.eng.Modify(&transport.Attr{State: StateErr}, AttrState, now)
				d.touch(q)
			}
		}
	}
	d.endCall(now)
}
