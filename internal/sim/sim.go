// Package sim runs goroce endpoints deterministically: whole qp.Devices in
// manual mode, joined by in-memory links whose faults (drop, duplicate,
// reorder, delay, corrupt) are drawn from one seed, all on a fake clock, in
// one goroutine. Given the same seed and the same sequence of calls, a run
// is identical every time, so any failure can be replayed from its seed
// (GOROCE_SEED=... go test -run ...).
//
// The scheduler is simple: Step lets every device process whatever is due
// at the current simulated time; when nothing is due it advances the clock
// to the earliest pending event (a frame becoming deliverable on a link, or
// an engine deadline such as a retransmission or RNR timer).
package sim

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// Clock is a manual clock.
type Clock struct{ t time.Time }

// Epoch is where every simulation's clock starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns the simulated time.
func (c *Clock) Now() time.Time { return c.t }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// Elapsed is the simulated time since Epoch.
func (c *Clock) Elapsed() time.Duration { return c.t.Sub(Epoch) }

// Endpoint is one simulated host.
type Endpoint struct {
	Dev  *qp.Device
	Link *nic.MemLink
	IP   netip.Addr
}

// Net is two endpoints joined by an in-memory link.
type Net struct {
	Clock *Clock
	Seed  int64
	A, B  Endpoint
	Steps int
}

// Config configures a simulated pair.
type Config struct {
	Seed       int64
	MTU        int // link MTU (default 1500)
	AtoB, BtoA nic.Faults
	Tap        io.Writer // optional pcap of every delivered frame
	// RetryCnt7Infinite selects rxe's retry_cnt semantics on both ends.
	RetryCnt7Infinite bool
}

// NewPair builds two manual devices (198.18.0.1 and 198.18.0.2) on one link.
func NewPair(cfg Config) (*Net, error) {
	c := &Clock{t: Epoch}
	la, lb := nic.NewMemPair(nic.MemConfig{MTU: cfg.MTU, Seed: cfg.Seed, AtoB: cfg.AtoB, BtoA: cfg.BtoA,
		Clock: c.Now, Tap: cfg.Tap, QueueLen: 1 << 16})
	n := &Net{Clock: c, Seed: cfg.Seed}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	mk := func(name string, l *nic.MemLink, ip, peer netip.Addr, peerMAC net.HardwareAddr) (Endpoint, error) {
		d, err := qp.Open(qp.Config{Name: name, Link: l, IP: ip, Now: c.Now, Manual: true, Seed: cfg.Seed + int64(len(name)),
			Neighbors: map[netip.Addr]net.HardwareAddr{peer: peerMAC}, RetryCnt7Infinite: cfg.RetryCnt7Infinite})
		return Endpoint{Dev: d, Link: l, IP: ip}, err
	}
	var err error
	if n.A, err = mk("simA", la, ipA, ipB, lb.HardwareAddr()); err != nil {
		return nil, err
	}
	if n.B, err = mk("simB", lb, ipB, ipA, la.HardwareAddr()); err != nil {
		return nil, err
	}
	return n, nil
}

// ErrIdle is returned by RunUntil when nothing is pending anywhere but the
// condition is still false: the system is stuck.
var ErrIdle = errors.New("sim: idle before the condition became true")

// Step processes what is due now; if nothing was, it advances the clock to
// the next pending event. It reports false when nothing at all is pending.
func (n *Net) Step() bool {
	n.Steps++
	if n.A.Dev.Poll()+n.B.Dev.Poll() > 0 {
		return true
	}
	var next time.Time
	consider := func(t time.Time, ok bool) {
		if ok && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	consider(n.A.Link.NextDue())
	consider(n.B.Link.NextDue())
	consider(n.A.Dev.NextDeadline())
	consider(n.B.Dev.NextDeadline())
	if next.IsZero() {
		return false
	}
	if next.After(n.Clock.t) {
		n.Clock.t = next
	} else {
		// Due but not yet handled (e.g. a reordered frame held back):
		// nudge time forward so the hold expires.
		n.Clock.Advance(time.Microsecond)
	}
	return true
}

// RunUntil steps until cond is true, or fails when the system is idle, the
// step budget is spent or the simulated time limit passes.
func (n *Net) RunUntil(cond func() bool, maxSteps int, maxTime time.Duration) error {
	deadline := n.Clock.t.Add(maxTime)
	for i := 0; !cond(); i++ {
		if i >= maxSteps {
			return fmt.Errorf("sim: condition still false after %d steps (seed %d, t=%v)", maxSteps, n.Seed, n.Clock.Elapsed())
		}
		if n.Clock.t.After(deadline) {
			return fmt.Errorf("sim: condition still false after %v simulated (seed %d)", maxTime, n.Seed)
		}
		if !n.Step() {
			if cond() {
				return nil
			}
			return fmt.Errorf("%w (seed %d, t=%v)", ErrIdle, n.Seed, n.Clock.Elapsed())
		}
	}
	return nil
}

// Close releases both devices.
func (n *Net) Close() {
	n.A.Dev.Close()
	n.B.Dev.Close()
}

// Seeds returns the seeds a test should run: GOROCE_SEED (one seed, to
// replay a failure) if set, else the given defaults.
func Seeds(defaults ...int64) []int64 {
	if s := os.Getenv("GOROCE_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 0, 64)
		if err == nil {
			return []int64{v}
		}
	}
	return defaults
}
