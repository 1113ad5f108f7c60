package wire

// UDP source ports (PROTOCOL §1.1). The source port only spreads flows over
// ECMP paths and RSS queues; no receiver checks it. Matching the Linux
// choice keeps captures comparable.

// FlowLabel is rdma_calc_flow_label (include/rdma/ib_verbs.h): a symmetric
// 20-bit hash of the two QPNs, so both directions of a connection agree.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// FlowLabelToUDPSport is rdma_flow_label_to_udp_sport: folds a 20-bit flow
// label into the range 0xC000..0xFFFF.
func FlowLabelToUDPSport(fl uint32) uint16 {
	fl &= 0xFFFFF
	return uint16(0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)))
}

// RCSourcePortFL is rdma_get_udp_sport: the port of a given non-zero flow
// label (grh.flow_label), else of the QPN hash. rxe (since Linux 5.13,
// rxe_modify_qp with IB_QP_AV) and mlx5 use it for RC/UC.
func RCSourcePortFL(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	return FlowLabelToUDPSport(fl)
}

// RCSourcePort is RCSourcePortFL with no application flow label.
func RCSourcePort(lqpn, rqpn uint32) uint16 { return RCSourcePortFL(0, lqpn, rqpn) }

// UDSourcePort is rxe's port for a QP that never got an AV with a GRH (UD
// QPs, and QPs before modify): 0xC000 + hash_32(qpn, 14) (rxe_qp_init_req),
// where hash_32(v, 14) = (v * 0x61C88647) >> 18.
func UDSourcePort(qpn uint32) uint16 {
	return uint16(0xC000 + (qpn*0x61C88647)>>18)
}
