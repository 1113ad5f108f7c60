package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peerConn is a net.Conn whose peer sends fixed bytes and then closes;
// what we write is kept. Deadlines are accepted and ignored: reads never
// block.
type peerConn struct {
	r       *bytes.Reader
	written bytes.Buffer
	closed  bool
}

func newPeerConn(b []byte) *peerConn { return &peerConn{r: bytes.NewReader(b)} }

func (c *peerConn) Read(b []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.r.Read(b)
}

func (c *peerConn) Write(b []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.written.Write(b)
}

func (c *peerConn) Close() error                     { c.closed = true; return nil }
func (c *peerConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *peerConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *peerConn) SetDeadline(time.Time) error      { return nil }
func (c *peerConn) SetReadDeadline(time.Time) error  { return nil }
func (c *peerConn) SetWriteDeadline(time.Time) error { return nil }

// runSel decodes FuzzRun's selector byte: the test (bits 0-2), the role
// (bit 3), --report-per-port (4), --dont_xchg_versions (5), -a (6) and two
// QPs instead of one (7).
func runSel(sel uint8) (Config, int) {
	cfg := Config{
		Test: Test(sel & 7), Server: sel&8 != 0, ReportPerPort: sel&16 != 0, DontExchangeVersions: sel&32 != 0,
		Plan: PlanConfig{Size: 64, AllSizes: sel&64 != 0},
	}
	return cfg, 1 + int(sel>>7)
}

func selFor(test Test, server bool) uint8 {
	s := uint8(test)
	if server {
		s |= 8
	}
	return s
}

// FuzzRun plays a whole perftest control conversation against a peer that
// sends arbitrary bytes: every decoder of the peer's messages (version, sys
// data, MTU, key messages, reports) in the order the real tools use them.
// Nothing may panic or hang; a failed run is a *StepError; a run that
// succeeds negotiated values within the rules (the larger page and cache
// line, a valid MTU no larger than ours), learned one key per QP (which
// prints as two lines), put our key message on the wire, and as a BW server
// kept the client's report exactly as sent. The seed corpus in
// testdata/fuzz/FuzzRun is each side of the rxe captures' conversations
// (regenerate with PERFTEST_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus).
func FuzzRun(f *testing.F) {
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		cfg, nqp := runSel(sel)
		local := keysFor(7, nqp)
		rep := BWReport{Size: 64, Iters: 1000, BWPeak: 1.5, BWAvg: 1.25, MsgRateAvg: 0.5}
		hooks := Hooks{
			Setup: func(n Negotiated) ([]KeyMsg, error) {
				// What cmd/goroce checks before sizing its buffers.
				if n.CycleBuffer < DefaultCycleBuffer || n.CacheLine < DefaultCacheLine {
					t.Fatalf("negotiated %+v below ours", n)
				}
				return local, nil
			},
			Traffic: func(uint64, []KeyMsg) (BWReport, error) { return rep, nil },
		}
		c := newPeerConn(data)
		out, err := Run(context.Background(), c, cfg, hooks)
		if err != nil {
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a StepError", err)
			}
			return
		}
		n := out.Negotiated
		if !n.MTU.Valid() || n.MTU > MTU1024 {
			t.Fatalf("negotiated MTU %d", n.MTU)
		}
		if len(out.Peer) != nqp {
			t.Fatalf("%d peer keys for %d QPs", len(out.Peer), nqp)
		}
		// The tools print the peer's keys: two lines each.
		for _, k := range out.Peer {
			if l := FormatAddress("remote", k, cfg.Test.Verb(), true); strings.Count(l, "\n") != 2 {
				t.Fatalf("FormatAddress(%+v) = %q", k, l)
			}
		}
		// Our side of the conversation: every 108-byte message at a key
		// message's place is one of our keys.
		if !bytes.Contains(c.written.Bytes(), func() []byte { m := EncodeKeyMsg(local[0]); return m[:] }()) {
			t.Fatal("our key message is not on the wire")
		}
		if out.Reported && cfg.Server && cfg.Test.BW() && cfg.Test != SendBW {
			// The server's copy of the client's report is what the client
			// sent, blob for blob.
			wide := atLeastFloat(n.PeerVersion, 5.33)
			var got bytes.Buffer
			for _, b := range out.RemoteReport.blobs(wide, cfg.ReportPerPort) {
				got.Write(b)
			}
			if !bytes.Contains(data, got.Bytes()) {
				t.Fatalf("report %+v re-encoded is not in the peer's bytes", out.RemoteReport)
			}
		}
	})
}

// FuzzVersion: DecodeVersion on any 16-byte blob, then the version rules.
// The string is what precedes the first NUL and EncodeVersion restores the
// blob up to there; Atof agrees with strconv on plain decimals and is never
// NaN.
func FuzzVersion(f *testing.F) {
	for _, v := range []string{"6.06", "6.29", "5.32", "5.31", "5.1", "4.5-0.17", "", "inf", "1e400", " +7.", "0x1p4"} {
		b := EncodeVersion(v)
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := DecodeVersion(b)
		if len(v) > len(b) || bytes.IndexByte([]byte(v), 0) >= 0 {
			t.Fatalf("DecodeVersion(%q) = %q", b, v)
		}
		if len(v) <= VersionSize {
			enc := EncodeVersion(v)
			if len(b) >= VersionSize && !bytes.Equal(enc[:len(v)], b[:len(v)]) {
				t.Fatalf("EncodeVersion(%q) = %q", v, enc)
			}
			if bytes.Count(enc[len(v):], []byte{0}) != VersionSize-len(v) || DecodeVersion(enc[:]) != v {
				t.Fatalf("round trip of %q: %q", v, enc)
			}
		}
		a := Atof(v)
		if math.IsNaN(a) {
			t.Fatalf("Atof(%q) is NaN", v)
		}
		plain := len(v) > 0 && len(v) < 30
		dots := 0
		for _, c := range []byte(v) {
			if c == '.' {
				dots++
			} else if c < '0' || c > '9' {
				plain = false
			}
		}
		if plain && dots <= 1 && v != "." {
			want, err := strconv.ParseFloat(v, 64)
			if err == nil && a != want {
				t.Fatalf("Atof(%q) = %v, strconv %v", v, a, want)
			}
		}
		_ = atLeast(v, 5.32)
		_ = atLeastFloat(v, 5.1)
	})
}

// FuzzDecodeMTU: decodeMTU is strtol on the peer's 2 or 4 bytes; our own
// encoding of every valid MTU decodes to itself in both widths.
func FuzzDecodeMTU(f *testing.F) {
	f.Add([]byte("3\x00"))
	f.Add([]byte("5\x00\x00\x00"))
	f.Add([]byte(" -1\x00"))
	f.Add([]byte("99999999"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := decodeMTU(b)
		if m.Valid() != (m.Bytes() != 0) || (m.Valid() && MTUFromBytes(m.Bytes()) != m) {
			t.Fatalf("decodeMTU(%q) = %d, %d bytes", b, m, m.Bytes())
		}
		// A plain decimal that fits is read exactly.
		if len(b) > 0 && len(b) <= 6 {
			if v, err := strconv.Atoi(string(b)); err == nil && v >= 0 && b[0] != '+' && MTU(v) != m {
				t.Fatalf("decodeMTU(%q) = %d", b, m)
			}
		}
		for mm := MTU256; mm <= MTU4096; mm++ {
			for _, size := range []int{2, 4} {
				if got := decodeMTU(encodeMTU(mm, size)); got != mm {
					t.Fatalf("decodeMTU(encodeMTU(%d, %d)) = %d", mm, size, got)
				}
			}
		}
	})
}

// FuzzExchangeReports: the peer's report blobs (4- or 8-byte iteration count,
// with or without the per-port fields) decode to a report whose encoding is
// the peer's bytes again, bit for bit (NaNs included), and prints as one
// line; a short stream is an error.
func FuzzExchangeReports(f *testing.F) {
	r := BWReport{Size: 65536, Iters: 5000, BWPeak: 1, BWAvg: 2, MsgRateAvg: 3, BWAvgP1: 4, MsgRateAvgP1: 5, BWAvgP2: 6, MsgRateAvgP2: 7}
	for _, wide := range []bool{false, true} {
		for _, pp := range []bool{false, true} {
			f.Add(wide, pp, bytes.Join(r.blobs(wide, pp), nil))
		}
	}
	f.Fuzz(func(t *testing.T, wide, perPort bool, data []byte) {
		s := NewSession(newPeerConn(data), true)
		if wide {
			s.PeerVersion = "6.06"
		} else {
			s.PeerVersion = "5.32"
		}
		need := 8 * 5
		if !wide {
			need -= 4
		}
		if perPort {
			need += 8 * 4
		}
		got, err := s.ExchangeReports(BWReport{}, perPort)
		if len(data) < need {
			if err == nil {
				t.Fatalf("%d bytes of %d read without error", len(data), need)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if enc := bytes.Join(got.blobs(wide, perPort), nil); !bytes.Equal(enc, data[:need]) {
			t.Fatalf("report %+v encodes to % x, peer sent % x", got, enc, data[:need])
		}
		// A BW server prints the client's report: one line whatever the
		// numbers (NaN, infinities, 2^64-1 iterations).
		for _, gbits := range []bool{false, true} {
			if l := FormatBWReport(got, gbits); strings.Count(l, "\n") != 1 || !strings.HasSuffix(l, "\n") {
				t.Fatalf("FormatBWReport(%+v) = %q", got, l)
			}
		}
	})
}

// TestWriteFuzzCorpus regenerates the seed corpora of FuzzRun (each side
// of every captured conversation, whole and cut), FuzzDecodeKeyMsg (every
// distinct key message in the captures), FuzzExchangeReports (the captured
// clients' reports), FuzzVersion and FuzzDecodeMTU (the captured Hello
// messages). It only runs with PERFTEST_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("PERFTEST_WRITE_CORPUS") != "1" {
		t.Skip("set PERFTEST_WRITE_CORPUS=1 to regenerate the seed corpora")
	}
	dirs := map[string]string{}
	for _, name := range []string{"FuzzRun", "FuzzDecodeKeyMsg", "FuzzExchangeReports", "FuzzVersion", "FuzzDecodeMTU"} {
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
	seenKey, seenHello := map[string]bool{}, map[string]bool{}
	for _, c := range capCases {
		cv := loadConversation(t, c)
		base := c.pcap[:len(c.pcap)-len(".pcap")]
		for _, server := range []bool{false, true} {
			var peer bytes.Buffer
			for _, m := range cv.msgs {
				if m.FromClient == server {
					peer.Write(m.Payload)
				}
				if len(m.Payload) == KeyMsgSize && !seenKey[string(m.Payload)] {
					seenKey[string(m.Payload)] = true
					write("FuzzDecodeKeyMsg", fmt.Sprintf("%s_%d", base, len(seenKey)), bs(m.Payload))
				}
			}
			role := "client"
			if server {
				role = "server"
			}
			sel := fmt.Sprintf("byte(%q)", selFor(c.test, server))
			write("FuzzRun", base+"_as_"+role, sel, bs(peer.Bytes()))
			if c.test == WriteBW || c.test == SendBW {
				write("FuzzRun", base+"_as_"+role+"_cut", sel, bs(peer.Bytes()[:peer.Len()/2]))
			}
		}
		// Hello: the versions (messages 0-1) and MTUs (6-7) as sent.
		for _, i := range []int{0, 1} {
			for fuzz, m := range map[string][]byte{"FuzzVersion": cv.msgs[i].Payload, "FuzzDecodeMTU": cv.msgs[6+i].Payload} {
				if !seenHello[fuzz+string(m)] {
					seenHello[fuzz+string(m)] = true
					write(fuzz, fmt.Sprintf("%s_%d", base, i), bs(m))
				}
			}
		}
		if cv.hasReport {
			wide := atLeastFloat(Version, 5.33)
			write("FuzzExchangeReports", base, fmt.Sprintf("bool(%v)", wide), "bool(false)", bs(bytes.Join(cv.clientReport.blobs(wide, false), nil)))
		}
	}
	// A peer that claims a 2 GiB page and cache line (cmd/goroce refuses
	// them before sizing anything).
	cv := loadConversation(t, capCases[0])
	var peer bytes.Buffer
	for i, m := range cv.msgs {
		if !m.FromClient {
			p := m.Payload
			if i == 3 || i == 5 {
				p = binary.BigEndian.AppendUint32(nil, 0x7fffffff)
			}
			peer.Write(p)
		}
	}
	write("FuzzRun", "huge_sys_data_as_client", fmt.Sprintf("byte(%q)", selFor(capCases[0].test, false)), bs(peer.Bytes()))
}
