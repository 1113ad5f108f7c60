package transport

import (
	"fmt"
	satomic "sync/atomic"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/wire"
)

// UD (unreliable datagram) queue pairs, as rxe runs them (rxe_req.c,
// rxe_resp.c, rxe_recv.c with qp_type IB_QPT_UD or IB_QPT_GSI):
//
//   - a send is one UD SEND_ONLY (or SEND_ONLY_WITH_IMMEDIATE) packet to the
//     address handle and remote QPN of its work request, carrying a DETH
//     with the Q_Key and the source QPN. There are no ACKs, no retries and
//     no window: the packet leaves during PostSend and the WR completes
//     then. The PSN goes up by one per send and is never checked.
//   - a receive consumes one RECV WQE per packet and writes rxe's 40-byte
//     GRH area in front of the payload (the IPv6 header, or for IPv4 20
//     zero bytes and the IPv4 header), so byte_len is payload + 40.
//   - a packet that cannot be received (no RECV posted, a buffer shorter
//     than 40 + payload, a wrong Q_Key, the QP not in RTR/RTS) is dropped
//     and counted; nothing is sent back.

// QPType is a QP's transport service (enum ibv_qp_type's RC, UC and UD).
type QPType uint8

const (
	// QPTypeRC is the reliable-connected service (the zero value).
	QPTypeRC QPType = 0
	// QPTypeUD is the unreliable-datagram service.
	QPTypeUD QPType = 1
	// QPTypeUC is the unreliable-connected service (uc.go).
	QPTypeUC QPType = 2
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUD:
		return "UD"
	case QPTypeUC:
		return "UC"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// GRHLen is the size of the area in front of every UD receive: rxe's
// union rdma_network_hdr (struct ib_grh, or 20 reserved bytes and an IPv4
// header).
const GRHLen = 40

// GSIQPN is the QP number of the General Services Interface (QP1). A
// datagram from QP1 always carries the GSI Q_Key (rxe_req.c).
const GSIQPN = 1

// AH is an address handle (struct ibv_ah): the resolved path to one peer,
// used by the UD sends that name it. It is immutable once made; Destroy
// makes later sends that use it fail.
type AH struct {
	av        AV
	pd        *memreg.PD
	destroyed satomic.Bool
}

// NewAH makes an address handle for av (with its MACs and source GID
// already resolved) in protection domain pd.
func NewAH(pd *memreg.PD, av AV) *AH { return &AH{av: av, pd: pd} }

// AV returns the address vector the handle sends to.
func (ah *AH) AV() AV { return ah.av }

// Destroy releases the handle (ibv_destroy_ah). A send posted with it
// afterwards fails; one posted before has already left.
func (ah *AH) Destroy() error {
	if ah.destroyed.Swap(true) {
		return fmt.Errorf("destroy AH: already destroyed: %w", ErrInvalidArgument)
	}
	return nil
}

// udState is the UD side of a QP: a frame template rebuilt for each send
// (no allocation) and the GRH area of the packet being received.
type udState struct {
	frame wire.Frame
	grh   [GRHLen]byte
}

// udTransitions are ib_modify_qp_is_ok's attributes for UD QPs
// (drivers/infiniband/core/verbs.c qp_state_table, IB_QPT_UD column): a
// Q_Key at INIT, nothing at RTR, only the SQ PSN at RTS.
var udTransitions = func() (t [7][7]transition) {
	for from := range t {
		t[from][StateReset] = transition{ok: true}
		t[from][StateErr] = transition{ok: true}
	}
	t[StateReset][StateErr] = transition{}
	t[StateReset][StateInit] = transition{ok: true, req: AttrPKeyIndex | AttrPort | AttrQKey}
	t[StateInit][StateInit] = transition{ok: true, optional: AttrPKeyIndex | AttrPort | AttrQKey}
	t[StateInit][StateRTR] = transition{ok: true, optional: AttrPKeyIndex | AttrQKey}
	t[StateRTR][StateRTS] = transition{ok: true, req: AttrSQPSN, optional: AttrCurState | AttrQKey}
	t[StateRTS][StateRTS] = transition{ok: true, optional: AttrCurState | AttrQKey}
	t[StateRTS][StateSQD] = transition{ok: true, optional: AttrEnSQDAsyncNotify}
	t[StateSQD][StateRTS] = transition{ok: true, optional: AttrCurState | AttrQKey}
	t[StateSQD][StateSQD] = transition{ok: true, optional: AttrPKeyIndex | AttrQKey}
	return t
}()

// checkUDTransition validates mask for cur→next of a UD QP.
func checkUDTransition(cur, next State, mask AttrMask) error {
	return checkTransitionIn(&udTransitions, "UD", cur, next, mask)
}

// Type returns the QP's transport service.
func (q *QP) Type() QPType { return q.cfg.Type }

// udQKey is the Q_Key a send puts in its DETH: QP1 always sends the GSI
// Q_Key (rxe_req.c); otherwise the WR's, unless its high bit is set, which
// IBTA (10.2.5, C10-15) reserves to mean "the QP's own Q_Key" (mlx5 does
// this in hardware; rxe sends the WR's value as it is, so the rule only
// matters for privileged Q_Keys, which rxe peers never use).
func (q *QP) udQKey(wr *SendWR) uint32 {
	if q.cfg.QPN == GSIQPN {
		return wire.GSIQKey
	}
	if wr.RemoteQKey&0x80000000 != 0 {
		return q.attr.QKey
	}
	return wr.RemoteQKey
}

// udPostSend validates a UD send work request and sends its one packet.
func (q *QP) udPostSend(wr *SendWR, now time.Time) error {
	st := q.attr.State
	if st != StateRTS && st != StateErr {
		return fmt.Errorf("post send in state %v (UD sends need RTS): %w", st, ErrInvalidArgument)
	}
	cfg := &q.cfg
	if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
		return fmt.Errorf("post send: opcode %v not supported on UD (SEND and SEND_WITH_IMM only): %w", wr.Opcode, ErrInvalidArgument)
	}
	if len(wr.SGL) > cfg.Caps.MaxSendSGE {
		return fmt.Errorf("post send: %d SGEs > max_send_sge %d: %w", len(wr.SGL), cfg.Caps.MaxSendSGE, ErrInvalidArgument)
	}
	ah := wr.AH
	if ah == nil {
		return fmt.Errorf("post send: a UD send needs an address handle: %w", ErrInvalidArgument)
	}
	if ah.destroyed.Load() {
		return fmt.Errorf("post send: the address handle was destroyed: %w", ErrInvalidArgument)
	}
	if ah.pd != cfg.PD {
		return fmt.Errorf("post send: the address handle belongs to another PD: %w", ErrInvalidArgument)
	}
	if wr.RemoteQPN == 0 || wr.RemoteQPN > 0xFFFFFF {
		return fmt.Errorf("post send: remote QPN %#x out of range 1..0xffffff: %w", wr.RemoteQPN, ErrInvalidArgument)
	}
	var length uint64
	for _, s := range wr.SGL {
		length += uint64(s.Length)
	}
	if wr.Flags&SendInline != 0 && length > MaxInlineData {
		return fmt.Errorf("post send: %d inline bytes > %d: %w", length, MaxInlineData, ErrInvalidArgument)
	}
	if st == StateErr {
		wc := WC{WRID: wr.WRID, Status: WCWRFlushErr, Opcode: WCSend, QPNum: cfg.QPN}
		q.completion(cfg.SendCQ, &wc)
		return nil
	}
	psn := q.req.nextPSN
	q.req.nextPSN = psn.Add(1)
	status := WCSuccess
	if length > uint64(cfg.PortMaxMTU.Bytes()) {
		// C10-93.1.1 (rxe_req.c): a UD message longer than the port MTU
		// emits no packet and completes without an error.
		q.inc(CntUDSendOverMTU)
	} else if err := q.udSend(wr, ah, psn, int(length)); err != nil {
		// A bad lkey or range (rxe finish_packet: LOC_PROT_ERR); the
		// completer then moves the QP to ERR.
		status = WCLocProtErr
	}
	if status != WCSuccess || cfg.SQSigAll || wr.Flags&SendSignaled != 0 {
		wc := WC{WRID: wr.WRID, Status: status, Opcode: WCSend, QPNum: cfg.QPN}
		if status == WCSuccess {
			wc.ByteLen = uint32(length)
			if wr.Opcode == WRSendWithImm {
				wc.Flags |= WCWithImm
			}
		}
		q.completion(cfg.SendCQ, &wc)
	}
	if status != WCSuccess {
		q.fail(Event{Status: status})
	}
	return nil
}

// udSend builds the UD packet of wr and hands it to the output.
func (q *QP) udSend(wr *SendWR, ah *AH, psn wire.PSN, n int) error {
	av := &ah.av
	f := &q.ud.frame
	*f = wire.Frame{
		DstMAC: av.DMAC, SrcMAC: av.SMAC, HasVLAN: av.HasVLAN, VLAN: av.VLAN,
		SrcIP: av.SGID.Unmap(), DstIP: av.DGID.Unmap(),
		// IPv4 ID 0 with DF, as RC (emitter.tmpl).
		TrafficClass: av.TrafficClass, HopLimit: av.HopLimit,
		// rxe: a UD QP keeps the port rxe_qp_init_req chose from its QPN
		// (no AV is ever set on it); IPv6 flow label 0 as for RC.
		SrcPort: wire.UDSourcePort(q.cfg.QPN),
		BTH: wire.BTHFields{Opcode: wire.UDSendOnly, SE: wr.Flags&SendSolicited != 0, PKey: wire.DefaultPKey,
			// AckReq 0, as rxe sends UD (testdata/rxe/ud_pingpong.pcap):
			// nothing acknowledges a datagram.
			DestQP: wr.RemoteQPN, PSN: psn},
		DETH: wire.DETHFields{QKey: q.udQKey(wr), SrcQP: q.cfg.QPN},
	}
	if wr.Opcode == WRSendWithImm {
		f.BTH.Opcode = wire.UDSendOnlyWithImmediate
		f.ImmDt = wr.Imm
	}
	buf := q.out.buffer()
	hl := f.HeaderLen()
	if len(buf) < hl+n+3+wire.ICRCLen {
		q.inc(CntSendErrors)
		return nil
	}
	if n > 0 {
		if err := q.walkSGL(wr.SGL, 0, uint32(n), false, func(mem []byte, at uint32) { copy(buf[hl+int(at):], mem) }); err != nil {
			return err
		}
	}
	q.out.emit(buf, f, n)
	return nil
}

// udReceive handles a packet for a UD QP, after the owner's checks of the
// destination address and ICRC: rxe_recv.c's type, state and key checks,
// then rxe_resp.c's receive of one datagram.
func (q *QP) udReceive(p *wire.Packet) {
	op := p.Opcode()
	if op != wire.UDSendOnly && op != wire.UDSendOnlyWithImmediate {
		q.inc(CntRcvdBadOpcode)
		return
	}
	if st := q.attr.State; st < StateRTR || st == StateErr {
		q.inc(CntRcvdWrongState)
		return
	}
	if p.BTH.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		q.inc(CntRcvdBadPKey)
		return
	}
	// rxe_recv.c check_keys: QP1 expects the GSI Q_Key, others their own.
	want := q.attr.QKey
	if q.cfg.QPN == GSIQPN {
		want = wire.GSIQKey
	}
	if p.DETH.QKey() != want {
		q.inc(CntRcvdBadQKey)
		return
	}
	q.inc(CntRcvdPkts)
	defer q.commEst() // after the datagram is handled, as RC's Receive
	r := &q.resp
	if !r.recvReady() {
		// rxe RESPST_ERR_RNR on UD: class D, the datagram is dropped
		// (from an empty SRQ too).
		q.inc(CntUDNoRecv)
		return
	}
	w := r.recvHead()
	n := uint32(len(p.Payload))
	if GRHLen+n > w.length {
		// rxe_resp_check_length: a buffer shorter than GRH + payload is
		// RESPST_ERR_LENGTH. Without an SRQ that is class D, a silent
		// drop (IBTA: an invalid UD request is dropped; the WQE stays for
		// the next). On an SRQ it is class E: the WQE, already taken from
		// the SRQ, completes with REM_INV_REQ_ERR and the QP goes on.
		q.inc(CntUDRecvTooShort)
		if q.cfg.SRQ != nil {
			wc := WC{WRID: w.wrID, Status: WCRemInvReqErr, Opcode: WCRecv, QPNum: q.cfg.QPN}
			r.recvPop()
			q.recvCompletion(&wc)
		}
		return
	}
	g := q.ud.grh[:]
	if p.IPv4 != nil {
		clear(g[:GRHLen-wire.IPv4Len])
		copy(g[GRHLen-wire.IPv4Len:], p.L3[:wire.IPv4Len])
	} else {
		copy(g, p.L3[:wire.IPv6Len])
	}
	payload := p.Payload
	err := q.walkSGL(w.sgl[:w.nsge], 0, GRHLen, true, func(mem []byte, at uint32) { copy(mem, g[at:]) })
	if err == nil && n > 0 {
		err = q.walkSGL(w.sgl[:w.nsge], GRHLen, n, true, func(mem []byte, at uint32) { copy(mem, payload[at:]) })
	}
	wc := WC{WRID: w.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: GRHLen + n, QPNum: q.cfg.QPN,
		SrcQP: p.DETH.SrcQP(), Flags: WCGRH}
	if p.Eth != nil {
		wc.Flags |= WCWithSMAC
		wc.SMAC = p.Eth.Src()
	}
	r.recvPop()
	if err != nil {
		// A bad lkey or access in the RECV WQE: RESPST_ERR_MALFORMED_WQE,
		// class A for every QP type; the QP goes to ERR.
		wc = WC{WRID: w.wrID, Status: WCLocQPOpErr, Opcode: WCRecv, QPNum: q.cfg.QPN}
		q.recvCompletion(&wc)
		q.fail(Event{Status: WCLocQPOpErr})
		return
	}
	if op.HasImm() {
		wc.Flags |= WCWithImm
		wc.Imm = p.ImmDt.Imm()
	}
	if p.BTH.SE() {
		wc.Flags |= WCSolicited
	}
	q.recvCompletion(&wc)
}
