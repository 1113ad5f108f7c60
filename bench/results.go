//go:build linux

package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// stat summarizes the repetitions of one measurement.
type stat struct {
	med, min, max float64
	n             int
}

// summarizeValues returns the median (the mean of the middle two for an
// even count) and the range of v; v is not modified.
func summarizeValues(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stat{med: med, min: s[0], max: s[n-1], n: n}
}

// key names one measurement: a backend (or "tcp" for the kernel's TCP,
// "" for the machine), the veth MTU, and a metric.
type key struct {
	backend string
	mtu     int
	metric  string
}

// section is one backend at one MTU, as the report lists it.
type section struct {
	backend string
	mtu     int
	mode    string // the backend's mode (native, tpacket_v3, socket)
	pmtu    int    // the connection's path MTU in bytes
}

// results collects every repetition of every measurement, and the errors
// of those that failed. Safe for concurrent use.
type results struct {
	mu       sync.Mutex
	vals     map[key][]float64
	errs     map[key]error
	notes    map[key]string
	sections []section
	// placements are the run's placements of the sleeping round trips
	// (-placements), in the order the report lists them.
	placements []placement
}

func newResults() *results {
	return &results{vals: map[key][]float64{}, errs: map[key]error{}, notes: map[key]string{},
		placements: []placement{{"free", -1, -1}}}
}

func (r *results) add(k key, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	r.vals[k] = append(r.vals[k], v)
}

// fail records why a measurement has no value (the last error wins).
func (r *results) fail(k key, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[k] = err
}

func (r *results) note(k key, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes[k] = s
}

func (r *results) addSection(s section) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range r.sections {
		if t.backend == s.backend && t.mtu == s.mtu {
			if s.mode != "" {
				r.sections[i] = s
			}
			return
		}
	}
	r.sections = append(r.sections, s)
}

func (r *results) section(backend string, mtu int) (section, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sections {
		if s.backend == backend && s.mtu == mtu {
			return s, true
		}
	}
	return section{}, false
}

var errNotMeasured = errors.New("not measured")

// get returns the summary of k, or the error that kept it from being
// measured (errNotMeasured when it was never tried).
func (r *results) get(k key) (stat, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.vals[k]; len(v) > 0 {
		return summarizeValues(v), nil
	}
	if err := r.errs[k]; err != nil {
		return stat{}, err
	}
	return stat{}, errNotMeasured
}

// ratio is the ratio of two medians.
func (r *results) ratio(a, b key) (float64, bool) {
	x, err1 := r.get(a)
	y, err2 := r.get(b)
	if err1 != nil || err2 != nil || y.med == 0 {
		return 0, false
	}
	return x.med / y.med, true
}

// Metric names. goroce's and the raw backend's are keyed by backend,
// TCP's by backend "tcp", at each MTU.
const (
	mRawSmallFPS = "raw.small.fps"   // one-way frames/s, 64 B WRITE frames
	mRawSmallLen = "raw.small.len"   // their length in bytes
	mRawFullGbps = "raw.full.gbps"   // payload Gbit/s, path-MTU frames
	mRawFullLen  = "raw.full.len"    // their length in bytes
	mRawCPUGB    = "raw.full.cpugb"  // whole-machine busy CPU-s per GB of payload
	mRawProcGB   = "raw.full.procgb" // process CPU-s per GB
	mRawGbPerCPU = "raw.full.gbpcpu" // Gbit of payload per busy CPU-second
	mRawFullFPS  = "raw.full.fps"    // one-way frames/s, path-MTU frames
	// The reference sender's (-rawref) frames/s at the same frame lengths.
	mRawRefSmallFPS = "rawref.small.fps"
	mRawRefFullFPS  = "rawref.full.fps"
	mTCPGbps        = "tcp.stream.gbps"
	mTCPCPUGB       = "tcp.stream.cpugb"
	mTCPProcGB      = "tcp.stream.procgb"
	mTCPGbPerCPU    = "tcp.stream.gbpcpu"
	mIperfGbps      = "tcp.iperf3.gbps"
	mQPsAgg         = "qps.agg.mps"
	mQPsOne         = "qps.one.mps"
	mQPsHeap        = "qps.heap" // bytes per QP
	mQPsLink        = "qps.link" // bytes of link rings per QP (qpsRings)
	mIdleProc       = "idle.proc"
	mIdleMachine    = "idle.machine"
	mSysGoroce      = "sys.goroce"
	mSysTCP         = "sys.tcp"
	latBusy         = "lat.busy"
	latSleep        = "lat.sleep"
	latRaw          = "raw.rtt"
	latRaw2         = "raw.rtt2" // the busy ping-pong with 2 frames each way in one kick
	latRawSleep     = "raw.rtt.sleep"
	latRawSleep2    = "raw.rtt2.sleep" // the sleeping ping-pong with 2 frames each way in one batch
	latTCP          = "tcp.rtt"
	bwPrefix        = "bw."
	sizeSmall       = 64
	sizeMid         = 4 << 10
	sizeLarge       = 64 << 10
)

func bwKey(backend string, mtu int, op string, size int, what string) key {
	return key{backend, mtu, fmt.Sprintf("%s%s.%d.%s", bwPrefix, op, size, what)}
}

func latKey(backend string, mtu int, base, q string) key {
	return key{backend, mtu, base + "." + q}
}

func record(res *results, k key, v float64, err error) {
	if err != nil {
		res.fail(k, err)
		return
	}
	res.add(k, v)
}

// recordRate records a stream's goodput (base.gbps) and, when the CPU was
// measured (cpuErr nil), its CPU cost: base.cpugb, base.procgb,
// base.gbpcpu.
func recordRate(res *results, at key, base string, bytes int64, el time.Duration, cpu cpuUse, cpuErr, err error) {
	k := func(m string) key { return key{at.backend, at.mtu, base + "." + m} }
	if err != nil {
		res.fail(k("gbps"), err)
		return
	}
	gb := float64(bytes) / 1e9
	res.add(k("gbps"), gb*8/el.Seconds())
	if cpuErr != nil {
		res.fail(k("cpugb"), cpuErr)
		return
	}
	if gb > 0 {
		res.add(k("cpugb"), cpu.machine/gb)
		res.add(k("procgb"), cpu.proc/gb)
	}
	if cpu.machine > 0 {
		res.add(k("gbpcpu"), gb*8/cpu.machine)
	}
}

// recordLat records p50, mean and p99 of rtts in microseconds.
func recordLat(res *results, base key, rtts []time.Duration, err error) {
	k := func(q string) key { return key{base.backend, base.mtu, base.metric + "." + q} }
	if err == nil && len(rtts) == 0 {
		err = fmt.Errorf("no round trip")
	}
	if err != nil {
		for _, q := range []string{"p50", "mean", "p99"} {
			res.fail(k(q), err)
		}
		return
	}
	l := summarizeRTTs(rtts)
	res.add(k("p50"), us(l.p50))
	res.add(k("mean"), us(l.mean))
	res.add(k("p99"), us(l.p99))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type latency struct {
	n              int
	p50, mean, p99 time.Duration
}

// summarizeRTTs sorts rtts in place and returns the nearest-rank
// percentiles and the mean.
func summarizeRTTs(rtts []time.Duration) latency {
	if len(rtts) == 0 {
		return latency{}
	}
	slices.Sort(rtts)
	var sum time.Duration
	for _, r := range rtts {
		sum += r
	}
	n := len(rtts)
	return latency{n: n, p50: rtts[(n-1)/2], mean: sum / time.Duration(n), p99: rtts[(n*99+99)/100-1]}
}

func latLine(rtts []time.Duration) string {
	if len(rtts) == 0 {
		return "–"
	}
	l := summarizeRTTs(slices.Clone(rtts))
	return fmt.Sprintf("p50 %s mean %s p99 %s n %d", fmtMicros(us(l.p50)), fmtMicros(us(l.mean)), fmtMicros(us(l.p99)), l.n)
}
