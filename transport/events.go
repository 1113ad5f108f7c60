package transport

import "github.com/goroce/goroce/wire"

// EventKind is what an Event reports.
type EventKind uint8

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=EventKind,ErrorClass -linecomment -output=events_string.go

const (
	// EventError: the QP moved itself to ERR (a failure in one of its
	// roles; not a Modify to ERR). Class, Status, Syndrome and NAK say
	// which failure.
	EventError EventKind = iota + 1 // ERROR
	// EventCommEst: the QP, in RTR, accepted its first packet (IBTA
	// 11.6.3.1, Communication Established). Once per QP: a QP that went
	// past RTR before any packet never reports it.
	EventCommEst // COMM_EST
	// EventSQDrained: the QP was moved to SQD and its send queue has
	// drained: every send WR the requester had started before (or went on
	// with in SQD: a message partly sent is finished) has completed and the
	// next one has not started. Once per entry into SQD. That is rxe's
	// condition for IB_EVENT_SQ_DRAINED (rxe_req.c req_check_sq_drain_done,
	// rxe_comp.c comp_check_sq_drain_done); like rxe it does not depend on
	// EN_SQD_ASYNC_NOTIFY.
	EventSQDrained // SQ_DRAINED
	// EventSRQLimit: a message of this QP took a WQE from its SRQ
	// (Config.SRQ) and fewer than the SRQ's armed limit remain; the limit
	// is disarmed (rxe get_srq_wqe). Once per arming.
	EventSRQLimit // SRQ_LIMIT
	// EventLastWQE: the QP, created with an SRQ, entered ERR (however it
	// got there: an error, Modify, its owner) after the WQE it held from
	// the SRQ was flushed: it takes no more WQEs from the SRQ (IBTA 11.6.3
	// o11-5.2.5, Last WQE Reached; rxe flush_recv_queue). Once per entry
	// into ERR.
	EventLastWQE // LAST_WQE
)

// Kinds not reported yet have room after these: path migration (the QP
// has no alternate path: APM is not implemented, as in rxe) and port
// changes, which are the device's (the engine knows no port state).

// ErrorClass is the affiliated asynchronous error IBTA 11.6.3.1 names for
// an EventError, ErrorNone when it names none.
type ErrorClass uint8

const (
	// ErrorNone: an error IBTA reports by the error completion alone: the
	// requester's (a NAK received, retries exhausted, a bad response, a
	// bad local WQE), a UC or UD responder's (which sends no NAK).
	ErrorNone ErrorClass = iota // NONE
	// ErrorFatal: Local Work Queue Catastrophic Error (IBV_EVENT_QP_FATAL):
	// the RC responder failed on its side and NAKed the request with
	// REMOTE_OPERATIONAL_ERROR.
	ErrorFatal // QP_FATAL
	// ErrorRequest: Invalid Request Local Work Queue Error
	// (IBV_EVENT_QP_REQ_ERR): the RC responder NAKed the request with
	// INVALID_REQUEST.
	ErrorRequest // QP_REQ_ERR
	// ErrorAccess: Local Access Violation Work Queue Error
	// (IBV_EVENT_QP_ACCESS_ERR): the RC responder NAKed the request with
	// REMOTE_ACCESS_ERROR.
	ErrorAccess // QP_ACCESS_ERR
)

// NAKDir says whether an EventError's NAK was sent or received.
type NAKDir uint8

const (
	NAKNone NAKDir = iota // no NAK: found locally (retries exhausted, a bad WQE or response)
	NAKSent               // the responder NAKed the peer's request (Syndrome)
	NAKRcvd               // the requester received the NAK (Syndrome)
)

// Event is one thing a QP reports to its owner through Config.Events,
// besides frames and completions. It is a value: the sink may keep it.
type Event struct {
	Kind EventKind
	// QPN is the reporting QP's number.
	QPN uint32
	// EventError only: the affiliated error it is (ErrorNone for the
	// errors reported by their completion alone); the completion status
	// that names the failure (the failed WQE's, send or receive, when one
	// was at hand: a responder's error on a WRITE has none); the NAK sent
	// or received, if any (NAK says which, Syndrome is its AETH syndrome).
	Class    ErrorClass
	Status   WCStatus
	NAK      NAKDir
	Syndrome wire.Syndrome
}

// EventSink receives a QP's events (Config.Events). Event is called
// synchronously, by the engine call that detected the event, in the order
// they happen; like CompletionQueue.Complete it must not call back into
// the engine. Delivering an event allocates nothing.
type EventSink interface {
	Event(ev Event)
}

// emit hands ev to the sink, if there is one.
func (q *QP) emit(ev Event) {
	if q.cfg.Events != nil {
		ev.QPN = q.cfg.QPN
		q.cfg.Events.Event(ev)
	}
}

// nakClass is the affiliated error of a responder's error NAK (IBTA
// 11.6.3.1; the classes mlx5 raises): none for a PSN sequence NAK.
func nakClass(code wire.NAKCode) ErrorClass {
	switch code {
	case wire.NAKInvalidRequest:
		return ErrorRequest
	case wire.NAKRemoteAccessError:
		return ErrorAccess
	case wire.NAKRemoteOperationalError:
		return ErrorFatal
	}
	return ErrorNone
}

// fail moves the QP to ERR after a failure in one of its roles and
// reports it (EventError) first: cause carries Class, Status, NAK and
// Syndrome. Nothing is reported when the QP was already in ERR.
func (q *QP) fail(cause Event) {
	if q.attr.State != StateErr {
		cause.Kind = EventError
		q.emit(cause)
	}
	q.toErr()
}

// commEst reports COMM_EST once the QP in RTR has accepted a packet
// (called after Receive handled one).
func (q *QP) commEst() {
	if q.attr.State == StateRTR && !q.commEstDone {
		q.commEstDone = true
		q.emit(Event{Kind: EventCommEst})
	}
}

// sqdCheck reports SQ_DRAINED when the QP is in SQD, has not reported it
// since it entered SQD, and its send queue has drained: it runs when the
// QP enters SQD and whenever the completer retires WQEs, the two moments
// the condition can become true.
func (q *QP) sqdCheck() {
	if !q.sqDraining || q.attr.State != StateSQD {
		return
	}
	sq := &q.sq
	if sq.head != sq.tail && (sq.req != sq.head || sq.at(sq.head).state != wqePosted) {
		return
	}
	q.sqDraining = false
	q.emit(Event{Kind: EventSQDrained})
}
