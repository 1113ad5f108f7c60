package transport

import (
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// UC (unreliable connected) queue pairs, as IBTA 9.8.3 defines them and
// rxe runs them (rxe_req.c next_opcode_uc, rxe_resp.c check_psn,
// check_op_seq and the class D/E errors for IB_QPT_UC):
//
//   - a UC QP is connected like RC (the same path, destination QP, PSNs
//     and state machine without the reliability attributes: state.go's
//     ucTransitions) and sends SEND and RDMA WRITE, with or without
//     immediate, segmented at the path MTU into the opcodes 0x20-0x2B. READ,
//     atomics and SEND_WITH_INV do not exist on UC: posting one fails.
//   - nothing is acknowledged: the requester sends without AckReq, keeps
//     no window and no timer, and a send completes as soon as its last
//     packet has left.
//   - the responder accepts packets in PSN order. A packet that is not
//     the expected one drops the rest of the message in progress silently;
//     the next FIRST or ONLY packet, whatever its PSN, starts the next
//     message, which is delivered whole. A message that cannot be received
//     (no receive posted, a bad length or R_Key, a WRITE without
//     REMOTE_WRITE) is dropped likewise, never NAKed; the receive WQE it
//     had begun to fill is reused for the next message (also one taken
//     from an SRQ, where rxe completes it with an error, class E). Only a
//     receive WQE that cannot be written (class A, a bad lkey) moves the
//     QP to ERR.
//
// Where rxe differs: its check_op_seq, when a FIRST or ONLY arrives while
// a message is still open, resets the receive WQE and then drops that
// packet too (do_class_d1e_error returns RESPST_CLEANUP), and resets its
// expected opcode only when a receive WQE was being filled; so after a
// lost SEND packet rxe loses the next message as well, and after a lost
// WRITE packet every following message. goroce starts the new message
// with that packet, as IBTA's text says ("the packet may be the start of a
// new message and could be valid", rxe's own comment there).

// ucSent completes w, whose last packet just left: UC waits for nothing.
func (r *requester) ucSent(w *sendWQE) {
	r.sq.complete(w, WCSuccess)
	r.comp.compPSN = r.nextPSN
}

// ucReceive handles a UC request packet (rxe_resp.c with IB_QPT_UC).
func (r *responder) ucReceive(p *wire.Packet, now time.Time) {
	r.now = now
	psn := p.BTH.PSN()
	op := p.Opcode()
	pos := op.Info().Pos
	start := pos == wire.PosFirst || pos == wire.PosOnly

	// PSN (check_psn): a packet out of order ends the message in progress;
	// only a FIRST or ONLY, of any PSN, starts receiving again.
	if r.ucDrop || psn != r.expPSN {
		if !start {
			r.ucLose()
			return
		}
		r.ucDrop = false
	}
	// Opcode sequence (check_op_seq): a MIDDLE/LAST must continue the
	// open message with its own kind; a FIRST/ONLY while one is open
	// abandons it (the rest of it was lost).
	if r.respOpcode >= 0 {
		if start {
			r.ucAbandon()
		} else if wire.Opcode(r.respOpcode).IsSend() != op.IsSend() {
			r.ucLose()
			return
		}
	} else if !start {
		r.ucLose()
		return
	}
	// Access (check_op_valid): a WRITE needs REMOTE_WRITE on the QP.
	if op.IsWrite() && r.qp.attr.AccessFlags&memreg.RemoteWrite == 0 {
		r.ucLose()
		return
	}
	switch {
	case op.IsSend():
		r.execSend(p, op, psn)
	case op.IsWrite():
		r.execWrite(p, op, psn)
	default:
		r.ucLose()
	}
}

// ucLose drops the rest of the current message: every packet up to the
// next FIRST/ONLY is ignored. The message counts as dropped once.
func (r *responder) ucLose() {
	if !r.ucDrop {
		r.qp.inc(CntUCMsgDropped)
	}
	r.ucReset()
	r.ucDrop = true
}

// ucAbandon drops the open message because a new one starts before its
// LAST packet came.
func (r *responder) ucAbandon() {
	r.qp.inc(CntUCMsgDropped)
	r.ucReset()
}

// ucReset forgets the message in progress. What it placed stays placed;
// its receive WQE goes back to the start, for the next message (rxe class
// D1: "reset the recv wr to its original state"). On an SRQ the WQE stays
// taken by this QP for its next message, so nothing a peer lost costs a
// receive.
func (r *responder) ucReset() {
	r.respOpcode = -1
	r.recvOff = 0
	r.recvActive = false
}

// ucFail handles a responder error on UC. A receive WQE that cannot be
// written is class A, as on RC but without the NAK: the WQE completes with
// the error and the QP goes to ERR. Everything else (no receive posted, a
// bad length, R_Key or range) drops the message silently, classes D and E.
func (r *responder) ucFail(code wire.NAKCode, status WCStatus) {
	if code == wire.NAKRemoteOperationalError {
		if r.recvHeld() {
			w := r.recvHead()
			r.recvPop()
			wc := WC{WRID: w.wrID, Status: status, Opcode: WCRecv, QPNum: r.qp.cfg.QPN}
			r.qp.recvCompletion(&wc)
		}
		r.ucReset()
		r.qp.fail(Event{Status: status})
		return
	}
	r.ucLose()
}
