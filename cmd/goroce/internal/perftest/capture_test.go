package perftest

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
)

// rxeDir holds the real rxe captures (testdata/rxe/README.md at the module
// root): perftest 4.5-0.17 and rdma-core 44 between two Debian VMs, the
// server at 198.18.0.11, the client at 198.18.0.12.
var rxeDir = filepath.Join("..", "..", "..", "..", "testdata", "rxe")

// tcpMsg is one TCP segment's payload on the tool's port, in capture order.
type tcpMsg struct {
	fromClient bool
	payload    []byte
}

// tcpMessages extracts the payload of every TCP segment to or from port
// (Ethernet/IPv4 only, which is what the captures hold), dropping
// retransmissions by sequence number. Each message of these tools leaves in
// one write() and so in one segment.
func tcpMessages(t *testing.T, name string, port uint16) []tcpMsg {
	t.Helper()
	f, err := os.Open(filepath.Join(rxeDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	next := map[bool]uint32{}
	seen := map[bool]bool{}
	var out []tcpMsg
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
			t.Fatalf("%s: bad TCP header", name)
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
		out = append(out, tcpMsg{fromClient: fromClient, payload: bytes.Clone(payload)})
	}
	return out
}

// toolLog splits NAME.log into the server's and the client's output.
func toolLog(t *testing.T, name string) (server, client []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rxeDir, name))
	if err != nil {
		t.Fatal(err)
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
	return server, client
}
