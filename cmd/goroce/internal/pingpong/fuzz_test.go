package pingpong

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// peerConn is a net.Conn whose peer sends fixed bytes and then closes;
// what we write is kept.
type peerConn struct {
	r       *bytes.Reader
	written bytes.Buffer
}

func (c *peerConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *peerConn) Write(b []byte) (int, error)      { return c.written.Write(b) }
func (c *peerConn) Close() error                     { return nil }
func (c *peerConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *peerConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *peerConn) SetDeadline(time.Time) error      { return nil }
func (c *peerConn) SetReadDeadline(time.Time) error  { return nil }
func (c *peerConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzExchange runs ServerExchange and ClientExchange against a peer that
// sends arbitrary bytes. Nothing may panic; the peer record they return is
// Decode of the peer's first 52 bytes, or they fail; the server calls onPeer
// exactly when the record decodes and writes its own record only after it;
// what each side writes is exactly Encode(local) (and the client's "done").
// The seed corpus in testdata/fuzz/FuzzExchange is each side of the rxe
// captures (regenerate with PINGPONG_WRITE_CORPUS=1 go test -run
// TestWriteFuzzCorpus).
func FuzzExchange(f *testing.F) {
	local := Dest{QPN: 0x123, PSN: 0xabcdef, GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 1}}
	mine := Encode(local)
	f.Fuzz(func(t *testing.T, server bool, data []byte) {
		want, werr := Decode(data[:min(len(data), MsgSize)])
		if len(data) < MsgSize {
			werr = errors.New("short")
		}
		c := &peerConn{r: bytes.NewReader(data)}
		var peer Dest
		var err error
		if server {
			calls := 0
			peer, err = ServerExchange(c, local, func(d Dest) error {
				calls++
				if c.written.Len() != 0 {
					t.Fatal("wrote before onPeer")
				}
				return nil
			})
			if calls != map[bool]int{true: 0, false: 1}[werr != nil] {
				t.Fatalf("onPeer called %d times (decode error %v)", calls, werr)
			}
			if wrote := c.written.Bytes(); (werr == nil && !bytes.Equal(wrote, mine[:])) || (werr != nil && len(wrote) != 0) {
				t.Fatalf("server wrote %q", wrote)
			}
			if werr == nil && (err == nil) != (len(data) >= MsgSize+len(Done)) {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
		} else {
			peer, err = ClientExchange(c, local)
			w := c.written.Bytes()
			if !bytes.HasPrefix(w, mine[:]) || (err == nil && !bytes.Equal(w[MsgSize:], Done[:])) || (err != nil && len(w) != MsgSize) {
				t.Fatalf("client wrote %q (%v)", w, err)
			}
		}
		if werr != nil {
			if err == nil {
				t.Fatalf("peer %q accepted: %+v", data, peer)
			}
			return
		}
		if peer != want {
			t.Fatalf("peer %+v, Decode gives %+v", peer, want)
		}
	})
}

// FuzzFormatGID: the address printed for any GID (inet_ntop's format) is
// an IPv6 address that parses back to the same 16 bytes.
func FuzzFormatGID(f *testing.F) {
	for _, h := range []string{"00000000000000000000ffffc612000b", "fe800000000000000000000000000001", "00000000000000000000000001020304", "00010000000000000001000000000001"} {
		b, err := hex.DecodeString(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var gid [16]byte
		copy(gid[:], b)
		s := FormatGID(gid)
		a, err := netip.ParseAddr(s)
		if err != nil || a.As16() != gid {
			t.Fatalf("FormatGID(% x) = %q: %v %v", gid, s, a, err)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzExchange (each side's
// bytes in every captured exchange, whole and cut) and
// testdata/fuzz/FuzzDecode (every captured record) and
// testdata/fuzz/FuzzFormatGID (every captured GID). It only runs with
// PINGPONG_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("PINGPONG_WRITE_CORPUS") != "1" {
		t.Skip("set PINGPONG_WRITE_CORPUS=1 to regenerate the seed corpora")
	}
	dirs := map[string]string{}
	for _, name := range []string{"FuzzExchange", "FuzzDecode", "FuzzFormatGID"} {
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs[name] = dir
	}
	write := func(fuzz, name string, vals ...string) {
		s := "go test fuzz v1\n"
		for _, v := range vals {
			s += v + "\n"
		}
		if err := os.WriteFile(filepath.Join(dirs[fuzz], name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bs := func(b []byte) string { return fmt.Sprintf("[]byte(%q)", b) }
	gids := map[[16]byte]bool{}
	for _, pcap := range []string{captures[0].pcap, captures[1].pcap, "ud_pingpong.pcap"} {
		base := pcap[:len(pcap)-len(".pcap")]
		msgs := tcpMessages(t, pcap, DefaultPort)
		for _, server := range []bool{false, true} {
			var peer bytes.Buffer
			for _, m := range msgs {
				if m.FromClient == server {
					peer.Write(m.Payload)
				}
			}
			role := "client"
			if server {
				role = "server"
			}
			write("FuzzExchange", base+"_as_"+role, fmt.Sprintf("bool(%v)", server), bs(peer.Bytes()))
			write("FuzzExchange", base+"_as_"+role+"_cut", fmt.Sprintf("bool(%v)", server), bs(peer.Bytes()[:peer.Len()-3]))
		}
		for i, m := range msgs {
			if len(m.Payload) == MsgSize {
				write("FuzzDecode", fmt.Sprintf("%s_%d", base, i), bs(m.Payload))
				if d, err := Decode(m.Payload); err == nil && !gids[d.GID] {
					gids[d.GID] = true
					write("FuzzFormatGID", fmt.Sprintf("%s_%d", base, i), bs(d.GID[:]))
				}
			}
		}
	}
}
