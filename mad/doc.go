// Package mad encodes and decodes management datagrams (MADs) and the
// InfiniBand Communication Manager (CM) messages they carry, as the Linux
// kernel's ib_cm sends them over RoCEv2, and the rdma_cm pieces that ride in
// their private data.
//
// A MAD is exactly [MADLen] (256) bytes: a 24-byte common [Header] and a
// 232-byte class payload. On RoCEv2 it travels as a UD SEND_ONLY from QP1 to
// destination QP 1 (the GSI) with Q_Key 0x80010000. The CM class
// ([ClassCM], class version 2) uses [MethodSend] and names its message by
// the header's attribute ID: [AttrREQ], [AttrMRA], [AttrREJ], [AttrREP],
// [AttrRTU], [AttrDREQ], [AttrDREP], [AttrSIDRREQ], [AttrSIDRREP] (and
// [AttrLAP], [AttrAPR], which Linux no longer implements).
//
// Each message is one Go struct ([REQ], [MRA], [REJ], [REP], [RTU], [DREQ],
// [DREP], [SIDRREQ], [SIDRREP]) with every field of the layout in
// IBTA Vol. 1 chapter 12 as Linux declares it (include/rdma/ibta_vol1_c12.h,
// drivers/infiniband/core/cm_msgs.h), including the ECE vendor ID that newer
// kernels put in reserved bytes. Private data is a fixed-size array of the
// size the format gives it, so a message is a plain value and encoding
// allocates nothing. Offsets in the comments are relative to the start of
// the CM payload, MAD byte 24; multi-byte fields are big-endian and bit
// fields are numbered from the most significant bit, as in the IBTA tables.
//
// [Marshal] writes a header and a message into a 256-byte buffer and
// [Parse] reads them back. Reserved bits are written as zero and ignored on
// input, so Parse followed by Marshal reproduces every MAD the kernel sends
// byte for byte.
//
// rdma_cm (librdmacm, drivers/infiniband/core/cma.c) maps IP addresses onto
// the CM: the service ID is the port space and the destination port
// ([ServiceID], [ParseServiceID]), and a REQ's private data starts with a
// 36-byte [CMAHeader] naming both IP endpoints.
package mad
