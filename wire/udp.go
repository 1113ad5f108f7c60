package wire

import "encoding/binary"

// UDP header (RFC 768):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |    Destination Port (4791)    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Length (8 + BTH..ICRC)     |      Checksum (masked, 0)     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// rxe sends checksum 0 over IPv4 and IPv6 alike; the ICRC replaces it by
// 0xFFFF. Ports and length are covered by the ICRC. The source port carries
// flow entropy (see RCSourcePort); no receiver checks it.

const (
	udpSrcPort = 0
	udpDstPort = 2
	udpLength  = 4
	udpCsum    = 6
)

// UDP is a view of a UDP header.
type UDP []byte

// UDPFields builds a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16
}

// IsValid reports whether b holds a whole header.
func (b UDP) IsValid() bool { return len(b) >= UDPLen }

// SrcPort returns the source port.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the UDP length (header + payload).
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum (RoCEv2 senders write 0).
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpCsum:]) }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(v uint16) { binary.BigEndian.PutUint16(b[udpSrcPort:], v) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(v uint16) { binary.BigEndian.PutUint16(b[udpDstPort:], v) }

// SetLength sets the length.
func (b UDP) SetLength(v uint16) { binary.BigEndian.PutUint16(b[udpLength:], v) }

// SetChecksum sets the checksum.
func (b UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[udpCsum:], v) }

// Encode writes the header into b.
func (b UDP) Encode(f *UDPFields) {
	b.SetSrcPort(f.SrcPort)
	b.SetDstPort(f.DstPort)
	b.SetLength(f.Length)
	b.SetChecksum(f.Checksum)
}
