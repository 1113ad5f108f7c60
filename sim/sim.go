// Package sim runs two goroce endpoints joined by a faulty in-memory link,
// deterministically, so that an application can test its own RDMA code
// under loss, duplication, reordering, corruption and delay, and replay any
// failure from its seed.
//
// NewPair opens two qp.Devices (198.18.0.1 and 198.18.0.2, or 2001:2::1 and
// 2001:2::2 with Config.IPv6) on the two ends of an in-memory link that
// carries complete RoCEv2 frames. Config.AtoB and Config.BtoA are the faults
// of each direction; every fault decision is drawn from Config.Seed. A
// program imports only sim and qp: everything else it needs (Faults,
// LinkStats) is named here.
//
// # The scheduler
//
// In Manual mode (the default) the devices start no goroutines and read the
// simulation's Clock, which stands still until the scheduler moves it. Step
// lets both devices handle every frame and timer that is due now; when
// nothing is due it moves the clock to the earliest pending event: a frame
// becoming deliverable on the link (after Faults.Delay, jitter or a reorder
// hold) or an engine deadline (an ACK timeout, an RNR back-off). RunUntil
// steps until a condition holds, Wait until a CQ yields a completion, RunFor
// lets simulated time pass. A one-hour retransmission timeout costs no real
// time.
//
// # Determinism
//
// Given the same Config (Seed included) and the same sequence of calls, a
// Manual run is identical every time: the same frames, faults, PSNs, memory
// keys, completions and counters. To keep that, the application must
//
//   - drive everything from one goroutine: post work, poll CQs and call
//     Step, RunUntil, RunFor or Wait from the goroutine that called NewPair;
//   - take time from Net.Clock, never from time.Now, time.Sleep or timers;
//   - not block waiting for the devices (CQ.Wait blocks forever on a Manual
//     device, since nothing moves while it waits): poll, or use Net.Wait;
//   - draw its own randomness from a seeded generator (math/rand/v2 with
//     a seed derived from Net.Seed), never from an unseeded one.
//
// The seed of a run is Net.Seed; every error RunUntil and Wait return names
// it. EnvSeed reads GOROCE_SEED so that a failing run can be replayed
// (GOROCE_SEED=1234 go test -run TestX); package sim/simtest has the
// testing.TB helpers that do this and log the seed of a failed test.
//
// # Real-time modes
//
// Config.Mode Goroutines opens the same pair in qp's threaded mode (its driver
// goroutines, the real clock) and BusyPoll in busy-poll mode (CQ
// polling drives the devices). They are not deterministic, but they run the
// same faults and the same setup code (ConnectQPs) over the devices as an
// application runs in production; RunUntil and Wait then wait in real time.
// Inside a testing/synctest bubble, Goroutines mode runs on the bubble's
// fake clock: time moves only when every goroutine (the devices' receive
// and timer goroutines included) is blocked, so a retransmission timeout
// costs no real time and never fires because the machine was slow. BusyPoll
// mode cannot run in a bubble (its spinning never blocks, so time stands
// still).
package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// Faults are the fault probabilities (0..1 per frame) and delays of one
// direction of the link: Drop, Duplicate, Reorder, Corrupt, Delay, Jitter,
// ReorderHold, Rate and a Filter that drops chosen frames. The field
// documentation is on nic.Faults (go doc github.com/goroce/goroce/nic.Faults).
type Faults = nic.Faults

// LinkStats are one link end's counters (Endpoint.LinkStats): frames sent
// and received, and the faults applied to the frames it sent (Dropped,
// Duplicated, Reordered, Corrupted, Overflow).
type LinkStats = nic.MemStats

// Mode selects how the devices run.
type Mode int

const (
	// Manual runs the devices without goroutines (qp.ModeManual) on the simulation's
	// Clock; the application drives them with Step, RunUntil, RunFor and
	// Wait. Deterministic.
	Manual Mode = iota
	// Goroutines runs the devices in qp's threaded mode (qp.ModeThreaded),
	// with their driver goroutines, on the real clock.
	Goroutines
	// BusyPoll runs the devices in qp's busy-poll mode on the real clock:
	// CQ.Poll and CQ.Wait drive them (qp.ModeBusyPoll).
	BusyPoll
)

// qpMode is the qp device mode that runs m.
func (m Mode) qpMode() qp.Mode {
	switch m {
	case Manual:
		return qp.ModeManual
	case BusyPoll:
		return qp.ModeBusyPoll
	}
	return qp.ModeThreaded
}

func (m Mode) String() string {
	switch m {
	case Manual:
		return "manual"
	case Goroutines:
		return "goroutines"
	case BusyPoll:
		return "busy-poll"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures NewPair. The zero value is a fault-free 1500-byte link
// (path MTU 1024) in Manual mode with seed 0.
type Config struct {
	Mode Mode
	// Seed seeds every random decision: the link's faults and the devices'
	// memory keys. The same seed replays the same run (Manual mode); 0 is
	// a seed like any other.
	Seed int64
	// MTU is the link's IP MTU (default 1500; 9000 gives path MTU 4096).
	MTU int
	// AtoB and BtoA are the faults of frames sent by A and by B.
	AtoB, BtoA Faults
	// Tap, when set, receives every delivered frame as a pcap stream
	// (Ethernet), readable by Wireshark and `goroce dump`. In the real-time
	// modes it is written from the devices' goroutines.
	Tap io.Writer
	// IPv6 addresses the endpoints 2001:2::1 and 2001:2::2 (RFC 5180's
	// benchmarking prefix) instead of 198.18.0.1 and 198.18.0.2.
	IPv6 bool
	// QueueLen is how many frames may be pending per direction before the
	// link drops new ones (default 65536).
	QueueLen int
	// RetryCnt7Infinite selects rxe's retry_cnt == 7 semantics on both
	// devices (qp.Config.RetryCnt7Infinite).
	RetryCnt7Infinite bool
	// Queues makes both devices multi-queue (qp.Config.Links): that many
	// in-memory link pairs, queue i of A joined to queue i of B, each
	// with the faults above (seeded per queue). 0 or 1: one link.
	Queues int
}

// Epoch is the time a Manual simulation's clock starts at.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is the time of a simulation: in Manual mode a fake clock that only
// the scheduler moves (starting at Epoch), in the real-time modes the real
// clock.
type Clock struct {
	fake    bool
	elapsed atomic.Int64 // fake: nanoseconds since Epoch
	start   time.Time    // real: when NewPair ran
}

// Now returns the current time.
func (c *Clock) Now() time.Time {
	if c.fake {
		return Epoch.Add(time.Duration(c.elapsed.Load()))
	}
	return time.Now()
}

// Elapsed returns the time since the simulation started.
func (c *Clock) Elapsed() time.Duration {
	if c.fake {
		return time.Duration(c.elapsed.Load())
	}
	return time.Since(c.start)
}

func (c *Clock) set(t time.Time) { c.elapsed.Store(int64(t.Sub(Epoch))) }

// Endpoint is one simulated host.
type Endpoint struct {
	// Dev is the endpoint's device: allocate PDs, register memory, create
	// CQs and QPs on it as on any qp.Device.
	Dev *qp.Device
	// IP is the device's address (its GID at index 1).
	IP netip.Addr
	// Link is the endpoint's end of the in-memory link (queue 0's).
	Link *nic.MemLink
	// Links are its ends of every queue's link (Config.Queues), Links[0]
	// being Link.
	Links []*nic.MemLink
}

// GID returns the endpoint's RoCEv2 GID (index 1), the one a peer's
// qp.Remote names.
func (e *Endpoint) GID() qp.GID {
	g, _ := e.Dev.GID(1)
	return g
}

// SetFaults replaces the faults of the frames this endpoint sends.
func (e *Endpoint) SetFaults(f Faults) {
	for _, l := range e.Links {
		l.SetFaults(f)
	}
}

// LinkStats returns the counters of this endpoint's link end: the faults
// count frames it sent.
func (e *Endpoint) LinkStats() LinkStats {
	s := e.Link.MemStats()
	for _, l := range e.Links[1:] {
		t := l.MemStats()
		s.Stats.Add(t.Stats)
		s.Dropped += t.Dropped
		s.Duplicated += t.Duplicated
		s.Reordered += t.Reordered
		s.Corrupted += t.Corrupted
		s.Overflow += t.Overflow
		s.TapErrors += t.TapErrors
	}
	return s
}

// Net is two endpoints joined by an in-memory link.
type Net struct {
	A, B  *Endpoint
	seed  int64
	mode  Mode
	clock *Clock
	steps int
}

// The endpoints' addresses, from the benchmarking prefixes (RFC 2544,
// RFC 5180): never anyone's real address.
var (
	ipA, ipB   = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	ip6A, ip6B = netip.MustParseAddr("2001:2::1"), netip.MustParseAddr("2001:2::2")
)

// NewPair opens two devices, A and B, on the two ends of one in-memory link.
// Close releases them.
func NewPair(cfg Config) (*Net, error) {
	if cfg.Mode < Manual || cfg.Mode > BusyPoll {
		return nil, fmt.Errorf("sim: unknown mode %v", cfg.Mode)
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 1 << 16
	}
	n := &Net{seed: cfg.Seed, mode: cfg.Mode, clock: &Clock{fake: cfg.Mode == Manual, start: time.Now()}}
	mc := nic.MemConfig{MTU: cfg.MTU, Seed: cfg.Seed, AtoB: cfg.AtoB, BtoA: cfg.BtoA, Tap: cfg.Tap, QueueLen: cfg.QueueLen}
	if cfg.Mode == Manual {
		mc.Clock = n.clock.Now
	}
	la, lb := nic.NewMemPair(mc)
	las, lbs := []*nic.MemLink{la}, []*nic.MemLink{lb}
	for i := 1; i < cfg.Queues; i++ {
		qc := mc
		qc.Seed = cfg.Seed + int64(i)*0x9E3779B9 // each queue's faults their own stream
		qc.Tap = nil                             // one pcap stream: queue 0's
		qa, qb := nic.NewMemPair(qc)
		las, lbs = append(las, qa), append(lbs, qb)
	}
	closeLinks := func() {
		for i := range las {
			las[i].Close()
			lbs[i].Close()
		}
	}
	a, b := ipA, ipB
	if cfg.IPv6 {
		a, b = ip6A, ip6B
	}
	open := func(name string, ls []*nic.MemLink, ip, peer netip.Addr, peerMAC net.HardwareAddr, seed int64) (*Endpoint, error) {
		c := qp.Config{Name: name, Link: ls[0], IP: ip, Seed: seed, RetryCnt7Infinite: cfg.RetryCnt7Infinite,
			Neighbors: map[netip.Addr]net.HardwareAddr{peer: peerMAC},
			Mode:      cfg.Mode.qpMode()}
		if len(ls) > 1 {
			for _, l := range ls {
				c.Links = append(c.Links, l)
			}
		}
		if cfg.Mode == Manual {
			c.Now = n.clock.Now
		}
		d, err := qp.Open(c)
		if err != nil {
			return nil, err
		}
		return &Endpoint{Dev: d, IP: ip, Link: ls[0], Links: ls}, nil
	}
	var err error
	// Both devices draw their memory keys from Seed+4 (never 0, which
	// qp.Config.Seed takes for random keys): the captures recorded from the
	// simulator (cmd/goroce/internal/dump/testdata) depend on these keys
	// byte for byte.
	if n.A, err = open("simA", las, a, b, lb.HardwareAddr(), keySeed(cfg.Seed)); err != nil {
		closeLinks()
		return nil, fmt.Errorf("sim: device A: %w", err)
	}
	if n.B, err = open("simB", lbs, b, a, la.HardwareAddr(), keySeed(cfg.Seed)); err != nil {
		n.A.Dev.Close()
		closeLinks()
		return nil, fmt.Errorf("sim: device B: %w", err)
	}
	return n, nil
}

func keySeed(seed int64) int64 {
	if s := seed + 4; s != 0 {
		return s
	}
	return 3
}

// Seed returns the seed of the run.
func (n *Net) Seed() int64 { return n.seed }

// Mode returns how the devices run.
func (n *Net) Mode() Mode { return n.mode }

// Clock returns the simulation's clock.
func (n *Net) Clock() *Clock { return n.clock }

// Steps returns how many times Step ran.
func (n *Net) Steps() int { return n.steps }

// Close closes both devices and both ends of the link.
func (n *Net) Close() error {
	err := errors.Join(n.A.Dev.Close(), n.B.Dev.Close())
	// Manual devices leave their link to their owner; closing a closed
	// link is a no-op.
	for i := range n.A.Links {
		n.A.Links[i].Close()
		n.B.Links[i].Close()
	}
	return err
}

// Errors of RunUntil, RunFor and Wait; the returned errors wrap them and
// name the seed and the simulated time.
var (
	// ErrIdle: nothing is pending anywhere (no frame on the link, no
	// engine deadline) and the condition is still false; waiting longer
	// cannot help (Manual mode).
	ErrIdle = errors.New("sim: idle before the condition became true")
	// ErrTimeout: the time limit passed with the condition still false.
	ErrTimeout = errors.New("sim: condition still false at the time limit")
	// ErrLivelock: a million steps ran without the clock moving.
	ErrLivelock = errors.New("sim: no progress of time")
)

// maxStepsPerInstant bounds the steps at one simulated instant: the
// devices handle a finite number of frames and timers at any one time, so
// more means two of them keep answering each other without time passing.
const maxStepsPerInstant = 1_000_000

// Step processes what is due now; if nothing was, it advances the clock to
// the next pending event. It reports false when nothing at all is pending.
// In the real-time modes it polls both devices (BusyPoll) or yields the
// processor briefly (Goroutines) and reports true.
func (n *Net) Step() bool {
	switch n.mode {
	case BusyPoll:
		n.steps++
		n.A.Dev.Poll()
		n.B.Dev.Poll()
		return true
	case Goroutines:
		n.steps++
		time.Sleep(50 * time.Microsecond)
		return true
	}
	return n.step(time.Time{}) != idle
}

type stepResult int

const (
	stepped stepResult = iota // handled what was due, or moved the clock to the next event
	idle                      // nothing is pending anywhere
	atStop                    // the next event is after stop, and the clock is at stop
)

// step is one Manual step whose clock never passes stop (zero: no bound).
func (n *Net) step(stop time.Time) stepResult {
	n.steps++
	if n.A.Dev.Poll()+n.B.Dev.Poll() > 0 {
		return stepped
	}
	next, ok := n.nextEvent()
	if !ok {
		return idle
	}
	now := n.clock.Now()
	if !next.After(now) {
		// Due but not handled yet (a reordered frame held back until a
		// later one overtakes it): move time so the hold expires.
		next = now.Add(time.Microsecond)
	}
	if !stop.IsZero() && next.After(stop) {
		if now.Before(stop) {
			n.clock.set(stop) // the next step handles what is due at stop
			return stepped
		}
		return atStop
	}
	n.clock.set(next)
	return stepped
}

// nextEvent returns the earliest pending event: a frame becoming due on
// the link or an engine deadline.
func (n *Net) nextEvent() (time.Time, bool) {
	var next time.Time
	for _, f := range [...]func() (time.Time, bool){n.A.Link.NextDue, n.B.Link.NextDue, n.A.Dev.NextDeadline, n.B.Dev.NextDeadline} {
		if t, ok := f(); ok && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for i := 1; i < len(n.A.Links); i++ {
		for _, l := range [...]*nic.MemLink{n.A.Links[i], n.B.Links[i]} {
			if t, ok := l.NextDue(); ok && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next, !next.IsZero()
}

// RunUntil steps until cond reports true. It fails when limit has passed
// (simulated time in Manual mode, real time otherwise) or, in Manual mode,
// when nothing is pending any more. cond is called between steps, from the
// caller's goroutine.
func (n *Net) RunUntil(cond func() bool, limit time.Duration) error {
	if n.mode != Manual {
		deadline := n.clock.Elapsed() + limit
		for !cond() {
			if n.clock.Elapsed() > deadline {
				return n.errorf(ErrTimeout, "after %v", limit)
			}
			n.Step()
		}
		return nil
	}
	stop := n.clock.Now().Add(limit)
	var guard livelockGuard
	for !cond() {
		switch n.step(stop) {
		case idle:
			if cond() {
				return nil
			}
			return n.errorf(ErrIdle, "")
		case atStop:
			if cond() {
				return nil
			}
			return n.errorf(ErrTimeout, "after %v", limit)
		}
		if guard.stuck(n.clock.Now()) {
			return n.errorf(ErrLivelock, "%d steps", maxStepsPerInstant)
		}
	}
	return nil
}

// livelockGuard counts the steps at one simulated instant.
type livelockGuard struct {
	at    time.Time
	steps int
}

func (g *livelockGuard) stuck(now time.Time) bool {
	if !now.Equal(g.at) {
		g.at, g.steps = now, 0
	}
	g.steps++
	return g.steps > maxStepsPerInstant
}

// RunFor lets d pass: in Manual mode it handles every event up to now+d
// and leaves the clock there; in the real-time modes it keeps the devices
// going for d of real time.
func (n *Net) RunFor(d time.Duration) error {
	if n.mode != Manual {
		end := n.clock.Elapsed() + d
		return ignoreTimeout(n.RunUntil(func() bool { return n.clock.Elapsed() >= end }, d+time.Second))
	}
	stop := n.clock.Now().Add(d)
	var guard livelockGuard
	for {
		switch n.step(stop) {
		case idle:
			if n.clock.Now().Before(stop) {
				n.clock.set(stop)
			}
			return nil
		case atStop:
			return nil
		}
		if guard.stuck(n.clock.Now()) {
			return n.errorf(ErrLivelock, "%d steps", maxStepsPerInstant)
		}
	}
}

func ignoreTimeout(err error) error {
	if errors.Is(err, ErrTimeout) {
		return nil
	}
	return err
}

// Wait runs the simulation until cq yields at least one completion and
// returns how many it put into wcs (at least one), or an error when limit
// passes first (RunUntil).
func (n *Net) Wait(cq *qp.CQ, wcs []qp.WC, limit time.Duration) (int, error) {
	if len(wcs) == 0 {
		return 0, errors.New("sim: Wait: no room for a completion")
	}
	var k int
	var perr error
	err := n.RunUntil(func() bool {
		k, perr = cq.Poll(wcs)
		return k > 0 || perr != nil
	}, limit)
	if perr != nil {
		return 0, perr
	}
	return k, err
}

func (n *Net) errorf(sentinel error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if what != "" {
		what += ", "
	}
	return fmt.Errorf("%w (%s%s mode, seed %d, t=%v, %d steps; replay with GOROCE_SEED=%d)",
		sentinel, what, n.mode, n.seed, n.clock.Elapsed(), n.steps, n.seed)
}

// EnvSeed returns the seed in the GOROCE_SEED environment variable (decimal,
// or with a 0x prefix hexadecimal), if it is set. A test runs with it
// instead of its default seeds to replay a failure.
func EnvSeed() (seed int64, ok bool, err error) {
	s := os.Getenv("GOROCE_SEED")
	if s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, false, fmt.Errorf("sim: GOROCE_SEED=%q is not a seed: %w", s, err)
	}
	return v, true, nil
}

// QPOptions configure one side of ConnectQPs. The zero value is a 64 KiB
// buffer registered with every access right, a send CQ and a receive CQ of
// 4096 entries, and an RC QP with 256 send and 256 receive WRs of up to 4
// SGEs, connected with qp.Connect's defaults and send PSN 0.
type QPOptions struct {
	// BufSize is the size of the registered buffer (default 64 KiB).
	BufSize int
	// Access is the buffer's MR access (default LocalWrite, RemoteWrite,
	// RemoteRead and RemoteAtomic).
	Access qp.Access
	// CQSize is the number of entries of each CQ (default 4096).
	CQSize int
	// SharedCQ makes one CQ take both send and receive completions.
	SharedCQ bool
	// Caps are the QP's queue sizes (default 256 WRs, 4 SGEs each way).
	Caps qp.Caps
	// SQSigAll signals every send WR (qp.InitAttr.SQSigAll).
	SQSigAll bool
	// Connect are the options of this side's qp.Connect; its SQPSN is the
	// PSN the peer expects first.
	Connect qp.ConnectOptions
	// PathMTU is the MTU this side sends with (0: the smaller of the two
	// devices' ActiveMTU).
	PathMTU qp.MTU
	// Type is the QP's transport service: qp.QPTypeRC (the zero value) or
	// qp.QPTypeUC, connected alike (qp.QP.Connect gives UC its attributes).
	Type qp.QPType
}

// QPEnd is one side of a connected RC QP pair: the QP, its PD and CQs, and
// a buffer registered in the PD.
type QPEnd struct {
	PD             *qp.PD
	SendCQ, RecvCQ *qp.CQ // the same CQ with QPOptions.SharedCQ
	QP             *qp.QP
	Buf            []byte
	MR             *qp.MR
}

// SGE returns the SGE of n bytes at offset off of the buffer.
func (e *QPEnd) SGE(off, n int) qp.SGE {
	return qp.SGE{Addr: e.MR.IOVA() + uint64(off), Length: uint32(n), LKey: e.MR.LKey()}
}

// ConnectQPs creates a PD, a registered buffer, CQs and an RC QP on each of
// the devices a and b (any devices: these of a Net, or two opened with
// qp.OpenInterface) and connects the two QPs to each other at the smaller
// of the devices' path MTUs, through RESET, INIT, RTR and RTS, addressed by
// each device's GID at oa.Connect.SGIDIndex and ob.Connect.SGIDIndex (0
// meaning 1, the IP's GID). On an error the devices may hold some of the
// resources; closing them releases those.
func ConnectQPs(ctx context.Context, a, b *qp.Device, oa, ob QPOptions) (*QPEnd, *QPEnd, error) {
	ea, err := newQPEnd(a, oa)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: side A: %w", err)
	}
	eb, err := newQPEnd(b, ob)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: side B: %w", err)
	}
	gid := func(d *qp.Device, o QPOptions) (qp.GID, error) {
		i := int(o.Connect.SGIDIndex)
		if i == 0 {
			i = 1
		}
		return d.GID(i)
	}
	ga, err := gid(a, oa)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: side A: %w", err)
	}
	gb, err := gid(b, ob)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: side B: %w", err)
	}
	mtu := min(a.ActiveMTU(), b.ActiveMTU())
	mtuA, mtuB := cmp.Or(oa.PathMTU, mtu), cmp.Or(ob.PathMTU, mtu)
	if err := ea.QP.Connect(ctx, qp.Remote{QPN: eb.QP.QPN(), PSN: ob.Connect.SQPSN, GID: gb, MTU: mtuA}, oa.Connect); err != nil {
		return nil, nil, fmt.Errorf("sim: connect A: %w", err)
	}
	if err := eb.QP.Connect(ctx, qp.Remote{QPN: ea.QP.QPN(), PSN: oa.Connect.SQPSN, GID: ga, MTU: mtuB}, ob.Connect); err != nil {
		return nil, nil, fmt.Errorf("sim: connect B: %w", err)
	}
	return ea, eb, nil
}

// ConnectQPs is ConnectQPs on the Net's two devices.
func (n *Net) ConnectQPs(oa, ob QPOptions) (a, b *QPEnd, err error) {
	return ConnectQPs(context.Background(), n.A.Dev, n.B.Dev, oa, ob)
}

func newQPEnd(d *qp.Device, o QPOptions) (*QPEnd, error) {
	if o.BufSize <= 0 {
		o.BufSize = 64 << 10
	}
	if o.Access == 0 {
		o.Access = qp.LocalWrite | qp.RemoteWrite | qp.RemoteRead | qp.RemoteAtomic
	}
	if o.CQSize <= 0 {
		o.CQSize = 4096
	}
	if o.Caps == (qp.Caps{}) {
		o.Caps = qp.Caps{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}
	}
	e := &QPEnd{PD: d.AllocPD(), Buf: make([]byte, o.BufSize)}
	var err error
	if e.SendCQ, err = d.CreateCQ(o.CQSize); err != nil {
		return nil, err
	}
	e.RecvCQ = e.SendCQ
	if !o.SharedCQ {
		if e.RecvCQ, err = d.CreateCQ(o.CQSize); err != nil {
			return nil, err
		}
	}
	if e.QP, err = e.PD.CreateQP(qp.InitAttr{SendCQ: e.SendCQ, RecvCQ: e.RecvCQ, Cap: o.Caps, SQSigAll: o.SQSigAll, Type: o.Type}); err != nil {
		return nil, err
	}
	if e.MR, err = e.PD.RegMR(e.Buf, o.Access); err != nil {
		return nil, err
	}
	return e, nil
}
