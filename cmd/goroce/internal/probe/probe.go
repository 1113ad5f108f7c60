// Package probe is the engine of `goroce probe`: it tests how an RDMA peer
// reacts to crafted RoCEv2 frames. For each check it opens a fresh
// connection to a perftest server (ib_write_bw, ib_read_bw, ib_atomic_bw, or
// goroce's own) through the tool's usual TCP exchange (package perftest),
// learns the server's QPN, PSN, rkey and buffer from it, and, where the
// client would run its traffic, sends frames built with package wire on a
// raw link instead, then records what the peer answered (the NAK syndrome,
// an ACK, a READ response, an ATOMIC ACK, or silence) next to what IBTA
// requires. The rest of the exchange then runs as usual, so the server
// prints its report and exits normally; checks that kill the QP get a
// connection of their own.
//
// The probe is a requester that exists only in its frames: it advertises
// a QPN, a PSN and a GID (the link's IP) in the key message, and reads
// every frame the peer sends to that QPN. Nothing is registered on this
// side; no check makes the peer write to us.
package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// Env is how the probe reaches the peer.
type Env struct {
	// Dial opens a fresh control connection to the perftest server.
	Dial func(ctx context.Context) (net.Conn, error)
	// Link carries the crafted frames and the peer's answers. The probe
	// reads it from one goroutine until Close.
	Link nic.Link
	// LocalIP is the address the probe's frames come from (advertised as
	// the GID); LocalMAC the link's. PeerMAC is the next hop's MAC for the
	// peer's IP (from the neighbour table).
	LocalIP  netip.Addr
	LocalMAC net.HardwareAddr
	PeerMAC  func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error)
}

// Config selects what to run.
type Config struct {
	// Test is the server's program: WriteBW (default), ReadBW or AtomicBW.
	// It decides the region's access rights and so which checks apply.
	Test perftest.Test
	// Size is the server's -s (default: perftest's, 65536; 8 for atomics).
	Size uint64
	// Checks names the checks to run (nil: every one that applies).
	Checks []string
	// Window is how long the peer must stay silent where IBTA requires
	// silence (default 200 ms). Where an answer is required the probe
	// waits up to ten windows for it, so a slow peer's late answer is not
	// taken for silence and then for the next check's answer.
	Window time.Duration
}

// Result is one check.
type Result struct {
	Check    string `json:"check"`
	Sent     string `json:"sent"`     // the crafted frames
	Observed string `json:"observed"` // what the peer did
	Required string `json:"required"` // what IBTA requires
	// Verdict is "pass" (the peer did what IBTA requires), "deviation"
	// (it did not, but did what a known implementation is documented to do
	// instead: Deviation says which and what), "fail", or "error" (the
	// check could not run: Error says why).
	Verdict   string `json:"verdict"`
	Deviation string `json:"deviation,omitempty"`
	Error     string `json:"error,omitempty"`
	// Peer is what the exchange told about the server.
	PeerQPN uint32 `json:"peer_qpn"`
	PeerPSN uint32 `json:"peer_psn"`
}

// answer is one frame the peer sent to the probe's QPN.
type answer struct {
	at   time.Time
	op   wire.Opcode
	psn  wire.PSN
	syn  wire.Syndrome
	aeth bool
	orig uint64
	hasO bool
	data []byte // payload (READ responses)
}

func (a answer) String() string {
	s := a.op.String() + " psn " + fmt.Sprint(uint32(a.psn))
	if a.aeth {
		s += " " + synText(a.syn)
	}
	if a.hasO {
		s += fmt.Sprintf(" orig %#x", a.orig)
	}
	if len(a.data) > 0 {
		s += fmt.Sprintf(" %d bytes", len(a.data))
	}
	return s
}

func synText(s wire.Syndrome) string {
	switch s.Kind() {
	case wire.SynACK:
		return "ACK"
	case wire.SynRNRNAK:
		return fmt.Sprintf("RNR_NAK(timer %d)", s.RNRTimer())
	case wire.SynNAK:
		return "NAK(" + s.NAK().String() + ")"
	}
	return s.String()
}

// receiver reads the link and hands the answers to the running check.
type receiver struct {
	mu   sync.Mutex
	cond *sync.Cond
	from netip.Addr
	qpn  uint32
	got  []answer
	err  error
}

func newReceiver(l nic.Link) *receiver {
	r := &receiver{}
	r.cond = sync.NewCond(&r.mu)
	go r.loop(l)
	return r
}

func (r *receiver) loop(l nic.Link) {
	n := max(l.BatchSize(), 1)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, 65536)
	}
	sizes := make([]int, n)
	for {
		k, err := l.ReadBatch(bufs, sizes)
		r.mu.Lock()
		for i := range k {
			var p wire.Packet
			if wire.Parse(bufs[i][:sizes[i]], &p) != nil || p.SrcIP() != r.from || p.BTH.DestQP() != r.qpn || r.qpn == 0 {
				continue
			}
			a := answer{at: time.Now(), op: p.Opcode(), psn: p.BTH.PSN()}
			if p.AETH != nil {
				a.aeth, a.syn = true, p.AETH.Syndrome()
			}
			if p.AtomicAckETH != nil {
				a.hasO, a.orig = true, p.AtomicAckETH.OrigValue()
			}
			if len(p.Payload) > 0 {
				a.data = append([]byte(nil), p.Payload...)
			}
			r.got = append(r.got, a)
		}
		if err != nil {
			r.err = err
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// expect starts collecting answers from ip to qpn, dropping older ones.
func (r *receiver) expect(ip netip.Addr, qpn uint32) {
	r.mu.Lock()
	r.from, r.qpn, r.got = ip, qpn, nil
	r.mu.Unlock()
}

// wait returns the answers once n have come or the window has passed.
func (r *receiver) wait(ctx context.Context, n int, window time.Duration) []answer {
	deadline := time.Now().Add(window)
	stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop()
	t := time.AfterFunc(window, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got) < n && time.Now().Before(deadline) && ctx.Err() == nil && r.err == nil {
		r.cond.Wait()
	}
	out := r.got
	r.got = nil
	return out
}

// session is one connection's worth of probing: the peer's keys and a way
// to send frames as the probe's QP.
type session struct {
	ctx     context.Context
	env     *Env
	rx      *receiver
	window  time.Duration
	peer    perftest.KeyMsg
	peerIP  netip.Addr
	dstMAC  [6]byte
	srcMAC  [6]byte
	qpn     uint32 // ours
	psn     wire.PSN
	mtu     int
	regionN uint64 // bytes writable/readable from peer.VAddr
	cfgTest perftest.Test
	ipID    uint16
	buf     []byte
	sent    []string
	last    []answer // the answers the check judged (for known deviations)
}

// frame is what a check sends.
type frame struct {
	op      wire.Opcode
	psn     wire.PSN
	dqpn    uint32 // 0: the peer's QPN
	va      uint64
	rkey    uint32
	dmaLen  uint32
	swapAdd uint64
	compare uint64
	payload []byte
	badICRC bool
	cut     int // send only this many bytes of the frame
}

func (s *session) send(f frame) error {
	wf := wire.Frame{DstMAC: s.dstMAC, SrcMAC: s.srcMAC, SrcIP: s.env.LocalIP, DstIP: s.peerIP, HopLimit: 64,
		SrcPort: wire.RCSourcePort(s.qpn, s.peer.QPN)}
	s.ipID++
	wf.IPID = s.ipID
	dq := f.dqpn
	if dq == 0 {
		dq = s.peer.QPN
	}
	wf.BTH = wire.BTHFields{Opcode: f.op, DestQP: dq, PSN: f.psn, AckReq: true, PKey: wire.DefaultPKey}
	wf.RETH = wire.RETHFields{VA: f.va, RKey: f.rkey, DMALen: f.dmaLen}
	wf.AtomicETH = wire.AtomicETHFields{VA: f.va, RKey: f.rkey, SwapAdd: f.swapAdd, Compare: f.compare}
	n, err := wire.BuildPayload(s.buf, &wf, f.payload)
	if err != nil {
		return err
	}
	b := s.buf[:n]
	if f.badICRC {
		b[n-1] ^= 0xFF
	}
	if f.cut > 0 && f.cut < n {
		b = b[:f.cut]
	}
	desc := fmt.Sprintf("%v psn %d", f.op, uint32(f.psn))
	if f.op.Info().Headers&(wire.HasRETH|wire.HasAtomicETH) != 0 {
		desc += fmt.Sprintf(" va %#x rkey %#x", f.va, f.rkey)
	}
	if f.op.Info().Headers&wire.HasRETH != 0 {
		desc += fmt.Sprintf(" len %d", f.dmaLen)
	}
	if f.op.Info().Payload {
		desc += fmt.Sprintf(" payload %d", len(f.payload))
	}
	if f.dqpn != 0 {
		desc += fmt.Sprintf(" to qpn %#x", f.dqpn)
	}
	if f.badICRC {
		desc += " with a bad ICRC"
	}
	if f.cut > 0 {
		desc += fmt.Sprintf(" cut to %d of %d bytes", f.cut, n)
	}
	s.sent = append(s.sent, desc)
	if _, err := s.env.Link.WriteBatch([][]byte{b}); err != nil {
		return err
	}
	return nil
}

// answerPatience is how many windows the probe waits for an answer that
// IBTA requires before it calls the peer silent.
const answerPatience = 10

// answers waits for n answers, which IBTA requires (up to answerPatience
// windows), and returns them.
func (s *session) answers(n int) []answer {
	return s.rx.wait(s.ctx, n, answerPatience*s.window)
}

// silence waits one window, in which IBTA requires the peer to stay
// silent, and returns whatever answers came.
func (s *session) silence() []answer { return s.rx.wait(s.ctx, 1, s.window) }

func describe(as []answer) string {
	if len(as) == 0 {
		return "silence"
	}
	var parts []string
	for _, a := range as {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, "; ")
}

// ErrNoChecks is returned when no check applies to the test.
var ErrNoChecks = errors.New("probe: no check applies")

// Run runs the checks one connection each and returns their results.
func Run(ctx context.Context, env *Env, cfg Config) ([]Result, error) {
	if cfg.Window <= 0 {
		cfg.Window = 200 * time.Millisecond
	}
	if cfg.Size == 0 {
		cfg.Size = perftest.Defaults(cfg.Test).Size
	}
	list, err := selectChecks(cfg)
	if err != nil {
		return nil, err
	}
	rx := newReceiver(env.Link)
	var out []Result
	for _, c := range list {
		out = append(out, runOne(ctx, env, cfg, rx, c))
		if ctx.Err() != nil {
			break
		}
	}
	return out, ctx.Err()
}

func selectChecks(cfg Config) ([]*check, error) {
	var list []*check
	want, asked := map[string]bool{}, map[string]bool{}
	for _, n := range cfg.Checks {
		want[n], asked[n] = true, true
	}
	for _, c := range checks {
		if len(asked) > 0 && !asked[c.name] {
			continue
		}
		delete(want, c.name)
		if !c.applies(cfg.Test) {
			if len(cfg.Checks) > 0 {
				return nil, fmt.Errorf("probe: check %s needs a %s server", c.name, c.needs())
			}
			continue
		}
		list = append(list, c)
	}
	for n := range want {
		return nil, fmt.Errorf("probe: no check named %q (have: %s)", n, Names())
	}
	if len(list) == 0 {
		return nil, ErrNoChecks
	}
	return list, nil
}

// Names lists the checks.
func Names() string {
	var n []string
	for _, c := range checks {
		n = append(n, c.name)
	}
	return strings.Join(n, ", ")
}

func runOne(ctx context.Context, env *Env, cfg Config, rx *receiver, c *check) Result {
	res := Result{Check: c.name, Required: c.required}
	fail := func(err error) Result {
		res.Verdict, res.Error = "error", err.Error()
		return res
	}
	conn, err := env.Dial(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	s := &session{ctx: ctx, env: env, rx: rx, window: cfg.Window, qpn: 0x100000 | rand.Uint32()&0xFFFFF,
		psn: wire.PSN(rand.Uint32() & wire.PSNMask), buf: make([]byte, 65536)}
	copy(s.srcMAC[:], env.LocalMAC)
	gid := env.LocalIP.As16() // ::ffff:a.b.c.d for IPv4, as rxe's GID index 1
	s.cfgTest = cfg.Test
	var outcome string
	var pass bool
	var runErr error
	hooks := perftest.Hooks{
		Setup: func(n perftest.Negotiated) ([]perftest.KeyMsg, error) {
			s.mtu = n.MTU.Bytes()
			s.regionN = perftest.BuffSize(cfg.Size, n.CycleBuffer)
			return []perftest.KeyMsg{{OutReads: 16, QPN: s.qpn, PSN: uint32(s.psn), GID: gid}}, nil
		},
		Connect: func(local, peer []perftest.KeyMsg) error {
			s.peer = peer[0]
			s.peerIP = netip.AddrFrom16(s.peer.GID).Unmap()
			mac, err := env.PeerMAC(ctx, s.peerIP)
			if err != nil {
				return err
			}
			copy(s.dstMAC[:], mac)
			rx.expect(s.peerIP, s.qpn)
			return nil
		},
		Traffic: func(size uint64, peer []perftest.KeyMsg) (perftest.BWReport, error) {
			outcome, pass, runErr = c.run(s)
			return perftest.BWReport{Size: cfg.Size, Iters: 1}, nil
		},
	}
	pcfg := perftest.Config{Test: cfg.Test, Plan: perftest.PlanConfig{Size: cfg.Size}, ExchangeTimeout: 10 * time.Second}
	_, err = perftest.Run(ctx, conn, pcfg, hooks)
	res.PeerQPN, res.PeerPSN = s.peer.QPN, s.peer.PSN
	res.Sent = strings.Join(s.sent, "; ")
	switch {
	case runErr != nil:
		return fail(runErr)
	case outcome == "" && err != nil:
		return fail(err)
	}
	res.Observed = outcome
	res.Verdict, res.Deviation = verdict(c, s, pass)
	return res
}

// verdict judges a check that ran: pass, a known deviation, or fail.
func verdict(c *check, s *session, pass bool) (string, string) {
	switch {
	case pass:
		return "pass", ""
	case c.rxe != nil && c.rxe.match(s):
		return "deviation", "rxe does " + c.rxe.does + "; IBTA requires " + c.required
	}
	return "fail", ""
}
