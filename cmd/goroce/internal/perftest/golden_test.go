package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

type capCase struct {
	pcap, log string
	test      Test
	gbits     bool
	atomic    AtomicType
	txDepth   int // printed by the client
	rxDepth   int // printed by a send server
}

var capCases = []capCase{
	{pcap: "write_bw_gbits_small.pcap", log: "write_bw_gbits_small.log", test: WriteBW, gbits: true, txDepth: 128},
	{pcap: "read_bw_small.pcap", log: "read_bw_small.log", test: ReadBW, txDepth: 100},
	{pcap: "send_bw_small.pcap", log: "send_bw_small.log", test: SendBW, txDepth: 100, rxDepth: 100},
	{pcap: "atomic_fadd.pcap", log: "atomic_fadd.log", test: AtomicBW, atomic: FetchAndAdd, txDepth: 100},
	{pcap: "atomic_cas.pcap", log: "atomic_cas.log", test: AtomicBW, atomic: CmpAndSwap, txDepth: 100},
	{pcap: "write_lat.pcap", log: "write_lat.log", test: WriteLat, txDepth: 1},
}

// conversation is a capture cut into its kinds of messages.
type conversation struct {
	msgs                 []tcpMsg
	clientKey, serverKey KeyMsg
	clientReport         BWReport
	hasReport            bool
}

func loadConversation(t *testing.T, c capCase) conversation {
	t.Helper()
	cv := conversation{msgs: tcpMessages(t, c.pcap, DefaultPort)}
	var gotClientKey, gotServerKey bool
	blob := 0
	for i, m := range cv.msgs {
		switch len(m.Payload) {
		case KeyMsgSize:
			k, err := DecodeKeyMsg(m.Payload)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if enc := EncodeKeyMsg(k); !bytes.Equal(enc[:], m.Payload) {
				t.Fatalf("message %d: EncodeKeyMsg(DecodeKeyMsg(x)) = %q, want %q", i, enc, m.Payload)
			}
			// Every handshake repeats the same message.
			switch {
			case m.FromClient && !gotClientKey:
				cv.clientKey, gotClientKey = k, true
			case !m.FromClient && !gotServerKey:
				cv.serverKey, gotServerKey = k, true
			case m.FromClient && k != cv.clientKey, !m.FromClient && k != cv.serverKey:
				t.Fatalf("message %d: key changed: %+v", i, k)
			}
		case 8:
			if m.FromClient {
				cv.clientReport.setBlob(blob, m.Payload)
				blob++
				cv.hasReport = true
			}
		}
	}
	if !gotClientKey || !gotServerKey {
		t.Fatal("no key messages")
	}
	return cv
}

// TestCaptureMessages checks each message of each capture against our
// encoders and against what the tools printed.
func TestCaptureMessages(t *testing.T) {
	for _, c := range capCases {
		t.Run(c.pcap, func(t *testing.T) {
			cv := loadConversation(t, c)
			slog, clog := toolLog(t, c.log)
			// Hello: versions, sys data, MTU, byte for byte.
			v606 := EncodeVersion("6.06")
			hello := []struct {
				what string
				want []byte
			}{
				{"version", v606[:]},
				{"cycle buffer", []byte{0, 0, 0x10, 0}},
				{"cache line", []byte{0, 0, 0, 64}},
				{"MTU", encodeMTU(MTU1024, 2)},
			}
			for i, h := range hello {
				for side := 0; side < 2; side++ {
					m := cv.msgs[2*i+side]
					if m.FromClient != (side == 0) || !bytes.Equal(m.Payload, h.want) {
						t.Errorf("%s (client=%v): %q, want %q", h.what, m.FromClient, m.Payload, h.want)
					}
				}
			}
			if v := DecodeVersion(cv.msgs[0].Payload); v != Version {
				t.Errorf("version %q", v)
			}
			if m := decodeMTU(cv.msgs[6].Payload); m != MTU1024 {
				t.Errorf("MTU %d", m)
			}
			// Keys decode to the printed addresses.
			verb := c.test.Verb()
			for _, side := range []struct {
				log          []string
				local, remot KeyMsg
			}{{slog, cv.serverKey, cv.clientKey}, {clog, cv.clientKey, cv.serverKey}} {
				want := FormatAddress("local", side.local, verb, true) + FormatAddress("remote", side.remot, verb, true)
				got := strings.Join(linesFrom(t, side.log, " local address:", 4), "\n") + "\n"
				if got != want {
					t.Errorf("addresses:\n%s\nlog:\n%s", want, got)
				}
			}
			// The BW table line both sides print is the client's report.
			if c.test.BW() && c.test != SendBW {
				line := FormatBWReport(cv.clientReport, c.gbits)
				for _, l := range [][]string{slog, clog} {
					hdr := linesFrom(t, l, " #bytes", 2)
					if hdr[0]+"\n" != BWHeader(c.gbits) || hdr[1]+"\n" != line {
						t.Errorf("table:\n%q\n%q\nlog:\n%q", BWHeader(c.gbits), line, hdr)
					}
				}
			}
			// The header block.
			for _, side := range []struct {
				log    []string
				server bool
			}{{slog, true}, {clog, false}} {
				ti := TestInfo{Test: c.test, Server: side.server, AtomicType: c.atomic, Device: "rxe0", NumQPs: 1,
					Transport: "IB", PCIeRelax: c.test.BW(), TxDepth: c.txDepth, RxDepth: c.rxDepth, CQMod: 100,
					MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1, InlineSize: 0, OutReads: 128}
				want := FormatTestInfo(ti)
				n := strings.Count(want, "\n")
				got := strings.Join(linesFrom(t, side.log, "                    ", n-1), "\n") + "\n"
				if ResultLine+got != want {
					t.Errorf("header (server=%v):\n%s\nlog:\n%s", side.server, want, ResultLine+got)
				}
			}
		})
	}
}

// linesFrom returns n lines of log starting at the first one with prefix.
func linesFrom(t *testing.T, log []string, prefix string, n int) []string {
	t.Helper()
	for i, l := range log {
		if strings.HasPrefix(l, prefix) {
			if i+n > len(log) {
				break
			}
			return log[i : i+n]
		}
	}
	t.Fatalf("no %d lines from %q in log", n, prefix)
	return nil
}

// TestLatLineFromLog: the latency line of write_lat.log, from its numbers.
func TestLatLineFromLog(t *testing.T) {
	slog, clog := toolLog(t, "write_lat.log")
	for _, c := range []struct {
		log []string
		r   LatReport
	}{
		{slog, LatReport{Size: 2, Iters: 100, Min: 211.20, Max: 3150.89, Typical: 387.25, Avg: 683.15, Stdev: 586.26, Percentile99: 3150.89, Percentile999: 3150.89}},
		{clog, LatReport{Size: 2, Iters: 100, Min: 201.87, Max: 3714.27, Typical: 420.94, Avg: 677.82, Stdev: 616.40, Percentile99: 3714.27, Percentile999: 3714.27}},
	} {
		got := linesFrom(t, c.log, " #bytes", 2)
		if got[0]+"\n" != LatHeader || got[1]+"\n" != FormatLatReport(c.r) {
			t.Errorf("lat table\n%q\n%q\nlog\n%q", LatHeader, FormatLatReport(c.r), got)
		}
	}
}

// replay plays one side of a captured conversation on conn, writing that
// side's messages and reading and checking the other side's. Each side's
// final "done" is read from the system under test before ours is written
// (ours may then hit a closed socket, which the real tools ignore too). At
// the end it expects the other side to close, unless lingering is set
// (write_lat), where it closes first as the 6.06 tool does when it exits.
func replay(conn net.Conn, msgs []tcpMsg, asClient bool, lingering bool, same func(i int, want, got []byte) bool) error {
	var ourDone []byte
	for i, m := range msgs {
		isDone := bytes.Equal(m.Payload, Done[:])
		if m.FromClient == asClient {
			if isDone {
				ourDone = m.Payload
				continue
			}
			if _, err := conn.Write(m.Payload); err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			continue
		}
		got := make([]byte, len(m.Payload))
		if _, err := io.ReadFull(conn, got); err != nil {
			return fmt.Errorf("message %d (%d bytes, client=%v): %w", i, len(m.Payload), m.FromClient, err)
		}
		if !same(i, m.Payload, got) {
			return fmt.Errorf("message %d (client=%v): got %q, capture %q", i, m.FromClient, got, m.Payload)
		}
	}
	if ourDone != nil {
		conn.Write(ourDone)
	}
	if lingering {
		return conn.Close()
	}
	var b [1]byte
	n, err := conn.Read(b[:])
	if n != 0 || (err != io.EOF && !isReset(err)) {
		return fmt.Errorf("after the conversation: %d bytes, %v", n, err)
	}
	return nil
}

func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type r struct {
		c   net.Conn
		err error
	}
	ch := make(chan r, 1)
	go func() { c, err := ln.Accept(); ch <- r{c, err} }()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	deadline := time.Now().Add(time.Minute)
	client.SetDeadline(deadline)
	a.c.SetDeadline(deadline)
	t.Cleanup(func() { client.Close(); a.c.Close() })
	return client, a.c
}

// TestReplay runs Run as client against each captured server, and as
// server against each captured client, over TCP on 127.0.0.1: every byte we
// send must be the captured byte (except the server's report, which the real
// server sends uninitialised), and every captured message must be consumed
// in order, so the sequences of handshakes match the real tools'.
func TestReplay(t *testing.T) {
	for _, c := range capCases {
		for _, server := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/server=%v", c.pcap, server), func(t *testing.T) {
				cv := loadConversation(t, c)
				ours, theirs := loopbackPair(t)
				if server {
					ours, theirs = theirs, ours
				}
				local, peer := cv.clientKey, cv.serverKey
				if server {
					local, peer = peer, local
				}
				var calls []string
				hooks := Hooks{
					Setup: func(n Negotiated) ([]KeyMsg, error) {
						calls = append(calls, "setup")
						want := Negotiated{PeerVersion: "6.06", CycleBuffer: 4096, CacheLine: 64, MTU: MTU1024}
						if n != want {
							t.Errorf("Negotiated %+v, want %+v", n, want)
						}
						return []KeyMsg{local}, nil
					},
					Connect: func(l, p []KeyMsg) error {
						calls = append(calls, "connect")
						if !reflect.DeepEqual(p, []KeyMsg{peer}) {
							t.Errorf("Connect peer %+v, want %+v", p, peer)
						}
						return nil
					},
					Traffic: func(size uint64, p []KeyMsg) (BWReport, error) {
						calls = append(calls, fmt.Sprintf("traffic %d", size))
						if server {
							return BWReport{}, nil
						}
						return cv.clientReport, nil
					},
				}
				errc := make(chan error, 1)
				go func() {
					errc <- replay(theirs, cv.msgs, server, c.test == WriteLat, func(i int, want, got []byte) bool {
						if server && len(want) == 8 {
							return len(got) == 8 // the real server's report is garbage
						}
						return bytes.Equal(want, got)
					})
				}()
				size := uint64(64)
				if c.test.Verb() == Atomic {
					size = 8
				}
				if c.test == WriteLat {
					size = 2
				}
				out, err := Run(context.Background(), ours, Config{Test: c.test, Server: server, Plan: PlanConfig{Size: size}}, hooks)
				if err != nil {
					t.Fatal(err)
				}
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
				wantCalls := []string{"setup", "connect"}
				if !server || c.test == SendBW || c.test == WriteLat {
					wantCalls = append(wantCalls, fmt.Sprintf("traffic %d", size))
				}
				if !reflect.DeepEqual(calls, wantCalls) {
					t.Errorf("hooks %q, want %q", calls, wantCalls)
				}
				if server && cv.hasReport {
					if !out.Reported || out.RemoteReport != cv.clientReport {
						t.Errorf("server got report %+v (reported %v), want %+v", out.RemoteReport, out.Reported, cv.clientReport)
					}
				}
			})
		}
	}
}

func TestKeyMsgCodec(t *testing.T) {
	k := KeyMsg{LID: 0xbeef, OutReads: 0x80, QPN: 0x1b, PSN: 0x51306, RKey: 0xcf4, VAddr: 0x55e227703000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 0xc6, 13: 0x12, 15: 0x0b}, SRQN: 0xdeadbeef}
	m := EncodeKeyMsg(k)
	want := "beef:0080:00001b:051306:00000cf4:000055e227703000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:0b:deadbeef:\x00"
	if string(m[:]) != want {
		t.Fatalf("EncodeKeyMsg = %q", m)
	}
	if got, err := DecodeKeyMsg(m[:]); err != nil || got != k {
		t.Fatalf("DecodeKeyMsg = %+v, %v", got, err)
	}
	// strtol reads fields of any width.
	if got, err := DecodeKeyMsg([]byte("1:2:3:4:5:6:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:7:8:")); err != nil ||
		got != (KeyMsg{LID: 1, OutReads: 2, QPN: 3, PSN: 4, RKey: 5, VAddr: 6, GID: [16]byte{15: 7}, SRQN: 8}) {
		t.Fatalf("short fields: %+v, %v", got, err)
	}
	for i := 0; i < KeyMsgSize-1; i++ {
		if _, err := DecodeKeyMsg(m[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%d-byte prefix: %v", i, err)
		}
	}
	for _, bad := range []string{
		"10000:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:1000000:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:0:0:0:0:100:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:0:0:100000000:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:100000000:",
		"0:0:0:0:0:x:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
		"0:0:0:0:0::0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:",
	} {
		if _, err := DecodeKeyMsg([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeKeyMsg(%q) = %v", bad, err)
		}
	}
}

func FuzzDecodeKeyMsg(f *testing.F) {
	m := EncodeKeyMsg(KeyMsg{OutReads: 1, QPN: 0x1b, PSN: 0x9da8ae, RKey: 0xca2, VAddr: 0x558a33d8f000})
	f.Add(m[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := DecodeKeyMsg(b)
		if err != nil {
			return
		}
		m := EncodeKeyMsg(k)
		if k2, err := DecodeKeyMsg(m[:]); err != nil || k2 != k {
			t.Fatalf("round trip %+v: %+v, %v", k, k2, err)
		}
	})
}
