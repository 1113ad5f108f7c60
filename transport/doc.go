// Package transport is goroce's RC (reliable connected) engine: the IBTA
// transport of one queue pair as Linux rxe implements it (rxe_req.c,
// rxe_comp.c, rxe_resp.c), written as a deterministic state machine. A QP
// takes work requests, received packets and the current time, and gives
// frames, completions, events and its next deadline. It has no goroutine,
// no lock and no clock of its own; package qp owns it and serialises every
// call.
//
// # Roles
//
// A QP is three roles over two shared pieces:
//
//	requester  send WQEs → request packets             requester.go  (rxe_req.c)
//	completer  response packets → send completions     completer.go  (rxe_comp.c)
//	responder  the peer's requests → memory, receive   responder.go  (rxe_resp.c)
//	           completions, responses
//
//	sendQueue  the send WQEs, shared by requester and completer   sendqueue.go
//	emitter    builds every frame the QP sends, for requester and emit.go
//	           responder alike
//
// The requester and the completer are the two halves of the sending side.
// The requester owns the PSNs it hands out (nextPSN, psnEnd, sentEnd), the
// AckReq cadence, and the RNR back-off. The completer owns compPSN, the
// retry and RNR budgets and the local ACK timer; it completes WQEs, retires
// them in posting order into the send CQ, and decides when the requester
// must go back (go-back-N) and from which PSN. They call each other only
// through a few named methods: the requester reads compPSN as its window
// base, starts the completer's ACK timer when it sends, and has the
// completer retire a LOCAL_INV it executed; the completer calls the
// requester's goBack, pump and waitRNR.
//
// The responder serves the peer's requester and shares nothing with the
// other two roles except the emitter and the QP's state. It owns the receive
// queue, expPSN, ackPSN, the MSN, the state of the message in progress, and
// the records that answer duplicates: READ resources (replayed from memory)
// and the history of executed atomics (answered from their saved results,
// never executed twice). A QP created with Config.SRQ has no receive queue:
// its responder takes each message's WQE from the shared receive queue
// (srq.go), which several QPs consume and which knows no QP type.
//
// QP itself is the composition: it keeps the configuration, the attributes
// and the state machine (Modify, after ib_modify_qp_is_ok), the counters and
// the receive filters (addresses, P_Key, opcode, state). Receive hands
// requests to the responder and responses to the completer. A failure in
// any role moves the whole QP to ERR, which flushes both queues.
//
// # The send queue
//
// The send queue is a ring of Caps.MaxSendWR WQEs indexed by three uint64
// counters, taken modulo the ring size. head and tail only grow; req moves
// back on go-back-N, never before head:
//
//	head ≤ req ≤ tail,  tail − head ≤ MaxSendWR
//
//	      head                req                     tail
//	       |  sent (or complete) |  packets still to send |
//	       |  not yet retired    |  (posted ones: suffix) |
//
// PostSend adds at tail. The requester works at req: a WQE gets its PSN
// range when the requester reaches it (posted → sending), and req passes it
// when its last packet is sent (sent). Go-back-N moves req back to the WQE
// that holds the PSN to resend. The completer marks WQEs complete (success
// in PSN order, or an error) and retires them at head, in posting order:
// a CQE for each signalled WR and for every error.
//
// # PSNs
//
// PSNs are 24-bit and compared modulo 2^24 (wire.PSN's Before, After,
// Diff). On the sending side, while the QP is in RTS or SQD and for every
// sequence of responses a conforming responder can send:
//
//	compPSN ≤ nextPSN ≤ sentEnd ≤ psnEnd
//
//	[compPSN, nextPSN)  sent and not acknowledged (a READ's response PSNs
//	                    count as sent with its request)
//	[nextPSN, sentEnd)  sent before and to be sent again after go-back-N
//	                    (counted in retransmitted_pkts)
//	[sentEnd, psnEnd)   assigned to a WQE, never sent (the window was full)
//	psnEnd              the first PSN of the next WQE
//
// Each WQE holds [firstPSN, lastPSN], one PSN per request packet (per
// response packet for a READ, one for an atomic); the ranges of consecutive
// WQEs are adjacent (a LOCAL_INV takes none). The requester sends only while nextPSN − compPSN ≤
// MaxUnackedPSNs (rxe's window). The completer drops responses at or beyond
// sentEnd, for PSNs never sent (rcvd_unknown_psn), and before compPSN
// (rcvd_stale_response, except an error NAK for a READ in progress), and
// moves compPSN forward only. A flush (ERR) sets compPSN = nextPSN = psnEnd.
//
// On the receiving side:
//
//	ackPSN ≤ expPSN
//
// expPSN is the PSN of the next new request: a request before it is a
// duplicate, one after it is out of sequence (one PSN sequence NAK per gap).
// ackPSN is one past the last SEND, WRITE or atomic executed: a READ moves
// only expPSN (by its number of response packets), so [ackPSN, expPSN)
// are the PSNs of READs executed since, and a duplicate SEND/WRITE is
// acknowledged with ackPSN − 1, never beyond a READ the requester may still
// be waiting for.
//
// # Time
//
// The engine never reads the clock: every call that can start or act on a
// timer (PostSend, Modify, Receive, Tick) takes now from the caller. Each
// role reports its own deadline and handles its own timeout, as quic-go's
// packet handlers do (GetLossDetectionTimeout, OnLossDetectionTimeout):
//
//	requester  end of the RNR back-off → resend from compPSN; with
//	           congestion control, when the pacer lets the next packet go
//	           (cc.go, dcqcn.go: DCQCN's rate, a token bucket)
//	completer  local ACK timeout (4.096 µs × 2^timeout) → go-back-N from
//	           compPSN, or RETRY_EXC_ERR when retry_cnt is spent
//	responder  work left for the next call → the time of the last call
//	           ("now"): READ response packets beyond the budget, an owed ACK
//
// Deadline returns the earliest of them. The owner calls Tick(now) at or
// after it; Tick runs the timeout of every role whose deadline has passed
// (a Tick before any deadline does nothing). Any call may move the
// deadline, so the owner asks again after each one.
//
// # Batches: ACK coalescing and READ pacing
//
// The responder sends one cumulative ACK per receive batch, not one per
// request that asks for it (AckReq): it owes the ACK (the latest PSN and
// MSN), and EndBatch sends it. The device calls EndBatch for every QP that
// got a frame, after handing a batch of received frames to its QPs and
// before writing the batch of frames they produced, so the ACK and the
// requests produced in that pass leave in the same WriteBatch. An ACK
// acknowledges every earlier PSN, so coalescing is what IBTA's cumulative
// acknowledgement allows and what mlx5 and hfi1 do. NAKs, ATOMIC ACKs and
// READ responses are never delayed or merged; an owed ACK is sent before
// any of them, so responses leave in PSN order. An owner that never calls
// EndBatch loses nothing: the owed ACK makes the deadline now, and Tick
// sends it.
//
// HoldAck ends a batch without sending the owed ACK yet: the owner's next
// EndBatch sends it (qp holds it until the application's next post, so
// the ACK and the answer leave in one transmit batch), or Tick at the
// bound HoldAck was given, which Deadline reports meanwhile.
//
// READ responses are paced: one engine call sends at most ResponseBudget
// response packets of a QP; the rest of the response, and every response
// owed after it, waits in the responder's queue and the deadline is now,
// so the owner's drive loop calls Tick again after writing the batch (and
// after reading the link). A retried READ for a PSN inside the response in
// progress abandons the rest of it and continues from that PSN. A
// SEND_WITH_INV never overtakes the queued responses of a READ through the
// key it invalidates: they are sent first, as rxe answers a READ whole
// before it takes the next request.
//
// # Inputs and outputs
//
// Inputs: PostSend and PostRecv (work requests, validated like rxe's
// validate_send_wr), Modify (state and attributes), Receive (a packet
// wire.Parse accepted, ICRC checked), EndBatch and HoldAck (the end of a
// receive batch) and Tick (the time). Nothing else changes a QP.
//
// Outputs, each delivered synchronously by the call that produced it:
//
//	frames       Config.Out: Frame, then Send, per frame; the payload is
//	             copied straight from or to registered memory (memreg)
//	             and the headers are built in front of it
//	completions  Config.SendCQ and Config.RecvCQ: Complete, per WC
//	events       Config.Events: Event, per Event (events.go): the QP's
//	             failures (EventError: the affiliated error class, the
//	             completion status, the NAK sent or received and its
//	             syndrome), COMM_EST, SQ_DRAINED, the SRQ limit, Last WQE
//	             Reached
//	deadline     Deadline, asked after each call (see Time)
//	counters     QP.Counters, and Config.DeviceCounters if set, counted
//	             as things happen (counters.go)
//
// The owner learns everything from these: it never parses a frame the
// engine built, compares counters or polls a state to find out what
// happened. The data path allocates nothing; neither does an event.
//
// # UD
//
// A QP made with Config.Type QPTypeUD is a datagram QP (ud.go) and uses
// none of the three roles' RC machinery: PostSend builds its one UD
// SEND_ONLY packet (to the work request's AH and remote QPN, DETH with the
// Q_Key) and completes it at once; Receive checks the Q_Key and hands the
// payload, behind rxe's 40-byte GRH area, to the next receive WQE of the
// responder's queue. Nothing is acknowledged, retried or timed.
package transport
