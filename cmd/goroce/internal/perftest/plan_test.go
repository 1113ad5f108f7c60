package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

var allTests = []Test{WriteBW, ReadBW, SendBW, AtomicBW, WriteLat, ReadLat, SendLat, AtomicLat}

// wireKinds is the part of a sequence that puts bytes on the wire.
func wireKinds(steps []Step) []StepKind {
	var k []StepKind
	for _, s := range steps {
		switch s.Kind {
		case StepSetup, StepConnect, StepPrepare, StepTraffic:
		default:
			k = append(k, s.Kind)
		}
	}
	return k
}

// TestStepsAgree: for every test and variant, client and server put the same
// exchanges on the wire in the same order (else one of them would block), and
// every sequence starts with Hello and Setup and connects exactly once.
func TestStepsAgree(t *testing.T) {
	for _, test := range allTests {
		for _, all := range []bool{false, true} {
			cfg := PlanConfig{Size: 64, AllSizes: all}
			c, s := Steps(test, false, cfg), Steps(test, true, cfg)
			if !slices.Equal(wireKinds(c), wireKinds(s)) {
				t.Errorf("%v all=%v: client %v, server %v", test, all, wireKinds(c), wireKinds(s))
			}
			for _, st := range [][]Step{c, s} {
				if st[0].Kind != StepHello || st[1].Kind != StepSetup {
					t.Errorf("%v: starts with %v", test, st[:2])
				}
				n := 0
				for _, x := range st {
					if x.Kind == StepConnect {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%v: %d connects", test, n)
				}
			}
		}
	}
	// The counts taken from the captures (key messages each way before
	// any report or close) and from the 4.5-0.17 binaries.
	keysBefore := func(steps []Step) (n int) {
		for _, s := range steps {
			switch s.Kind {
			case StepKeys, StepSync:
				n++
			case StepReports, StepClose, StepLingerClose:
				return n
			}
		}
		return n
	}
	for test, want := range map[Test]int{WriteBW: 4, ReadBW: 4, AtomicBW: 4, SendBW: 4, WriteLat: 4, ReadLat: 4, AtomicLat: 4, SendLat: 4} {
		if got := keysBefore(Steps(test, false, PlanConfig{Size: 2})); got != want {
			t.Errorf("%v: %d handshakes before the end, want %d", test, got, want)
		}
	}
}

type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, a ...any) {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

func keysFor(base uint32, n int) []KeyMsg {
	k := make([]KeyMsg, n)
	for i := range k {
		k[i] = KeyMsg{OutReads: 1, QPN: base + uint32(i), PSN: base<<8 + uint32(i), RKey: base + 0x1000, VAddr: uint64(base) << 20,
			GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: byte(base)}}
	}
	return k
}

// TestLoopbackAll runs our client against our server for each of the eight
// tests over TCP on 127.0.0.1, with fake RDMA hooks: each side must connect
// to the other's keys, run traffic where its tool does, and a BW server must
// end with the client's report.
func TestLoopbackAll(t *testing.T) {
	for _, test := range allTests {
		for _, qps := range []int{1, 2} {
			for _, all := range []bool{false, true} {
				if all && test.Verb() == Atomic {
					continue
				}
				t.Run(fmt.Sprintf("%v/qps=%d/all=%v", test, qps, all), func(t *testing.T) {
					cconn, sconn := loopbackPair(t)
					plan := PlanConfig{Size: 4096, AllSizes: all}
					type side struct {
						peer  *side
						rec   recorder
						local []KeyMsg
						out   Outcome
						err   error
					}
					cli := &side{local: keysFor(0x11, qps)}
					srv := &side{local: keysFor(0x22, qps)}
					cli.peer, srv.peer = srv, cli
					report := BWReport{Size: 4096, Iters: 1000, BWPeak: 1.5, BWAvg: 1.25, MsgRateAvg: 0.03}
					hooks := func(s *side) Hooks {
						return Hooks{
							Setup: func(n Negotiated) ([]KeyMsg, error) {
								s.rec.add("setup %s %d %d %d", n.PeerVersion, n.CycleBuffer, n.CacheLine, n.MTU)
								return s.local, nil
							},
							Connect: func(l, p []KeyMsg) error {
								s.rec.add("connect %x", p[len(p)-1].QPN)
								if len(p) != qps {
									return fmt.Errorf("%d peer keys", len(p))
								}
								return nil
							},
							Prepare: func(size uint64, p []KeyMsg) error {
								s.rec.add("prepare %d", size)
								return nil
							},
							Traffic: func(size uint64, p []KeyMsg) (BWReport, error) {
								s.rec.add("traffic %d", size)
								// The handshake before traffic orders the
								// peer's Prepare before our sends.
								if test.Verb() == Send {
									s.peer.rec.mu.Lock()
									ok := slices.Contains(s.peer.rec.calls, fmt.Sprintf("prepare %d", size))
									s.peer.rec.mu.Unlock()
									if !ok {
										return BWReport{}, fmt.Errorf("traffic %d before the peer prepared it", size)
									}
								}
								r := report
								r.Size = size
								return r, nil
							},
						}
					}
					var wg sync.WaitGroup
					wg.Add(2)
					go func() {
						defer wg.Done()
						srv.out, srv.err = Run(context.Background(), sconn, Config{Test: test, Server: true, Plan: plan, CycleBuffer: 8192, MTU: MTU4096}, hooks(srv))
					}()
					go func() {
						defer wg.Done()
						cli.out, cli.err = Run(context.Background(), cconn, Config{Test: test, Plan: plan, CacheLine: 128, MTU: MTU1024}, hooks(cli))
					}()
					wg.Wait()
					if cli.err != nil || srv.err != nil {
						t.Fatalf("client: %v; server: %v", cli.err, srv.err)
					}
					if !reflect.DeepEqual(cli.out.Peer, srv.local) || !reflect.DeepEqual(srv.out.Peer, cli.local) {
						t.Fatalf("peers: client got %+v, server got %+v", cli.out.Peer, srv.out.Peer)
					}
					wantNeg := Negotiated{PeerVersion: Version, CycleBuffer: 8192, CacheLine: 128, MTU: MTU1024}
					if cli.out.Negotiated != wantNeg || srv.out.Negotiated != wantNeg {
						t.Fatalf("negotiated: client %+v, server %+v", cli.out.Negotiated, srv.out.Negotiated)
					}
					for _, s := range []struct {
						side   *side
						server bool
						peer   uint32
					}{{cli, false, 0x22 + uint32(qps) - 1}, {srv, true, 0x11 + uint32(qps) - 1}} {
						want := []string{fmt.Sprintf("setup %s %d %d %d", Version, 8192, 128, MTU1024), fmt.Sprintf("connect %x", s.peer)}
						for _, st := range Steps(test, s.server, plan) {
							switch st.Kind {
							case StepPrepare:
								want = append(want, fmt.Sprintf("prepare %d", st.Size))
							case StepTraffic:
								want = append(want, fmt.Sprintf("traffic %d", st.Size))
							}
						}
						if !slices.Equal(s.side.rec.calls, want) {
							t.Errorf("server=%v hooks:\n%q\nwant\n%q", s.server, s.side.rec.calls, want)
						}
					}
					if test.BW() && test != SendBW {
						want := report
						want.Size = plan.Size
						if all {
							want.Size = 1 << 23
						}
						if !srv.out.Reported || srv.out.RemoteReport != want {
							t.Errorf("server report %+v (reported %v), want %+v", srv.out.RemoteReport, srv.out.Reported, want)
						}
					}
				})
			}
		}
	}
}

// scriptedPeer is a server of another perftest version, driven by hand.
type scriptedPeer struct {
	t    *testing.T
	conn net.Conn
}

func (p scriptedPeer) read(n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(p.conn, b); err != nil {
		p.t.Errorf("peer reading %d bytes: %v", n, err)
	}
	return b
}

func (p scriptedPeer) write(b []byte) {
	if _, err := p.conn.Write(b); err != nil {
		p.t.Errorf("peer writing: %v", err)
	}
}

// TestPeerVersions drives our client's Hello and reports against peers of
// other versions, checking what is sent and its size for each rule.
func TestPeerVersions(t *testing.T) {
	cases := []struct {
		version   string
		sysData   bool
		mtuSize   int // 0: no MTU exchange
		wideIters bool
	}{
		{"6.29", true, 2, true}, // HEAD: no negotiate_params with us (we are < 6.28)
		{"6.06", true, 2, true},
		{"5.70", true, 2, true},
		{"5.33", true, 2, false}, // float(5.33) < 5.33 in xchg_bw_reports
		{"5.32", true, 2, false},
		{"5.31", false, 4, false}, // float(5.31) < 5.31 in check_mtu
		{"5.20", false, 4, false},
		{"5.1", false, 4, false}, // float(5.1) >= 5.1: 5.0999999 vs 5.1? see below
		{"5.0", false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			// float32(5.1) = 5.0999999 < 5.1 (double): no MTU for "5.1".
			if c.version == "5.1" {
				c.mtuSize = 0
			}
			ours, theirs := loopbackPair(t)
			peer := scriptedPeer{t, theirs}
			done := make(chan struct{})
			local := BWReport{Size: 64, Iters: 0x1_0000_0007, BWPeak: 2.5, BWAvg: 2, MsgRateAvg: 0.5}
			peerRep := BWReport{Size: 128, Iters: 9, BWPeak: 1, BWAvg: 0.75, MsgRateAvg: 0.25}
			go func() {
				defer close(done)
				v := EncodeVersion(Version)
				if got := peer.read(VersionSize); !bytes.Equal(got, v[:]) {
					t.Errorf("version %q", got)
				}
				pv := EncodeVersion(c.version)
				peer.write(pv[:])
				if c.sysData {
					if got := peer.read(4); binary.BigEndian.Uint32(got) != 4096 {
						t.Errorf("cycle buffer %x", got)
					}
					peer.write([]byte{0, 0, 0x20, 0}) // 8192
					if got := peer.read(4); binary.BigEndian.Uint32(got) != 64 {
						t.Errorf("cache line %x", got)
					}
					peer.write([]byte{0, 0, 0, 32})
				}
				if c.mtuSize > 0 {
					want := make([]byte, c.mtuSize)
					want[0] = '5'
					if got := peer.read(c.mtuSize); !bytes.Equal(got, want) {
						t.Errorf("MTU %q, want %q", got, want)
					}
					reply := make([]byte, c.mtuSize)
					reply[0] = '2'
					peer.write(reply)
				}
				for i, b := range peerRep.blobs(c.wideIters, false) {
					got := peer.read(len(b))
					if i == 1 {
						want := binary.BigEndian.AppendUint32(nil, 7)
						if c.wideIters {
							want = binary.BigEndian.AppendUint64(nil, local.Iters)
						}
						if !bytes.Equal(got, want) {
							t.Errorf("iters %x, want %x", got, want)
						}
					}
					peer.write(b)
				}
			}()
			s := NewSession(ours, false)
			n, err := s.Hello(4096, 64, MTU4096)
			if err != nil {
				t.Fatal(err)
			}
			want := Negotiated{PeerVersion: c.version, CycleBuffer: 4096, CacheLine: 64, MTU: MTU4096}
			if c.sysData {
				want.CycleBuffer, want.CacheLine = 8192, 64
			}
			if c.mtuSize > 0 {
				want.MTU = MTU512
			}
			if n != want {
				t.Errorf("negotiated %+v, want %+v", n, want)
			}
			if n.PeerNegotiates() != (c.version == "6.29") {
				t.Errorf("PeerNegotiates = %v", n.PeerNegotiates())
			}
			got, err := s.ExchangeReports(local, false)
			if err != nil {
				t.Fatal(err)
			}
			if got != peerRep {
				t.Errorf("peer report %+v, want %+v", got, peerRep)
			}
			<-done
		})
	}
}

// TestDontExchangeVersions: with --dont_xchg_versions nothing is sent in
// Hello and the reports carry 4-byte iteration counts (atof("") = 0).
func TestDontExchangeVersions(t *testing.T) {
	a, b := loopbackPair(t)
	sa, sb := NewSession(a, false), NewSession(b, true)
	sa.DontExchangeVersions, sb.DontExchangeVersions = true, true
	n, err := sa.Hello(4096, 64, MTU2048)
	if err != nil || n != (Negotiated{CycleBuffer: 4096, CacheLine: 64, MTU: MTU2048}) {
		t.Fatalf("Hello = %+v, %v", n, err)
	}
	var traced []int
	sb.Trace = func(out bool, what string, b []byte) {
		if out {
			traced = append(traced, len(b))
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := sb.ExchangeReports(BWReport{Iters: 3}, false)
		errc <- err
	}()
	r, err := sa.ExchangeReports(BWReport{Iters: 5}, false)
	if err != nil || r.Iters != 3 {
		t.Fatalf("reports: %+v, %v", r, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(traced, []int{8, 4, 8, 8, 8}) {
		t.Fatalf("blob sizes %v", traced)
	}
}

// TestRunErrors: a peer that hangs up mid-sequence gives a StepError naming
// the step, and a cancelled context unblocks a waiting Run.
func TestRunErrors(t *testing.T) {
	ours, theirs := loopbackPair(t)
	go func() {
		io.ReadFull(theirs, make([]byte, VersionSize))
		theirs.Close()
	}()
	_, err := Run(context.Background(), ours, Config{Test: WriteBW}, Hooks{Setup: func(Negotiated) ([]KeyMsg, error) { return keysFor(1, 1), nil }})
	var se *StepError
	if !errors.As(err, &se) || se.Step.Kind != StepHello || !errors.Is(err, io.EOF) {
		t.Fatalf("err = %v", err)
	}

	ours2, _ := loopbackPair(t) // the peer never answers
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	_, err = Run(ctx, ours2, Config{Test: SendLat}, Hooks{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Run: %v", err)
	}

	ours3, theirs3 := loopbackPair(t)
	go func() {
		s := NewSession(theirs3, true)
		s.Hello(4096, 64, MTU1024)
	}()
	_, err = Run(context.Background(), ours3, Config{Test: ReadLat}, Hooks{Setup: func(Negotiated) ([]KeyMsg, error) { return nil, nil }})
	if !errors.Is(err, ErrNoKeys) {
		t.Fatalf("no keys: %v", err)
	}
}

// TestLingerClose: write_lat's end works against a peer with no close (the
// 6.06 tool: it just exits) and against one that does a close handshake.
func TestLingerClose(t *testing.T) {
	for _, server := range []bool{false, true} {
		// Peer without a close: it closes the socket.
		a, b := loopbackPair(t)
		if server {
			a, b = b, a
		}
		b.Close()
		if err := NewSession(a, server).LingerClose(KeyMsg{QPN: 1}); err != nil {
			t.Errorf("server=%v, peer closes: %v", server, err)
		}
		// Peer with a close handshake.
		a, b = loopbackPair(t)
		if server {
			a, b = b, a
		}
		errc := make(chan error, 1)
		go func() {
			k, err := NewSession(b, !server).HandShake(KeyMsg{QPN: 2})
			if err == nil && k.QPN != 1 {
				err = fmt.Errorf("peer got %+v", k)
			}
			errc <- err
		}()
		if err := NewSession(a, server).LingerClose(KeyMsg{QPN: 1}); err != nil {
			t.Errorf("server=%v, peer handshakes: %v", server, err)
		}
		if err := <-errc; err != nil {
			t.Errorf("server=%v: %v", server, err)
		}
	}
}

// TestWaitsForTraffic: the exchanges that may wait for a traffic phase are
// exactly the first ones after a Traffic step of either side, for every
// test, role and plan.
func TestWaitsForTraffic(t *testing.T) {
	names := func(steps []Step, long []bool) []string {
		var s []string
		for i, st := range steps {
			if long[i] {
				s = append(s, st.Kind.String())
			}
		}
		return s
	}
	want := map[Test]string{
		WriteBW:   "sync", // the server's wait during the client's run; the client's after its own
		ReadBW:    "sync",
		AtomicBW:  "sync",
		SendBW:    "close",
		SendLat:   "close",
		WriteLat:  "linger-close",
		ReadLat:   "close",
		AtomicLat: "close",
	}
	for _, test := range allTests {
		for _, server := range []bool{false, true} {
			plan := PlanConfig{Size: 64}
			steps := Steps(test, server, plan)
			got := names(steps, WaitsForTraffic(test, server, plan))
			if len(got) != 1 || got[0] != want[test] {
				t.Errorf("%v server=%v: long waits %q, want [%s]", test, server, got, want[test])
			}
			// With -a, every exchange after a size's traffic waits.
			if test.Verb() == Atomic {
				continue
			}
			plan.AllSizes = true
			steps = Steps(test, server, plan)
			long := WaitsForTraffic(test, server, plan)
			n := 0
			for i := range steps {
				if long[i] {
					n++
					if !steps[i].Kind.OnWire() {
						t.Errorf("%v: step %d (%v) is not an exchange", test, i, steps[i].Kind)
					}
				}
			}
			wantN := 1
			if test == SendBW || test == SendLat {
				wantN = len(AllSizes()) // the handshake after each size's traffic (SendLat: the next size's sync)
			}
			if n != wantN {
				t.Errorf("%v server=%v -a: %d long waits, want %d", test, server, n, wantN)
			}
		}
	}
}

// TestStepsDuplex: with -b both sides of a BW test run the traffic and put
// the same exchanges on the wire: write/read/atomic_bw a handshake before
// each size's run (and one after it with -a), the reports each way, the
// close; send_bw its usual sequence with the reports after each size
// unless the run is timed; with --run_infinitely the RDMA tests go straight
// from the after-RTR handshake to the traffic.
func TestStepsDuplex(t *testing.T) {
	w := func(k ...StepKind) []StepKind { return k }
	hello := w(StepHello, StepKeys, StepKeys, StepSync)
	for _, c := range []struct {
		test Test
		cfg  PlanConfig
		want []StepKind
	}{
		{WriteBW, PlanConfig{Duplex: true}, append(hello, StepSync, StepReports, StepClose)},
		{ReadBW, PlanConfig{Duplex: true, Duration: true}, append(hello, StepSync, StepReports, StepClose)},
		{WriteBW, PlanConfig{Duplex: true, RunInf: true, Duration: true}, append(hello, StepClose)},
		{SendBW, PlanConfig{Duplex: true}, w(StepHello, StepKeys, StepSync, StepKeys, StepSync, StepReports, StepClose)},
		{SendBW, PlanConfig{Duplex: true, Duration: true}, w(StepHello, StepKeys, StepSync, StepKeys, StepSync, StepClose)},
	} {
		for _, server := range []bool{false, true} {
			c.cfg.Size = 64
			steps := Steps(c.test, server, c.cfg)
			if got := wireKinds(steps); !slices.Equal(got, c.want) {
				t.Errorf("%v %+v server=%v: %v, want %v", c.test, c.cfg, server, got, c.want)
			}
			n := 0
			for _, s := range steps {
				if s.Kind == StepTraffic {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%v %+v server=%v: %d traffic steps", c.test, c.cfg, server, n)
			}
		}
	}
	for _, test := range []Test{WriteBW, ReadBW, SendBW} {
		cfg := PlanConfig{Size: 64, AllSizes: true, Duplex: true}
		c, s := wireKinds(Steps(test, false, cfg)), wireKinds(Steps(test, true, cfg))
		// Per size: a handshake, the run, a handshake, the reports.
		if !slices.Equal(c, s) || len(c) != len(hello)+23*3+1 {
			t.Errorf("%v -a -b: client %v, server %v", test, c, s)
		}
	}
}

// TestCMListenBeforeSync: with -R the server's CMListen runs before the
// handshake after which the client dials the data connections, so that
// dial never finds the port without a listener; the client never calls it.
func TestCMListenBeforeSync(t *testing.T) {
	cconn, sconn := loopbackPair(t)
	plan := PlanConfig{Size: 4096, RDMACM: true}
	var srv, cli recorder
	keys := keysFor(0x11, 1)
	var early bool
	hooks := func(rec *recorder, server bool) Hooks {
		return Hooks{
			Setup: func(Negotiated) ([]KeyMsg, error) { return keys, nil },
			CMListen: func(Negotiated) error {
				rec.add("cm-listen")
				return nil
			},
			CMConnect: func(Negotiated) error {
				if !server {
					srv.mu.Lock()
					early = !slices.Contains(srv.calls, "cm-listen")
					srv.mu.Unlock()
				}
				rec.add("cm-connect")
				return nil
			},
			Traffic: func(size uint64, _ []KeyMsg) (BWReport, error) { return BWReport{Size: size, Iters: 1}, nil },
		}
	}
	var wg sync.WaitGroup
	var serr, cerr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, serr = Run(context.Background(), sconn, Config{Test: WriteBW, Server: true, Plan: plan}, hooks(&srv, true))
	}()
	go func() {
		defer wg.Done()
		_, cerr = Run(context.Background(), cconn, Config{Test: WriteBW, Plan: plan}, hooks(&cli, false))
	}()
	wg.Wait()
	if serr != nil || cerr != nil {
		t.Fatalf("server: %v; client: %v", serr, cerr)
	}
	if early {
		t.Error("the client dialled the data connections before the server listened for them")
	}
	if want := []string{"cm-listen", "cm-connect"}; !slices.Equal(srv.calls, want) {
		t.Errorf("server hooks %q, want %q", srv.calls, want)
	}
	if want := []string{"cm-connect"}; !slices.Equal(cli.calls, want) {
		t.Errorf("client hooks %q, want %q", cli.calls, want)
	}
}
