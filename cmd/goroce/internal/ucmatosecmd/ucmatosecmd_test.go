package ucmatosecmd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rxecapture"
	"github.com/goroce/goroce/mad"

	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

// The lines cmatose prints (testdata/rxe/ucmatose.log).
const (
	serverLines = `cmatose: starting server
initiating data transfers
completing sends
receiving data transfers
data transfers complete
cmatose: disconnecting
disconnected
test complete
return status 0
`
	clientLines = `cmatose: starting client
cmatose: connecting
receiving data transfers
sending replies
data transfers complete
test complete
return status 0
`
)

// TestUcmatoseMem runs goroce ucmatose against itself over the in-memory
// link: 4 concurrent connections, 10 messages each way on each.
func TestUcmatoseMem(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"c4", []string{"-c", "4", "-C", "10"}},
		{"one-large", []string{"-S", "5000", "-C", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunCMPair(t, Run, open,
				append([]string{"--dev", "a", "-b", "198.18.0.1"}, c.args...),
				append([]string{"--dev", "b", "-s", "198.18.0.1"}, c.args...))
			if s.Code != 0 || cl.Code != 0 || s.Stdout != serverLines || cl.Stdout != clientLines {
				t.Errorf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", s.Code, s.Stdout, s.Stderr, cl.Code, cl.Stdout, cl.Stderr)
			}
		})
	}
}

func TestUcmatoseFlags(t *testing.T) {
	var out, errb strings.Builder
	f, ok := ParseFlags([]string{"-s", "198.18.0.1", "-c4", "-C", "10", "-S", "64", "-p", "9999", "-f", "ip"}, &out, &errb)
	if !ok || f.Dst != "198.18.0.1" || f.Connections != 4 || f.MessageCount != 10 || f.MessageSize != 64 || f.Port != "9999" {
		t.Errorf("%+v %v", f, ok)
	}
	if _, ok := ParseFlags([]string{"-x"}, &out, &errb); ok || !strings.HasPrefix(out.String(), "usage: ucmatose") {
		t.Errorf("-x: %v %q", ok, out.String())
	}
}

// TestConnParamAgainstRXE: the REQs of the stock ucmatose -c 4 -C 10
// (testdata/rxe/ucmatose.pcap) carry the rdma_conn_param goroce's client
// gives cm: four REQs, each with responder resources and initiator depth
// 1, retry count 5, RNR retry 0, for cmatose's port 7471.
func TestConnParamAgainstRXE(t *testing.T) {
	msgs, err := rxecapture.RoCEMessages(filepath.Join("..", "..", "..", "..", "testdata", "rxe", "ucmatose.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := 0
	for _, m := range msgs {
		if m.DestQP != mad.GSIQPN {
			continue
		}
		_, msg, err := mad.Parse(m.Payload)
		if err != nil {
			t.Fatalf("MAD: %v", err)
		}
		req, ok := msg.(*mad.REQ)
		if !ok {
			continue
		}
		reqs++
		_, port, _ := mad.ParseServiceID(req.ServiceID)
		if req.ResponderResources != connParam.ResponderResources || req.InitiatorDepth != connParam.InitiatorDepth ||
			req.RetryCount != connParam.RetryCount || req.RNRRetryCount != connParam.RNRRetry || !connParam.ZeroRetry || port != DefaultPort {
			t.Errorf("REQ: responder resources %d, initiator depth %d, retry %d, RNR retry %d, port %d; goroce sends %+v",
				req.ResponderResources, req.InitiatorDepth, req.RetryCount, req.RNRRetryCount, port, connParam)
		}
	}
	if reqs != 4 {
		t.Errorf("%d REQs, want 4 (-c 4)", reqs)
	}
}
