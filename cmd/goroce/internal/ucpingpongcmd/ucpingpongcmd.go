// Package ucpingpongcmd is the goroce uc_pingpong subcommand:
// ibv_uc_pingpong on a goroce device. Package pingpong holds its exchange
// format, flags and output lines (those of rc_pingpong); this package runs
// the UC QP.
package ucpingpongcmd

import (
	"context"
	"fmt"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

const usageText = `Usage:
  goroce uc_pingpong            start a server and wait for connection
  goroce uc_pingpong <host>     connect to server at <host>

Options (those of ibv_uc_pingpong):
` + pingpong.UsageHead + `  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
` + pingpong.UsageTail + `UC has no retransmission: a lost message stalls the ping-pong (use --timeout).
` + pingpong.GoroceUsage

// Summary is the command's line in goroce's usage.
const Summary = "ibv_uc_pingpong-compatible UC SEND/RECV ping-pong (server without host, client with host)"

// Run is ibv_uc_pingpong (rdma-core 44, libibverbs/examples/uc_pingpong.c)
// on a goroce device: rc_pingpong's exchange and output lines on a UC QP
// connected with UC's attributes only. It returns the exit code.
func Run(env tool.Env, args []string) int { return ucTool.Run(env, args) }

var ucTool = &pingpong.Tool{
	Name: "uc_pingpong", Usage: usageText, Parse: pingpong.ParseUCFlags,
	Setup: func(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*pingpong.PingPong, error) {
		return initEndpoint(ctx, dev, f)
	},
	FormatLocal: pingpong.FormatLocal,
	NoGID:       "can't read sgid of index %d\n",
	Connect: func(ctx context.Context, pp *pingpong.PingPong, f pingpong.Flags, my, rem pingpong.Dest) error {
		// pp_connect_ctx: RTR with the AV (GRH hop limit 1, as
		// rc_pingpong), path MTU, destination QPN and RQ PSN; RTS with
		// the SQ PSN (tool.ModifyToRTS leaves out what UC does not take).
		return tool.ModifyToRTS(ctx, pp.QP, tool.ConnectAttrs{
			MTU: qp.MTUFromBytes(f.MTU), DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: my.PSN,
			DGID: rem.GID, Global: !allZero(rem.GID[8:]), SGIDIndex: f.GIDIndex, HopLimit: 1, SL: uint8(f.SL),
		})
	},
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// initEndpoint is uc_pingpong's pp_init_ctx: a buffer of size bytes filled
// with 0x7b and registered with LOCAL_WRITE, one CQ of rx_depth+1 entries
// for both queues, and a UC QP (max_send_wr 1, max_recv_wr rx_depth) moved
// to INIT with no remote access. The C tool sends inline when the QP's
// max_inline_data allows; inline changes nothing on the wire, and goroce
// sends from the registered buffer.
func initEndpoint(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*pingpong.PingPong, error) {
	pp := &pingpong.PingPong{Buf: make([]byte, f.Size), RxDepth: int(f.RxDepth)}
	pp.Payload = pp.Buf
	for i := range pp.Buf {
		pp.Buf[i] = 0x7b // memset(ctx->buf, 0x7b, size)
	}
	pd := dev.AllocPD()
	mr, err := pd.RegMR(pp.Buf, qp.LocalWrite)
	if err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.CQ, err = dev.CreateCQ(int(f.RxDepth) + 1); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	pp.QP, err = pd.CreateQP(qp.InitAttr{SendCQ: pp.CQ, RecvCQ: pp.CQ, Type: qp.QPTypeUC,
		Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: int(f.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	if err := tool.ModifyToInit(ctx, pp.QP, f.IBPort, 0); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	sge := []qp.SGE{mr.SGE(0, int(f.Size))}
	pp.RecvWR = qp.RecvWR{WRID: pingpong.RecvWRID, SGL: sge}
	pp.SendWR = qp.SendWR{WRID: pingpong.SendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: sge}
	return pp, nil
}
