package qp

import "github.com/goroce/goroce/transport"

// UC queue pairs. A QP created with InitAttr{Type: QPTypeUC} is connected
// like an RC QP (QP.Connect, or the modify calls of rdma-core's
// ibv_uc_pingpong: INIT with the access flags, RTR with the path, MTU,
// destination QP and RQ PSN, RTS with the SQ PSN; the RC-only attributes
// are refused) and sends SEND and RDMA WRITE, with or without immediate.
// READ, atomics and SEND_WITH_INV fail at PostSend with
// ErrInvalidArgument. Nothing is acknowledged or retried: a send completes
// once its packets have left, and a message that loses a packet on the
// way is dropped silently by the receiver, which goes on with the next one
// (the receive it had begun to fill is reused). CntUCMsgDropped counts the
// messages the receiver dropped. See package transport's uc.go.

// CntUCMsgDropped counts the UC messages the responder dropped part of or
// refused (Counters[...]).
const CntUCMsgDropped = transport.CntUCMsgDropped
