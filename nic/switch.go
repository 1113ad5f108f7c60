package nic

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Switch is an in-memory Ethernet switch with one SwitchPort per host: the
// model of a shared bottleneck for congestion tests (incast: N senders into
// one receiver). It is output-queued and store-and-forward:
//
//		host ──cable──▶ ingress ──▶ egress queue of the destination port ──cable──▶ host
//
//	  - Every cable runs at LineRate in each direction. A frame a host writes
//	    is serialized on its cable after the frames before it (the host's
//	    NIC), reaches the switch Delay after its last bit, and is switched
//	    by destination MAC (unknown destinations are dropped).
//	  - Each egress port is a FIFO of Buffer bytes drained at LineRate. Its
//	    occupancy when a frame arrives is the backlog still to be
//	    serialized. A frame that does not fit is dropped (tail drop).
//	  - RED-style ECN marking (RED): a frame whose IP ECN field says
//	    ECN-capable (ECT(0) or ECT(1)) is marked CE when it leaves the queue
//	    (its first bit goes on the egress cable), with probability 0 while
//	    the backlog behind it is below Kmin, Pmax·(q−Kmin)/(Kmax−Kmin)
//	    between Kmin and Kmax, and 1 at or above Kmax (the IPv4 header
//	    checksum is updated). Marking at dequeue tells the sender about the
//	    queue as it is, not as it was a queueing delay earlier. Frames that
//	    are not ECN-capable are never marked or dropped early: only the tail
//	    drop loses them.
//
// The switch looks at Ethernet and IP headers only. All decisions are
// drawn from a PCG generator seeded with SwitchConfig.Seed, one draw per
// frame leaving a queue, so a run on a fake Clock is the same every time.
// Nothing runs in the background: when any port is written or read or
// NextDue is asked, the switch catches up with the clock, handling
// arrivals (admission, tail drop) and departures (marking) in time order.
type Switch struct {
	mu      sync.Mutex
	cfg     SwitchConfig
	clock   func() time.Time
	rng     *rand.Rand
	ports   []*SwitchPort
	byMAC   map[[6]byte]int
	ingress memQueue // frames on their way to the switch, by arrival
	seq     uint64
	free    [][]byte
	unknown uint64 // frames for no port's MAC
}

// RED configures ECN marking: Kmin and Kmax in bytes of egress backlog,
// Pmax the marking probability at Kmax. The zero value marks nothing.
type RED struct {
	Kmin, Kmax int
	Pmax       float64
}

// SwitchConfig configures NewSwitch.
type SwitchConfig struct {
	Ports    int              // hosts (at least 2)
	MTU      int              // IP MTU of every port (default 1500)
	LineRate int64            // bits per second of every cable, each direction (default 10 Gb/s)
	Delay    time.Duration    // propagation delay of each cable
	Buffer   int              // bytes of each egress queue (default 1 MiB)
	ECN      RED              // marking (zero: none)
	Seed     int64            // seeds the marking decisions
	Clock    func() time.Time // nil = time.Now; a fake clock for deterministic simulation
}

// SwitchPortStats are one port's counters. Tx is from the host into the
// switch, Rx from the switch to the host; Enqueued, Marked, Dropped and
// the queue are the port's egress queue (towards its host).
type SwitchPortStats struct {
	TxFrames, TxBytes uint64
	RxFrames, RxBytes uint64
	Enqueued          uint64 // frames admitted to the egress queue
	Marked            uint64 // frames marked CE
	Dropped           uint64 // tail drops
	QueueMax          int    // largest backlog, bytes (seen by an arriving frame)
	// Queue is the histogram of the backlog behind each frame as it left
	// the queue, in QueueBucket-byte buckets. Frames leave at line rate
	// while the port is busy, so it is the queue's distribution over the
	// port's busy time (an arrival-sampled one would weigh the moments
	// when N senders arrive at once N times).
	Queue []uint64
}

// QueueBucket is the width of a SwitchPortStats.Queue bucket in bytes.
const QueueBucket = 64

// QueueQuantile returns the backlog (bytes, a bucket's lower edge) at or
// below which a fraction q of the departing frames left the queue.
func (s *SwitchPortStats) QueueQuantile(q float64) int {
	var total uint64
	for _, c := range s.Queue {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(q*float64(total) + 0.5)
	want = max(want, 1)
	var acc uint64
	for i, c := range s.Queue {
		acc += c
		if acc >= want {
			if i == 0 {
				return 0
			}
			return i * QueueBucket
		}
	}
	return (len(s.Queue) - 1) * QueueBucket
}

// SwitchPort is one host's end of a Switch: a Link and Poller.
type SwitchPort struct {
	sw     *Switch
	idx    int
	mac    net.HardwareAddr
	closed bool

	upFree   time.Time // the host's cable into the switch is free again
	wireFree time.Time // the egress cable towards the host is free again
	// q holds the frames on their way to the host in FIFO order (due
	// times only grow); q[head:dec] have left the queue (marking decided),
	// q[dec:] wait in it.
	q         []swFrame
	head, dec int
	st        SwitchPortStats
	done      chan struct{}
}

// swFrame is a frame in an egress queue.
type swFrame struct {
	buf        []byte
	start, due time.Time // its first bit on the egress cable; at the host
}

var (
	_ Link   = (*SwitchPort)(nil)
	_ Poller = (*SwitchPort)(nil)
)

const (
	switchDefaultRate   = 10_000_000_000
	switchDefaultBuffer = 1 << 20
)

// NewSwitch returns a switch with cfg.Ports ports; port i has MAC
// 02:00:00:5e:00:i+1 (SwitchPort.HardwareAddr).
func NewSwitch(cfg SwitchConfig) (*Switch, error) {
	if cfg.Ports < 2 || cfg.Ports > 250 {
		return nil, fmt.Errorf("nic: switch: %d ports, want 2..250", cfg.Ports)
	}
	if cfg.MTU <= 0 {
		cfg.MTU = memDefaultMTU
	}
	if cfg.LineRate <= 0 {
		cfg.LineRate = switchDefaultRate
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = switchDefaultBuffer
	}
	if e := cfg.ECN; e != (RED{}) && (e.Kmin < 0 || e.Kmax <= e.Kmin || e.Pmax < 0 || e.Pmax > 1) {
		return nil, fmt.Errorf("nic: switch: RED Kmin %d Kmax %d Pmax %v: want 0 ≤ Kmin < Kmax and Pmax in [0, 1]", e.Kmin, e.Kmax, e.Pmax)
	}
	s := &Switch{cfg: cfg, clock: cfg.Clock, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5117C4)), byMAC: map[[6]byte]int{}}
	if s.clock == nil {
		s.clock = time.Now
	}
	buckets := cfg.Buffer/QueueBucket + 2
	for i := 0; i < cfg.Ports; i++ {
		mac := net.HardwareAddr{0x02, 0, 0, 0x5e, 0, byte(i + 1)}
		p := &SwitchPort{sw: s, idx: i, mac: mac, done: make(chan struct{})}
		p.st.Queue = make([]uint64, buckets)
		s.ports = append(s.ports, p)
		s.byMAC[[6]byte(mac)] = i
	}
	return s, nil
}

// Port returns port i.
func (s *Switch) Port(i int) *SwitchPort { return s.ports[i] }

// Ports returns the number of ports.
func (s *Switch) Ports() int { return len(s.ports) }

// Config returns the switch's configuration with defaults filled in.
func (s *Switch) Config() SwitchConfig { return s.cfg }

// PortStats returns port i's counters (a copy).
func (s *Switch) PortStats(i int) SwitchPortStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ports[i].st
	st.Queue = append([]uint64(nil), st.Queue...)
	return st
}

// Unknown returns how many frames named no port's MAC.
func (s *Switch) Unknown() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unknown
}

// NextDue returns when the next frame reaches the switch or a host.
func (s *Switch) NextDue() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.process(s.clock())
	var next time.Time
	if s.ingress.len() > 0 {
		next = s.ingress.peek().due
	}
	for _, p := range s.ports {
		if p.head < len(p.q) {
			if d := p.q[p.head].due; next.IsZero() || d.Before(next) {
				next = d
			}
		}
	}
	return next, !next.IsZero()
}

// Ready sets ready[i] to whether port i has a frame due at its host now
// (len(ready) ≥ Ports()).
func (s *Switch) Ready(ready []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	s.process(now)
	for i, p := range s.ports {
		ready[i] = p.head < p.dec && !p.q[p.head].due.After(now)
	}
}

// serialize is how long n bytes occupy a cable, rounded up to the
// nanosecond (rounding down would make the cable faster than its rate).
func (s *Switch) serialize(n int) time.Duration {
	return time.Duration((int64(n)*8*int64(time.Second) + s.cfg.LineRate - 1) / s.cfg.LineRate)
}

// backlog is the bytes still to be serialized on p's egress at t.
func (s *Switch) backlog(p *SwitchPort, t time.Time) int {
	if !p.wireFree.After(t) {
		return 0
	}
	return int(int64(p.wireFree.Sub(t)) * s.cfg.LineRate / (8 * int64(time.Second)))
}

// process catches up with now (s.mu held): the arrivals at the switch and
// the departures from its queues up to now, in time order (a departure
// before an arrival at the same instant).
func (s *Switch) process(now time.Time) {
	for {
		var dp *SwitchPort
		for _, p := range s.ports {
			if p.dec < len(p.q) && !p.q[p.dec].start.After(now) && (dp == nil || p.q[p.dec].start.Before(dp.q[dp.dec].start)) {
				dp = p
			}
		}
		arrival := s.ingress.len() > 0 && !s.ingress.peek().due.After(now)
		switch {
		case dp != nil && (!arrival || !s.ingress.peek().due.Before(dp.q[dp.dec].start)):
			s.depart(dp)
		case arrival:
			f := s.ingress.pop()
			s.forward(f.buf, f.due)
		default:
			return
		}
	}
}

// depart takes the frame at the front of p's queue onto the cable,
// marking it by the backlog behind it (s.mu held).
func (s *Switch) depart(p *SwitchPort) {
	f := &p.q[p.dec]
	p.dec++
	r := s.rng.Float64()
	q := s.backlog(p, f.start) - len(f.buf)
	p.st.Queue[min(q/QueueBucket, len(p.st.Queue)-1)]++
	e := s.cfg.ECN
	if e.Kmax == 0 || q <= e.Kmin {
		return
	}
	prob := 1.0
	if q < e.Kmax {
		prob = e.Pmax * float64(q-e.Kmin) / float64(e.Kmax-e.Kmin)
	}
	if r < prob && markCE(f.buf) {
		p.st.Marked++
	}
}

// forward puts buf, arrived at t, into its egress queue, or drops it
// (s.mu held).
func (s *Switch) forward(buf []byte, t time.Time) {
	i, ok := s.byMAC[[6]byte(buf[:6])]
	if !ok {
		s.unknown++
		s.release(buf)
		return
	}
	p := s.ports[i]
	if p.closed {
		s.release(buf)
		return
	}
	q := s.backlog(p, t)
	p.st.QueueMax = max(p.st.QueueMax, q)
	if q+len(buf) > s.cfg.Buffer {
		p.st.Dropped++
		s.release(buf)
		return
	}
	start := t
	if p.wireFree.After(start) {
		start = p.wireFree
	}
	p.wireFree = start.Add(s.serialize(len(buf)))
	p.st.Enqueued++
	if p.head > 0 && len(p.q) == cap(p.q) {
		// Slide the live part down instead of growing.
		k := copy(p.q, p.q[p.head:])
		clear(p.q[k:])
		p.q, p.dec, p.head = p.q[:k], p.dec-p.head, 0
	}
	p.q = append(p.q, swFrame{buf: buf, start: start, due: p.wireFree.Add(s.cfg.Delay)})
}

func (s *Switch) nextSeq() uint64 { s.seq++; return s.seq }

func (s *Switch) alloc(n int) []byte {
	if k := len(s.free); k > 0 {
		b := s.free[k-1]
		s.free[k-1] = nil
		s.free = s.free[:k-1]
		return b[:n]
	}
	return make([]byte, n, s.cfg.MTU+18)
}

func (s *Switch) release(b []byte) { s.free = append(s.free, b[:0]) }

// markCE sets the IP ECN field of an ECN-capable frame to CE and reports
// whether it did (RFC 3168: only ECT(0) and ECT(1) may be marked).
func markCE(b []byte) bool {
	if len(b) < EthernetHeaderLen {
		return false
	}
	l3, et := 14, binary.BigEndian.Uint16(b[12:])
	if et == 0x8100 && len(b) >= 18 {
		l3, et = 18, binary.BigEndian.Uint16(b[16:])
	}
	switch et {
	case 0x0800:
		if len(b) < l3+20 {
			return false
		}
		ip := b[l3:]
		ihl := int(ip[0]&0x0F) * 4
		if ip[1]&3 == 0 || ip[1]&3 == 3 || ihl < 20 || len(ip) < ihl {
			return false
		}
		ip[1] |= 3
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip[:ihl]))
		return true
	case 0x86DD:
		if len(b) < l3+40 {
			return false
		}
		ecn := b[l3+1] >> 4 & 3
		if ecn == 0 || ecn == 3 {
			return false
		}
		b[l3+1] |= 0x30
		return true
	}
	return false
}

// EthernetHeaderLen is the length of an untagged Ethernet header.
const EthernetHeaderLen = 14

func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

// LineRate returns the port's line rate in bits per second.
func (p *SwitchPort) LineRate() int64 { return p.sw.cfg.LineRate }

// BatchSize implements Link.
func (p *SwitchPort) BatchSize() int { return memBatchSize }

// MTU implements Link.
func (p *SwitchPort) MTU() int { return p.sw.cfg.MTU }

// HardwareAddr implements Link (a copy).
func (p *SwitchPort) HardwareAddr() net.HardwareAddr { return append(net.HardwareAddr(nil), p.mac...) }

// WriteBatch implements Link: each frame is serialized on the host's cable
// and reaches the switch Delay later. Frames longer than MTU+18 bytes are
// dropped and counted.
func (p *SwitchPort) WriteBatch(frames [][]byte) (int, error) {
	s := p.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	now := s.clock()
	s.process(now)
	for _, f := range frames {
		if len(f) == 0 || len(f) > s.cfg.MTU+18 {
			continue
		}
		start := now
		if p.upFree.After(start) {
			start = p.upFree
		}
		p.upFree = start.Add(s.serialize(len(f)))
		buf := s.alloc(len(f))
		copy(buf, f)
		p.st.TxFrames++
		p.st.TxBytes += uint64(len(f))
		s.ingress.push(memFrame{buf: buf, due: p.upFree.Add(s.cfg.Delay), seq: s.nextSeq()})
	}
	return len(frames), nil
}

// TryReadBatch implements Poller: the frames that reached the host by now.
func (p *SwitchPort) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	s := p.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	now := s.clock()
	s.process(now)
	n := 0
	for n < len(bufs) && n < len(sizes) && p.head < p.dec && !p.q[p.head].due.After(now) {
		f := p.q[p.head]
		p.q[p.head] = swFrame{}
		p.head++
		if len(f.buf) <= len(bufs[n]) {
			sizes[n] = copy(bufs[n], f.buf)
			p.st.RxFrames++
			p.st.RxBytes += uint64(len(f.buf))
			n++
		}
		s.release(f.buf)
	}
	return n, nil
}

// ReadBatch implements Link by polling TryReadBatch every millisecond of
// real time; a deterministic scheduler uses TryReadBatch and
// Switch.NextDue instead.
func (p *SwitchPort) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	for {
		n, err := p.TryReadBatch(bufs, sizes)
		if n > 0 || err != nil {
			return n, err
		}
		select {
		case <-p.done:
			return 0, ErrClosed
		case <-time.After(memFakeClockPoll):
		}
	}
}

// Stats implements Link.
func (p *SwitchPort) Stats() Stats {
	s := p.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{TxFrames: p.st.TxFrames, TxBytes: p.st.TxBytes, RxFrames: p.st.RxFrames, RxBytes: p.st.RxBytes}
}

// Close implements Link: the port's further calls fail and frames towards
// it are dropped.
func (p *SwitchPort) Close() error {
	s := p.sw
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.done)
		for _, f := range p.q[p.head:] {
			s.release(f.buf)
		}
		clear(p.q)
		p.q, p.head, p.dec = p.q[:0], 0, 0
	}
	return nil
}

// Backlog returns port i's egress backlog now, in bytes.
func (s *Switch) Backlog(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	s.process(now)
	return s.backlog(s.ports[i], now)
}
