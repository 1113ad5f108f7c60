package transport

// Counter names one QP/device counter. Where rxe has a counter for the same
// event (rxe_hw_counters.c), the name is rxe's; String returns the name (the
// line comment).
type Counter int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Counter -linecomment -output=counters_string.go

const (
	CntSentPkts         Counter = iota // sent_pkts
	CntRcvdPkts                        // rcvd_pkts
	CntDuplicateRequest                // duplicate_request
	// Gaps NAKed: one per gap, not per packet, as rxe.
	CntOutOfSeqRequest // out_of_seq_request
	// The requester got an RNR NAK.
	CntRcvdRNRErr // rcvd_rnr_err
	// The responder sent an RNR NAK.
	CntSendRNRErr // send_rnr_err
	// The requester got a PSN sequence NAK.
	CntRcvdSeqErr // rcvd_seq_err
	// Go-back-N started by the completer.
	CntCompleterRetryErr   // completer_retry_err
	CntRetryExceededErr    // retry_exceeded_err
	CntRetryRNRExceededErr // retry_rnr_exceeded_err
	// A request without AckReq whose ACK was coalesced.
	CntAckDeferred // ack_deferred
	// The ACK timer fired.
	CntLocalAckTimeoutErr // local_ack_timeout_err

	// More of rxe's counters. The first two count what happens outside
	// the engine: the owner of the engines (package qp) maintains them and
	// the engine never touches them; the engine counts the other two.

	// Frames the link failed to send (rxe: rxe_xmit_packet errors).
	CntSendErr // send_err
	// The port went down (rxe: NETDEV_DOWN or carrier loss).
	CntLinkDowned // link_downed
	// SEND, SEND_WITH_IMM and SEND_WITH_INV work requests.
	CntRDMASends // rdma_sends
	// Successful receive completions.
	CntRDMARecvs // rdma_recvs

	// goroce's own counters.

	// Packets sent again by go-back-N.
	CntRetransmittedPkts // retransmitted_pkts
	// Responses for a PSN never sent, ignored.
	CntRcvdUnknownPSN // rcvd_unknown_psn
	// Responses for an already acknowledged PSN, ignored.
	CntRcvdStaleResponse // rcvd_stale_response
	// Packets whose IP addresses do not match the QP's path.
	CntRcvdBadAddr // rcvd_bad_addr
	// P_Key mismatches.
	CntRcvdBadPKey // rcvd_bad_pkey
	// Packets without an RC opcode.
	CntRcvdBadOpcode // rcvd_bad_opcode
	// Packets in a state that does not accept them.
	CntRcvdWrongState // rcvd_wrong_state
	// NAKs sent (all kinds).
	CntSentNAKs // sent_naks
	// NAKs received (all kinds).
	CntRcvdNAKs // rcvd_naks
	// Frames that could not be built.
	CntSendErrors // send_errors
	// ACKs asked for (AckReq, or a duplicate SEND/WRITE) that were merged
	// into a later cumulative ACK of the same receive batch instead of
	// being sent (QP.EndBatch).
	CntAckCoalesced // ack_coalesced
	// READ responses abandoned part-way because the requester asked again
	// from a PSN inside them (a retry after a lost response packet); the
	// response continues from that PSN.
	CntReadRestarted // read_restarted
	// UD datagrams whose DETH Q_Key is not the QP's (rxe qkey_viol_cntr).
	CntRcvdBadQKey // rcvd_bad_qkey
	// UD datagrams dropped because no receive was posted.
	CntUDNoRecv // ud_no_recv
	// UD datagrams dropped because the receive buffer was shorter than
	// the 40-byte GRH area plus the payload.
	CntUDRecvTooShort // ud_recv_too_short
	// UD sends longer than the port MTU, completed without a packet
	// (C10-93.1.1).
	CntUDSendOverMTU // ud_send_over_mtu
	// UC drops (uc.go): each time the responder abandons a message it
	// lost part of (a PSN gap, a missing FIRST, a new FIRST/ONLY before
	// the LAST) or refuses one (no receive posted, bad length, R_Key or
	// access), silently. A stray or duplicated packet that ends in such a
	// drop counts too; messages lost whole never reach the responder.
	CntUCMsgDropped // uc_msg_dropped
	// The requester stopped with its window full (QP.SetWindow): once per
	// requester step that had a packet to send and could not.
	CntWindowFull // window_full

	// Requests by type (reqcounters.go). The three rx_* that mlx5 has
	// carry mlx5's names (drivers/infiniband/hw/mlx5/counters.c
	// basic_q_cnts); the others are goroce's, named alike.

	// WRITE / WRITE_WITH_IMM messages the responder executed (mlx5).
	CntRxWriteRequests // rx_write_requests
	// READ requests the responder accepted (mlx5).
	CntRxReadRequests // rx_read_requests
	// FETCH_ADD / CMP_SWAP requests the responder executed (mlx5).
	CntRxAtomicRequests // rx_atomic_requests
	// SEND messages (all three kinds) the responder completed.
	CntRxSendRequests // rx_send_requests
	// Request messages the requester started, by type (first transmissions).
	CntTxSendRequests   // tx_send_requests
	CntTxWriteRequests  // tx_write_requests
	CntTxReadRequests   // tx_read_requests
	CntTxAtomicRequests // tx_atomic_requests

	// Congestion control (mlx5's names). The notification point's two are
	// the owner's (package qp), which sees the IP header and sends CNPs.

	// RoCEv2 packets received with ECN = CE.
	CntNPECNMarkedRoCEPackets // np_ecn_marked_roce_packets
	// CNPs sent.
	CntNPCNPSent // np_cnp_sent
	// CNPs the reaction point acted on.
	CntRPCNPHandled // rp_cnp_handled
	// CNPs received with congestion control off or for a QP that does not send.
	CntRPCNPIgnored // rp_cnp_ignored

	// NumCounters is the number of counters.
	NumCounters
)

// Counters holds one value per Counter.
type Counters [NumCounters]uint64

// Each calls fn for every counter, in order.
func (c *Counters) Each(fn func(name string, v uint64)) {
	for i, v := range c {
		fn(Counter(i).String(), v)
	}
}

// Add adds o into c.
func (c *Counters) Add(o *Counters) {
	for i := range c {
		c[i] += o[i]
	}
}
