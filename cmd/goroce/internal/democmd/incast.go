package democmd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// The incast demo (--incast N): N senders write 64 KiB RDMA WRITEs without
// pause to one receiver through one switch (sim.Fabric, nic.Switch); the
// receiver's switch port is the bottleneck. Everything runs on the
// simulation's fake clock, in one goroutine. docs/congestion.md explains
// the model and the choices below, and shows the output.

// The switch: 10 Gb/s ports with 1 µs cables, a 2 MiB egress buffer per
// port, RED ECN marking from 20 KB to 100 KB of backlog (Pmax 50 %), link
// MTU 1500 (path MTU 1024).
const (
	incastLineRate = 10_000_000_000
	incastDelay    = time.Microsecond
	incastBuffer   = 2 << 20
	incastKmin     = 20_000
	incastKmax     = 100_000
	incastPmax     = 0.5
	incastMTU      = 1500

	incastMsg      = 64 << 10
	incastSlots    = 16 // 64 KiB slots per flow, on both sides
	incastInFlight = 12 // WRITEs outstanding per flow: more than the 129-PSN window holds
	// incastTick is how often the driver reaps completions and posts more.
	incastTick = 20 * time.Microsecond
	// incastTag is the spacing of the per-message tags in the source data.
	incastTag = 256

	// incastDuration is the default simulated time of --incast.
	incastDuration = 40 * time.Millisecond
)

// incastParams are the demo's DCQCN parameters: NVIDIA's defaults with the
// α timer of the DCQCN paper (K = 55 µs, g = 1/256) instead of the
// firmware's 1 µs and 1019/1024. With 16 flows at 10 Gb/s a flow sees a
// CNP in few 1 µs periods, α decays in about 200 µs, and the first rate
// increase (fast recovery to half the line rate, 300 µs after the cuts)
// finds α small: the queue then overshoots to most of the buffer
// (docs/congestion.md has both runs).
func incastParams() qp.CCParams {
	p := qp.DefaultCCParams()
	p.RPDCETCPRTT = 55 * time.Microsecond
	p.RPDCETCPG = 1020
	return p
}

type incastConfig struct {
	flows    int
	cc       bool
	params   *qp.CCParams // nil: incastParams
	seed     int64
	duration time.Duration
	// start and stop are each flow's start and end times (missing or 0:
	// the start of the run, the end of the run).
	start, stop []time.Duration
	// window is the width of the goodput timeline's intervals (0: none).
	window time.Duration
	// corrupt, when set, may change the received bytes of message m of
	// flow f before they are checked (tests of the check).
	corrupt func(f int, m uint64, dst []byte)
}

type incastFlow struct {
	ip       string     // the sender's address
	end      *sim.QPEnd // the sender's QP
	dst      *sim.QPEnd // the receiver's QP
	posted   uint64     // messages posted
	done     uint64     // messages completed and checked
	bytes    uint64     // bytes completed and correct within the run
	bad      int        // messages that failed or whose bytes were wrong
	timeline []uint64   // bytes completed per window
	cnps     uint64     // CNPs the sender's QP handled
	rate     int64      // its DCQCN rate at the end
	retrans  uint64     // packets it sent again
}

type incastResult struct {
	cfg      incastConfig
	flows    []*incastFlow
	util     float64 // bytes on the bottleneck cable (every frame) over its capacity
	goodput  float64 // bytes written and checked over the bottleneck's capacity
	jain     float64 // Jain's index of the flows' goodputs
	p50, p99 int     // the bottleneck queue's backlog, bytes
	queueMax int
	drops    uint64 // tail drops at the bottleneck
	marked   uint64 // frames marked CE there
	cnps     uint64 // CNPs the receiver sent
	retrans  uint64
	bad      int
}

// pattern tags the source of message m of flow f: every incastTag bytes
// hold (f, m, offset), so a byte of another message, another flow or
// another place in the message cannot pass the check.
func pattern(b []byte, f int, m uint64) {
	for off := 0; off+8 <= len(b); off += incastTag {
		binary.LittleEndian.PutUint64(b[off:], uint64(f)<<56|m<<24|uint64(off))
	}
}

func runIncast(cfg incastConfig) (*incastResult, error) {
	var cc *qp.CCParams
	if cfg.cc {
		p := incastParams()
		if cfg.params != nil {
			p = *cfg.params
		}
		cc = &p
	}
	fab, err := sim.NewFabric(sim.FabricConfig{Hosts: cfg.flows + 1, Seed: cfg.seed, MTU: incastMTU, LineRate: incastLineRate,
		Delay: incastDelay, Buffer: incastBuffer, ECN: sim.RED{Kmin: incastKmin, Kmax: incastKmax, Pmax: incastPmax}, CC: cc})
	if err != nil {
		return nil, err
	}
	defer fab.Close()
	recv := fab.Hosts[0]
	var flows []*incastFlow
	opt := sim.QPOptions{BufSize: incastSlots * incastMsg, CQSize: 64, SharedCQ: true,
		Caps: qp.Caps{MaxSendWR: incastInFlight, MaxRecvWR: 1}, Connect: qp.ConnectOptions{Timeout: 10, RetryCnt: 7}}
	for i := 1; i <= cfg.flows; i++ {
		a, b, err := sim.ConnectQPs(context.Background(), fab.Hosts[i].Dev, recv.Dev, opt, opt)
		if err != nil {
			return nil, fmt.Errorf("flow %d: %w", i, err)
		}
		// Static content between the tags, different per flow.
		for j := range a.Buf {
			a.Buf[j] = byte(j*7 + i*13)
		}
		flows = append(flows, &incastFlow{ip: fab.Hosts[i].IP.String(), end: a, dst: b})
	}
	at := func(ts []time.Duration, i int, def time.Duration) time.Duration {
		if i < len(ts) && ts[i] != 0 {
			return ts[i]
		}
		return def
	}
	clock := fab.Clock()
	post := func(i int, f *incastFlow) error {
		m := f.posted
		slot := int(m % incastSlots)
		pattern(f.end.Buf[slot*incastMsg:(slot+1)*incastMsg], i, m)
		err := f.end.QP.PostSend(&qp.SendWR{WRID: m, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL:        []qp.SGE{f.end.SGE(slot*incastMsg, incastMsg)},
			RemoteAddr: f.dst.MR.IOVA() + uint64(slot*incastMsg), RKey: f.dst.MR.RKey()})
		if err == nil {
			f.posted++
		}
		return err
	}
	var wcs [16]qp.WC
	// reap checks the completed WRITEs: slot m%incastSlots of the receiver
	// must hold exactly what the sender's slot holds, and message m+16,
	// which reuses the slot, is posted only after this check.
	reap := func(i int, f *incastFlow, inRun bool) {
		for {
			n, err := f.end.SendCQ.Poll(wcs[:])
			if err != nil || n == 0 {
				return
			}
			for _, wc := range wcs[:n] {
				slot := int(wc.WRID % incastSlots)
				dst := f.dst.Buf[slot*incastMsg : (slot+1)*incastMsg]
				if cfg.corrupt != nil {
					cfg.corrupt(i, wc.WRID, dst)
				}
				ok := wc.Status == qp.WCSuccess && wc.WRID == f.done && bytes.Equal(dst, f.end.Buf[slot*incastMsg:(slot+1)*incastMsg])
				if !ok {
					f.bad++
				}
				f.done++
				if inRun && ok {
					f.bytes += incastMsg
					if cfg.window > 0 {
						w := int(clock.Elapsed() / cfg.window)
						for len(f.timeline) <= w {
							f.timeline = append(f.timeline, 0)
						}
						f.timeline[w] += incastMsg
					}
				}
			}
		}
	}
	for clock.Elapsed() < cfg.duration {
		now := clock.Elapsed()
		for i, f := range flows {
			reap(i, f, true)
			if now < at(cfg.start, i, 0) || now >= at(cfg.stop, i, cfg.duration) {
				continue
			}
			for f.posted-f.done < incastInFlight {
				if err := post(i, f); err != nil {
					return nil, fmt.Errorf("flow %d: post: %w", i+1, err)
				}
			}
		}
		if err := fab.RunFor(min(incastTick, cfg.duration-now)); err != nil {
			return nil, err
		}
	}
	for i, f := range flows {
		reap(i, f, true)
	}
	st := fab.Switch.PortStats(0)
	res := &incastResult{cfg: cfg, flows: flows}
	capacity := float64(incastLineRate) * cfg.duration.Seconds()
	res.util = float64(st.RxBytes) * 8 / capacity
	// The WRITEs still in flight at the end are checked too.
	err = fab.RunUntil(func() bool {
		all := true
		for i, f := range flows {
			reap(i, f, false)
			all = all && f.done == f.posted
		}
		return all
	}, time.Second)
	if err != nil {
		return nil, fmt.Errorf("draining the flows: %w", err)
	}
	var sum, sq float64
	for _, f := range flows {
		c := f.end.QP.Counters()
		f.cnps, f.retrans = c[qp.CntRPCNPHandled], c[qp.CntRetransmittedPkts]
		f.rate = f.end.QP.CongestionState().CurrentRate
		res.retrans += f.retrans
		res.bad += f.bad
		x := float64(f.bytes)
		sum += x
		sq += x * x
	}
	if sq > 0 {
		res.jain = sum * sum / (float64(len(flows)) * sq)
	}
	res.goodput = sum * 8 / capacity
	res.p50, res.p99 = st.QueueQuantile(0.5), st.QueueQuantile(0.99)
	res.drops, res.marked, res.queueMax = st.Dropped, st.Marked, st.QueueMax
	res.cnps = recv.Dev.Counters()[qp.CntNPCNPSent]
	return res, nil
}

func (r *incastResult) ccName() string {
	if r.cfg.cc {
		return "dcqcn"
	}
	return "none"
}

func gbps(bits float64) string { return fmt.Sprintf("%.3f Gb/s", bits/1e9) }

// print writes one row per flow and the summary line.
func (r *incastResult) print(w io.Writer) {
	fmt.Fprintf(w, "%-5s %-12s %14s %8s %14s %14s\n", "flow", "sender", "goodput", "cnps", "final_rate", "retransmitted")
	for i, f := range r.flows {
		rate := "-"
		if r.cfg.cc {
			rate = gbps(float64(f.rate))
		}
		fmt.Fprintf(w, "%-5d %-12s %14s %8d %14s %14d\n", i+1, f.ip,
			gbps(float64(f.bytes)*8/r.cfg.duration.Seconds()), f.cnps, rate, f.retrans)
	}
	fmt.Fprintf(w, "incast: cc=%s flows=%d util=%.3f jain=%.3f queue_p50=%d queue_p99=%d drops=%d cnps=%d retransmitted=%d\n",
		r.ccName(), len(r.flows), r.util, r.jain, r.p50, r.p99, r.drops, r.cnps, r.retrans)
}

// ccParamFlags collects repeated --cc-param name=value flags.
type ccParamFlags []string

func (c *ccParamFlags) String() string { return strings.Join(*c, ",") }

func (c *ccParamFlags) Set(s string) error {
	if !strings.Contains(s, "=") {
		return fmt.Errorf("want name=value (mlx5 cc_params names), got %q", s)
	}
	*c = append(*c, s)
	return nil
}

// runIncastDemo is `goroce demo --incast N --cc dcqcn|none`.
func runIncastDemo(env tool.Env, flows int, ccMode string, seed int64, duration time.Duration, set ccParamFlags) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(env.Stderr, "goroce demo: "+format+"\nRun 'goroce demo -h' for usage.\n", args...)
		return 2
	}
	if flows < 1 || flows > 64 {
		return fail("--incast %d: want 1 to 64 senders", flows)
	}
	if ccMode != "dcqcn" && ccMode != "none" {
		return fail("--cc %q: want dcqcn or none", ccMode)
	}
	if duration <= 0 || duration > 10*time.Second {
		return fail("--duration %v: want more than 0 and at most 10s", duration)
	}
	params := incastParams()
	for _, kv := range set {
		name, value, _ := strings.Cut(kv, "=")
		if err := params.Set(name, value); err != nil {
			return fail("--cc-param %s: %v", kv, err)
		}
	}
	if err := params.Check(); err != nil {
		return fail("--cc-param: %v", err)
	}
	w := env.Stdout
	fmt.Fprintf(w, "goroce demo: incast of %d senders into one receiver, %v of simulated time, cc=%s, seed %d\n",
		flows, duration, ccMode, seed)
	fmt.Fprintf(w, "switch: %d Gb/s ports, %v cables, %d KiB egress buffer, ECN marking Kmin %d B Kmax %d B Pmax %g; path MTU 1024; 64 KiB RDMA WRITEs, %d outstanding per flow\n",
		incastLineRate/1_000_000_000, incastDelay, incastBuffer>>10, incastKmin, incastKmax, incastPmax, incastInFlight)
	if ccMode == "dcqcn" {
		var b strings.Builder
		def := qp.DefaultCCParams()
		defs := map[string]uint64{}
		def.Each(func(name string, v uint64) { defs[name] = v })
		params.Each(func(name string, v uint64) {
			if defs[name] != v {
				fmt.Fprintf(&b, " %s=%d", name, v)
			}
		})
		if b.Len() == 0 {
			fmt.Fprintln(w, "cc_params: NVIDIA's defaults")
		} else {
			fmt.Fprintf(w, "cc_params: NVIDIA's defaults except%s\n", b.String())
		}
	}
	start := time.Now()
	res, err := runIncast(incastConfig{flows: flows, cc: ccMode == "dcqcn", params: &params, seed: seed, duration: duration})
	if err != nil {
		fmt.Fprintln(env.Stderr, "goroce demo:", err)
		return 1
	}
	fmt.Fprintln(w)
	res.print(w)
	fmt.Fprintf(w, "(goodput %.3f of the line rate; %d frames marked CE; largest backlog %d B; %v of real time)\n",
		res.goodput, res.marked, res.queueMax, time.Since(start).Round(time.Millisecond))
	if res.bad > 0 {
		fmt.Fprintf(env.Stderr, "goroce demo: %d WRITEs failed or did not arrive intact\n", res.bad)
		return 1
	}
	return 0
}
