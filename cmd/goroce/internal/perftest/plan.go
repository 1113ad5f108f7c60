package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Test is one of the eight perftest programs.
type Test int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Test,StepKind,AtomicType -linecomment -output=enums_string.go

// The tests, named after their binaries without "ib_" (String).
const (
	WriteBW   Test = iota // write_bw
	ReadBW                // read_bw
	SendBW                // send_bw
	AtomicBW              // atomic_bw
	WriteLat              // write_lat
	ReadLat               // read_lat
	SendLat               // send_lat
	AtomicLat             // atomic_lat
)

// ParseTest maps "write_bw" (or "ib_write_bw") to WriteBW and so on.
func ParseTest(name string) (Test, bool) {
	for t := WriteBW; t <= AtomicLat; t++ {
		if n := t.String(); name == n || name == "ib_"+n {
			return t, true
		}
	}
	return 0, false
}

// Verb is the test's operation (enum VerbType order in perftest).
type Verb int

// Verbs.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

// Verb is the test's RDMA operation.
func (t Test) Verb() Verb {
	switch t {
	case WriteBW, WriteLat:
		return Write
	case ReadBW, ReadLat:
		return Read
	case AtomicBW, AtomicLat:
		return Atomic
	}
	return Send
}

// BW reports whether t is a bandwidth test (tst == BW), else a latency test.
func (t Test) BW() bool { return t <= AtomicBW }

// StepKind is one thing a tool does on the control connection, or one hook.
type StepKind int

// The steps, in the vocabulary of the C sources; String returns the line
// comment.
const (
	// StepHello is exchange_versions, check_sys_data and check_mtu.
	StepHello StepKind = iota // hello
	// StepSetup calls Hooks.Setup (ctx_init and set_up_connection: create
	// resources and produce one KeyMsg per QP). Nothing on the wire.
	StepSetup // setup
	// StepKeys is the per-QP loop of ctx_hand_shake; the peer's keys are kept.
	StepKeys // keys
	// StepConnect calls Hooks.Connect (ctx_connect: QPs to RTR and RTS).
	StepConnect // connect
	// StepSync is one ctx_hand_shake on QP 0.
	StepSync // sync
	// StepPrepare calls Hooks.Prepare for one message size before the
	// handshake that releases the peer's traffic (send tests: receives must
	// be posted before the peer's SENDs can arrive, ctx_set_recv_wqes).
	StepPrepare // prepare
	// StepTraffic calls Hooks.Traffic for one message size.
	StepTraffic // traffic
	// StepReports is xchg_bw_reports.
	StepReports // reports
	// StepClose is ctx_close_connection (handshake, "done\0", close).
	StepClose // close
	// StepLingerClose is Session.LingerClose (write_lat has no close).
	StepLingerClose // linger-close
	// StepCMConnect calls Hooks.CMConnect (-R: create_rdma_cm_connection
	// between its two handshakes: the resources and the data QPs,
	// connected through rdma_cm). Nothing on the control connection.
	StepCMConnect // cm-connect
)

// Step is one element of a test's sequence. Size is the message size of a
// StepTraffic.
type Step struct {
	Kind StepKind
	Size uint64
}

// PlanConfig selects the variant of a test's sequence.
type PlanConfig struct {
	// Size is the message size (-s) of a single run.
	Size uint64
	// AllSizes is -a: run every size from 2 to 2^23 bytes (BW and latency
	// tests other than atomic), which repeats the traffic step and, for the
	// send tests, the handshake around it.
	AllSizes bool
	// Duplex is -b (BW tests): both sides run the traffic and exchange
	// their reports after it.
	Duplex bool
	// Duration is a timed run (-D, or --run_infinitely): send_bw's duplex
	// sides then exchange no reports.
	Duration bool
	// RunInf is --run_infinitely: a duplex write/read/atomic test runs its
	// traffic right after the after-RTR handshake and then closes.
	RunInf bool
	// RDMACM is -R: after Hello, create_rdma_cm_connection (a handshake,
	// the data QPs connected through rdma_cm, a handshake) comes before
	// Setup, and there is no ctx_connect.
	RDMACM bool
}

// AllSizes returns the sizes -a runs: 2^1 … 2^23 (the loops "for (i = 1;
// i < 24; ++i) size = 1 << i" of the tests; send_bw's size_max_pow is 24 on
// RC too).
func AllSizes() []uint64 {
	s := make([]uint64, 0, 23)
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// Steps returns the sequence test t runs as client or server in perftest
// 4.5-0.17 (the same counts as HEAD). See the package documentation for
// where each count comes from.
func Steps(t Test, server bool, cfg PlanConfig) []Step {
	steps := ethernetSteps(t, server, cfg)
	if !cfg.RDMACM {
		return steps
	}
	// -R: create_rdma_cm_connection between Hello and Setup, whose first
	// handshake sends my_dest[0] before set_up_connection has filled it
	// (zeros); rdma_cm moves the QPs, so there is no ctx_connect.
	out := []Step{steps[0], {Kind: StepSync}, {Kind: StepCMConnect}, {Kind: StepSync}}
	for _, st := range steps[1:] {
		if st.Kind != StepConnect {
			out = append(out, st)
		}
	}
	return out
}

// ethernetSteps is Steps without -R.
func ethernetSteps(t Test, server bool, cfg PlanConfig) []Step {
	sizes := []uint64{cfg.Size}
	if cfg.AllSizes && t != AtomicBW && t != AtomicLat {
		sizes = AllSizes()
	}
	st := func(k StepKind) Step { return Step{Kind: k} }
	steps := []Step{st(StepHello), st(StepSetup)}
	switch t {
	case WriteBW, ReadBW, AtomicBW:
		// write_bw.c/read_bw.c/atomic_bw.c: per-QP handshake, ctx_connect,
		// per-QP handshake (printing), "an additional handshake is required
		// after moving qp to RTR"; then the server waits in one more
		// handshake while the client runs, reports, close.
		steps = append(steps, st(StepKeys), st(StepConnect), st(StepKeys), st(StepSync))
		if cfg.Duplex {
			// Both sides: a handshake before each size's run (none with
			// --run_infinitely), one after it with -a (6.06 >= 4.6), then
			// the reports each way; close.
			if cfg.RunInf {
				steps = append(steps, Step{Kind: StepTraffic, Size: cfg.Size})
			} else {
				for _, sz := range sizes {
					steps = append(steps, st(StepSync), Step{Kind: StepTraffic, Size: sz})
					if cfg.AllSizes {
						steps = append(steps, st(StepSync))
					}
					steps = append(steps, st(StepReports))
				}
			}
			return append(steps, st(StepClose))
		}
		if !server {
			for _, sz := range sizes {
				steps = append(steps, Step{Kind: StepTraffic, Size: sz})
			}
		}
		steps = append(steps, st(StepSync), st(StepReports), st(StepClose))
	case SendBW:
		// send_bw.c: per-QP handshake, ctx_connect, handshake, per-QP
		// handshake (printing), then for each size: post receives,
		// handshake, run; with -a another handshake after each size.
		steps = append(steps, st(StepKeys), st(StepConnect), st(StepSync), st(StepKeys))
		for _, sz := range sizes {
			steps = append(steps, Step{Kind: StepPrepare, Size: sz}, st(StepSync), Step{Kind: StepTraffic, Size: sz})
			if cfg.Duplex && !cfg.Duration {
				steps = append(steps, st(StepReports))
			}
			if cfg.AllSizes {
				steps = append(steps, st(StepSync))
			}
		}
		steps = append(steps, st(StepClose))
	case SendLat:
		// send_lat.c: as send_bw, without the handshake after each size.
		steps = append(steps, st(StepKeys), st(StepConnect), st(StepSync), st(StepKeys))
		for _, sz := range sizes {
			steps = append(steps, Step{Kind: StepPrepare, Size: sz}, st(StepSync), Step{Kind: StepTraffic, Size: sz})
		}
		steps = append(steps, st(StepClose))
	case WriteLat, ReadLat, AtomicLat:
		// {write,read,atomic}_lat.c: an extra handshake before the per-QP
		// loop, ctx_connect, per-QP handshake (printing), the after-RTR
		// handshake.
		steps = append(steps, st(StepSync), st(StepKeys), st(StepConnect), st(StepKeys), st(StepSync))
		if t == WriteLat || !server {
			for _, sz := range sizes {
				steps = append(steps, Step{Kind: StepTraffic, Size: sz})
			}
		}
		if t == WriteLat {
			steps = append(steps, st(StepLingerClose))
		} else {
			steps = append(steps, st(StepClose))
		}
	}
	return steps
}

// Hooks are the RDMA side of a run. Any nil hook is skipped.
type Hooks struct {
	// Setup creates the QPs and memory now that the buffer size
	// (max(size, n.CycleBuffer)) and path MTU are known, and returns one
	// KeyMsg per QP (at least one).
	Setup func(n Negotiated) ([]KeyMsg, error)
	// Connect moves the QPs to RTR and RTS towards the peer's keys.
	Connect func(local, peer []KeyMsg) error
	// CMConnect (-R) creates the resources and connects the data QPs
	// through rdma_cm; Setup then only describes them.
	CMConnect func(n Negotiated) error
	// CMListen (-R, server) is called before the handshake that precedes
	// CMConnect, so the server can listen for the data connections before
	// the client, which dials them right after that handshake, can send
	// its REQ. perftest's server listens only in create_rdma_cm_connection,
	// after the handshake: a client faster than that is rejected (REJ
	// reason 8), and a 4.5-0.17 client then crashes in its retry
	// (perftest 3d9d8d0 fixed that).
	CMListen func(n Negotiated) error
	// Prepare readies one message size before the handshake after which the
	// peer starts sending (send tests only: post the receives).
	Prepare func(size uint64, peer []KeyMsg) error
	// Traffic runs the measured phase on this side for one message size.
	// A BW client returns the report that Reports sends; other callers
	// return whatever they will print (it is kept in Outcome.Local).
	Traffic func(size uint64, peer []KeyMsg) (BWReport, error)
	// After is called after every step that succeeded, with what the run
	// learned so far (the tools print their address lines after the second
	// key exchange, a BW server its table line after Reports). An error
	// stops the run as a failed step would.
	After func(index int, step Step, out *Outcome) error
}

// Config is a run of one test.
type Config struct {
	Test   Test
	Server bool
	Plan   PlanConfig
	// Local system data and MTU offered in Hello; zero values mean
	// DefaultCycleBuffer, DefaultCacheLine and MTU1024.
	CycleBuffer, CacheLine int32
	MTU                    MTU
	DontExchangeVersions   bool
	ReportPerPort          bool
	// ExchangeTimeout, when positive, bounds each message exchange on the
	// control connection, so that a dead or wedged peer cannot hang the
	// run. It does not apply to the exchanges that wait for the end of
	// either side's traffic (WaitsForTraffic): their length is the test's.
	ExchangeTimeout time.Duration
	// Trace, when set, is given every message (see Session.Trace).
	Trace func(out bool, what string, b []byte)
	// GIDIndex is the gid_index field of the -R key messages.
	GIDIndex int32
}

// Outcome is what a run learned.
type Outcome struct {
	Negotiated Negotiated
	Local      []KeyMsg
	Peer       []KeyMsg
	// Local is the last report from Traffic; Remote the peer's report when
	// Reports ran (the non-duplex BW server prints Remote).
	LocalReport, RemoteReport BWReport
	Reported                  bool
}

// StepError tells which step of a sequence failed.
type StepError struct {
	Index int
	Step  Step
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("perftest: step %d (%s): %v", e.Index, e.Step.Kind, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// ErrNoKeys is returned when Setup produces no KeyMsg.
var ErrNoKeys = errors.New("perftest: Setup returned no keys")

// Run plays cfg.Test's sequence (Steps) on conn in cfg's role, calling the
// hooks where the real tool does its RDMA work. Cancelling ctx aborts any
// blocked read or write by expiring conn's deadline. conn is closed when
// Run returns after a close step, and left open on error.
func Run(ctx context.Context, conn net.Conn, cfg Config, hooks Hooks) (Outcome, error) {
	// The deadline is set from two places: the cancellation below and the
	// per-step timeout. mu and cancelled keep a step from lifting the past
	// deadline that cancellation set.
	var (
		mu        sync.Mutex
		cancelled bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		cancelled = true
		conn.SetDeadline(time.Unix(1, 0))
		mu.Unlock()
	})
	defer stop()
	setDeadline := func(d time.Time) {
		mu.Lock()
		if !cancelled {
			conn.SetDeadline(d)
		}
		mu.Unlock()
	}
	s := NewSession(conn, cfg.Server)
	s.DontExchangeVersions = cfg.DontExchangeVersions
	s.Trace = cfg.Trace
	s.CM, s.GIDIndex = cfg.Plan.RDMACM, cfg.GIDIndex
	var out Outcome
	steps := Steps(cfg.Test, cfg.Server, cfg.Plan)
	long := WaitsForTraffic(cfg.Test, cfg.Server, cfg.Plan)
	for i, step := range steps {
		if cfg.ExchangeTimeout > 0 && step.Kind.OnWire() {
			if long[i] {
				setDeadline(time.Time{})
			} else {
				setDeadline(time.Now().Add(cfg.ExchangeTimeout))
			}
		}
		var err error
		if step.Kind == StepSync && cfg.Server && hooks.CMListen != nil && i+1 < len(steps) && steps[i+1].Kind == StepCMConnect {
			err = hooks.CMListen(out.Negotiated)
		}
		if err == nil {
			err = runStep(s, cfg, hooks, step, &out)
		}
		if err == nil && hooks.After != nil {
			err = hooks.After(i, step, &out)
		}
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", ctx.Err(), err)
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("%w: no answer from the peer within %v", err, cfg.ExchangeTimeout)
			}
			return out, &StepError{Index: i, Step: step, Err: err}
		}
	}
	return out, nil
}

// OnWire reports whether the step exchanges messages with the peer.
func (k StepKind) OnWire() bool {
	switch k {
	case StepHello, StepKeys, StepSync, StepReports, StepClose, StepLingerClose:
		return true
	}
	return false
}

// WaitsForTraffic returns, for each step of Steps(t, server, cfg), whether
// it is an exchange that may wait for the end of a traffic phase: the first
// exchange after a Traffic step of either side (the wire steps of both
// sides agree one to one, so the peer's traffic is located by counting
// them). A write_bw server's Sync after the handshake that starts the
// client's run is one; the exchanges before any traffic are not.
func WaitsForTraffic(t Test, server bool, cfg PlanConfig) []bool {
	mark := func(steps []Step) map[int]bool {
		m := map[int]bool{} // wire ordinal → preceded by traffic
		wire, traffic := 0, false
		for _, s := range steps {
			switch {
			case s.Kind == StepTraffic:
				traffic = true
			case s.Kind.OnWire():
				if traffic {
					m[wire] = true
				}
				wire++
				traffic = false
			}
		}
		return m
	}
	own, peer := mark(Steps(t, server, cfg)), mark(Steps(t, !server, cfg))
	steps := Steps(t, server, cfg)
	out := make([]bool, len(steps))
	wire := 0
	for i, s := range steps {
		if s.Kind.OnWire() {
			out[i] = own[wire] || peer[wire]
			wire++
		}
	}
	return out
}

func runStep(s *Session, cfg Config, hooks Hooks, step Step, out *Outcome) error {
	switch step.Kind {
	case StepHello:
		cb, cl, mtu := cfg.CycleBuffer, cfg.CacheLine, cfg.MTU
		if cb == 0 {
			cb = DefaultCycleBuffer
		}
		if cl == 0 {
			cl = DefaultCacheLine
		}
		if mtu == 0 {
			mtu = MTU1024
		}
		n, err := s.Hello(cb, cl, mtu)
		out.Negotiated = n
		return err
	case StepSetup:
		if hooks.Setup != nil {
			local, err := hooks.Setup(out.Negotiated)
			if err != nil {
				return err
			}
			out.Local = local
		}
		if len(out.Local) == 0 {
			return ErrNoKeys
		}
	case StepKeys:
		peer, err := s.ExchangeKeys(out.Local)
		if err != nil {
			return err
		}
		out.Peer = peer
	case StepSync:
		if len(out.Local) == 0 {
			// -R's handshakes around the rdma_cm connection: zeros out,
			// nothing kept.
			_, err := s.HandShake(KeyMsg{})
			return err
		}
		p, err := s.HandShake(out.Local[0])
		if err != nil {
			return err
		}
		if len(out.Peer) == 0 {
			out.Peer = make([]KeyMsg, len(out.Local))
		}
		out.Peer[0] = p
	case StepConnect:
		if hooks.Connect != nil {
			return hooks.Connect(out.Local, out.Peer)
		}
	case StepCMConnect:
		if hooks.CMConnect != nil {
			return hooks.CMConnect(out.Negotiated)
		}
	case StepPrepare:
		if hooks.Prepare != nil {
			return hooks.Prepare(step.Size, out.Peer)
		}
	case StepTraffic:
		if hooks.Traffic != nil {
			r, err := hooks.Traffic(step.Size, out.Peer)
			if err != nil {
				return err
			}
			out.LocalReport = r
		}
	case StepReports:
		r, err := s.ExchangeReports(out.LocalReport, cfg.ReportPerPort)
		if err != nil {
			return err
		}
		out.RemoteReport, out.Reported = r, true
	case StepClose:
		return s.Close(out.Local[0])
	case StepLingerClose:
		return s.LingerClose(out.Local[0])
	default:
		return fmt.Errorf("unknown step %v", step.Kind)
	}
	return nil
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
