//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Program names, as the kernel shows them (bpftool prog, netlink). Open uses
// them to recognise a program left behind by an earlier goroce run.
const (
	redirectProgName = "goroce_xdp"
	passProgName     = "goroce_pass"
)

// RoCEv2's UDP destination port (IBTA Annex A17.2.1).
const roceUDPPort = 4791

// XDP actions (include/uapi/linux/bpf.h, enum xdp_action).
const (
	xdpDrop = 1
	xdpPass = 2
)

// struct xdp_md field offsets (include/uapi/linux/bpf.h).
const (
	xdpMDData         = 0
	xdpMDDataEnd      = 4
	xdpMDRxQueueIndex = 16
)

// be16 returns the value a BPF half-word load yields for the big-endian
// (network order) 16-bit value v: BPF loads use host byte order.
func be16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// redirectInstructions assembles the steering program:
//
//	Ethernet [802.1Q/802.1ad tag] → IPv4 (IHL, not a fragment) | IPv6 (fixed
//	header) → UDP dst 4791 → bpf_redirect_map(xsks, rx_queue_index, miss)
//	anything else → XDP_PASS
//
// Every packet access is preceded by a bounds check against data_end, as the
// verifier demands. miss is the action when the queue has no socket in the
// map (XDP_PASS in production; tests use XDP_DROP to tell "would redirect"
// from "passed" with BPF_PROG_TEST_RUN and an empty map).
func redirectInstructions(mapFD int, miss int32) asm.Instructions {
	const (
		ctx   = asm.R1
		pkt   = asm.R2 // cursor: start of the current header
		end   = asm.R3 // data_end
		tmp   = asm.R4
		etype = asm.R5
		queue = asm.R6 // callee-saved across the helper call
	)
	// need(n): if pkt+n > data_end, pass.
	need := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(tmp, pkt),
			asm.Add.Imm(tmp, n),
			asm.JGT.Reg(tmp, end, "pass"),
		}
	}
	var p asm.Instructions
	add := func(ins ...asm.Instruction) { p = append(p, ins...) }

	add(
		asm.LoadMem(queue, ctx, xdpMDRxQueueIndex, asm.Word),
		asm.LoadMem(pkt, ctx, xdpMDData, asm.Word),
		asm.LoadMem(end, ctx, xdpMDDataEnd, asm.Word),
	)
	// Ethernet: dst(6) src(6) ethertype(2).
	add(need(14)...)
	add(
		asm.LoadMem(etype, pkt, 12, asm.Half),
		asm.JEq.Imm(etype, be16(0x8100), "vlan"), // 802.1Q
		asm.JEq.Imm(etype, be16(0x88a8), "vlan"), // 802.1ad (one tag only)
		asm.Add.Imm(pkt, 14),
		asm.Ja.Label("l3"),
	)
	// One VLAN tag: TPID(2) TCI(2), then the inner ethertype.
	p = append(p, asm.Mov.Reg(tmp, pkt).WithSymbol("vlan"))
	add(
		asm.Add.Imm(tmp, 18),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(etype, pkt, 16, asm.Half),
		asm.Add.Imm(pkt, 18),
	)
	p = append(p, asm.JEq.Imm(etype, be16(0x0800), "ipv4").WithSymbol("l3"))
	add(
		asm.JEq.Imm(etype, be16(0x86dd), "ipv6"),
		asm.Ja.Label("pass"),
	)
	// IPv4 (RFC 791): protocol at 9, flags+fragment offset at 6, IHL in the
	// low nibble of byte 0 (in 32-bit words, >= 5). A fragment (MF set or a
	// non-zero offset) goes to the kernel, which reassembles; RoCEv2 sets DF.
	p = append(p, asm.Mov.Reg(tmp, pkt).WithSymbol("ipv4"))
	add(
		asm.Add.Imm(tmp, 20),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(tmp, pkt, 9, asm.Byte),
		asm.JNE.Imm(tmp, unix.IPPROTO_UDP, "pass"),
		asm.LoadMem(tmp, pkt, 6, asm.Half),
		asm.And.Imm(tmp, be16(0x3fff)),
		asm.JNE.Imm(tmp, 0, "pass"),
		asm.LoadMem(tmp, pkt, 0, asm.Byte),
		asm.And.Imm(tmp, 0x0f),
		asm.JLT.Imm(tmp, 5, "pass"),
		asm.LSh.Imm(tmp, 2), // 20..60 bytes
		asm.Add.Reg(pkt, tmp),
		asm.Ja.Label("udp"),
	)
	// IPv6 (RFC 8200): next header at 6; extension headers are not followed
	// (RoCEv2 over IPv6 uses none), such frames go to the kernel.
	p = append(p, asm.Mov.Reg(tmp, pkt).WithSymbol("ipv6"))
	add(
		asm.Add.Imm(tmp, 40),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(tmp, pkt, 6, asm.Byte),
		asm.JNE.Imm(tmp, unix.IPPROTO_UDP, "pass"),
		asm.Add.Imm(pkt, 40),
	)
	// UDP (RFC 768): destination port at 2.
	p = append(p, asm.Mov.Reg(tmp, pkt).WithSymbol("udp"))
	add(
		asm.Add.Imm(tmp, 8),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(tmp, pkt, 2, asm.Half),
		asm.JNE.Imm(tmp, be16(roceUDPPort), "pass"),
		// bpf_redirect_map(map, key, flags): the low bits of flags are the
		// action when key has no entry (kernel >= 5.3).
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, queue),
		asm.Mov.Imm(asm.R3, miss),
		asm.FnRedirectMap.Call(),
		asm.Return(),
	)
	p = append(p, asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"))
	add(asm.Return())
	return p
}

// newXSKMap creates the socket map, keyed by receive queue index.
func newXSKMap(entries uint32) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "goroce_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: entries,
	})
	if err != nil {
		return nil, classifyBPFError("XSKMAP", "CONFIG_XDP_SOCKETS, CONFIG_BPF_SYSCALL and kernel >= 4.18", err)
	}
	return m, nil
}

// loadRedirectProgram loads the steering program bound to xsks. With frags
// it is loaded with BPF_F_XDP_HAS_FRAGS (what libbpf does for SEC("xdp.frags"),
// kernel >= 5.18): it may then see multi-buffer frames, of which it reads only
// the headers in the linear part, and be attached natively to a device whose
// MTU exceeds a page.
func loadRedirectProgram(xsks *ebpf.Map, miss int32, frags bool) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         redirectProgName,
		Type:         ebpf.XDP,
		Flags:        progFlags(frags),
		License:      "Dual MIT/GPL",
		Instructions: redirectInstructions(xsks.FD(), miss),
	})
	if err != nil {
		return nil, classifyBPFError("XDP program", "CONFIG_BPF_SYSCALL, CAP_BPF+CAP_NET_ADMIN and kernel >= 5.3", err)
	}
	return prog, nil
}

func progFlags(frags bool) uint32 {
	if frags {
		return unix.BPF_F_XDP_HAS_FRAGS
	}
	return 0
}

// loadPassProgram loads the XDP_PASS program, frags-aware (it never reads
// the packet) where the kernel has BPF_F_XDP_HAS_FRAGS, so it attaches
// natively at any MTU.
func loadPassProgram() (*ebpf.Program, error) {
	prog, err := newPassProgram(true)
	if err != nil {
		prog, err = newPassProgram(false)
	}
	return prog, err
}

func newPassProgram(frags bool) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    passProgName,
		Type:    ebpf.XDP,
		Flags:   progFlags(frags),
		License: "Dual MIT/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, xdpPass),
			asm.Return(),
		},
	})
	if err != nil {
		return nil, classifyBPFError("XDP program", "CONFIG_BPF_SYSCALL, CAP_BPF+CAP_NET_ADMIN", err)
	}
	return prog, nil
}

// classifyBPFError turns "this kernel/process cannot" errors into a
// *NotSupportedError and leaves the others (e.g. a verifier rejection, which
// is a bug here) as they are.
func classifyBPFError(what, needs string, err error) error {
	switch {
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.ENOSYS),
		errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, unix.EOPNOTSUPP):
		return notSupported(what, needs, err)
	}
	return opError(what, err)
}

// attachXDP attaches prog to ifindex with a bpf_link, native mode first
// unless mode says otherwise. It returns the link, the mode used, and why
// native mode was not used (nil if it was).
func attachXDP(prog *ebpf.Program, ifindex int, mode Mode) (link.Link, string, error, error) {
	attach := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	}
	var nativeErr error
	if mode != ModeGeneric {
		l, err := attach(link.XDPDriverMode)
		if err == nil {
			return l, "native", nil, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, "", nil, notSupported("XDP bpf_link", "kernel >= 5.9", err)
		}
		if mode == ModeNative {
			return nil, "", nil, opError("attach XDP in native mode", explainNative(err))
		}
		nativeErr = explainNative(err)
	}
	l, err := attach(link.XDPGenericMode)
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return nil, "", nil, notSupported("XDP bpf_link", "kernel >= 5.9", err)
		}
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return nil, "", nil, busy("attach XDP", "the interface already has an XDP program (another process?)", err)
		}
		if nativeErr != nil {
			return nil, "", nil, opError("attach XDP", fmt.Errorf("native: %v; generic: %w", nativeErr, err))
		}
		return nil, "", nil, opError("attach XDP in generic mode", err)
	}
	return l, "generic", nativeErr, nil
}

func explainNative(err error) error {
	switch {
	case errors.Is(err, unix.ERANGE):
		return fmt.Errorf("MTU too large for single-buffer XDP in driver mode: %w", err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("driver has no native XDP: %w", err)
	}
	return err
}

// AttachPassProgram attaches a trivial XDP program that passes every frame to
// the interface named ifname (native mode if the driver has it, else
// generic), and returns a Closer that detaches it.
//
// It exists for veth: a native-mode XDP program on one end of a veth pair
// only receives redirected frames when the peer end has an XDP program too.
// When one end is opened with Open and the other end is a plain socket (the
// kernel stack, a raw socket, AF_PACKET), attach this to the other end. The
// program is held by a bpf_link owned by this process: it goes away when the
// Closer is closed or the process exits. Like Open, it acts in the calling
// thread's network namespace.
func AttachPassProgram(ifname string) (io.Closer, error) {
	ifi, err := interfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	prog, err := loadPassProgram()
	if err != nil {
		return nil, err
	}
	l, _, _, err := attachXDP(prog, ifi.Index, ModeAuto)
	if err != nil {
		prog.Close()
		return nil, err
	}
	return &passProgram{prog: prog, link: l}, nil
}

type passProgram struct {
	prog *ebpf.Program
	link link.Link
}

func (p *passProgram) Close() error {
	err := p.link.Close()
	if err2 := p.prog.Close(); err == nil {
		err = err2
	}
	return err
}
