// Package rxecapture reads the tools' out-of-band exchanges out of the real
// rxe captures in testdata/rxe (see its README): the TCP payloads on the
// tools' port and the tools' printed output, for golden tests.
package rxecapture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strings"

	"net/netip"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/wire"
)

// Msg is one TCP segment's payload on the tool's port, in capture order.
type Msg struct {
	FromClient bool
	Payload    []byte
}

// TCPMessages extracts the payload of every TCP segment to or from port in
// the pcap at path (Ethernet/IPv4 only, which is what the captures hold),
// dropping retransmissions by sequence number. Each message of these tools
// leaves in one write() and so in one segment.
func TCPMessages(path string, port uint16) ([]Msg, error) {
	recs, err := pcapfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	next := map[bool]uint32{}
	seen := map[bool]bool{}
	var out []Msg
	for _, r := range recs {
		p := r.Data
		if len(p) < 14+20 || binary.BigEndian.Uint16(p[12:]) != 0x0800 {
			continue
		}
		ip := p[14:]
		ihl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if ip[9] != 6 || tot > len(ip) || ihl+20 > tot {
			continue
		}
		tcp := ip[ihl:tot]
		sport, dport := binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
		if sport != port && dport != port {
			continue
		}
		off := int(tcp[12]>>4) * 4
		if off > len(tcp) {
			return nil, fmt.Errorf("%s: bad TCP header", path)
		}
		payload := tcp[off:]
		if len(payload) == 0 {
			continue
		}
		fromClient := dport == port
		seq := binary.BigEndian.Uint32(tcp[4:])
		if seen[fromClient] && int32(seq-next[fromClient]) < 0 {
			continue // retransmission
		}
		seen[fromClient] = true
		next[fromClient] = seq + uint32(len(payload))
		out = append(out, Msg{FromClient: fromClient, Payload: bytes.Clone(payload)})
	}
	return out, nil
}

// ToolLog splits a NAME.log file into the server's and the client's output.
func ToolLog(path string) (server, client []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var cur *[]string
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "### server"):
			cur = &server
		case strings.HasPrefix(l, "### client"):
			cur = &client
		case strings.HasPrefix(l, "###"):
			cur = nil
		case cur != nil:
			*cur = append(*cur, l)
		}
	}
	return server, client, nil
}

// RoCEMsg is one RoCEv2 packet of a capture: who sent it to which QP, its
// opcode and its payload (without pad).
type RoCEMsg struct {
	Src, Dst netip.Addr
	DestQP   uint32
	Opcode   wire.Opcode
	PSN      uint32
	// RETH: the RDMA target of a WRITE FIRST/ONLY or READ REQUEST.
	HasRETH bool
	VA      uint64
	RKey    uint32
	DMALen  uint32
	Imm     uint32 // the immediate, when the opcode carries one
	Payload []byte
}

// RoCEMessages parses every RoCEv2 packet of the pcap at path (frames that
// are not RoCEv2, or do not parse, are skipped).
func RoCEMessages(path string) ([]RoCEMsg, error) {
	recs, err := pcapfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []RoCEMsg
	var p wire.Packet
	for _, r := range recs {
		if wire.Parse(r.Data, &p) != nil {
			continue
		}
		m := RoCEMsg{Src: p.SrcIP(), Dst: p.DstIP(), DestQP: p.BTH.DestQP(), Opcode: p.Opcode(),
			PSN: uint32(p.BTH.PSN()), Payload: bytes.Clone(p.Payload)}
		if p.RETH != nil {
			m.HasRETH, m.VA, m.RKey, m.DMALen = true, p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		}
		if p.ImmDt != nil {
			m.Imm = p.ImmDt.Imm()
		}
		out = append(out, m)
	}
	return out, nil
}
