package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

type rawPair struct {
	a, b         nic.Link
	infoA, infoB *qp.InterfaceInfo
	ab, ba       wire.Frame // RDMA WRITE ONLY templates, A→B and B→A
}

func (r *rawPair) Close() {
	r.a.Close()
	r.b.Close()
}

// openRaw opens the backend links qp.OpenInterface would use on both ends, without
// devices, for frame-level measurements on the same veth.
func openRaw(pair *netns.Pair, backend string) (*rawPair, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	r := &rawPair{}
	open := func(s netns.Side) (nic.Link, *qp.InterfaceInfo, error) {
		var l nic.Link
		var info *qp.InterfaceInfo
		err := pair.Do(s, func() error {
			var err error
			l, info, err = qp.OpenInterfaceLink(ctx, pair.End(s).Ifname, qp.InterfaceOptions{Backend: backend, Logger: logger})
			return err
		})
		return l, info, err
	}
	var err error
	if r.a, r.infoA, err = open(netns.A); err != nil {
		return nil, err
	}
	if r.b, r.infoB, err = open(netns.B); err != nil {
		r.a.Close()
		return nil, err
	}
	tmpl := func(src, dst *qp.InterfaceInfo) wire.Frame {
		f := wire.Frame{SrcIP: src.IP, DstIP: dst.IP, HopLimit: 64, SrcPort: 0xC000,
			BTH:  wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true},
			RETH: wire.RETHFields{VA: 0x1000, RKey: 0x1234}}
		copy(f.SrcMAC[:], src.MAC)
		copy(f.DstMAC[:], dst.MAC)
		return f
	}
	r.ab, r.ba = tmpl(r.infoA, r.infoB), tmpl(r.infoB, r.infoA)
	return r, nil
}

func buildFrames(t wire.Frame, n, payload int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		t.BTH.PSN = wire.PSN(i)
		t.RETH.DMALen = uint32(payload)
		buf := make([]byte, t.Len(payload))
		k, err := wire.Build(buf, &t, payload)
		if err != nil {
			return nil, err
		}
		out[i] = buf[:k]
	}
	return out, nil
}

type rawRate struct {
	frames   uint64 // received
	sent     int
	frameLen int
	payload  int
	elapsed  time.Duration
	cpu      cpuUse
	cpuErr   error
}

func (r rawRate) framesPerSec() float64 { return float64(r.frames) / r.elapsed.Seconds() }
func (r rawRate) payloadBitsPerSec() float64 {
	return float64(r.frames) * float64(r.payload) * 8 / r.elapsed.Seconds()
}

// rate sends batches of RDMA WRITE ONLY frames with payload bytes from A
// to B as fast as WriteBatch takes them, for lim, and counts what B
// receives; the rate is B's count over the time to B's last frame. The
// CPU use covers the sending and the receiving, up to the receiver's stop.
func rate(r *rawPair, payload int, lim limit) (rawRate, error) {
	batch, err := buildFrames(r.ab, r.a.BatchSize(), payload)
	if err != nil {
		return rawRate{}, err
	}
	var got atomic.Uint64
	var last atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, r.b.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, r.b.MTU()+64)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := r.b.ReadBatch(bufs, sizes)
			if n > 0 {
				got.Add(uint64(n))
				last.Store(time.Now().UnixNano())
			}
			if err != nil {
				return
			}
		}
	}()
	c0 := markCPU()
	start := time.Now()
	sent := 0
	for sent < lim.n && time.Since(start) < lim.d {
		n, err := r.a.WriteBatch(batch)
		if err != nil {
			r.b.Close()
			<-done
			return rawRate{}, err
		}
		sent += n
	}
	// Let the receiver catch up (bounded), then stop it.
	for prev, t0 := uint64(0), time.Now(); time.Since(t0) < time.Second; {
		time.Sleep(20 * time.Millisecond)
		cur := got.Load()
		if cur == prev || cur >= uint64(sent) {
			break
		}
		prev = cur
	}
	r.b.Close()
	<-done
	cpu, cpuErr := markCPU().since(c0)
	if got.Load() == 0 {
		return rawRate{}, errors.New("nothing received")
	}
	return rawRate{frames: got.Load(), sent: sent, frameLen: len(batch[0]), payload: payload,
		elapsed: time.Unix(0, last.Load()).Sub(start), cpu: cpu, cpuErr: cpuErr}, nil
}

// rawBusyRTT measures single-frame round trips (8-byte payload RDMA WRITE
// ONLY frames) between the two links with both ends busy-polling: each
// end's goroutine spins on TryReadBatch, yielding the processor between
// empty looks as a busy-poll goroce device does.
func rawBusyRTT(r *rawPair, lim limit) ([]time.Duration, error) {
	pa, okA := poller(r.a)
	pb, okB := poller(r.b)
	if !okA || !okB {
		return nil, errors.New("the backend link cannot be polled (no TryReadBatch)")
	}
	req, err := buildFrames(r.ab, 1, 8)
	if err != nil {
		return nil, err
	}
	resp, err := buildFrames(r.ba, 1, 8)
	if err != nil {
		return nil, err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bufs, sizes := [][]byte{make([]byte, r.b.MTU()+64)}, []int{0}
		for !stop.Load() {
			n, err := pb.TryReadBatch(bufs, sizes)
			if err != nil {
				return
			}
			if n == 0 {
				runtime.Gosched()
				continue
			}
			r.b.WriteBatch(resp)
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	bufs, sizes := [][]byte{make([]byte, r.a.MTU()+64)}, []int{0}
	rtts := make([]time.Duration, 0, min(lim.n, 1<<20))
	start := time.Now()
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if _, err := r.a.WriteBatch(req); err != nil {
			return nil, err
		}
		for spins := 0; ; spins++ {
			n, err := pa.TryReadBatch(bufs, sizes)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				break
			}
			// A frame lost in the veth backlog would spin forever: bound it.
			if spins%1024 == 1023 && time.Since(t0) > stallTime {
				return nil, fmt.Errorf("no response in %v", stallTime)
			}
			runtime.Gosched()
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// poller finds the non-blocking read of l, under OpenInterfaceLink's
// ownership wrapper (Unwrap).
func poller(l nic.Link) (nic.Poller, bool) {
	for {
		if p, ok := l.(nic.Poller); ok {
			return p, true
		}
		u, ok := l.(interface{ Unwrap() nic.Link })
		if !ok {
			return nil, false
		}
		l = u.Unwrap()
	}
}
