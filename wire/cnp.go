package wire

import "net/netip"

// CNP, the RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.3;
// PROTOCOL §7): BTH with opcode 0x81, BECN set, PSN 0, then 16 reserved zero
// bytes, then the ICRC.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Reserved (16 bytes, zero)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// rxe neither sends nor understands CNPs (opcode 0x81 is not in
// rxe_opcode[]): do not send them to rxe peers.

// CNPPad is a view of the 16 reserved bytes of a CNP.
type CNPPad []byte

// IsValid reports whether b holds the whole 16 bytes.
func (b CNPPad) IsValid() bool { return len(b) >= CNPPadLen }

// Encode zeroes the 16 bytes.
func (b CNPPad) Encode() { clear(b[:CNPPadLen]) }

// CNP header values observed from a ConnectX-4 Lx (PROTOCOL §7).
const (
	CNPTOS     = 0xC2 // DSCP 48, ECN ECT(0)
	CNPTTL     = 64
	CNPSrcPort = 0
)

// CNPFrame returns the Frame of a CNP sent to the source of an ECN-CE-marked
// packet: IP src/dst are the marked packet's dst/src, destQP is the QP that
// sent the marked traffic. TOS 0xC2, TTL 64, UDP source port 0, P_Key
// 0xFFFF, BECN 1, PSN 0, as the captured ConnectX-4 Lx CNP. IPID is left 0:
// set it before Build if the link does not choose it.
func CNPFrame(dstMAC, srcMAC [6]byte, src, dst netip.Addr, destQP uint32) Frame {
	return Frame{
		DstMAC: dstMAC, SrcMAC: srcMAC,
		SrcIP: src, DstIP: dst,
		TrafficClass: CNPTOS, HopLimit: CNPTTL,
		SrcPort: CNPSrcPort,
		BTH:     BTHFields{Opcode: CNP, PKey: DefaultPKey, BECN: true, DestQP: destQP},
	}
}
