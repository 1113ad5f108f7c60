package probe

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// responder is goroce's own perftest server side on the far end of an
// in-memory link: one fresh QP and region per control connection, as a
// stock server restarted per connection has.
type responder struct {
	t    *testing.T
	test perftest.Test
	size uint64
	dev  *qp.Device
	ip   netip.Addr
	mu   sync.Mutex
	bufs [][]byte // each connection's region, for memory checks
	offs []uint64 // offset of the advertised VAddr in it
	wg   sync.WaitGroup
}

func newEnv(t *testing.T, test perftest.Test, size uint64) (*Env, *responder) {
	la, lb := nic.NewMemPair(nic.MemConfig{})
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	dev, err := qp.Open(qp.Config{Name: "resp", Link: lb, IP: ipB, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: la.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	r := &responder{t: t, test: test, size: size, dev: dev, ip: ipB}
	// The control connections go over loopback, as the tools' own tests do.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		la.Close()
		r.wg.Wait()
		dev.Close()
	})
	env := &Env{
		Link: la, LocalIP: ipA, LocalMAC: la.HardwareAddr(),
		PeerMAC: func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) { return lb.HardwareAddr(), nil },
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", ln.Addr().String())
		},
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go r.serve(c)
		}
	}()
	return env, r
}

func (r *responder) serve(conn net.Conn) {
	defer r.wg.Done()
	defer conn.Close()
	var (
		pd  *qp.PD
		q   *qp.QP
		buf []byte
	)
	access := memreg.LocalWrite
	switch r.test {
	case perftest.WriteBW:
		access |= memreg.RemoteWrite
	case perftest.ReadBW:
		access |= memreg.RemoteRead
	case perftest.AtomicBW:
		access |= memreg.RemoteAtomic
	}
	hooks := perftest.Hooks{
		Setup: func(n perftest.Negotiated) ([]perftest.KeyMsg, error) {
			bs := perftest.BuffSize(r.size, n.CycleBuffer)
			buf = make([]byte, 2*bs)
			pd = r.dev.AllocPD()
			mr, err := pd.RegMR(buf, access)
			if err != nil {
				return nil, err
			}
			cq, err := r.dev.CreateCQ(64)
			if err != nil {
				return nil, err
			}
			if q, err = pd.CreateQP(qp.InitAttr{SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16}}); err != nil {
				return nil, err
			}
			va := perftest.TargetVAddr(mr.IOVA(), 1, 0, r.size, n.CycleBuffer)
			r.mu.Lock()
			r.bufs = append(r.bufs, buf)
			r.offs = append(r.offs, va-mr.IOVA())
			r.mu.Unlock()
			return []perftest.KeyMsg{{OutReads: 16, QPN: q.QPN(), PSN: 0x123456, RKey: mr.RKey(), VAddr: va, GID: r.ip.As16()}}, nil
		},
		Connect: func(local, peer []perftest.KeyMsg) error {
			return q.Connect(context.Background(), qp.Remote{QPN: peer[0].QPN, PSN: peer[0].PSN, GID: netip.AddrFrom16(peer[0].GID)},
				qp.ConnectOptions{SQPSN: local[0].PSN})
		},
	}
	_, err := perftest.Run(context.Background(), conn, perftest.Config{Test: r.test, Server: true, Plan: perftest.PlanConfig{Size: r.size}}, hooks)
	if err != nil {
		r.t.Errorf("server: %v", err)
	}
}

// region returns connection i's region from the advertised VAddr.
func (r *responder) region(i int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bufs[i][r.offs[i]:]
}

func runChecks(t *testing.T, test perftest.Test, names ...string) ([]Result, *responder) {
	t.Helper()
	env, r := newEnv(t, test, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, env, Config{Test: test, Checks: names, Window: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return res, r
}

func byName(rs []Result) map[string]Result {
	m := map[string]Result{}
	for _, r := range rs {
		m[r.Check] = r
	}
	return m
}

// Every check against goroce's own responder, with what it answered.
func TestProbeWriteServer(t *testing.T) {
	res, r := runChecks(t, perftest.WriteBW)
	want := map[string]string{
		"access":               "RC_ACKNOWLEDGE psn %d ACK",
		"wrong-rkey":           "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"outside-region":       "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"straddle-end":         "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"length-mismatch":      "RC_ACKNOWLEDGE psn %d NAK(INVALID_REQUEST)",
		"middle-without-first": "RC_ACKNOWLEDGE psn %d NAK(INVALID_REQUEST)",
		"psn-gap":              "RC_ACKNOWLEDGE psn %d NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn %d ACK",
		"far-future-psn":       "RC_ACKNOWLEDGE psn %d NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ACKNOWLEDGE psn %d ACK",
		"duplicate":            "RC_ACKNOWLEDGE psn %d ACK, then for the duplicate: RC_ACKNOWLEDGE psn %d ACK",
		"bad-icrc":             "silence, then for the valid request: RC_ACKNOWLEDGE psn %d ACK",
		"truncated":            "silence, then for the valid request: RC_ACKNOWLEDGE psn %d ACK",
		"wrong-dest-qp":        "silence, then for the valid request: RC_ACKNOWLEDGE psn %d ACK",
	}
	checkResults(t, res, want)
	// The duplicate WRITE was not executed again: the region holds the
	// first payload, not the duplicate's.
	for i, x := range res {
		if x.Check == "duplicate" {
			if got := r.region(i)[:8]; !bytes.Equal(got, []byte("goroce!!")) {
				t.Fatalf("after the duplicate WRITE the region holds %q", got)
			}
		}
		if x.Check == "straddle-end" || x.Check == "wrong-rkey" || x.Check == "outside-region" {
			if bytes.Contains(r.bufs[i], []byte("goroce")) {
				t.Fatalf("%s: the rejected WRITE changed the region", x.Check)
			}
		}
	}
}

func TestProbeAtomicServer(t *testing.T) {
	res, r := runChecks(t, perftest.AtomicBW)
	want := map[string]string{
		"access":            "RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
		"wrong-rkey":        "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"outside-region":    "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"misaligned-atomic": "RC_ACKNOWLEDGE psn %d NAK(INVALID_REQUEST)",
		"psn-gap":           "RC_ACKNOWLEDGE psn %d NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
		"duplicate":         "RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0, then for the duplicate: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0, then FETCH_ADD 0: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x1",
		"bad-icrc":          "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
		"truncated":         "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
		"far-future-psn":    "RC_ACKNOWLEDGE psn %d NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
		"wrong-dest-qp":     "silence, then for the valid request: RC_ATOMIC_ACKNOWLEDGE psn %d ACK orig 0x0",
	}
	checkResults(t, res, want)
	for i, x := range res {
		if x.Check == "duplicate" && r.region(i)[0] != 1 {
			t.Fatalf("after the duplicate FETCH_ADD the word is %d, want 1", r.region(i)[0])
		}
	}
}

func TestProbeReadServer(t *testing.T) {
	res, _ := runChecks(t, perftest.ReadBW, "access", "wrong-rkey", "straddle-end", "duplicate", "psn-gap", "oversized-read", "truncated")
	want := map[string]string{
		"oversized-read": "RC_ACKNOWLEDGE psn %d NAK(INVALID_REQUEST)",
		"truncated":      "silence, then for the valid request: RC_RDMA_READ_RESPONSE_ONLY psn %d ACK 8 bytes",
		"access":         "RC_RDMA_READ_RESPONSE_ONLY psn %d ACK 8 bytes",
		"wrong-rkey":     "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"straddle-end":   "RC_ACKNOWLEDGE psn %d NAK(REMOTE_ACCESS_ERROR)",
		"duplicate":      "RC_RDMA_READ_RESPONSE_ONLY psn %d ACK 8 bytes, then for the duplicate: RC_RDMA_READ_RESPONSE_ONLY psn %d ACK 8 bytes",
		"psn-gap":        "RC_ACKNOWLEDGE psn %d NAK(PSN_SEQUENCE_ERROR), then for the request at the expected PSN: RC_RDMA_READ_RESPONSE_ONLY psn %d ACK 8 bytes",
	}
	checkResults(t, res, want)
}

// checkResults compares the observations, with the session's PSN for
// every %d (the probe's own PSN, and PSN+1 for a third answer).
func checkResults(t *testing.T, res []Result, want map[string]string) {
	t.Helper()
	got := byName(res)
	if len(got) != len(want) {
		t.Errorf("ran %d checks, want %d: %v", len(got), len(want), res)
	}
	for name, w := range want {
		r, ok := got[name]
		if !ok {
			t.Errorf("check %s did not run", name)
			continue
		}
		if r.Verdict != "pass" {
			t.Errorf("%s: %s (%s): observed %q, required %q", name, r.Verdict, r.Error, r.Observed, r.Required)
			continue
		}
		// The PSN is random; compare the shape.
		if shape(r.Observed) != shape(w) {
			t.Errorf("%s: observed %q, want %q", name, r.Observed, w)
		}
	}
}

// shape replaces decimal PSNs by %d.
func shape(s string) string {
	f := strings.Fields(s)
	for i := range f {
		if i > 0 && f[i-1] == "psn" {
			if rest := strings.TrimLeft(f[i], "0123456789"); len(rest) < len(f[i]) {
				f[i] = "%d" + rest
			}
		}
	}
	return strings.Join(f, " ")
}

func TestProbeUnknownCheck(t *testing.T) {
	env, _ := newEnv(t, perftest.WriteBW, 0)
	if _, err := Run(context.Background(), env, Config{Test: perftest.WriteBW, Checks: []string{"nope"}}); err == nil ||
		!strings.Contains(err.Error(), `no check named "nope"`) {
		t.Fatalf("err %v", err)
	}
	if _, err := Run(context.Background(), env, Config{Test: perftest.WriteBW, Checks: []string{"misaligned-atomic"}}); err == nil ||
		!strings.Contains(err.Error(), "needs a atomic_bw server") {
		t.Fatalf("err %v", err)
	}
}

// A check with a known rxe deviation: the IBTA answer passes, rxe's answer
// is a deviation that names both, anything else fails.
func TestProbeKnownDeviation(t *testing.T) {
	var c *check
	for _, x := range checks {
		if x.name == "oversized-read" {
			c = x
		}
	}
	s := &session{psn: 77}
	nak := func(code wire.NAKCode, psn wire.PSN) []answer {
		return []answer{{op: wire.RCAcknowledge, psn: psn, aeth: true, syn: wire.NAKSyndrome(code)}}
	}
	for _, tc := range []struct {
		last    []answer
		pass    bool
		verdict string
	}{
		{nak(wire.NAKInvalidRequest, 77), true, "pass"},
		{nak(wire.NAKRemoteAccessError, 77), false, "deviation"},
		{nak(wire.NAKRemoteAccessError, 78), false, "fail"},
		{nil, false, "fail"},
	} {
		s.last = tc.last
		v, dev := verdict(c, s, tc.pass)
		if v != tc.verdict {
			t.Errorf("%s: verdict %s, want %s", describe(tc.last), v, tc.verdict)
		}
		if v == "deviation" {
			if !strings.HasPrefix(dev, "rxe does NAK REMOTE_ACCESS_ERROR") || !strings.Contains(dev, "; IBTA requires NAK INVALID_REQUEST") {
				t.Errorf("deviation text %q", dev)
			}
			txt := Text([]Result{{Check: c.name, Verdict: v, Deviation: dev, Observed: describe(tc.last), Required: c.required}})
			if !strings.Contains(txt, "DEVIATION oversized-read") || !strings.Contains(txt, "known:    rxe does") ||
				!strings.Contains(txt, "1 checks: 0 pass, 1 known deviation from IBTA, 0 fail") {
				t.Errorf("text:\n%s", txt)
			}
		} else if dev != "" {
			t.Errorf("%s: deviation text %q on a %s", describe(tc.last), dev, v)
		}
	}
}
