package transport

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/atomic"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// IBTA 1.5's memory placement extensions on RC, as Linux rxe implements
// them since 6.2 (rxe_req.c, rxe_resp.c, rxe_comp.c; rdma-core's
// ibv_wr_flush and ibv_wr_atomic_write):
//
//   - RDMA FLUSH (opcode 0x1C: BTH, FETH, RETH, no payload) asks the
//     responder to make [VA, VA+len) of the R_Key's region (selectivity
//     FlushRange), or the whole region (FlushMR), globally visible
//     (placement type FlushGlobal) and/or persistent (FlushPersistent).
//     The responder needs the matching QP access (FLUSH_GLOBAL,
//     FLUSH_PERSISTENT: else NAK invalid request) and MR access (else NAK
//     remote access error), and answers with an RDMA READ RESPONSE ONLY
//     without payload. It uses one PSN and no READ/atomic credit (rxe's
//     check_init_depth does not count it). Writes that reached the
//     responder before the FLUSH are in registered memory already when it
//     executes (every request runs in PSN order under the device lock), so
//     global visibility is immediate; persistence cannot be had (goroce
//     registers no persistent memory: memreg refuses FLUSH_PERSISTENT).
//   - ATOMIC WRITE (opcode 0x1D: BTH, RETH with length 8, 8 bytes of
//     payload) stores the 8 bytes at an 8-aligned VA in one atomic store,
//     ordered behind every earlier request like a WRITE; it needs
//     REMOTE_WRITE on the QP and the region, takes a READ/atomic credit,
//     and is answered like a FLUSH, with an RDMA READ RESPONSE ONLY without
//     payload.
//
// Both are executed once: a duplicate (the requester's retry after a lost
// response) is answered from the responder's record of it and not executed
// again (rxe duplicate_request → res->replay → acknowledge only).

// placement reports FLUSH and ATOMIC_WRITE.
func (o WROpcode) placement() bool { return o == WRFlush || o == WRAtomicWrite }

// validatePlacement checks a FLUSH or ATOMIC_WRITE work request. goroce is
// stricter than rxe's post path, which takes any type and level: a FLUSH
// must name a placement type (1, 2 or 3) and a level (0 or 1), and both
// exist on RC only (rxe_wr_opcode_info has no UC or UD mask for them).
func validatePlacement(wr *SendWR, typ QPType) error {
	if typ != QPTypeRC {
		return fmt.Errorf("post send: %v exists on RC only: %w", wr.Opcode, ErrInvalidArgument)
	}
	if len(wr.SGL) != 0 {
		return fmt.Errorf("post send: %v takes no scatter/gather list: %w", wr.Opcode, ErrInvalidArgument)
	}
	if wr.Opcode == WRFlush {
		if wr.FlushType == 0 || wr.FlushType&^(wire.FlushGlobal|wire.FlushPersistent) != 0 {
			return fmt.Errorf("post send: FLUSH placement type %d: %w", wr.FlushType, ErrInvalidArgument)
		}
		if wr.FlushLevel > wire.FlushMR {
			return fmt.Errorf("post send: FLUSH selectivity level %d: %w", wr.FlushLevel, ErrInvalidArgument)
		}
		if wr.FlushLen > MaxMessageLen {
			return fmt.Errorf("post send: FLUSH of %d bytes > 2^31: %w", wr.FlushLen, ErrInvalidArgument)
		}
	}
	return nil
}

// placementLen is the WQE's length: what its completion reports.
func placementLen(wr *SendWR) uint64 {
	if wr.Opcode == WRAtomicWrite {
		return 8
	}
	return uint64(wr.FlushLen)
}

// sendPlacement sends the one packet of a FLUSH or ATOMIC_WRITE, AckReq
// set as on every packet that ends a request (rxe init_req_packet): FLUSH
// with FETH (feth_init(type, level)) and RETH (flush.rkey, iova,
// dma.resid = the flush length); ATOMIC_WRITE with RETH (length 8) and
// the 8 bytes (finish_packet: memcpy of wqe->dma.atomic_wr).
func (r *requester) sendPlacement(w *sendWQE) {
	op, n := wire.RCFlush, 0
	if w.wr.Opcode == WRAtomicWrite {
		op, n = wire.RCAtomicWrite, 8
	}
	f := r.out.frame(op, w.firstPSN)
	f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
	if op == wire.RCFlush {
		f.FETH = wire.FETHFields{PlacementType: w.wr.FlushType, Selectivity: w.wr.FlushLevel}
	}
	f.BTH.AckReq = true
	r.noackPkts = 0
	buf := r.out.buffer()
	copy(buf[f.HeaderLen():], w.wr.AtomicData[:n])
	r.out.emit(buf, f, n)
}

// placementAccessOK checks the QP's access flags for a FLUSH or an
// ATOMIC_WRITE (rxe check_qp_attr_access): REMOTE_WRITE for ATOMIC_WRITE,
// FLUSH_GLOBAL / FLUSH_PERSISTENT for each placement type a FLUSH asks for.
func (r *responder) placementAccessOK(p *wire.Packet) bool {
	acc := r.qp.attr.AccessFlags
	if p.Opcode() == wire.RCAtomicWrite {
		return acc&memreg.RemoteWrite != 0
	}
	t := p.FETH.PlacementType()
	return (t&wire.FlushGlobal == 0 || acc&memreg.FlushGlobal != 0) &&
		(t&wire.FlushPersistent == 0 || acc&memreg.FlushPersistent != 0)
}

// execFlush executes a FLUSH (rxe check_rkey, process_flush). The MR must
// grant the placement types asked for; a range FLUSH must lie inside it.
func (r *responder) execFlush(p *wire.Packet, psn wire.PSN) {
	va, rkey, length := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	if length > MaxMessageLen {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn) // rxe_resp_check_length, C9-94
		return
	}
	var need memreg.Access
	t := p.FETH.PlacementType()
	if t&wire.FlushGlobal != 0 {
		need |= memreg.FlushGlobal
	}
	if t&wire.FlushPersistent != 0 {
		need |= memreg.FlushPersistent
	}
	var err error
	if p.FETH.Selectivity() == wire.FlushMR {
		err = r.qp.cfg.MRs.KeyQP(rkey, r.qp.cfg.PD, r.qp, need)
	} else {
		_, err = r.qp.remote(rkey, need, va, length)
	}
	if err != nil {
		r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
		return
	}
	// Nothing to write back: every earlier request's bytes are in the
	// registered memory already, visible to every reader of it.
	r.atomicHist.Record(psn, va, rkey, 0)
	r.placed(psn)
}

// execAtomicWrite executes an ATOMIC_WRITE (rxe check_length, check_rkey,
// atomic_write_reply): RETH length and payload both 8, the R_Key and range
// with REMOTE_WRITE (NAK remote access error), then the alignment (NAK
// invalid request), then one atomic store.
func (r *responder) execAtomicWrite(p *wire.Packet, psn wire.PSN) {
	if r.qp.attr.MaxDestRdAtomic == 0 {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn) // RESPST_ERR_TOO_MANY_RDMA_ATM_REQ
		return
	}
	va, rkey := p.RETH.VA(), p.RETH.RKey()
	mem, err := r.qp.remote(rkey, memreg.RemoteWrite, va, p.RETH.DMALen())
	if err != nil {
		r.classC(wire.NAKRemoteAccessError, WCRemAccessErr, psn)
		return
	}
	if p.RETH.DMALen() != 8 || len(p.Payload) != 8 || p.Pad != 0 {
		r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn) // check_rkey: pktlen != resid → ERR_LENGTH
		return
	}
	var v [8]byte
	copy(v[:], p.Payload)
	if err := r.qp.cfg.Atomics.Store(mem, va, v); err != nil {
		if errors.Is(err, atomic.ErrMisaligned) || errors.Is(err, atomic.ErrShort) {
			r.classC(wire.NAKInvalidRequest, WCRemInvReqErr, psn)
		} else {
			r.classC(wire.NAKRemoteOperationalError, WCRemOpErr, psn)
		}
		return
	}
	r.atomicHist.Record(psn, va, rkey, 0)
	r.qp.inc(CntRxWriteRequests)
	r.qp.cfg.MRs.WriteDone(rkey)
	r.placed(psn)
}

// placed finishes a FLUSH or ATOMIC_WRITE like an atomic (rxe: msn++,
// psn + 1, ack_psn) and answers it with an RDMA READ RESPONSE ONLY without
// payload, after whatever ACK is owed (responses stay in PSN order).
func (r *responder) placed(psn wire.PSN) {
	r.msn++
	r.respOpcode = -1
	r.expPSN = psn.Add(1)
	r.ackPSN = r.expPSN
	r.settleAck()
	r.respond(pending{kind: pendPlaced, psn: psn, msn: r.msn})
}

// duplicatePlacement answers a retried FLUSH or ATOMIC_WRITE from its
// record: the same response, nothing executed again (rxe duplicate_request
// finds the resource by PSN and replays only the acknowledgement). A
// request no record matches is dropped (class D).
func (r *responder) duplicatePlacement(p *wire.Packet, psn wire.PSN) {
	rec, ok := r.atomicHist.Lookup(psn)
	if !ok || rec.VA != p.RETH.VA() || rec.RKey != p.RETH.RKey() {
		return
	}
	r.settleAck()
	r.respond(pending{kind: pendPlaced, psn: psn, msn: r.msn})
}

// placedAck sends the READ RESPONSE ONLY that answers a FLUSH or an
// ATOMIC_WRITE (rxe send_read_response_ack: AETH ACK, the MSN, no payload).
func (e *emitter) placedAck(psn wire.PSN, msn uint32) {
	f := e.frame(wire.RCRDMAReadResponseOnly, psn)
	f.AETH = wire.AETHFields{Syndrome: wire.SyndromeACKNoCredit, MSN: msn & wire.PSNMask}
	e.emit(e.buffer(), f, 0)
}
