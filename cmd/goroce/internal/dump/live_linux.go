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
	"golang.org/x/sys/unix"
)

// roceFilter is the classic BPF program attached to the capture socket: it
// accepts IPv4 (unfragmented or first fragment, any IHL) or IPv6 (UDP as the
// next header) UDP datagrams to port 4791 and drops everything else in the
// kernel. 802.1Q tags are already in the skb metadata when packet-socket
// filters run, so tagged RoCE traffic matches too.
var roceFilter = []unix.SockFilter{
	/* 0 */ bpfStmt(unix.BPF_LD|unix.BPF_H|unix.BPF_ABS, 12), // EtherType
	/* 1 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 0x0800, 0, 7), // IPv4, else → 9
	/* 2 */ bpfStmt(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 23), // IPv4 protocol
	/* 3 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 17, 0, 11), // UDP, else → 15
	/* 4 */ bpfStmt(unix.BPF_LD|unix.BPF_H|unix.BPF_ABS, 20), // flags, fragment offset
	/* 5 */ bpfJump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, 0x1FFF, 9, 0), // non-first fragment → 15
	/* 6 */ bpfStmt(unix.BPF_LDX|unix.BPF_B|unix.BPF_MSH, 14), // X = IPv4 header length
	/* 7 */ bpfStmt(unix.BPF_LD|unix.BPF_H|unix.BPF_IND, 14+2), // UDP destination port
	/* 8 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 4791, 5, 6), // → 14 / 15
	/* 9 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 0x86DD, 0, 5), // IPv6, else → 15
	/* 10 */ bpfStmt(unix.BPF_LD|unix.BPF_B|unix.BPF_ABS, 20), // IPv6 next header
	/* 11 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 17, 0, 3), // UDP, else → 15
	/* 12 */ bpfStmt(unix.BPF_LD|unix.BPF_H|unix.BPF_ABS, 14+40+2), // UDP destination port
	/* 13 */ bpfJump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 4791, 0, 1), // → 14 / 15
	/* 14 */ bpfStmt(unix.BPF_RET|unix.BPF_K, maxSnaplen), // accept
	/* 15 */ bpfStmt(unix.BPF_RET|unix.BPF_K, 0), // drop
}

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
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
		prog := append([]unix.SockFilter(nil), roceFilter...)
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
