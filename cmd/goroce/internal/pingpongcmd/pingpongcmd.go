// Package pingpongcmd is the goroce pingpong subcommand: ibv_rc_pingpong
// on a goroce device. Package pingpong holds its exchange format, flags
// and output lines; this package runs the QP.
package pingpongcmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

const usageText = `Usage:
  goroce pingpong            start a server and wait for connection
  goroce pingpong <host>     connect to server at <host>

Options (those of ibv_rc_pingpong):
` + pingpong.UsageHead + `  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
` + pingpong.UsageTail + `  -c, --chk              validate received buffer
  -N, --new_send         accepted (the same SENDs on the wire)
` + pingpong.GoroceUsage

// Summary is the command's line in goroce's usage.
const Summary = "ibv_rc_pingpong-compatible RC SEND/RECV ping-pong (server without host, client with host)"

// Run is ibv_rc_pingpong (rdma-core 44, libibverbs/examples/
// rc_pingpong.c) on a goroce device: the same exchange, QP attributes,
// work requests and output lines. It returns the exit code.
func Run(env tool.Env, args []string) int { return rcTool.Run(env, args) }

var rcTool = &pingpong.Tool{
	Name: "pingpong", Usage: usageText, Parse: pingpong.ParseFlags,
	Check: func(f pingpong.Flags) error {
		switch {
		case f.ODP:
			return errors.New("The device isn't ODP capable or does not support RC send and receive with ODP")
		case f.Timestamps:
			return errors.New("The device isn't completion timestamp capable")
		case f.DM:
			return errors.New("Device doesn't support dm allocation")
		}
		return nil
	},
	Setup: func(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*pingpong.PingPong, error) {
		pp, err := initEndpoint(ctx, dev, f)
		if err != nil {
			return nil, err
		}
		return &pp.PingPong, nil
	},
	FormatLocal: pingpong.FormatLocal,
	NoGID:       "can't read sgid of index %d\n",
	Connect: func(ctx context.Context, pp *pingpong.PingPong, f pingpong.Flags, my, rem pingpong.Dest) error {
		return tool.ModifyToRTS(ctx, pp.QP, tool.ConnectAttrs{
			MTU: qp.MTUFromBytes(f.MTU), DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: my.PSN,
			DGID: rem.GID, Global: !allZero(rem.GID[8:]), SGIDIndex: f.GIDIndex, HopLimit: 1, SL: uint8(f.SL),
			MaxDestRdAtomic: 1, MaxRdAtomic: 1, Timeout: 14,
		})
	},
}

// endpoint is struct pingpong_context.
type endpoint struct {
	pingpong.PingPong
	dev  *qp.Device
	pd   *qp.PD
	mr   *qp.MR
	size uint32
	sge  [1]qp.SGE
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// initEndpoint is pp_init_ctx: a page-size-independent buffer of size bytes
// filled with 0x7b and registered with LOCAL_WRITE, one CQ of rx_depth+1
// entries for both queues, and an RC QP (max_send_wr 1, max_recv_wr
// rx_depth) moved to INIT with no remote access.
func initEndpoint(ctx context.Context, dev *qp.Device, f pingpong.Flags) (*endpoint, error) {
	pp := &endpoint{dev: dev, size: f.Size}
	pp.Buf = make([]byte, f.Size)
	pp.Payload = pp.Buf
	pp.RxDepth = int(f.RxDepth)
	for i := range pp.Buf {
		pp.Buf[i] = 0x7b // memset(ctx->buf, 0x7b, size)
	}
	pp.pd = dev.AllocPD()
	var err error
	if pp.mr, err = pp.pd.RegMR(pp.Buf, qp.LocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	if pp.CQ, err = dev.CreateCQ(int(f.RxDepth) + 1); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	pp.QP, err = pp.pd.CreateQP(qp.InitAttr{SendCQ: pp.CQ, RecvCQ: pp.CQ,
		Cap: qp.Caps{MaxSendWR: 1, MaxRecvWR: int(f.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	if err := tool.ModifyToInit(ctx, pp.QP, f.IBPort, 0); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	pp.sge[0] = pp.mr.SGE(0, int(f.Size))
	pp.RecvWR = qp.RecvWR{WRID: pingpong.RecvWRID, SGL: pp.sge[:]}
	pp.SendWR = qp.SendWR{WRID: pingpong.SendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: pp.sge[:]}
	return pp, nil
}
