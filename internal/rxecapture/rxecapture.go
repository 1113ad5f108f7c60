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

	"github.com/goroce/goroce/internal/pcapfile"
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
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
