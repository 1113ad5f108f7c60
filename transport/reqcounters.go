package transport

// countTxRequest counts a request message whose first packet the requester
// sends for the first time (retransmissions are counted by
// retransmitted_pkts, not here).
func (q *QP) countTxRequest(op WROpcode) {
	switch op {
	case WRSend, WRSendWithImm, WRSendWithInv:
		q.inc(CntTxSendRequests)
	case WRRDMAWrite, WRRDMAWriteWithImm, WRAtomicWrite:
		q.inc(CntTxWriteRequests)
	case WRRDMARead:
		q.inc(CntTxReadRequests)
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		q.inc(CntTxAtomicRequests)
	}
}

// MLX5Counter reports whether c is one of mlx5's hw counters, under
// mlx5's name (drivers/infiniband/hw/mlx5/counters.c).
func MLX5Counter(c Counter) bool {
	return c == CntRxWriteRequests || c == CntRxReadRequests || c == CntRxAtomicRequests
}
