package perftest

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rxecapture"
	"github.com/goroce/goroce/wire"
)

// TestCMExchangeAgainstRXE reads `ib_send_bw -R -s 4096 -n 20` between two
// rxe VMs (testdata/rxe/send_bw_rdma_cm.pcap): the exchanges travel as
// SEND ONLY on the rdma_cm control QP, one message per Write, and their
// order and sizes are exactly what Steps(SendBW, RDMACM) plays (Hello's
// 16/4/4/2 bytes, then a 56-byte struct pingpong_dest per handshake, the
// client first each time). The key messages decode to what the tools
// printed (QPN, PSN, GID), the QPN is the data QP's, and re-encoding them
// gives the captured bytes but for the padding the C tool leaves as stack
// garbage.
func TestCMExchangeAgainstRXE(t *testing.T) {
	msgs, err := rxecapture.RoCEMessages(filepath.Join(rxeDir, "send_bw_rdma_cm.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddr("198.18.0.12")
	// The control QP carries the first RC SEND; the data QP the SEND FIRST.
	var ctrl, data uint32
	var ctrlMsgs []rxecapture.RoCEMsg
	for _, m := range msgs {
		switch {
		case m.Opcode == wire.RCSendOnly && (ctrl == 0 || m.DestQP == ctrl):
			ctrl = m.DestQP
			ctrlMsgs = append(ctrlMsgs, m)
		case m.Opcode == wire.RCSendFirst && data == 0:
			data = m.DestQP
		}
	}
	// What the plan puts on the wire, per exchange (each one message each
	// way, the client's first).
	var want []int
	for _, st := range Steps(SendBW, false, PlanConfig{Size: 4096, RDMACM: true}) {
		switch st.Kind {
		case StepHello:
			want = append(want, VersionSize, 4, 4, 2)
		case StepKeys, StepSync, StepClose:
			want = append(want, CMKeyMsgSize)
		case StepConnect:
			t.Errorf("-R plan has a ctx_connect step")
		}
	}
	if len(ctrlMsgs) != 2*len(want) {
		t.Fatalf("%d control messages, the plan exchanges %d", len(ctrlMsgs), 2*len(want))
	}
	for i, n := range want {
		c, s := ctrlMsgs[2*i], ctrlMsgs[2*i+1]
		if c.Src != client || s.Src == client || len(c.Payload) != n || len(s.Payload) != n {
			t.Fatalf("exchange %d: %v %d bytes then %v %d bytes, want the client then the server, %d bytes each",
				i, c.Src, len(c.Payload), s.Src, len(s.Payload), n)
		}
	}
	if v := DecodeVersion(ctrlMsgs[0].Payload); v != Version {
		t.Errorf("peer version %q, want %q", v, Version)
	}
	// The handshakes around the rdma_cm connection (exchanges 4 and 5) send
	// the still empty my_dest[0]; the next ones carry the data QP.
	keys := map[bool][]KeyMsg{}
	for i := 4; i < len(want); i++ {
		for _, m := range []rxecapture.RoCEMsg{ctrlMsgs[2*i], ctrlMsgs[2*i+1]} {
			k, err := DecodeCMKeyMsg(m.Payload)
			if err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
			switch {
			case i < 6:
				if k != (KeyMsg{}) {
					t.Errorf("exchange %d: %+v, want zeros", i, k)
				}
				continue
			case i == 6:
				keys[m.Src == client] = append(keys[m.Src == client], k)
			}
			enc := EncodeCMKeyMsg(k, int32(binary.BigEndian.Uint32(m.Payload[52:])))
			got := bytes.Clone(m.Payload)
			copy(got[20:24], enc[20:24]) // padding
			copy(got[48:52], enc[48:52]) // srqn, not decoded
			if !bytes.Equal(enc[:], got) || k != keys[m.Src == client][0] {
				t.Errorf("exchange %d: re-encoded\n%x\ncaptured\n%x", i, enc, m.Payload)
			}
		}
	}
	srv, cli := toolLog(t, "send_bw_rdma_cm.log")
	if k := keys[false][0]; k.QPN != data {
		t.Errorf("server key QPN %#x, the data QP is %#x", k.QPN, data)
	}
	for side, lines := range map[bool][]string{true: cli, false: srv} {
		// Each side prints its own key as local and the peer's as remote.
		want := FormatAddress("local", keys[side][0], Send, true) + FormatAddress("remote", keys[!side][0], Send, true)
		if got := strings.Join(lines, "\n"); !strings.Contains(got, want) {
			t.Errorf("client=%v: the log lacks\n%s\nin\n%s", side, want, got)
		}
	}
}

// TestCMKeyMsgRoundTrip: every field survives, and out-of-range values and
// short messages are refused, never a panic.
func TestCMKeyMsgRoundTrip(t *testing.T) {
	k := KeyMsg{OutReads: 16, QPN: 0xabcdef, PSN: 0x123456, RKey: 0xdeadbeef, VAddr: 0x7f00112233445566,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 2}}
	b := EncodeCMKeyMsg(k, 1)
	if got, err := DecodeCMKeyMsg(b[:]); err != nil || got != k {
		t.Errorf("round trip: %+v, %v", got, err)
	}
	if binary.BigEndian.Uint32(b[52:]) != 1 {
		t.Errorf("gid_index %x", b[52:56])
	}
	for n := range CMKeyMsgSize {
		if _, err := DecodeCMKeyMsg(b[:n]); err == nil {
			t.Errorf("%d bytes accepted", n)
		}
	}
	bad := b
	bad[8] = 1 // QPN beyond 24 bits
	if _, err := DecodeCMKeyMsg(bad[:]); err == nil {
		t.Error("a 32-bit QPN accepted")
	}
}
