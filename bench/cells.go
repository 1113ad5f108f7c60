//go:build linux

package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// measureRep runs one repetition of every selected cell at one MTU.
func measureRep(pair *netns.Pair, mtu, rep int, c *config, res *results) {
	lat := mtu == c.latMTU()
	lim := func(n int) limit { return limit{c.cell, n} }
	tag := fmt.Sprintf("MTU %d rep %d", mtu, rep+1)
	if c.cells["tcp"] && !c.rttOnly {
		t, err := tcpStream(pair, lim(maxStreamN))
		recordRate(res, key{"tcp", mtu, ""}, "tcp.stream", t.bytes, t.elapsed, t.cpu, firstErr(err, t.cpuErr), err)
		progress("%s: TCP stream %s (%v)", tag, fmtGbit(t.bitsPerSec()/1e9), err)
		if c.iperf3 != "" {
			bps, err := iperf3Stream(pair, c.iperf3, c.cell)
			record(res, key{"tcp", mtu, mIperfGbps}, bps/1e9, err)
			progress("%s: iperf3 %s (%v)", tag, fmtGbit(bps/1e9), err)
		}
	}
	if c.cells["tcp"] {
		if lat {
			ping := tcpPingPongPeer
			if c.latPeer == "goroutine" {
				ping = tcpPingPong
			}
			for _, pl := range c.placements {
				rtts, err := placedRTTs(pl, func() ([]time.Duration, error) { return ping(pair, lim(maxRTTs), nil) })
				recordLat(res, key{"tcp", mtu, latTCP + pl.suffix()}, rtts, err)
				progress("%s: TCP ping-pong (%s) %s (%v)", tag, pl.name, latLine(rtts), err)
			}
		}
	}
	for _, b := range c.backends {
		measureBackend(pair, mtu, rep, b, lat, c, res)
	}
}

func measureBackend(pair *netns.Pair, mtu, rep int, b string, lat bool, c *config, res *results) {
	tag := fmt.Sprintf("%s MTU %d rep %d", b, mtu, rep+1)
	lim := func(n int) limit { return limit{c.cell, n} }
	if c.cells["raw"] {
		measureRaw(pair, mtu, b, lat, c, tag, lim, res)
	} else if c.cells["rawrate"] {
		measureRawRates(pair, mtu, b, tag, lim, c, res)
	}
	if c.cells["bw"] && c.bwPeer == "process" {
		measureBWPeer(pair, mtu, b, tag, c, res)
	}
	if (c.cells["bw"] && c.bwPeer == "goroutine") || (lat && c.cells["idle"]) {
		p, err := openRDMA(pair, b, false)
		if err != nil {
			progress("%s: goroce devices: %v", tag, err)
			for _, m := range []string{bwKey(b, mtu, "WRITE", sizeSmall, "mps").metric, mIdleProc} {
				res.fail(key{b, mtu, m}, err)
			}
		} else {
			res.addSection(section{backend: b, mtu: mtu, mode: p.a.info.Mode, pmtu: p.pmtu})
			measureGoroce(p, mtu, b, lat, tag, c, res)
			p.Close()
		}
	}
	if lat && c.cells["qps"] {
		measureQPs(pair, mtu, b, tag, c, res)
	}
	if c.cells["rsock"] {
		measureRsock(pair, mtu, b, tag, c, res)
	}
	if lat && c.cells["heldack"] {
		measureHeldAck(pair, mtu, b, tag, rep, c, res)
	}
	if c.cells["nvmeof"] {
		measureNVMe(pair, mtu, b, tag, c, res)
	}
	if lat && c.cells["lat"] {
		for i, pl := range c.placements {
			var info section
			rtts, err := placedRTTs(pl, func() ([]time.Duration, error) {
				return roundTrips(pair, b, false, lim(maxRTTs), c.latPeer, &info)
			})
			if err == nil && i == 0 {
				info.backend, info.mtu = b, mtu
				res.addSection(info)
			}
			recordLat(res, key{b, mtu, latSleep + pl.suffix()}, rtts, err)
			progress("%s: goroce sleeping 8 B WRITE RTT (%s) %s (%v)", tag, pl.name, latLine(rtts), err)
		}
		rtts, err := roundTrips(pair, b, true, lim(maxRTTs), c.latPeer, nil)
		recordLat(res, key{b, mtu, latBusy}, rtts, err)
		progress("%s: goroce busy-poll 8 B WRITE RTT %s (%v)", tag, latLine(rtts), err)
	}
}

// roundTrips is the lat cell: write_lat's loop on devices of their own,
// the far end in a process of its own or (goroutine) in this one.
// info, when set, learns the backend's mode and the path MTU.
func roundTrips(pair *netns.Pair, b string, busy bool, lim limit, where string, info *section) ([]time.Duration, error) {
	runtime.GC()
	if where == "process" {
		return writeLatPeer(pair, b, busy, lim, nil, info)
	}
	p, err := openRDMA(pair, b, busy)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if info != nil {
		info.mode, info.pmtu = p.a.info.Mode, p.pmtu
	}
	return writeLat(p, lim, nil)
}

func measureRaw(pair *netns.Pair, mtu int, b string, lat bool, c *config, tag string, lim func(int) limit, res *results) {
	if !c.rttOnly {
		measureRawRates(pair, mtu, b, tag, lim, c, res)
	}
	if !lat {
		return
	}
	runtime.GC()
	var rtts []time.Duration
	var err error
	if c.latPeer == "process" {
		rtts, err = rawBusyRTTPeer(pair, b, 1, lim(maxRTTs))
	} else {
		var r *rawPair
		if r, err = openRaw(pair, b); err == nil {
			rtts, err = rawBusyRTT(r, lim(maxRTTs))
			r.Close()
		}
	}
	recordLat(res, key{b, mtu, latRaw}, rtts, err)
	progress("%s: raw busy ping-pong %s (%v)", tag, latLine(rtts), err)
	if c.latPeer == "process" {
		runtime.GC()
		rtts, err = rawBusyRTTPeer(pair, b, 2, lim(maxRTTs))
		recordLat(res, key{b, mtu, latRaw2}, rtts, err)
		progress("%s: raw busy 2-frame ping-pong %s (%v)", tag, latLine(rtts), err)
	}
	if c.latPeer == "process" {
		for _, pl := range c.placements {
			for _, frames := range []int{1, 2} {
				runtime.GC()
				rtts, err := placedRTTs(pl, func() ([]time.Duration, error) { return rawSleepRTTPeer(pair, b, frames, lim(maxRTTs)) })
				metric, what := latRawSleep, "raw sleeping ping-pong"
				if frames == 2 {
					metric, what = latRawSleep2, "raw sleeping 2-frame ping-pong"
				}
				recordLat(res, key{b, mtu, metric + pl.suffix()}, rtts, err)
				progress("%s: %s (%s) %s (%v)", tag, what, pl.name, latLine(rtts), err)
			}
		}
	}
}

// measureRawRates is the raw cell's one-way rates.
// With -rawref, each rate is followed by the reference sender's at the
// same frame length (rawref.go).
func measureRawRates(pair *netns.Pair, mtu int, b string, tag string, lim func(int) limit, c *config, res *results) {
	r, err := openRaw(pair, b)
	if err != nil {
		progress("%s: raw links: %v", tag, err)
		res.fail(key{b, mtu, mRawSmallFPS}, err)
		res.fail(key{b, mtu, mRawFullGbps}, err)
		return
	}
	pmtu := min(r.infoA.PathMTU, r.infoB.PathMTU)
	res.addSection(section{backend: b, mtu: mtu, pmtu: pmtu})
	// oneRate measures one frame size: on AF_XDP with -raw-sink process
	// (the default) B's end is a process of its own (rawsink.go), else a
	// goroutine of this one on a pair of links opened afresh.
	oneRate := func(payload int) (rawRate, error) {
		if b == qp.BackendAFXDP && c.rawSink == "process" {
			return rateSink(pair, b, payload, lim(maxFrames))
		}
		r, err := openRaw(pair, b)
		if err != nil {
			return rawRate{}, err
		}
		defer r.Close()
		return rate(r, payload, lim(maxFrames)) // closes B's link
	}
	r.Close()
	small, err := oneRate(sizeSmall)
	record(res, key{b, mtu, mRawSmallFPS}, small.framesPerSec(), err)
	if err == nil {
		res.add(key{b, mtu, mRawSmallLen}, float64(small.frameLen))
	}
	progress("%s: raw %d B frames %s/s, %.2f µs CPU per frame (both ends), %d of %d sent received (%v)", tag, small.frameLen, fmtRate(small.framesPerSec()), small.cpuPerFrame(), small.frames, small.sent, err)
	if err == nil && small.cpuErr == nil {
		res.add(key{b, mtu, mRawSmallFPS + ".cpu"}, small.cpuPerFrame())
	}
	if err == nil {
		measureRawref(pair, mtu, b, tag, small.frameLen, mRawRefSmallFPS, lim, c, res)
	}
	full, err := oneRate(pmtu)
	recordRate(res, key{b, mtu, ""}, "raw.full", int64(full.frames)*int64(full.payload), full.elapsed, full.cpu, firstErr(err, full.cpuErr), err)
	if err == nil {
		res.add(key{b, mtu, mRawFullLen}, float64(full.frameLen))
	}
	progress("%s: raw %d B frames %s payload, %s frames/s, %.2f µs CPU per frame (both ends), %d of %d sent received (%v)", tag, full.frameLen, fmtGbit(full.payloadBitsPerSec()/1e9), fmtRate(full.framesPerSec()), full.cpuPerFrame(), full.frames, full.sent, err)
	if err == nil && full.cpuErr == nil {
		res.add(key{b, mtu, mRawFullFPS + ".cpu"}, full.cpuPerFrame())
	}
	if err == nil {
		res.add(key{b, mtu, mRawFullFPS}, full.framesPerSec())
		measureRawref(pair, mtu, b, tag, full.frameLen, mRawRefFullFPS, lim, c, res)
	}
}

func measureGoroce(p *rdmaPair, mtu int, b string, lat bool, tag string, c *config, res *results) {
	lim := func(n int) limit { return limit{c.cell, n} }
	if c.cells["bw"] && c.bwPeer == "goroutine" {
		forBW(c, func(name string, op qp.WROpcode, size int) {
			runtime.GC()
			var t throughput
			var err error
			w0 := snapWire(p)
			// The application's goroutine (posts, polls, and the
			// device A work its CQ.Wait drives) is end=app in a
			// -cpuprofile.
			pprof.Do(context.Background(), pprof.Labels("end", "app"), func(context.Context) {
				t, err = bw(p, op, size, lim(maxMsgs))
			})
			recordBW(res, b, mtu, tag, name, size, t, err, snapWire(p).kicks(w0))
		})
	}
	if !lat {
		return
	}
	if c.cells["idle"] {
		u, err := idleCPU(p, c.idle)
		record(res, key{b, mtu, mIdleProc}, u.proc/u.wall, err)
		record(res, key{b, mtu, mIdleMachine}, u.machine/u.wall, err)
		progress("%s: idle devices %.4f CPU-s/s (%v)", tag, u.proc/u.wall, err)
	}
}

// forBW calls run for each of the bw cell's streams that -bw selects.
func forBW(c *config, run func(name string, op qp.WROpcode, size int)) {
	for _, op := range []struct {
		name string
		op   qp.WROpcode
	}{{"WRITE", qp.WRRDMAWrite}, {"READ", qp.WRRDMARead}} {
		for _, size := range []int{sizeSmall, sizeMid, sizeLarge} {
			if c.bwOnly != nil && !c.bwOnly[fmt.Sprintf("%s.%d", op.name, size)] {
				continue
			}
			run(op.name, op.op, size)
		}
	}
}

// recordBW records and prints one bw stream; kicks is its wireSnap.kicks
// line.
func recordBW(res *results, b string, mtu int, tag, name string, size int, t throughput, err error, kicks string) {
	record(res, bwKey(b, mtu, name, size, "mps"), t.msgsPerSec(), err)
	recordRate(res, key{b, mtu, ""}, fmt.Sprintf("%s%s.%d", bwPrefix, name, size), t.bytes, t.elapsed, t.cpu, firstErr(err, t.cpuErr), err)
	if err == nil {
		res.add(bwKey(b, mtu, name, size, "allocs"), t.allocsPer)
	}
	progress("%s: goroce %s %s: %s msg/s, %s, %.2f allocs/msg, %d msgs, %.2f µs process CPU and %.3f context switches per msg (%v)", tag, name, sizeName(size),
		fmtRate(t.msgsPerSec()), fmtGbit(t.bitsPerSec()/1e9), t.allocsPer, t.msgs, t.cpu.proc*1e6/float64(max(t.msgs, 1)), float64(t.cpu.csw)/float64(max(t.msgs, 1)), err)
	if t.peerCPU > 0 {
		m := float64(max(t.msgs, 1))
		progress("%s: goroce %s %s: per msg, requester process %.2f µs CPU, responder process %.2f µs", tag, name, sizeName(size),
			(t.cpu.proc-t.peerCPU)*1e6/m, t.peerCPU*1e6/m)
	}
	progress("%s: goroce %s %s: %s", tag, name, sizeName(size), kicks)
	progress("%s: goroce %s %s: %s", tag, name, sizeName(size), t.app.String(t.elapsed, t.msgs))
}

// measureBWPeer is the bw cell with B's end in a process of its own
// (-bw-peer process; bwpeer.go).
func measureBWPeer(pair *netns.Pair, mtu int, b, tag string, c *config, res *results) {
	r, err := openBWPeer(pair, b)
	if err != nil {
		progress("%s: goroce devices (bw, peer process): %v", tag, err)
		res.fail(bwKey(b, mtu, "WRITE", sizeSmall, "mps"), err)
		return
	}
	defer r.Close()
	res.addSection(section{backend: b, mtu: mtu, mode: r.a.info.Mode, pmtu: r.mtu.Bytes()})
	forBW(c, func(name string, op qp.WROpcode, size int) {
		runtime.GC()
		var t throughput
		var w0, w1 wireSnap
		var err error
		pprof.Do(context.Background(), pprof.Labels("end", "app"), func(context.Context) {
			t, w0, w1, err = r.stream(op, size, limit{c.cell, maxMsgs})
		})
		recordBW(res, b, mtu, tag, name, size, t, err, w1.kicks(w0))
	})
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// measureQPs is the qps cell, on a device pair of its own whose receive
// rings hold the cell's window (qpsRings).
func measureQPs(pair *netns.Pair, mtu int, b, tag string, c *config, res *results) {
	ring := qpsRings(c.qpsN * c.qpsDepth)
	p, err := openRDMAWith(pair, b, false, ring.tune)
	if err != nil {
		progress("%s: goroce devices for the qps cell: %v", tag, err)
		res.fail(key{b, mtu, mQPsAgg}, err)
		return
	}
	defer p.Close()
	res.addSection(section{backend: b, mtu: mtu, mode: p.a.info.Mode, pmtu: p.pmtu})
	q, err := manyQPs(p, c.qpsN, c.qpsDepth, c.qpsCQMod, limit{c.cell, maxMsgs})
	record(res, key{b, mtu, mQPsAgg}, q.agg.msgsPerSec(), err)
	if q.one.msgs > 0 {
		res.add(key{b, mtu, mQPsOne}, q.one.msgsPerSec())
	} else {
		res.fail(key{b, mtu, mQPsOne}, err)
	}
	if q.heapPerQP != 0 {
		res.add(key{b, mtu, mQPsHeap}, q.heapPerQP)
	} else {
		res.fail(key{b, mtu, mQPsHeap}, err)
	}
	if lb := ring.linkBytes(b); lb > 0 {
		res.add(key{b, mtu, mQPsLink}, float64(lb)/float64(c.qpsN)) // one link per device, n QPs per device
	}
	progress("%s: %d QPs %s msg/s, one QP %s msg/s, %s heap and %s link memory per QP (%v)", tag, c.qpsN,
		fmtRate(q.agg.msgsPerSec()), fmtRate(q.one.msgsPerSec()), fmtBytes(q.heapPerQP),
		fmtBytes(float64(ring.linkBytes(b))/float64(c.qpsN)), err)
	progress("%s: one QP %s", tag, q.oneWire)
	progress("%s: %d QPs %s", tag, c.qpsN, q.aggWire)
}

// measureRawref runs the reference sender (-rawref) at frameLen on the
// AF_XDP backend's pair, with the load average beside it.
func measureRawref(pair *netns.Pair, mtu int, b, tag string, frameLen int, metric string, lim func(int) limit, c *config, res *results) {
	if c.rawref == "" || b != qp.BackendAFXDP {
		return
	}
	fps, cpu, err := rawrefRate(pair, c.rawref, frameLen, lim(maxFrames))
	record(res, key{b, mtu, metric}, fps, err)
	record(res, key{b, mtu, metric + ".cpu"}, cpu.Seconds()*1e6, err)
	progress("%s: rawref %d B frames %s/s, %.2f µs CPU per frame, sender and receiver (load %s) (%v)", tag, frameLen, fmtRate(fps), cpu.Seconds()*1e6, loadavg(), err)
}
