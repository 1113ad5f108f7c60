//go:build linux

package dump

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
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

const maxSnaplen = 262144 // libpcap's MAXIMUM_SNAPLEN

// Capture is an open live capture: an AF_PACKET SOCK_RAW socket bound to
// one interface.
type Capture struct {
	f        *os.File
	rc       syscall.RawConn
	loopback bool
	buf      []byte // recvmsg buffer, snaplen bytes
	frame    []byte // buf with the 802.1Q tag put back, when there was one
	oob      []byte
}

// OpenLive opens an AF_PACKET socket on iface. It needs root or
// CAP_NET_RAW, and lives in the network namespace of the calling thread.
//
// The socket is created with protocol 0, which receives nothing; the
// RoCEv2 filter is attached, and only then is the socket bound to iface
// with ETH_P_ALL. So no packet is queued before the filter is in place
// (libpcap has to drain its socket for the same reason).
//
// Packets the host sends are captured too (PACKET_OUTGOING), so a capture on
// one end of a link sees both directions; on a loopback device the outgoing
// copy is skipped, as libpcap does. The kernel strips 802.1Q tags into
// metadata (PACKET_AUXDATA); Run puts them back into the frame.
func OpenLive(iface string, opts LiveOptions) (*Capture, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	snap := opts.Snaplen
	if snap <= 0 || snap > maxSnaplen {
		snap = maxSnaplen
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	fail := func(what string, err error) (*Capture, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !opts.All {
		raw, err := bpf.Assemble(roceFilter)
		if err != nil {
			return fail("assembling the capture filter", err)
		}
		prog := make([]unix.SockFilter, len(raw))
		for i, r := range raw {
			prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
			return fail("attaching the capture filter", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		return fail("PACKET_AUXDATA", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	// A larger receive buffer rides out bursts (best effort).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("binding to "+iface, err)
	}
	f := os.NewFile(uintptr(fd), "packet:"+iface) // non-blocking: pollable, Close wakes a reader
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Capture{
		f: f, rc: rc, loopback: ifi.Flags&net.FlagLoopback != 0,
		buf:   make([]byte, snap),
		frame: make([]byte, snap+4),
		oob:   make([]byte, unix.CmsgSpace(int(unsafe.Sizeof(unix.TpacketAuxdata{})))+unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))),
	}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Close closes the socket.
func (c *Capture) Close() error { return c.f.Close() }

// errSkip marks a packet that is not reported (the loopback's outgoing copy).
var errSkip = errors.New("skip")

// read receives one packet.
func (c *Capture) read() (Record, error) {
	var (
		n, oobn int
		from    unix.Sockaddr
		rerr    error
	)
	err := c.rc.Read(func(fd uintptr) bool {
		// MSG_TRUNC: n is the packet's real length even when longer than buf.
		n, oobn, _, from, rerr = unix.Recvmsg(int(fd), c.buf, c.oob, unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return Record{}, err
	}
	if ll, ok := from.(*unix.SockaddrLinklayer); ok && c.loopback && ll.Pkttype == unix.PACKET_OUTGOING {
		return Record{}, errSkip
	}
	rec := Record{Data: c.buf[:min(n, len(c.buf))], OrigLen: n, LinkType: layers.LinkTypeEthernet}
	cmsgs, err := unix.ParseSocketControlMessage(c.oob[:oobn])
	if err != nil {
		cmsgs = nil
	}
	for _, m := range cmsgs {
		switch {
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})):
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			rec.Time = time.Unix(int64(ts.Sec), int64(ts.Nsec))
		case m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= int(unsafe.Sizeof(unix.TpacketAuxdata{})):
			aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
			rec.OrigLen = int(aux.Len)
			if aux.Status&unix.TP_STATUS_VLAN_VALID != 0 && len(rec.Data) >= 12 {
				tpid := uint16(0x8100)
				if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 && aux.Vlan_tpid != 0 {
					tpid = aux.Vlan_tpid
				}
				fr := c.frame[:len(rec.Data)+4]
				copy(fr, rec.Data[:12])
				binary.BigEndian.PutUint16(fr[12:], tpid)
				binary.BigEndian.PutUint16(fr[14:], aux.Vlan_tci)
				copy(fr[16:], rec.Data[12:])
				rec.Data = fr
				rec.OrigLen += 4
			}
		}
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	return rec, nil
}

// Run feeds captured packets to d until ctx is done (nil error), d is Done
// (Options.Count), or the socket fails. It closes the socket when ctx is
// done, which is what unblocks the read.
func (c *Capture) Run(ctx context.Context, d *Dumper) error {
	stop := context.AfterFunc(ctx, func() { c.f.Close() })
	defer stop()
	for !d.Done() {
		rec, err := c.read()
		if errors.Is(err, errSkip) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.Packet(rec)
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
