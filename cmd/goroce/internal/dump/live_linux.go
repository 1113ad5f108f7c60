//go:build linux

package dump

import (
	"context"
	"fmt"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/net/bpf"
)

// roceFilter is the classic BPF program attached to the capture socket: it
// accepts IPv4 (unfragmented, any IHL) or IPv6 (UDP as the next header) UDP
// datagrams to port 4791 and drops everything else in the kernel. The
// kernel strips 802.1Q tags before packet-socket filters run (they are in
// the skb metadata), so tagged RoCE traffic matches too.
var roceFilter = []bpf.Instruction{
	/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2}, // EtherType
	/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipFalse: 7}, // → 9
	/* 2 */ bpf.LoadAbsolute{Off: 23, Size: 1}, // IPv4 protocol
	/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 11}, // → 15
	/* 4 */ bpf.LoadAbsolute{Off: 20, Size: 2}, // flags, fragment offset
	/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1FFF, SkipTrue: 9}, // non-first fragment → 15
	/* 6 */ bpf.LoadMemShift{Off: 14}, // X = IPv4 header length
	/* 7 */ bpf.LoadIndirect{Off: 14 + 2, Size: 2}, // UDP destination port
	/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipTrue: 5, SkipFalse: 6}, // → 14 / 15
	/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86DD, SkipFalse: 5}, // → 15
	/* 10 */ bpf.LoadAbsolute{Off: 20, Size: 1}, // IPv6 next header
	/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 3}, // → 15
	/* 12 */ bpf.LoadAbsolute{Off: 14 + 40 + 2, Size: 2}, // UDP destination port
	/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipFalse: 1}, // → 15
	/* 14 */ bpf.RetConstant{Val: 0x40000},
	/* 15 */ bpf.RetConstant{Val: 0},
}

// LiveOptions control a live capture.
type LiveOptions struct {
	Snaplen int  // bytes kept per packet (0: 262144)
	All     bool // do not attach the RoCEv2 filter (count every packet)
}

// Capture is an open live capture.
type Capture struct {
	h *pcapgo.EthernetHandle
}

// OpenLive opens an AF_PACKET socket on iface (gopacket's pure-Go
// pcapgo.EthernetHandle: recvmsg per packet, kernel timestamps) with the
// RoCEv2 filter attached. It needs root or CAP_NET_RAW. The socket lives in
// the network namespace of the calling thread. Packets the host sends are
// captured too (PACKET_OUTGOING), so a capture on one end of a link sees
// both directions; on the loopback device every packet is seen twice.
func OpenLive(iface string, opts LiveOptions) (*Capture, error) {
	h, err := pcapgo.NewEthernetHandle(iface)
	if err != nil {
		return nil, err
	}
	if opts.Snaplen > 0 {
		if err := h.SetCaptureLength(opts.Snaplen); err != nil {
			h.Close()
			return nil, err
		}
	}
	if !opts.All {
		raw, err := bpf.Assemble(roceFilter)
		if err == nil {
			err = h.SetBPF(raw)
		}
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("attaching the capture filter: %w", err)
		}
	}
	return &Capture{h: h}, nil
}

// Close closes the socket.
func (c *Capture) Close() error { return c.h.Close() }

// Run feeds captured packets to d until ctx is done (nil error), d is Done
// (Options.Count), or the socket fails. It closes the socket when ctx is
// done, which is what unblocks the read.
func (c *Capture) Run(ctx context.Context, d *Dumper) error {
	stop := context.AfterFunc(ctx, func() { c.h.Close() })
	defer stop()
	for !d.Done() {
		data, ci, err := c.h.ZeroCopyReadPacketData()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.Packet(Record{Time: ci.Timestamp, Data: data, OrigLen: ci.Length, LinkType: layers.LinkTypeEthernet})
		if d.err != nil {
			return d.err
		}
	}
	return nil
}

// Live opens iface (OpenLive) and runs the capture until ctx is done or d is
// Done.
func Live(ctx context.Context, iface string, d *Dumper, opts LiveOptions) error {
	c, err := OpenLive(iface, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Run(ctx, d)
}
