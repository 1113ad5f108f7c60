package rpingcmd

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rxecapture"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/wire"
)

// TestProtocolAgainstRXE follows `rping -C 5 -v` between two rxe VMs
// (testdata/rxe/rping.pcap): every control message decodes (16 bytes, the
// ping size), the server's READ targets the start buffer the client
// advertised and its WRITE the rdma buffer, with strlen+1 bytes; the data
// read is FillPing's, byte for byte; the client's printed lines are
// CString of it; and re-encoding each message gives the captured bytes.
func TestProtocolAgainstRXE(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "testdata", "rxe")
	msgs, err := rxecapture.RoCEMessages(filepath.Join(dir, "rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	_, clientOut, err := rxecapture.ToolLog(filepath.Join(dir, "rping.log"))
	if err != nil {
		t.Fatal(err)
	}
	var printed []string
	for _, l := range clientOut {
		if strings.HasPrefix(l, "ping data: ") {
			printed = append(printed, l)
		}
	}
	const size = 64 // rping's default -S
	client := msgs[0].Src
	var infos []Info
	var reads, writes []rxecapture.RoCEMsg
	var readData [][]byte
	for _, m := range msgs {
		switch {
		case m.Opcode == wire.RCSendOnly && m.Src == client:
			in, err := DecodeInfo(m.Payload, uint32(len(m.Payload)))
			if err != nil {
				t.Fatalf("client control message %x: %v", m.Payload, err)
			}
			var b [InfoLen]byte
			in.Encode(b[:])
			if !bytes.Equal(b[:], m.Payload) {
				t.Errorf("re-encoded %x, captured %x", b, m.Payload)
			}
			if in.Size != size {
				t.Errorf("control message size %d, want %d", in.Size, size)
			}
			infos = append(infos, in)
		case m.Opcode == wire.RCSendOnly:
			// The server's go-ahead: its send_buf, never formatted.
			if !bytes.Equal(m.Payload, make([]byte, InfoLen)) {
				t.Errorf("server go-ahead %x, want 16 zero bytes", m.Payload)
			}
		case m.Opcode == wire.RCRDMAReadRequest:
			reads = append(reads, m)
		case m.Opcode == wire.RCRDMAReadResponseOnly:
			readData = append(readData, m.Payload)
		case m.Opcode == wire.RCRDMAWriteOnly:
			writes = append(writes, m)
		}
	}
	const pings = 5
	if len(infos) != 2*pings || len(reads) != pings || len(writes) != pings || len(readData) != pings || len(printed) != pings {
		t.Fatalf("%d control messages, %d READs, %d READ responses, %d WRITEs, %d printed lines; want %d pings",
			len(infos), len(reads), len(readData), len(writes), len(printed), pings)
	}
	start := 65
	buf := make([]byte, size)
	for i := range pings {
		startInfo, rdmaInfo := infos[2*i], infos[2*i+1]
		if r := reads[i]; r.VA != startInfo.Buf || r.RKey != startInfo.RKey || r.DMALen != size {
			t.Errorf("ping %d: READ va %#x rkey %#x len %d, start buf info %+v", i, r.VA, r.RKey, r.DMALen, startInfo)
		}
		if w := writes[i]; w.VA != rdmaInfo.Buf || w.RKey != rdmaInfo.RKey || w.DMALen != size || !bytes.Equal(w.Payload, readData[i]) {
			t.Errorf("ping %d: WRITE va %#x rkey %#x len %d, rdma buf info %+v", i, w.VA, w.RKey, w.DMALen, rdmaInfo)
		}
		start = FillPing(buf, i, start)
		if !bytes.Equal(readData[i], buf) {
			t.Errorf("ping %d: read %q, FillPing gives %q", i, readData[i], buf)
		}
		if want := "ping data: " + string(CString(buf)); printed[i] != want {
			t.Errorf("ping %d: client printed %q, want %q", i, printed[i], want)
		}
	}
}

func TestDecodeInfoBogus(t *testing.T) {
	for _, n := range []uint32{0, 15, 17, 64} {
		if _, err := DecodeInfo(make([]byte, 64), n); err == nil {
			t.Errorf("%d bytes accepted", n)
		}
	}
}

// TestFillPing: the letters wrap after 'z' and each ping starts one later.
func TestFillPing(t *testing.T) {
	buf := make([]byte, 80)
	start := 65
	for i := range 58 {
		start = FillPing(buf, i, start)
	}
	if start != 65 {
		t.Errorf("after 58 pings the start is %d, want 65 (wrapped)", start)
	}
	start = FillPing(buf, 1234, 120)
	got := string(CString(buf))
	if !strings.HasPrefix(got, "rdma-ping-1234: xyzABC") || len(got) != 79 || start != 121 {
		t.Errorf("ping 1234 from 'x': %q (len %d), next start %d", got, len(got), start)
	}
	small := make([]byte, MinBufSize)
	FillPing(small, 2147483647, 65)
	if small[MinBufSize-1] != 0 {
		t.Errorf("min size buffer not terminated: %q", small)
	}
}

func TestParseFlags(t *testing.T) {
	var out, errb strings.Builder
	for _, tc := range []struct {
		args []string
		code int
		err  string
		want func(Flags) bool
	}{
		{[]string{"-s"}, 0, "", func(f Flags) bool { return f.Server == 1 && f.Port == 7174 && f.Size == 64 && f.Addr.IsUnspecified() }},
		{[]string{"-c", "-a", "198.18.0.1", "-C", "10", "-S", "4096", "-v", "-V"}, 0, "", func(f Flags) bool {
			return f.Server == 0 && f.Count == 10 && f.Size == 4096 && f.Verbose && f.Validate && f.Addr.String() == "198.18.0.1"
		}},
		{[]string{"-cvVa198.18.0.1", "-p", "70000"}, 0, "", func(f Flags) bool { return f.Verbose && f.Port == 70000&0xffff }},
		{[]string{"-c", "-S", "22"}, 22, "Invalid size 22 (valid range is 23 to 65536)", nil},
		{[]string{"-c", "-S", "65536"}, 22, "Invalid size 65536", nil},
		// rping's ret quirk: a good -a after a bad -S clears the error.
		{[]string{"-c", "-S", "1", "-a", "198.18.0.1"}, 0, "Invalid size 1", func(f Flags) bool { return f.Size == 1 }},
		{[]string{"-c", "-C", "-1"}, 22, "Invalid count -1", nil},
		{[]string{"-t", "1", "-s"}, 22, "", nil},
		{[]string{"-v"}, 22, "", nil},
		{[]string{"-x"}, 22, "", nil},
		{[]string{"-c", "-a", "no.such.host"}, 254, "", nil},
	} {
		out.Reset()
		errb.Reset()
		f, code := ParseFlags(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.err) || (tc.want != nil && !tc.want(f)) {
			t.Errorf("%q: code %d, flags %+v, stderr %q, stdout %q", tc.args, code, f, errb.String(), out.String())
		}
		if tc.code == 22 && tc.err == "" && !strings.HasPrefix(out.String(), "rping -s [-vVd]") {
			t.Errorf("%q: no usage: %q", tc.args, out.String())
		}
	}
}

// TestConnParamAgainstRXE: the stock rping's REQ (testdata/rxe/rping.pcap)
// carries the rdma_conn_param and QP that goroce rping gives cm:
// responder resources and initiator depth 1, retry and RNR retry 7, and
// the service ID of port 7174.
func TestConnParamAgainstRXE(t *testing.T) {
	msgs, err := rxecapture.RoCEMessages(filepath.Join("..", "..", "..", "..", "testdata", "rxe", "rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	o := (&controlBlock{}).cmOptions()
	if o.Cap.MaxSendWR != sqDepth || o.Cap.MaxRecvWR != 2 {
		t.Errorf("caps %+v, rping_create_qp has 16 send WRs and 2 receives", o.Cap)
	}
	for _, m := range msgs {
		if m.DestQP != mad.GSIQPN {
			continue
		}
		_, msg, err := mad.Parse(m.Payload)
		if err != nil {
			t.Fatalf("MAD: %v", err)
		}
		if req, ok := msg.(*mad.REQ); ok {
			_, port, _ := mad.ParseServiceID(req.ServiceID)
			if req.ResponderResources != o.ResponderResources || req.InitiatorDepth != o.InitiatorDepth ||
				req.RetryCount != o.RetryCount || req.RNRRetryCount != o.RNRRetry || port != DefaultPort {
				t.Errorf("REQ: responder resources %d, initiator depth %d, retry %d, RNR retry %d, port %d; goroce gives %+v",
					req.ResponderResources, req.InitiatorDepth, req.RetryCount, req.RNRRetryCount, port, o)
			}
			return
		}
	}
	t.Fatal("no REQ in rping.pcap")
}
