package nic

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
)

type swClock struct{ ns atomic.Int64 }

func (c *swClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *swClock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *swClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// ipFrame is an Ethernet/IPv4 frame of n bytes from port src to port dst
// with the given TOS and a valid header checksum.
func ipFrame(dst, src *SwitchPort, n int, tos byte) []byte {
	b := make([]byte, n)
	copy(b, dst.mac)
	copy(b[6:], src.mac)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[1] = 0x45, tos
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	return b
}

func readAll(t *testing.T, p *SwitchPort) [][]byte {
	t.Helper()
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9100)
	}
	var out [][]byte
	for {
		n, err := p.TryReadBatch(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for i := 0; i < n; i++ {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
}

// Frames cross two cables and the egress queue at line rate: 1250 bytes
// at 10 Gb/s are 1 µs on each cable, so frame k of a burst reaches the
// host at (k+2) µs + twice the cable delay.
func TestSwitchSerialization(t *testing.T) {
	var c swClock
	c.set(time.Unix(1000, 0))
	t0 := c.now()
	s, err := NewSwitch(SwitchConfig{Ports: 2, Clock: c.now, Delay: 500 * time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Port(0), s.Port(1)
	var frames [][]byte
	for i := 0; i < 5; i++ {
		frames = append(frames, ipFrame(b, a, 1250, 0))
	}
	if _, err := a.WriteBatch(frames); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 5; k++ {
		next, ok := s.NextDue()
		want := t0.Add(time.Duration(k+2)*time.Microsecond + time.Microsecond)
		// Before a frame reaches the host, the next event may be its
		// arrival at the switch; step through the events.
		for ok && next.Before(want) {
			c.set(next)
			if got := readAll(t, b); len(got) != 0 {
				t.Fatalf("frame %d delivered at %v, want %v", k, next.Sub(t0), want.Sub(t0))
			}
			next, ok = s.NextDue()
		}
		if !ok || !next.Equal(want) {
			t.Fatalf("frame %d due at %v, want %v", k, next.Sub(t0), want.Sub(t0))
		}
		c.set(next)
		if got := readAll(t, b); len(got) != 1 {
			t.Fatalf("frame %d: %d frames at %v", k, len(got), next.Sub(t0))
		}
	}
	if st := s.PortStats(1); st.Enqueued != 5 || st.RxFrames != 5 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// incast runs senders ports 1..n, each writing k frames of n bytes to
// port 0 at once, and returns what port 0 received.
func incast(t *testing.T, cfg SwitchConfig, senders, k, size int, tos byte) (*Switch, [][]byte) {
	t.Helper()
	var c swClock
	c.set(time.Unix(1000, 0))
	cfg.Clock = c.now
	cfg.Ports = senders + 1
	s, err := NewSwitch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= senders; i++ {
		var fs [][]byte
		for j := 0; j < k; j++ {
			fs = append(fs, ipFrame(s.Port(0), s.Port(i), size, tos))
		}
		s.Port(i).WriteBatch(fs)
	}
	var got [][]byte
	for {
		next, ok := s.NextDue()
		if !ok {
			return s, got
		}
		c.set(next)
		got = append(got, readAll(t, s.Port(0))...)
	}
}

// Four senders at line rate into one port: the buffer fills and the rest
// is tail-dropped; what passes is intact. ECT(0) frames are marked CE
// once the backlog passes Kmax (Pmax 1 between), with a correct IPv4
// checksum; frames that are not ECN-capable are never marked.
func TestSwitchIncastDropAndMark(t *testing.T) {
	cfg := SwitchConfig{Buffer: 50_000, ECN: RED{Kmin: 5_000, Kmax: 20_000, Pmax: 1}}
	s, got := incast(t, cfg, 4, 50, 1000, 0b10)
	st := s.PortStats(0)
	if st.Dropped == 0 || st.Enqueued+st.Dropped != 200 || uint64(len(got)) != st.Enqueued {
		t.Fatalf("stats %+v, %d delivered", st, len(got))
	}
	if st.QueueMax > cfg.Buffer {
		t.Fatalf("backlog %d above the buffer %d", st.QueueMax, cfg.Buffer)
	}
	marked := 0
	for _, f := range got {
		ip := f[14:34]
		if ipv4Checksum(ip) != 0 {
			t.Fatalf("bad IPv4 checksum after marking: % x", ip)
		}
		switch ip[1] & 3 {
		case 0b11:
			marked++
		case 0b10:
		default:
			t.Fatalf("ECN %02b", ip[1]&3)
		}
	}
	if marked == 0 || uint64(marked) != st.Marked || marked == len(got) {
		t.Fatalf("%d of %d marked (stats %d): want some, not all", marked, len(got), st.Marked)
	}
	if p99 := st.QueueQuantile(0.99); p99 < 40_000 || p99 > cfg.Buffer+QueueBucket {
		t.Fatalf("queue p99 %d", p99)
	}

	s, got = incast(t, cfg, 4, 50, 1000, 0)
	if st := s.PortStats(0); st.Marked != 0 || st.Dropped == 0 {
		t.Fatalf("not ECN-capable: %+v", st)
	}
	for _, f := range got {
		if f[15] != 0 {
			t.Fatal("a Not-ECT frame was changed")
		}
	}
}

// The same seed makes the same marks; another seed others.
func TestSwitchDeterministic(t *testing.T) {
	marks := func(seed int64) []int {
		_, got := incast(t, SwitchConfig{Seed: seed, Buffer: 1 << 20, ECN: RED{Kmin: 1_000, Kmax: 100_000, Pmax: 0.5}}, 3, 40, 1000, 0b10)
		var m []int
		for i, f := range got {
			if f[15]&3 == 3 {
				m = append(m, i)
			}
		}
		return m
	}
	a, b, c := marks(7), marks(7), marks(8)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("seed 7: %d and %d marks", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 differs at mark %d", i)
		}
	}
	same := len(a) == len(c)
	for i := 0; same && i < len(a); i++ {
		same = a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 7 and 8 mark the same frames")
	}
}

func TestSwitchConfigErrors(t *testing.T) {
	for _, cfg := range []SwitchConfig{{Ports: 1}, {Ports: 2, ECN: RED{Kmin: 10, Kmax: 5}}, {Ports: 2, ECN: RED{Kmax: 5, Pmax: 2}}} {
		if _, err := NewSwitch(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
