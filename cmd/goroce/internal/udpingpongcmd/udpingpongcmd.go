// Package udpingpongcmd is the goroce ud_pingpong subcommand:
// ibv_ud_pingpong (rdma-core 44, libibverbs/examples/ud_pingpong.c) on a
// goroce device: a UD QP, the same exchange as ibv_rc_pingpong, an address
// handle to the peer, SENDs of size bytes into receives of size + 40 (the
// GRH area), and the tool's output lines. Package pingpong holds the
// exchange format, flags and lines; package tool the shared ping-pong loop.
package udpingpongcmd

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// qkey is ud_pingpong's Q_Key, on both sides.
const qkey = 0x11111111

const usageText = `Usage:
  goroce ud_pingpong            start a server and wait for connection
  goroce ud_pingpong <host>     connect to server at <host>

Options (those of ibv_ud_pingpong):
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use the network interface <dev> (default: the first one up with IPv4)
  -i, --ib-port=<port>   use port <port> of IB device (default 1, the only one)
  -s, --size=<size>      size of message to exchange (default 1024; at most the port MTU)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<SL>          send messages with service level <SL> (default 0)
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (1: the IPv4 GID; required on RoCE)
  -c, --chk              validate received buffer
goroce options:
  --timeout=<seconds>    give up (exit 1) after this long, waiting for the peer included;
                         a client then retries a refused connection until the timeout
  --srq                  receive through a shared receive queue of rx-depth WRs (the UD QP
                         has no receive queue of its own; the peer cannot tell)
  --metrics=<host:port>  serve /metrics (Prometheus) and /debug/vars (expvar) during the run
  --pcap=<file>          write the frames the device sends and receives to this pcap file
                         (AF_XDP traffic included, which tcpdump on the interface does not see)
Environment: as goroce pingpong (GOROCE_BACKEND, GOROCE_BUSYPOLL, GOROCE_TX_DROP, GOROCE_VERBOSE).
`

// Summary is the command's line in goroce's usage.
const Summary = "ibv_ud_pingpong-compatible UD SEND/RECV ping-pong (server without host, client with host)"

// Run is ibv_ud_pingpong on a goroce device. It returns the exit code.
func Run(env tool.Env, args []string) int { return udTool.Run(env, args) }

var udTool = &pingpong.Tool{
	Name: "ud_pingpong", Usage: usageText, Parse: pingpong.ParseUDFlags,
	Setup: func(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*pingpong.PingPong, error) {
		if mtu := dev.ActiveMTU().Bytes(); int(f.Size) > mtu {
			return nil, fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
		pp, err := initEndpoint(ctx, dev, f)
		if err != nil {
			return nil, err
		}
		return &pp.PingPong, nil
	},
	FormatLocal: pingpong.FormatLocalUD,
	NoGID:       "Could not get local gid for gid index %d\n",
	Connect:     connect,
}

// endpoint is struct pingpong_context of ud_pingpong.c: Buf is the GRH
// area (40 bytes) and the payload.
type endpoint struct {
	pingpong.PingPong
	pd      *qp.PD
	mr      *qp.MR
	sendSGE [1]qp.SGE
	recvSGE [1]qp.SGE
}

// initEndpoint is pp_init_ctx: a buffer of size + 40 bytes filled with
// 0x7b and registered with LOCAL_WRITE, one CQ of rx_depth + 1 entries, a
// UD QP (max_send_wr 1, max_recv_wr rx_depth; SENDs inline when they fit)
// moved to INIT with pkey_index 0, the port and Q_Key 0x11111111.
func initEndpoint(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*endpoint, error) {
	pp := &endpoint{pd: dev.AllocPD()}
	pp.Buf = make([]byte, qp.GRHLen+int(f.Size))
	pp.Payload = pp.Buf[qp.GRHLen:]
	pp.RxDepth = int(f.RxDepth)
	for i := range pp.Buf {
		pp.Buf[i] = 0x7b // memset(ctx->buf, 0x7b, size + 40)
	}
	var err error
	if pp.mr, err = pp.pd.RegMR(pp.Buf, qp.LocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.CQ, err = dev.CreateCQ(int(f.RxDepth) + 1); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	ia := qp.InitAttr{SendCQ: pp.CQ, RecvCQ: pp.CQ, Type: qp.QPTypeUD,
		Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: int(f.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if f.SRQ {
		// --srq: srq_pingpong's ibv_create_srq (max_wr rx_depth, max_sge 1).
		if pp.SRQ, err = pp.pd.CreateSRQ(qp.SRQInitAttr{MaxWR: int(f.RxDepth), MaxSGE: 1}); err != nil {
			return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
		ia.SRQ = pp.SRQ
	}
	pp.QP, err = pp.pd.CreateQP(ia)
	if err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	if err := pp.QP.Modify(ctx, qp.Attr{State: qp.StateInit, PKeyIndex: 0, Port: uint8(f.IBPort), QKey: qkey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	flags := qp.SendSignaled
	if f.Size <= qp.MaxInlineData {
		flags |= qp.SendInline
	}
	pp.recvSGE[0] = pp.mr.SGE(0, len(pp.Buf))
	pp.sendSGE[0] = pp.mr.SGE(qp.GRHLen, int(f.Size))
	pp.RecvWR = qp.RecvWR{WRID: pingpong.RecvWRID, SGL: pp.recvSGE[:]}
	pp.SendWR = qp.SendWR{WRID: pingpong.SendWRID, Opcode: qp.WRSend, Flags: flags, SGL: pp.sendSGE[:],
		RemoteQKey: qkey}
	return pp, nil
}

// connect is pp_connect_ctx: RTR with the state alone, RTS with the SQ
// PSN, then the address handle: a GRH to the peer's GID (hop limit 1,
// which the route's replaces as the kernel does) when its interface id is
// not zero; without one there is no path on RoCE and, as on rxe,
// ibv_create_ah fails.
func connect(ctx context.Context, pp *pingpong.PingPong, f pingpong.Flags, my, rem pingpong.Dest) error {
	if err := pp.QP.Modify(ctx, qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := pp.QP.Modify(ctx, qp.Attr{State: qp.StateRTS, SQPSN: wire.PSN(my.PSN)}, qp.AttrState|qp.AttrSQPSN); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	var zero [8]byte
	if [8]byte(rem.GID[8:]) == zero {
		return fmt.Errorf("Failed to create AH: the peer sent no GID (RoCE needs -g on both sides)")
	}
	if f.GIDIndex < 1 || f.GIDIndex > 255 {
		return fmt.Errorf("Failed to create AH: GID index %d is not a RoCEv2 GID (use -g 1)", f.GIDIndex)
	}
	ah, err := pp.QP.PD().CreateAH(ctx, qp.AHAttr{GID: netip.AddrFrom16(rem.GID), SGIDIndex: uint8(f.GIDIndex), HopLimit: 1})
	if err != nil {
		return fmt.Errorf("Failed to create AH: %w", err)
	}
	pp.SendWR.AH, pp.SendWR.RemoteQPN = ah, rem.QPN
	return nil
}
