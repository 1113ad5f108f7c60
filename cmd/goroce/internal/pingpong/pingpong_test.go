package pingpong

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func mustHex16(t *testing.T, s string) (g [16]byte) {
	t.Helper()
	m := Encode(Dest{})
	copy(m[19:51], s)
	d, err := Decode(m[:])
	if err != nil {
		t.Fatal(err)
	}
	return d.GID
}

var captures = []struct {
	pcap, log string
	size      uint32
	iters     uint32
	// elapsed microseconds that make the logged timing lines (server, client)
	usecServer, usecClient int64
}{
	{"rc_pingpong.pcap", "rc_pingpong.log", 4096, 50, 374902, 387362},
	{"rc_pingpong_small.pcap", "rc_pingpong_small.log", 512, 50, 143985, 131921},
}

// TestCaptureGolden checks every message of the real exchanges: the records
// decode to what both tools printed, re-encode to the same bytes, and the
// last message is "done\0".
func TestCaptureGolden(t *testing.T) {
	for _, c := range captures {
		t.Run(c.pcap, func(t *testing.T) {
			msgs := tcpMessages(t, c.pcap, DefaultPort)
			if len(msgs) != 3 {
				t.Fatalf("got %d messages, want 3", len(msgs))
			}
			if !msgs[0].FromClient || msgs[1].FromClient || !msgs[2].FromClient {
				t.Fatalf("directions: %v %v %v, want client, server, client", msgs[0].FromClient, msgs[1].FromClient, msgs[2].FromClient)
			}
			if len(msgs[0].Payload) != MsgSize || len(msgs[1].Payload) != MsgSize {
				t.Fatalf("record sizes %d, %d; want %d", len(msgs[0].Payload), len(msgs[1].Payload), MsgSize)
			}
			if !bytes.Equal(msgs[2].Payload, Done[:]) {
				t.Fatalf("last message %q, want %q", msgs[2].Payload, Done[:])
			}
			cli, err := Decode(msgs[0].Payload)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := Decode(msgs[1].Payload)
			if err != nil {
				t.Fatal(err)
			}
			if m := Encode(cli); !bytes.Equal(m[:], msgs[0].Payload) {
				t.Errorf("Encode(client) = %q, capture %q", m, msgs[0].Payload)
			}
			if m := Encode(srv); !bytes.Equal(m[:], msgs[1].Payload) {
				t.Errorf("Encode(server) = %q, capture %q", m, msgs[1].Payload)
			}
			slog, clog := toolLog(t, c.log)
			want := []struct{ got, want string }{
				{FormatLocal(srv), slog[0]},
				{FormatRemote(cli), slog[1]},
				{FormatLocal(cli), clog[0]},
				{FormatRemote(srv), clog[1]},
				{FormatStats(c.size, c.iters, time.Duration(c.usecServer)*time.Microsecond), slog[2] + "\n" + slog[3]},
				{FormatStats(c.size, c.iters, time.Duration(c.usecClient)*time.Microsecond), clog[2] + "\n" + clog[3]},
			}
			for _, w := range want {
				if strings.TrimSuffix(w.got, "\n") != w.want {
					t.Errorf("printed\n%q\nlog has\n%q", w.got, w.want)
				}
			}
		})
	}
}

// TestReplayServer plays the captured client against ServerExchange and
// checks that our server answers with exactly the captured server bytes,
// after onPeer ran with the client's record.
func TestReplayServer(t *testing.T) {
	for _, c := range captures {
		t.Run(c.pcap, func(t *testing.T) {
			msgs := tcpMessages(t, c.pcap, DefaultPort)
			local, err := Decode(msgs[1].Payload)
			if err != nil {
				t.Fatal(err)
			}
			a, b := net.Pipe()
			defer a.Close()
			var connected atomic.Bool
			errc := make(chan error, 1)
			go func() {
				defer b.Close()
				if _, err := b.Write(msgs[0].Payload); err != nil {
					errc <- err
					return
				}
				got := make([]byte, MsgSize)
				if _, err := io.ReadFull(b, got); err != nil {
					errc <- err
					return
				}
				if !connected.Load() {
					errc <- errors.New("server wrote its record before onPeer returned")
					return
				}
				if !bytes.Equal(got, msgs[1].Payload) {
					errc <- errors.New("server record differs from capture: " + string(got))
					return
				}
				_, err := b.Write(msgs[2].Payload)
				errc <- err
			}()
			peer, err := ServerExchange(a, local, func(d Dest) error {
				if m := Encode(d); !bytes.Equal(m[:], msgs[0].Payload) {
					t.Errorf("onPeer got %+v", d)
				}
				connected.Store(true)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if m := Encode(peer); !bytes.Equal(m[:], msgs[0].Payload) {
				t.Errorf("returned peer %+v", peer)
			}
		})
	}
}

// TestReplayClient plays the captured server against ClientExchange.
func TestReplayClient(t *testing.T) {
	for _, c := range captures {
		t.Run(c.pcap, func(t *testing.T) {
			msgs := tcpMessages(t, c.pcap, DefaultPort)
			local, err := Decode(msgs[0].Payload)
			if err != nil {
				t.Fatal(err)
			}
			a, b := net.Pipe()
			defer a.Close()
			errc := make(chan error, 1)
			go func() {
				defer b.Close()
				got := make([]byte, MsgSize)
				if _, err := io.ReadFull(b, got); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(got, msgs[0].Payload) {
					errc <- errors.New("client record differs from capture: " + string(got))
					return
				}
				if _, err := b.Write(msgs[1].Payload); err != nil {
					errc <- err
					return
				}
				done := make([]byte, len(Done))
				if _, err := io.ReadFull(b, done); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(done, msgs[2].Payload) {
					errc <- errors.New("client done differs: " + string(done))
					return
				}
				errc <- nil
			}()
			peer, err := ClientExchange(a, local)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if m := Encode(peer); !bytes.Equal(m[:], msgs[1].Payload) {
				t.Errorf("returned peer %+v", peer)
			}
		})
	}
}

// TestLoopbackTCP runs both of our sides against each other over TCP on
// 127.0.0.1, through Listen/AcceptOne as the CLI will.
func TestLoopbackTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvDest := Dest{LID: 0, QPN: 0x11, PSN: 0x226416, GID: mustHex16(t, "00000000000000000000ffffc612000b")}
	cliDest := Dest{LID: 7, QPN: 0xabcdef, PSN: 0x000001, GID: mustHex16(t, "fe800000000000000000000000000001")}
	type result struct {
		peer     Dest
		err      error
		onPeerAt Dest
	}
	srvc := make(chan result, 1)
	go func() {
		conn, err := AcceptOne(ln)
		if err != nil {
			srvc <- result{err: err}
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute))
		var r result
		r.peer, r.err = ServerExchange(conn, srvDest, func(d Dest) error { r.onPeerAt = d; return nil })
		srvc <- r
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Minute))
	got, err := ClientExchange(conn, cliDest)
	if err != nil {
		t.Fatal(err)
	}
	r := <-srvc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got != srvDest || r.peer != cliDest || r.onPeerAt != cliDest {
		t.Fatalf("client got %+v, server got %+v (onPeer %+v)", got, r.peer, r.onPeerAt)
	}
}

// TestServerOnPeerError: when the local QP cannot be connected the server
// writes nothing and reports ErrPeer.
func TestServerOnPeerError(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		m := Encode(Dest{QPN: 1})
		b.Write(m[:])
		io.Copy(io.Discard, b) // must see EOF, not a record
		b.Close()
	}()
	boom := errors.New("modify QP failed")
	_, err := ServerExchange(a, Dest{}, func(Dest) error { return boom })
	if !errors.Is(err, ErrPeer) || !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

// TestExchangeTruncated: a peer that hangs up at any point is an error,
// never a hang or a panic.
func TestExchangeTruncated(t *testing.T) {
	rec := Encode(Dest{QPN: 0x12, PSN: 0x34})
	for n := 0; n < MsgSize; n++ {
		a, b := net.Pipe()
		go func() { b.Write(rec[:n]); b.Close() }()
		if _, err := ServerExchange(a, Dest{}, nil); err == nil {
			t.Fatalf("server accepted a %d-byte record", n)
		}
		a.Close()
		a, b = net.Pipe()
		go func() { io.ReadFull(b, make([]byte, MsgSize)); b.Write(rec[:n]); b.Close() }()
		if _, err := ClientExchange(a, Dest{}); err == nil {
			t.Fatalf("client accepted a %d-byte record", n)
		}
		a.Close()
	}
	// The server needs the 5-byte "done".
	a, b := net.Pipe()
	go func() {
		b.Write(rec[:])
		io.ReadFull(b, make([]byte, MsgSize))
		b.Write(Done[:4])
		b.Close()
	}()
	if _, err := ServerExchange(a, Dest{}, nil); err == nil {
		t.Fatal("server accepted a 4-byte done")
	}
	a.Close()
}

func TestEncodeDecode(t *testing.T) {
	d := Dest{LID: 0xbeef, QPN: 0xfedcba, PSN: 0x123456, GID: [16]byte{0xfe, 0x80, 15: 0x01}}
	m := Encode(d)
	want := "beef:fedcba:123456:fe800000000000000000000000000001\x00"
	if string(m[:]) != want {
		t.Fatalf("Encode = %q, want %q", m, want)
	}
	got, err := Decode(m[:])
	if err != nil || got != d {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	// Out-of-range QPN/PSN are masked to 24 bits, not allowed to overflow.
	m = Encode(Dest{QPN: 0x1000011, PSN: 0xff000002})
	if got := string(m[:19]); got != "0000:000011:000002:" {
		t.Fatalf("masked Encode = %q", got)
	}
	// sscanf("%x") reads any width and either case.
	got, err = Decode([]byte("1:11:AbC:00000000000000000000FFFFc612000b"))
	if err != nil || got.LID != 1 || got.QPN != 0x11 || got.PSN != 0xabc || FormatGID(got.GID) != "::ffff:198.18.0.11" {
		t.Fatalf("Decode short fields = %+v, %v", got, err)
	}
	for i := 0; i < MsgSize-1; i++ {
		if _, err := Decode(m[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode of a %d-byte prefix: %v", i, err)
		}
	}
	bad := []string{
		"", ":::", "0000:000000:000000", "0000:000000:000000:", "x000:000000:000000:00000000000000000000000000000000",
		"10000:000000:000000:00000000000000000000000000000000",
		"0000:000000:000000:0000000000000000000000000000000g", "0000:000000:000000:000000000000000000000000000000000",
		"0000::000000:00000000000000000000000000000000",
	}
	for _, s := range bad {
		if _, err := Decode([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q) = %v, want ErrMalformed", s, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	m := Encode(Dest{QPN: 0x11, PSN: 0x226416, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 11}})
	f.Add(m[:])
	f.Add([]byte("0:0:0:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			return
		}
		m := Encode(d)
		d2, err := Decode(m[:])
		if err != nil || d2 != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, d2, err)
		}
	})
}

func TestFormatGID(t *testing.T) {
	// Expected strings from glibc inet_ntop(AF_INET6).
	cases := map[string]string{
		"00000000000000000000ffffc612000b": "::ffff:198.18.0.11",
		"00000000000000000000000000000000": "::",
		"fe800000000000000000000000000001": "fe80::1",
		"00000000000000000000000000000001": "::1",
		"00000000000000000000000001020304": "::1.2.3.4",
		"20010db8000000000000000000000000": "2001:db8::",
		"00010000000000010000000000000001": "1:0:0:1::1",
		"00010000000000000001000000000001": "1::1:0:0:1",
		"00000000000000000000fffe01020304": "::fffe:102:304",
		"0000000000000000ffff000001020304": "::ffff:0:102:304",
		"00000000000000000000ffff00000000": "::ffff:0.0.0.0",
		"12345678abcdef0012345678abcdef00": "1234:5678:abcd:ef00:1234:5678:abcd:ef00",
		"fe80000000000000020c29fffe3a4b5c": "fe80::20c:29ff:fe3a:4b5c",
	}
	for h, want := range cases {
		if got := FormatGID(mustHex16(t, h)); got != want {
			t.Errorf("FormatGID(%s) = %q, want %q", h, got, want)
		}
	}
}

func TestFormatStatsEdge(t *testing.T) {
	got := FormatStats(4096, 1000, 0)
	want := "8192000 bytes in 0.00 seconds = inf Mbit/sec\n1000 iters in 0.00 seconds = 0.00 usec/iter\n"
	if got != want {
		t.Fatalf("zero time:\n%q\nwant\n%q", got, want)
	}
	got = FormatStats(4096, 1000, 34179*time.Microsecond)
	want = "8192000 bytes in 0.03 seconds = 1917.43 Mbit/sec\n1000 iters in 0.03 seconds = 34.18 usec/iter\n"
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}
