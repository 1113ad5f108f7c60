package sim

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// RED configures a switch port's ECN marking (Kmin, Kmax in bytes of
// backlog, Pmax); see nic.Switch.
type RED = nic.RED

// SwitchPortStats are one switch port's counters: frames in and out,
// marks, tail drops and the histogram of its egress backlog.
type SwitchPortStats = nic.SwitchPortStats

// FabricConfig configures NewFabric. The zero value of each field takes
// nic.SwitchConfig's default.
type FabricConfig struct {
	// Hosts is the number of hosts on the switch (2..250).
	Hosts int
	// Seed seeds the switch's marking decisions and the devices' memory
	// keys.
	Seed int64
	// MTU is the IP MTU of every port (default 1500; 9000 gives path MTU
	// 4096).
	MTU int
	// LineRate is every cable's rate in bits per second (default 10 Gb/s).
	LineRate int64
	// Delay is each cable's propagation delay.
	Delay time.Duration
	// Buffer is each egress queue's size in bytes (default 1 MiB).
	Buffer int
	// ECN is the switch's RED marking (zero: none).
	ECN RED
	// CC turns congestion control on in every device (qp.Config.CC).
	CC *qp.CCParams
}

// Host is one host of a Fabric.
type Host struct {
	Dev  *qp.Device
	IP   netip.Addr
	Port *nic.SwitchPort
}

// GID returns the host's RoCEv2 GID (index 1).
func (h *Host) GID() qp.GID {
	g, _ := h.Dev.GID(1)
	return g
}

// Fabric is a set of hosts on one switch (nic.Switch: line-rate cables,
// output queues with a buffer, RED ECN marking and tail drop), run in
// Manual mode on a fake clock: the congestion model. Host i is
// 198.18.1.(i+1). With N senders writing to one receiver, the receiver's
// switch port is the shared bottleneck (incast).
type Fabric struct {
	Hosts  []*Host
	Switch *nic.Switch
	clock  *Clock
	seed   int64
	steps  int
	// The scheduler's view of the hosts, refreshed at the start of every
	// run (the application may have posted) and after each host's poll:
	// its engine deadline, and which ports have a frame due.
	deadline []time.Time
	ready    []bool
}

// NewFabric opens cfg.Hosts devices in Manual mode on the ports of one
// switch; each knows every other's MAC. Close releases them.
func NewFabric(cfg FabricConfig) (*Fabric, error) {
	f := &Fabric{clock: &Clock{fake: true}, seed: cfg.Seed}
	sw, err := nic.NewSwitch(nic.SwitchConfig{Ports: cfg.Hosts, MTU: cfg.MTU, LineRate: cfg.LineRate, Delay: cfg.Delay,
		Buffer: cfg.Buffer, ECN: cfg.ECN, Seed: cfg.Seed, Clock: f.clock.Now})
	if err != nil {
		return nil, fmt.Errorf("sim: fabric: %w", err)
	}
	f.Switch = sw
	neigh := map[netip.Addr]net.HardwareAddr{}
	ips := make([]netip.Addr, cfg.Hosts)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)})
		neigh[ips[i]] = sw.Port(i).HardwareAddr()
	}
	for i := range ips {
		d, err := qp.Open(qp.Config{Name: fmt.Sprintf("fabric%d", i), Link: sw.Port(i), IP: ips[i],
			Seed: keySeed(cfg.Seed) + int64(i), Neighbors: neigh, Mode: qp.ModeManual, Now: f.clock.Now, CC: cfg.CC})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("sim: fabric host %d: %w", i, err)
		}
		f.Hosts = append(f.Hosts, &Host{Dev: d, IP: ips[i], Port: sw.Port(i)})
	}
	return f, nil
}

// Clock returns the fabric's clock.
func (f *Fabric) Clock() *Clock { return f.clock }

// Seed returns the seed of the run.
func (f *Fabric) Seed() int64 { return f.seed }

// Close closes every device and switch port.
func (f *Fabric) Close() error {
	for _, h := range f.Hosts {
		h.Dev.Close()
		h.Port.Close()
	}
	return nil
}

// refresh reads every host's engine deadline.
func (f *Fabric) refresh() {
	if f.deadline == nil {
		f.deadline, f.ready = make([]time.Time, len(f.Hosts)), make([]bool, len(f.Hosts))
	}
	for i, h := range f.Hosts {
		f.deadline[i], _ = h.Dev.NextDeadline()
	}
}

// step is one step of the scheduler whose clock never passes stop. Only
// the hosts with a frame or a deadline due are polled: with many hosts,
// most have nothing to do at any one instant.
func (f *Fabric) step(stop time.Time) stepResult {
	f.steps++
	now := f.clock.Now()
	events := 0
	f.Switch.Ready(f.ready)
	for i, h := range f.Hosts {
		if f.ready[i] || (!f.deadline[i].IsZero() && !f.deadline[i].After(now)) {
			events += h.Dev.Poll()
			f.deadline[i], _ = h.Dev.NextDeadline()
		}
	}
	if events > 0 {
		return stepped
	}
	next, ok := f.Switch.NextDue()
	for _, t := range f.deadline {
		if !t.IsZero() && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	if !ok {
		return idle
	}
	if !next.After(now) {
		next = now.Add(time.Nanosecond)
	}
	if !stop.IsZero() && next.After(stop) {
		if now.Before(stop) {
			f.clock.set(stop)
			return stepped
		}
		return atStop
	}
	f.clock.set(next)
	return stepped
}

// RunUntil steps until cond reports true, failing after limit of
// simulated time or when nothing is pending any more.
func (f *Fabric) RunUntil(cond func() bool, limit time.Duration) error {
	stop := f.clock.Now().Add(limit)
	var guard livelockGuard
	f.refresh()
	for !cond() {
		// cond may post work.
		f.refresh()
		switch f.step(stop) {
		case idle:
			if cond() {
				return nil
			}
			return f.errorf(ErrIdle, "")
		case atStop:
			if cond() {
				return nil
			}
			return f.errorf(ErrTimeout, "after %v", limit)
		}
		if guard.stuck(f.clock.Now()) {
			return f.errorf(ErrLivelock, "%d steps", maxStepsPerInstant)
		}
	}
	return nil
}

// RunFor handles every event up to now+d and leaves the clock there.
func (f *Fabric) RunFor(d time.Duration) error {
	stop := f.clock.Now().Add(d)
	var guard livelockGuard
	f.refresh()
	for {
		switch f.step(stop) {
		case idle:
			if f.clock.Now().Before(stop) {
				f.clock.set(stop)
			}
			return nil
		case atStop:
			return nil
		}
		if guard.stuck(f.clock.Now()) {
			return f.errorf(ErrLivelock, "%d steps", maxStepsPerInstant)
		}
	}
}

func (f *Fabric) errorf(sentinel error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if what != "" {
		what += ", "
	}
	return fmt.Errorf("%w (%sfabric, seed %d, t=%v, %d steps; replay with GOROCE_SEED=%d)",
		sentinel, what, f.seed, f.clock.Elapsed(), f.steps, f.seed)
}

// ConnectQPs is ConnectQPs between hosts a and b of the fabric.
func (f *Fabric) ConnectQPs(a, b int, oa, ob QPOptions) (*QPEnd, *QPEnd, error) {
	return ConnectQPs(context.Background(), f.Hosts[a].Dev, f.Hosts[b].Dev, oa, ob)
}
