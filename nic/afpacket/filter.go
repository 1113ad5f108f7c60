package afpacket

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// The socket filter (classic BPF, run by the kernel before a frame is put
// into the ring) passes only RoCEv2 candidates:
//
//	Ethernet [802.1Q tag] IPv4 (not a non-first fragment) UDP dst port
//	Ethernet [802.1Q tag] IPv6 (next header UDP)          UDP dst port
//
// and drops everything else (ARP, NDP, other UDP, TCP). Received VLAN tags
// are normally stripped into packet metadata before the filter runs (the
// kernel's skb_vlan_untag), so the untagged branch is the usual one; the
// tagged branch covers devices that leave the tag in the data. IPv6
// extension headers are not followed (rxe and mlx5 send none).

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	protoUDP      = 17
	// acceptLen is the snap length the filter returns: whole frames.
	acceptLen = 0x40000
)

// asm is a tiny assembler for classic BPF with symbolic jump targets.
type asm struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  []jump
}

type jump struct {
	at       int
	ifT, ifF string // "" = next instruction
	cond     bpf.JumpTest
	val      uint32
}

func (a *asm) label(name string) { a.labels[name] = len(a.ins) }

func (a *asm) add(i bpf.Instruction) { a.ins = append(a.ins, i) }

func (a *asm) jmp(cond bpf.JumpTest, val uint32, ifT, ifF string) {
	a.jumps = append(a.jumps, jump{at: len(a.ins), ifT: ifT, ifF: ifF, cond: cond, val: val})
	a.ins = append(a.ins, nil)
}

func (a *asm) resolve() ([]bpf.Instruction, error) {
	skip := func(from int, to string) (uint8, error) {
		if to == "" {
			return 0, nil
		}
		t, ok := a.labels[to]
		if !ok {
			return 0, fmt.Errorf("bpf: no label %q", to)
		}
		d := t - from - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("bpf: jump to %q out of range", to)
		}
		return uint8(d), nil
	}
	for _, j := range a.jumps {
		st, err := skip(j.at, j.ifT)
		if err != nil {
			return nil, err
		}
		sf, err := skip(j.at, j.ifF)
		if err != nil {
			return nil, err
		}
		a.ins[j.at] = bpf.JumpIf{Cond: j.cond, Val: j.val, SkipTrue: st, SkipFalse: sf}
	}
	return a.ins, nil
}

// roceFilter returns the assembled filter for UDP destination port. With
// dropOutgoing it first drops frames this host transmits (skb->pkt_type ==
// PACKET_OUTGOING, read through the SKF_AD_PKTTYPE ancillary load), for
// kernels without PACKET_IGNORE_OUTGOING (< 4.20).
func roceFilter(port uint16, dropOutgoing bool) ([]bpf.RawInstruction, error) {
	ins, err := roceProgram(port)
	if err != nil {
		return nil, err
	}
	if dropOutgoing {
		const packetOutgoing = 4
		prefix := []bpf.Instruction{
			bpf.LoadExtension{Num: bpf.ExtType},
			// Outgoing: skip to the final "ret 0" of the program.
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: packetOutgoing, SkipTrue: uint8(len(ins) - 1)},
		}
		if len(ins) > 255 {
			return nil, fmt.Errorf("bpf: program too long for the outgoing prefix")
		}
		ins = append(prefix, ins...)
	}
	return bpf.Assemble(ins)
}

// roceProgram returns the classic BPF program described above for UDP
// destination port.
func roceProgram(port uint16) ([]bpf.Instruction, error) {
	a := &asm{labels: map[string]int{}}
	a.add(bpf.LoadAbsolute{Off: 12, Size: 2})
	a.jmp(bpf.JumpEqual, etherTypeVLAN, "vlan", "")
	l3(a, 14, port, "plain")
	a.label("vlan")
	l3(a, 18, port, "tagged")
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	a.label("drop")
	a.add(bpf.RetConstant{Val: 0})
	return a.resolve()
}

// l3 emits the IPv4/IPv6 + UDP port checks for an IP header at offset l2.
func l3(a *asm, l2 uint32, port uint16, p string) {
	a.add(bpf.LoadAbsolute{Off: l2 - 2, Size: 2}) // EtherType
	a.jmp(bpf.JumpEqual, etherTypeIPv4, p+"v4", "")
	a.jmp(bpf.JumpEqual, etherTypeIPv6, p+"v6", "drop")

	a.label(p + "v4")
	a.add(bpf.LoadAbsolute{Off: l2 + 9, Size: 1}) // protocol
	a.jmp(bpf.JumpEqual, protoUDP, "", "drop")
	a.add(bpf.LoadAbsolute{Off: l2 + 6, Size: 2}) // flags + fragment offset
	a.jmp(bpf.JumpBitsSet, 0x1fff, "drop", "")    // non-first fragment: no UDP header
	a.add(bpf.LoadMemShift{Off: l2})              // X = IHL*4
	a.add(bpf.LoadIndirect{Off: l2 + 2, Size: 2}) // UDP destination port
	a.jmp(bpf.JumpEqual, uint32(port), "accept", "drop")

	a.label(p + "v6")
	a.add(bpf.LoadAbsolute{Off: l2 + 6, Size: 1}) // next header
	a.jmp(bpf.JumpEqual, protoUDP, "", "drop")
	a.add(bpf.LoadAbsolute{Off: l2 + 40 + 2, Size: 2})
	a.jmp(bpf.JumpEqual, uint32(port), "accept", "drop")
}

// outgoingOnlyFilter passes everything but this host's own transmissions
// (NoFilter on a kernel without PACKET_IGNORE_OUTGOING).
func outgoingOnlyFilter() ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4, SkipTrue: 1},
		bpf.RetConstant{Val: acceptLen},
		bpf.RetConstant{Val: 0},
	})
}
