package transport

// Counter names one QP/device counter. Where rxe has a counter for the same
// event (rxe_hw_counters.c), the name is rxe's.
type Counter int

const (
	CntSentPkts            Counter = iota // sent_pkts
	CntRcvdPkts                           // rcvd_pkts
	CntDuplicateRequest                   // duplicate_request
	CntOutOfSeqRequest                    // out_of_seq_request: gaps NAKed (one per gap, not per packet, as rxe)
	CntRcvdRNRErr                         // rcvd_rnr_err: requester got an RNR NAK
	CntSendRNRErr                         // send_rnr_err: responder sent an RNR NAK
	CntRcvdSeqErr                         // rcvd_seq_err: requester got a PSN sequence NAK
	CntCompleterRetryErr                  // completer_retry_err: go-back-N started by the completer
	CntRetryExceededErr                   // retry_exceeded_err
	CntRetryRNRExceededErr                // retry_rnr_exceeded_err
	CntAckDeferred                        // ack_deferred: request without AckReq, ACK coalesced
	CntLocalAckTimeoutErr                 // local_ack_timeout_err: the ACK timer fired
	CntRetransmittedPkts                  // goroce: packets sent again by go-back-N
	CntRcvdUnknownPSN                     // goroce: response for a PSN never sent, ignored
	CntRcvdStaleResponse                  // goroce: response for an already acknowledged PSN, ignored
	CntRcvdBadAddr                        // goroce: IP addresses do not match the QP's path
	CntRcvdBadPKey                        // goroce: P_Key mismatch
	CntRcvdBadOpcode                      // goroce: not an RC opcode
	CntRcvdWrongState                     // goroce: packet in a state that does not accept it
	CntSentNAKs                           // goroce: NAKs sent (all kinds)
	CntRcvdNAKs                           // goroce: NAKs received (all kinds)
	CntSendErrors                         // goroce: frames that could not be built
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
	"rcvd_seq_err", "completer_retry_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "ack_deferred",
	"local_ack_timeout_err", "retransmitted_pkts", "rcvd_unknown_psn", "rcvd_stale_response", "rcvd_bad_addr",
	"rcvd_bad_pkey", "rcvd_bad_opcode", "rcvd_wrong_state", "sent_naks", "rcvd_naks", "send_errors",
}

func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Counters holds one value per Counter.
type Counters [NumCounters]uint64

// Each calls fn for every counter, in order.
func (c *Counters) Each(fn func(name string, v uint64)) {
	for i, v := range c {
		fn(counterNames[i], v)
	}
}

// Add adds o into c.
func (c *Counters) Add(o *Counters) {
	for i := range c {
		c[i] += o[i]
	}
}
