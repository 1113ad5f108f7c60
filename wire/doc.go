// Package wire encodes and decodes RoCEv2 frames: Ethernet (+802.1Q), IPv4 or
// IPv6, UDP port 4791, the InfiniBand Base Transport Header, its extension
// headers, payload, pad and the invariant CRC. It uses the standard library
// only and does not allocate on the per-packet paths.
//
// # Model
//
// Headers are views over bytes, in the style of gVisor's tcpip/header: a
// named byte slice per header (Ethernet, IPv4, IPv6, UDP, BTH, RETH, AETH,
// AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, CNPPad) with getters and
// setters at fixed offsets, an XFields struct and an Encode method to write a
// whole header, and IsValid to check that a slice is long enough before the
// accessors are used (they panic on short slices, like gVisor's). Each header
// file starts with the IBTA/RFC field diagram.
//
// The opcode table (Opcode.Info, a [256]OpInfo array) says, for every RC,
// UC, UD and CNP opcode, which extension headers follow the BTH, whether a
// payload follows, the packet's position in its message and its direction.
// Parse and Build are driven by it.
//
// Parse fills a Packet with views into the received frame after checking
// lengths (taken from the IP and UDP length fields, never from the frame
// length), TVer, opcode, pad and ICRC; errors are sentinels (ErrTruncated,
// ErrNotRoCE, ErrBadICRC, ...) for errors.Is. Build writes a Frame's headers
// in front of a payload already placed in the caller's buffer, then the pad
// and the ICRC.
//
// Parse does not verify the IPv4 header checksum (the kernel would; the ICRC
// covers every IPv4 field except TOS, TTL and the checksum, so a corrupted
// header is caught anyway unless only those changed); IPv4.ChecksumValid is
// there for callers that want it. The IBTA 1.5 opcodes FLUSH (0x1C, FETH
// then RETH) and ATOMIC_WRITE (0x1D, RETH and 8 bytes) are parsed and built
// as Linux rxe 6.2+ lays them out (feth.go); the rxe peers on 6.1 kernels
// do not know them. RD opcodes are unassigned.
//
// # ICRC
//
// The ICRC (IBTA Annex A17.3.3, rxe_icrc.c, PROTOCOL §2) is the IEEE CRC-32
// over 8 bytes of 0xFF followed by the IP packet from the IP header through
// the last pad byte, with these fields replaced by all-ones: IPv4 TOS, TTL
// and header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; BTH byte 4 (FECN, BECN, resv6). The IPv4 Identification IS
// covered, so the sender must choose it. The 4-byte trailer is written
// least-significant byte first.
//
// # Source ports
//
// FlowLabel, RCSourcePort and UDSourcePort reproduce Linux's choice of UDP
// source port (rdma_get_udp_sport for RC/UC, hash_32 of the QPN for UD), so
// goroce's traffic looks like rxe's and mlx5's in a capture.
package wire
