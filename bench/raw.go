//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afxdp"
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
			l, info, err = qp.OpenInterfaceLink(ctx, pair.End(s).Ifname, rawLinkOptions(pair.End(s).Ifname, backend))
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
	r.ab = rawTemplate(r.infoA.MAC, r.infoA.IP, r.infoB.MAC, r.infoB.IP)
	r.ba = rawTemplate(r.infoB.MAC, r.infoB.IP, r.infoA.MAC, r.infoA.IP)
	if err := introduceUDP(r, backend); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// rawTemplate is an RDMA WRITE ONLY frame from (srcMAC, srcIP) to
// (dstMAC, dstIP), as buildFrames fills it in.
func rawTemplate(srcMAC net.HardwareAddr, srcIP netip.Addr, dstMAC net.HardwareAddr, dstIP netip.Addr) wire.Frame {
	f := wire.Frame{SrcIP: srcIP, DstIP: dstIP, HopLimit: 64, SrcPort: 0xC000,
		BTH:  wire.BTHFields{Opcode: wire.RCRDMAWriteOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x1234}}
	copy(f.SrcMAC[:], srcMAC)
	copy(f.DstMAC[:], dstMAC)
	return f
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

// cpuPerFrame is this process's CPU time (both ends) per frame received,
// in microseconds.
func (r rawRate) cpuPerFrame() float64 {
	if r.frames == 0 {
		return 0
	}
	return r.cpu.proc * 1e6 / float64(r.frames)
}
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
	sent, err := sendFor(r.a, batch, lim)
	if err != nil {
		r.b.Close()
		<-done
		return rawRate{}, err
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

// sendFor writes batch to l again and again, for lim, each time with new
// PSNs and ICRCs: what every RoCEv2 sender does per frame, as the
// reference sender does. It returns the frames WriteBatch took.
func sendFor(l nic.Link, batch [][]byte, lim limit) (int, error) {
	start := time.Now()
	sent := 0
	var psn uint32
	for sent < lim.n && time.Since(start) < lim.d {
		for _, f := range batch {
			psn++
			setPSNAndICRC(f, psn)
		}
		n, err := l.WriteBatch(batch)
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// setPSNAndICRC rewrites the PSN of the IPv4 RoCEv2 frame f (Ethernet
// header first, ICRC trailer last) and recomputes its ICRC.
func setPSNAndICRC(f []byte, psn uint32) {
	const bth = wire.EthernetLen + wire.IPv4Len + wire.UDPLen
	f[bth+9], f[bth+10], f[bth+11] = byte(psn>>16), byte(psn>>8), byte(psn)
	n := len(f) - wire.ICRCLen
	wire.PutICRC(f[n:], wire.ICRC(f[wire.EthernetLen:n]))
}

// rawBusyRTT measures single-frame round trips (8-byte payload RDMA WRITE
// ONLY frames) between the two links of r, both ends in this process
// (-lat-peer goroutine). Both busy-poll: see rawPingClient and rawEcho.
func rawBusyRTT(r *rawPair, lim limit) ([]time.Duration, error) {
	req, err := buildFrames(r.ab, 1, 8)
	if err != nil {
		return nil, err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rawEcho(r.b, 1, &stop)
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	return rawPingClient(r.a, req, lim)
}

// rawBusyRTTPeer is rawBusyRTT with B's end in a process of its own
// (bench -child peer-raw, or peer-raw2 for frames 2, in namespace B), as
// the lat cell's. Each way carries frames frames in one WriteBatch (one
// kick); the echo sends them back once it holds them all. With frames 2
// the ping-pong moves the frames of goroce's write_lat round trip with the
// owed ACK held until the next post: the ACK and the answering WRITE in one
// kick each way (two WRITE ONLY frames here, the second standing for the
// ACK).
func rawBusyRTTPeer(pair *netns.Pair, backend string, frames int, lim limit) ([]time.Duration, error) {
	child := "peer-raw"
	if frames == 2 {
		child = "peer-raw2"
	}
	e, err := openRawPeer(pair, backend, frames, 8, child)
	if err != nil {
		return nil, err
	}
	defer e.close()
	return rawPingClient(e.l, e.req, lim)
}

// rawPeerEnd is A's end of a raw ping-pong whose far end is a child
// process in namespace B: the link, the request frames, the child.
type rawPeerEnd struct {
	l    nic.Link
	req  [][]byte
	peer *peerProc
}

// openRawPeer opens A's link, builds frames WRITE ONLY frames to B with
// payload bytes each (frames 0: the link's BatchSize) and starts the child
// (bench -child child) on B's interface, returning once it is ready.
func openRawPeer(pair *netns.Pair, backend string, frames, payload int, child string) (*rawPeerEnd, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var l nic.Link
	var info *qp.InterfaceInfo
	if err := pair.Do(netns.A, func() error {
		var err error
		l, info, err = qp.OpenInterfaceLink(ctx, pair.A.Ifname, rawLinkOptions(pair.A.Ifname, backend))
		return err
	}); err != nil {
		return nil, err
	}
	t := rawTemplate(info.MAC, info.IP, pair.B.MAC, pair.B.Addr)
	if frames <= 0 {
		frames = l.BatchSize()
	}
	req, err := buildFrames(t, frames, payload)
	if err != nil {
		l.Close()
		return nil, err
	}
	peer, err := startPeer(pair, "-child", child, "-backends", backend, "-peer-ifname", pair.B.Ifname)
	if err != nil {
		l.Close()
		return nil, err
	}
	e := &rawPeerEnd{l: l, req: req, peer: peer}
	if line, ok := peer.lines.next(setupTimeout + 5*time.Second); !ok || line != "ready" {
		e.close()
		return nil, fmt.Errorf("peer: %s", strings.TrimPrefix(line, "error "))
	}
	return e, nil
}

func (e *rawPeerEnd) close() {
	e.peer.finish()
	e.l.Close()
}

// rawPingClient writes the frames of req in one batch and spins on
// TryReadBatch (yielding the processor between empty looks, as a busy-poll
// goroce device does) until as many are back; the round trip is from the
// write to the read of the last.
func rawPingClient(l nic.Link, req [][]byte, lim limit) ([]time.Duration, error) {
	pl, ok := poller(l)
	if !ok {
		return nil, errors.New("the backend link cannot be polled (no TryReadBatch)")
	}
	bufs, sizes := make([][]byte, len(req)), make([]int, len(req))
	for i := range bufs {
		bufs[i] = make([]byte, l.MTU()+64)
	}
	rtts := make([]time.Duration, 0, min(lim.n, 1<<20))
	start := time.Now()
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if _, err := l.WriteBatch(req); err != nil {
			return nil, err
		}
		for spins, got := 0, 0; ; spins++ {
			n, err := pl.TryReadBatch(bufs[got:], sizes[got:])
			if err != nil {
				return nil, err
			}
			if got += n; got == len(req) {
				break
			}
			// A frame lost in the veth backlog would spin forever: bound it.
			if spins%1024 == 1023 && time.Since(t0) > stallTime {
				return nil, fmt.Errorf("no response in %v", stallTime)
			}
			busyLook(spins + 1)
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// rawEcho spins on l's TryReadBatch (yielding between empty looks) and,
// each time it holds frames frames, sends them back in one batch with
// their Ethernet and IPv4 addresses swapped, until stop or the link fails.
func rawEcho(l nic.Link, frames int, stop *atomic.Bool) error {
	pl, ok := poller(l)
	if !ok {
		return errors.New("the backend link cannot be polled (no TryReadBatch)")
	}
	bufs, sizes, out := make([][]byte, frames), make([]int, frames), make([][]byte, frames)
	for i := range bufs {
		bufs[i] = make([]byte, l.MTU()+64)
	}
	got, idle := 0, 0
	for !stop.Load() {
		n, err := pl.TryReadBatch(bufs[got:], sizes[got:])
		if err != nil {
			return err
		}
		if n == 0 {
			idle++
			busyLook(idle)
			continue
		}
		idle = 0
		if got += n; got < frames {
			continue
		}
		if err := echoBack(l, bufs, sizes, out); err != nil {
			return err
		}
		got = 0
	}
	return nil
}

// busyLook is what the raw ping-pong's ends do after their spins-th empty
// look in a row, as a busy-poll goroce device does (qp/busypoll.go): yield
// the OS thread (sched_yield(2)) every 4th, so the spinning threads do not
// starve the kernel's softirq work that carries the frames, and let other
// goroutines run (runtime.Gosched) every 64th. With a Gosched at each look
// and no OS yields, in runs where other processes loaded the 2 vCPUs (load
// 9–12), the ping-pong's p50 was 4.3–5 µs in most runs and 0.15–10 ms in
// others, p99 up to 145 ms, while goroce's busy-poll round trip, which
// yields, stayed at 10–30 µs; with the yields p50 7.6–9 µs and p99 54–89 µs
// in the same conditions.
func busyLook(spins int) {
	if spins%4 == 0 {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
	if spins%64 == 0 {
		runtime.Gosched()
	}
}

// swapAddrs turns an Ethernet/IPv4 frame around: destination and source
// MAC, and destination and source IPv4 address, trade places (the IPv4
// header checksum does not change; the ICRC no longer matches, which no
// raw receiver checks).
func swapAddrs(f []byte) {
	if len(f) < 34 {
		return
	}
	for i := range 6 {
		f[i], f[6+i] = f[6+i], f[i]
	}
	if f[12] != 0x08 || f[13] != 0x00 {
		return
	}
	for i := range 4 {
		f[26+i], f[30+i] = f[30+i], f[26+i]
	}
}

// echoBack sends the frames in bufs (their sizes) back to where they came
// from in one WriteBatch, through out (as many as bufs).
func echoBack(l nic.Link, bufs [][]byte, sizes []int, out [][]byte) error {
	for i := range out {
		out[i] = bufs[i][:sizes[i]]
		swapAddrs(out[i])
	}
	_, err := l.WriteBatch(out)
	return err
}

// rawPeer is the raw ping-pong's far end (peer-raw, peer-raw2): it echoes
// batches of frames frames on ifname until stdin ends.
func rawPeer(ifname, backend string, frames int, sleep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	l, _, err := qp.OpenInterfaceLink(ctx, ifname, rawLinkOptions(ifname, backend))
	cancel()
	if err != nil {
		return err
	}
	defer l.Close()
	var w nic.Waiter
	if sleep {
		var ok bool
		if w, ok = waiter(l); !ok {
			return errors.New("the backend link cannot wait in the netpoller (no nic.Waiter)")
		}
	}
	var stop atomic.Bool
	in := newLineReader(os.Stdin)
	go func() {
		for range in.ch {
		}
		stop.Store(true)
		if w != nil {
			w.SetWaitDeadline(time.Unix(1, 0)) // wake rawSleepEcho's wait
		}
	}()
	fmt.Println("ready")
	if sleep {
		return rawSleepEcho(l, w, frames, &stop)
	}
	return rawEcho(l, frames, &stop)
}

// poller finds the non-blocking read of l, under OpenInterfaceLink's
// ownership wrapper (Unwrap).
func poller(l nic.Link) (nic.Poller, bool) {
	return unwrapTo[nic.Poller](l, nil)
}

// waiter finds the netpoller wait of l (one that works in the link's
// configuration), under OpenInterfaceLink's ownership wrapper.
func waiter(l nic.Link) (nic.Waiter, bool) {
	return unwrapTo(l, func(w nic.Waiter) bool { return w.SetWaitDeadline(time.Time{}) == nil })
}

// unwrapTo finds the first of l and the links it wraps (Unwrap) that is a
// T, and that usable accepts when it is given.
func unwrapTo[T any](l nic.Link, usable func(T) bool) (T, bool) {
	for {
		if t, ok := l.(T); ok && (usable == nil || usable(t)) {
			return t, true
		}
		u, ok := l.(interface{ Unwrap() nic.Link })
		if !ok {
			var zero T
			return zero, false
		}
		l = u.Unwrap()
	}
}

// afxdpOpts tunes every AF_XDP link bench opens (-afxdp-batch,
// -afxdp-chunk, -afxdp-frames, -afxdp-one-socket; zero fields keep the backend's defaults),
// in this process and, through afxdpFlags, in its children.
var afxdpOpts afxdp.Options

// linkOptions are the options bench opens backend's links and devices
// with.
func linkOptions(backend string) qp.InterfaceOptions {
	return qp.InterfaceOptions{Backend: backend, Logger: logger, AFXDP: afxdpOpts}
}

// rawLinkOptions are the options of the raw cells' links on ifname (in the
// caller's namespace): the raw reference sender's batch and ring sizes
// (afxdp.RawrefOptions) unless -afxdp-batch, -afxdp-chunk or -afxdp-frames
// set them.
func rawLinkOptions(ifname, backend string) qp.InterfaceOptions {
	o := linkOptions(backend)
	mtu := 1500
	if ifi, err := net.InterfaceByName(ifname); err == nil {
		mtu = ifi.MTU
	}
	ref := afxdp.RawrefOptions(mtu)
	if o.AFXDP.BatchSize == 0 {
		o.AFXDP.BatchSize = ref.BatchSize
	}
	if o.AFXDP.FrameSize == 0 && o.AFXDP.NumFrames == 0 {
		o.AFXDP.FrameSize, o.AFXDP.NumFrames = ref.FrameSize, ref.NumFrames
	}
	return o
}

// afxdpFlags passes afxdpOpts on to a child process.
func afxdpFlags() []string {
	var f []string
	for _, o := range []struct {
		name string
		v    int
	}{{"-afxdp-batch", afxdpOpts.BatchSize}, {"-afxdp-chunk", afxdpOpts.FrameSize}, {"-afxdp-frames", afxdpOpts.NumFrames}} {
		if o.v != 0 {
			f = append(f, o.name, strconv.Itoa(o.v))
		}
	}
	if afxdpOpts.OneSocket {
		f = append(f, "-afxdp-one-socket")
	}
	return f
}
