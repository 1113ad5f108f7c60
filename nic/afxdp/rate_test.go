//go:build linux

package afxdp

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// drain reads from l until it is closed, counting frames.
func drain(l *Link, count *atomic.Uint64) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, l.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := l.ReadBatch(bufs, sizes)
			count.Add(uint64(n))
			if err != nil {
				return
			}
		}
	}()
	return done
}

// rateFrames returns a batch of 1 KiB UDP-4791 frames from a to b.
func rateFrames(p *vethPair, n, size int) [][]byte {
	batch := make([][]byte, n)
	for i := range batch {
		batch[i] = buildFrame(make([]byte, size), size, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, uint32(i))
	}
	return batch
}

// TestRate measures one direction over veth with 1 KiB frames, bounded to
// 2 s and 1e6 frames. It prints the rate and asserts nothing about it.
func TestRate(t *testing.T) {
	if testing.Short() {
		t.Skip("rate measurement skipped in -short mode")
	}
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{})
	b := p.open(t, p.nsB, p.ifB, Options{})
	var got atomic.Uint64
	done := drain(b, &got)

	batch := rateFrames(p, a.BatchSize(), 1024)
	const maxFrames, maxTime = 1_000_000, 2 * time.Second
	start := time.Now()
	sent := 0
	for sent < maxFrames && time.Since(start) < maxTime {
		n, err := a.WriteBatch(batch)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	elapsed := time.Since(start)
	// Let the receiver catch up (bounded), then stop it.
	for last := uint64(0); ; {
		time.Sleep(50 * time.Millisecond)
		cur := got.Load()
		if cur == last || cur >= uint64(sent) {
			break
		}
		last = cur
	}
	b.Close()
	<-done
	recv := got.Load()
	sa, sb := a.Stats(), b.Stats()
	t.Logf("AF_XDP %s mode, 1024 B frames, %v: sent %d (%.3f Mpps, %.2f Gbit/s), received %d (%.3f Mpps); rx drops %d, tx ring full %d, kicks %d, kernel %+v",
		a.Mode(), elapsed.Round(time.Millisecond), sent, float64(sent)/elapsed.Seconds()/1e6,
		float64(sent)*1024*8/elapsed.Seconds()/1e9, recv, float64(recv)/elapsed.Seconds()/1e6,
		sb.RxDrops, sa.RingFull, sa.Wakeups, b.KernelStats())
	if recv == 0 {
		t.Errorf("nothing received")
	}
}

// BenchmarkWriteBatch sends 64-frame batches of 1 KiB frames a → b while a
// goroutine drains b; allocations of both sides are counted.
func BenchmarkWriteBatch(b *testing.B) {
	p := newVethPair(b, 1500)
	la := p.open(b, p.nsA, p.ifA, Options{})
	lb := p.open(b, p.nsB, p.ifB, Options{})
	var got atomic.Uint64
	done := drain(lb, &got)
	batch := rateFrames(p, la.BatchSize(), 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(batch) * 1024))
	start := time.Now()
	for b.Loop() {
		if _, err := la.WriteBatch(batch); err != nil && !errors.Is(err, nic.ErrClosed) {
			b.Fatal(err)
		}
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	time.Sleep(50 * time.Millisecond)
	lb.Close()
	<-done
	frames := float64(la.Stats().TxFrames)
	b.ReportMetric(frames/el, "txframes/s")
	b.ReportMetric(float64(got.Load())/el, "rxframes/s")
}

// TestRoundTrip measures request/response round trips over veth (a sends
// one 122-byte frame, b echoes it), sleeping in poll(2) and busy-polling.
// Bounded to 1000 round trips and 1 s per mode; prints, asserts nothing
// about time.
func TestRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("latency measurement skipped in -short mode")
	}
	for _, mode := range []struct {
		name string
		busy time.Duration
	}{{"poll", 0}, {"busy-poll", time.Second}} {
		t.Run(mode.name, func(t *testing.T) {
			p := newVethPair(t, 1500)
			a := p.open(t, p.nsA, p.ifA, Options{BusyPoll: mode.busy})
			b := p.open(t, p.nsB, p.ifB, Options{BusyPoll: mode.busy})
			echoDone := make(chan struct{})
			go func() {
				defer close(echoDone)
				bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
				out := [][]byte{nil}
				for {
					n, err := b.ReadBatch(bufs, sizes)
					if err != nil {
						return
					}
					if n == 1 {
						out[0] = bufs[0][:sizes[0]]
						copy(out[0][0:6], p.macA)
						copy(out[0][6:12], p.macB)
						b.WriteBatch(out)
					}
				}
			}()
			req := [][]byte{buildFrame(make([]byte, 122), 122, p.macB, p.macA, p.ipA, p.ipB, roceUDPPort, 0)}
			bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
			var rtts []time.Duration
			start := time.Now()
			for i := 0; i < 1000 && time.Since(start) < time.Second; i++ {
				t0 := time.Now()
				if _, err := a.WriteBatch(req); err != nil {
					t.Fatal(err)
				}
				if _, err := a.ReadBatch(bufs, sizes); err != nil {
					t.Fatal(err)
				}
				rtts = append(rtts, time.Since(t0))
			}
			b.Close()
			<-echoDone
			slices.Sort(rtts)
			t.Logf("%s: %d round trips, p50 %v, p99 %v, min %v", mode.name, len(rtts),
				rtts[len(rtts)/2], rtts[len(rtts)*99/100], rtts[0])
		})
	}
}
