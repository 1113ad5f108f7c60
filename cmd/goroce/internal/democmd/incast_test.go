package democmd

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/sim"
)

// incastSeed is the seed of the incast tests; GOROCE_SEED replaces it.
func incastSeed(t *testing.T) int64 {
	t.Helper()
	if s, ok, err := sim.EnvSeed(); err != nil {
		t.Fatal(err)
	} else if ok {
		return s
	}
	return 1
}

func mustIncast(t *testing.T, cfg incastConfig) *incastResult {
	t.Helper()
	r, err := runIncast(cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.seed, err)
	}
	if r.bad != 0 {
		t.Fatalf("seed %d: %d WRITEs failed or arrived wrong", cfg.seed, r.bad)
	}
	return r
}

func (r *incastResult) summary() string {
	var b strings.Builder
	r.print(&b)
	return fmt.Sprintf("seed %d:\n%s", r.cfg.seed, b.String())
}

// With DCQCN, N senders into one 10 Gb/s port share it without a loss:
// no drop, no retransmission, the queue's p99 under a quarter of the
// buffer, Jain's index ≥ 0.9 and the bottleneck ≥ 90 % busy, for 2 to 16
// senders over 40 ms (over seeds 1 to 10 the smallest Jain's index is
// 0.91, at N = 4; DCQCN evens out rates slowly, and over 20 ms it can be
// 0.89).
func TestIncastDCQCN(t *testing.T) {
	seed := incastSeed(t)
	for _, n := range []int{2, 4, 8, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			r := mustIncast(t, incastConfig{flows: n, cc: true, seed: seed, duration: 40 * time.Millisecond})
			if r.drops != 0 || r.retrans != 0 || r.p99 > incastBuffer/4 || r.jain < 0.9 || r.util < 0.9 || r.cnps == 0 {
				t.Errorf("%s", r.summary())
			}
			for i, f := range r.flows {
				if f.cnps == 0 || f.rate <= 0 || f.rate > incastLineRate {
					t.Errorf("flow %d: %d CNPs, rate %d\n%s", i+1, f.cnps, f.rate, r.summary())
				}
			}
		})
	}
}

// Without congestion control 16 senders overflow the buffer: tail drops,
// go-back-N retransmissions, a full queue; every byte still arrives.
// (Four do not: their 129-packet windows, 4 × 141 KB, fit in 2 MiB; the
// queue stands at their sum instead.)
func TestIncastNone(t *testing.T) {
	seed := incastSeed(t)
	r := mustIncast(t, incastConfig{flows: 16, seed: seed, duration: 5 * time.Millisecond})
	if r.drops == 0 || r.retrans == 0 || r.cnps != 0 || r.p99 < incastBuffer*9/10 {
		t.Errorf("%s", r.summary())
	}
	r = mustIncast(t, incastConfig{flows: 4, seed: seed, duration: 5 * time.Millisecond})
	if r.drops != 0 || r.p50 < 400_000 {
		t.Errorf("%s", r.summary())
	}
}

// share returns each flow's share of the line rate over windows [from, to).
func (r *incastResult) share(from, to int) []float64 {
	out := make([]float64, len(r.flows))
	for i, f := range r.flows {
		var b uint64
		for w := from; w < to && w < len(f.timeline); w++ {
			b += f.timeline[w]
		}
		out[i] = float64(b) * 8 / (float64(incastLineRate) * r.cfg.window.Seconds() * float64(to-from))
	}
	return out
}

func jain(x []float64) (j, sum float64) {
	var sq float64
	for _, v := range x {
		sum += v
		sq += v * v
	}
	return sum * sum / (float64(len(x)) * sq), sum
}

// A flow that starts late gets its fair share: three flows run alone for
// 6 ms, a fourth joins, and over the last 12 ms of 30 the four split the
// link fairly (Jain ≥ 0.9) and keep it busy.
func TestIncastLateStartConverges(t *testing.T) {
	ms := time.Millisecond
	r := mustIncast(t, incastConfig{flows: 4, cc: true, seed: incastSeed(t), duration: 30 * ms, window: ms,
		start: []time.Duration{0, 0, 0, 6 * ms}})
	s := r.share(18, 30)
	if j, sum := jain(s); j < 0.9 || sum < 0.8 || s[3] < 0.15 {
		t.Errorf("shares %.3f: Jain %.3f, sum %.3f\n%s", s, j, sum, r.summary())
	}
	if early := r.share(1, 6); early[3] != 0 {
		t.Errorf("flow 4 moved bytes before it started: %.3f", early)
	}
}

// When a flow leaves, the others take the link back: four flows, one
// stops at 4 ms, and the remaining three reach 90 % of the line rate
// again (DCQCN's additive and hyper increase are slow: it takes them
// about 15 ms).
func TestIncastFlowLeavesOthersRecover(t *testing.T) {
	ms := time.Millisecond
	r := mustIncast(t, incastConfig{flows: 4, cc: true, seed: incastSeed(t), duration: 28 * ms, window: ms,
		stop: []time.Duration{4 * ms}})
	after := r.share(24, 28)
	if _, sum := jain(after[1:]); after[0] != 0 || sum < 0.85 {
		t.Errorf("shares after the leave %.3f (sum of the three %.3f)\n%s", after, sum, r.summary())
	}
	if before := r.share(1, 4); before[0] < 0.1 {
		t.Errorf("flow 1 had no share before it left: %.3f", before)
	}
}

// The same seed gives the same run, to the byte.
func TestIncastDeterministic(t *testing.T) {
	cfg := incastConfig{flows: 4, cc: true, seed: incastSeed(t), duration: 3 * time.Millisecond}
	a, b := mustIncast(t, cfg).summary(), mustIncast(t, cfg).summary()
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
}

// The byte check catches a wrong byte: one flipped bit in one received
// message fails that message, and the demo would exit 1.
func TestIncastCheckCatchesCorruption(t *testing.T) {
	r, err := runIncast(incastConfig{flows: 2, cc: true, seed: 1, duration: time.Millisecond,
		corrupt: func(f int, m uint64, dst []byte) {
			if f == 1 && m == 3 {
				dst[4097] ^= 0x10
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if r.bad != 1 || r.flows[1].bad != 1 {
		t.Fatalf("%d bad messages (flow 2: %d), want exactly the corrupted one", r.bad, r.flows[1].bad)
	}
}

var incastLine = regexp.MustCompile(`(?m)^incast: cc=(dcqcn|none) flows=(\d+) util=[0-9.]+ jain=[0-9.]+ queue_p50=\d+ queue_p99=\d+ drops=\d+ cnps=\d+ retransmitted=\d+$`)

// goroce demo --incast prints one row per flow and the summary line, and
// exits 0; bad values exit 2.
func TestIncastDemo(t *testing.T) {
	code, out, errOut := runDemo("--incast", "3", "--cc", "dcqcn", "--duration", "2ms", "--cc-param", "rp_ai_rate=10")
	m := incastLine.FindStringSubmatch(out)
	if code != 0 || errOut != "" || m == nil || m[1] != "dcqcn" || m[2] != "3" || strings.Count(out, "198.18.1.") != 3 ||
		!strings.Contains(out, "rp_ai_rate=10") || !strings.HasSuffix(strings.TrimSpace(strings.Split(out, "\n(")[0]), m[0]) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runDemo("--incast", "2", "--cc", "none", "--duration", "1ms")
	if m := incastLine.FindStringSubmatch(out); code != 0 || m == nil || m[1] != "none" {
		t.Fatalf("none: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"--incast", "2", "--cc", "bbr"},
		{"--incast", "100"},
		{"--incast", "2", "--duration", "0s"},
		{"--incast", "2", "--cc-param", "rp_nope=1"},
		{"--incast", "2", "--cc-param", "np_cnp_dscp=64"},
	} {
		if code, _, errOut := runDemo(args...); code != 2 || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}
