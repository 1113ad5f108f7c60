package transport

import (
	"testing"
	"time"
)

var ccEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func us(n int) time.Time { return ccEpoch.Add(time.Duration(n) * time.Microsecond) }

func defaultCC() *DCQCNParams {
	p := DefaultDCQCNParams()
	p.PortRate = 10_000_000_000
	return &p
}

// The reaction point against a sequence computed by hand from the
// firmware's formulas (integer arithmetic; α shown in /1024, kept in
// 1/2^20 and at most 1023/1024), NVIDIA's defaults at 10 Gb/s:
//
//	t=0    first CNP: α = 1023, RT = RC = 10e9; RC −= RC·1023>>11 → 5004882813
//	t=2µs  CNP inside the 4 µs monitor period: the cut waits for t=4µs
//	t=4µs  α periods: [0,1) CNP → 1023·1019/1024+5 = 1023; [1,2) → 1018;
//	       [2,3) CNP → 1018; [3,4) → 1013. Cut: RT stays 10e9 (no increase
//	       since the last cut); RC −= RC·1013>>11 → 2529172751
//	t=304  timer, T=1 ≤ F=1: fast recovery, RC = (RT+RC)/2 = 6264586375
//	t=604  timer, T=2: additive, RT = min(10e9+5e6, 10e9); RC = 8132293187
//	t=904  timer, T=3: additive, RC = 9066146593
//	bytes  32767·64 sent: BC=1, min(T,BC)=1: additive, RC = 9533073296
//	bytes  again: BC=2 > F: hyper, RC = 9766536648
func TestDCQCNSequence(t *testing.T) {
	d := newDCQCN(defaultCC())
	step := func(what string, rc, rt int64, alpha uint32, now time.Time) {
		t.Helper()
		s := d.state(now)
		if s.CurrentRate != rc || s.TargetRate != rt || (alpha != 0 && s.Alpha != alpha) {
			t.Fatalf("%s: RC %d RT %d α %d, want RC %d RT %d α %d", what, s.CurrentRate, s.TargetRate, s.Alpha, rc, rt, alpha)
		}
	}
	const m = 10_000_000_000
	step("before any CNP", m, m, 1023, us(0))
	d.onCNP(us(0))
	step("first CNP", 5004882813, m, 1023, us(0))
	d.onCNP(us(2))
	step("second CNP postponed", 5004882813, m, 1018, us(2))
	step("second cut at the end of the monitor period", 2529172751, m, 1013, us(4))
	step("before the timer", 2529172751, m, 0, us(303))
	step("fast recovery", 6264586375, m, 0, us(304))
	step("additive", 8132293187, m, 0, us(604))
	step("additive", 9066146593, m, 0, us(904))
	const period = 32767 * 64
	d.sent(us(905), period-1)
	step("byte counter not yet", 9066146593, m, 0, us(905))
	d.sent(us(905), 1)
	step("byte counter, additive", 9533073296, m, 0, us(905))
	d.sent(us(906), period)
	step("byte counter, hyper", 9766536648, m, 0, us(906))
	if s := d.state(us(906)); s.CNPs != 2 || s.Cuts != 2 {
		t.Fatalf("CNPs %d cuts %d, want 2 and 2", s.CNPs, s.Cuts)
	}
	// Recovery ends at the ceiling, and the timer stops.
	s := d.state(us(100_000))
	if s.CurrentRate != m || d.active {
		t.Fatalf("after 100 ms: RC %d active %v, want line rate and idle", s.CurrentRate, d.active)
	}
	if s.Alpha != 0 {
		t.Fatalf("α %d after 100 ms without a CNP, want 0", s.Alpha)
	}
}

// α decays by g/1024 per period without CNPs, and a CNP in a period adds
// 1024−g at its end.
func TestDCQCNAlpha(t *testing.T) {
	d := newDCQCN(defaultCC())
	d.onCNP(us(0))
	// In 1/2^20: 1023<<10, then ·1019/1024 (+5<<10 in a period with a
	// CNP), at most 1023<<10.
	want := uint32(1023 << 10)
	want = min(want*1019/1024+5<<10, 1023<<10) // [0,1): the CNP's period
	for i := 1; i < 10; i++ {
		want = want * 1019 / 1024
	}
	if s := d.state(us(10)); s.Alpha != want>>10 || s.Alpha != 978 {
		t.Fatalf("α after 10 µs %d, want %d (978)", s.Alpha, want>>10)
	}
	d.onCNP(us(10)) // the cut reads α at 10 µs
	want = want*1019/1024 + 5<<10
	if s := d.state(us(11)); s.Alpha != want>>10 || s.Alpha != 979 {
		t.Fatalf("α after a CNP %d, want %d (979)", s.Alpha, want>>10)
	}
}

// Cuts are bounded by rp_min_dec_fac and rp_min_rate; clamp_tgt_rate sets
// RT to RC on every cut; rate_to_set_on_first_cnp replaces the first cut.
func TestDCQCNBounds(t *testing.T) {
	p := defaultCC()
	p.RPGD = 0 // α/1: the cut would take everything
	p.RPMinDecFac = 30
	d := newDCQCN(p)
	d.onCNP(us(0))
	if s := d.state(us(0)); s.CurrentRate != 3_000_000_000 {
		t.Fatalf("RC %d, want 30%% of 10 Gb/s", s.CurrentRate)
	}
	p = defaultCC()
	p.RPMinDecFac = 0
	p.RPGD = 0
	p.RPMinRate = 100
	d = newDCQCN(p)
	d.onCNP(us(0))
	if s := d.state(us(0)); s.CurrentRate != 100_000_000 {
		t.Fatalf("RC %d, want rp_min_rate 100 Mb/s", s.CurrentRate)
	}
	p = defaultCC()
	p.RPRateToSetOnFirstCNP = 2000
	p.RPClampTgtRate = true
	d = newDCQCN(p)
	d.onCNP(us(0))
	if s := d.state(us(0)); s.CurrentRate != 2e9 || s.TargetRate != 2e9 {
		t.Fatalf("first CNP: RC %d RT %d, want both 2 Gb/s", s.CurrentRate, s.TargetRate)
	}
	d.onCNP(us(10))
	if s := d.state(us(10)); s.TargetRate != 2e9 || s.CurrentRate >= 2e9 {
		t.Fatalf("clamped cut: RC %d RT %d, want RT = the RC before it", s.CurrentRate, s.TargetRate)
	}
	p = defaultCC()
	p.RPMaxRate = 4000
	if d = newDCQCN(p); d.rc != 4e9 {
		t.Fatalf("rp_max_rate 4000: start at %d", d.rc)
	}
}

// The pacer spaces packets at exactly the current rate: 1250 bytes at
// 10 Gb/s is 1 µs; after a cut, at the cut rate. Idle time is not saved up
// (PaceBurst 0).
func TestPacerSpacing(t *testing.T) {
	p := &pacer{cc: newDCQCN(defaultCC())}
	if p.blocked(us(0)) {
		t.Fatal("blocked before the first packet")
	}
	p.sent(us(0), 1250)
	if !p.blocked(us(0)) || p.next != us(1) {
		t.Fatalf("next %v, want blocked until 1 µs", p.next.Sub(ccEpoch))
	}
	if p.blocked(us(1)) {
		t.Fatal("blocked at 1 µs")
	}
	if p.blocked(us(50)) {
		t.Fatal("blocked after idle")
	}
	p.sent(us(50), 1250) // idle: no credit saved
	if !p.blocked(us(50)) || p.next != us(51) {
		t.Fatalf("after idle next %v, want 51 µs", p.next.Sub(ccEpoch))
	}
	if p.blocked(us(51)) {
		t.Fatal("blocked at 51 µs")
	}
	p.cc.onCNP(us(51))
	r := p.cc.rate(us(51))
	p.sent(us(51), 1250)
	// 1250 B at r, rounded up to the nanosecond.
	want := us(51).Add(time.Duration((1250*byteCredit + r - 1) / r))
	if !p.blocked(us(51)) || p.next != want || r > 5_010_000_000 {
		t.Fatalf("after a cut to %d next %v, want %v", r, p.next.Sub(ccEpoch), want.Sub(ccEpoch))
	}
}

// A deadline computed at a low rate does not outlive the rate: the
// requester looks again at the next timer increase, where the debt left
// is paid at the increased rate.
func TestPacerRateIncrease(t *testing.T) {
	c := defaultCC()
	c.RPGD, c.RPMinDecFac = 0, 0 // a cut to RC/1024: about 9.77 Mb/s
	p := &pacer{cc: newDCQCN(c)}
	p.cc.onCNP(us(0))
	r := p.cc.rate(us(0))
	p.blocked(us(0))
	p.sent(us(0), 1250) // 1250 B at 9.77 Mb/s: 1.02 ms
	if !p.blocked(us(0)) || p.next != us(300) {
		t.Fatalf("rate %d: next %v, want the timer increase at 300 µs", r, p.next.Sub(ccEpoch))
	}
	if !p.blocked(us(300)) {
		t.Fatal("not blocked at 300 µs: the debt is not paid yet")
	}
	// 300 µs at r paid r·300µs/8 bytes; the rest goes at the new rate.
	left := 1250*byteCredit - 300_000*r
	r2 := p.cc.rate(us(300))
	if want := us(300).Add(time.Duration((left + r2 - 1) / r2)); r2 < 5e9 || p.next != want {
		t.Fatalf("after the increase to %d: next %v, want %v", r2, p.next.Sub(ccEpoch), want.Sub(ccEpoch))
	}
}

// PaceBurst bytes beyond one packet may go at once after idle time.
func TestPacerBurst(t *testing.T) {
	c := defaultCC()
	c.PaceBurst = 2500
	q := &pacer{cc: newDCQCN(c)}
	q.blocked(us(0))
	q.sent(us(0), 1250)
	for i := 0; i < 3; i++ {
		if q.blocked(us(100)) {
			t.Fatalf("burst: packet %d after idle blocked", i+1)
		}
		q.sent(us(100), 1250)
	}
	if !q.blocked(us(100)) {
		t.Fatal("burst: fourth packet at once not blocked")
	}
}

// The cc_params table names every parameter as mlx5 does and round-trips
// values in the firmware's units.
func TestDCQCNParamsByName(t *testing.T) {
	p := DefaultDCQCNParams()
	got := map[string]uint64{}
	p.Each(func(name string, v uint64) { got[name] = v })
	want := map[string]uint64{
		"rp_clamp_tgt_rate": 0, "rp_clamp_tgt_rate_ati": 1, "rp_time_reset": 300, "rp_byte_reset": 32767,
		"rp_threshold": 1, "rp_ai_rate": 5, "rp_max_rate": 0, "rp_hai_rate": 50, "rp_min_dec_fac": 50,
		"rp_min_rate": 1, "rp_rate_to_set_on_first_cnp": 0, "rp_dce_tcp_g": 1019, "rp_dce_tcp_rtt": 1,
		"rp_rate_reduce_monitor_period": 4, "rp_initial_alpha_value": 1023, "rp_gd": 11,
		"np_min_time_between_cnps": 4, "np_cnp_dscp": 48, "np_cnp_prio": 6,
	}
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if err := p.Set("rp_dce_tcp_rtt", "55"); err != nil || p.RPDCETCPRTT != 55*time.Microsecond {
		t.Fatalf("rp_dce_tcp_rtt=55: %v %v", err, p.RPDCETCPRTT)
	}
	if err := p.Set("rp_clamp_tgt_rate", "1"); err != nil || !p.RPClampTgtRate {
		t.Fatalf("rp_clamp_tgt_rate=1: %v", err)
	}
	for _, bad := range [][2]string{{"rp_nope", "1"}, {"rp_ai_rate", "-1"}, {"rp_clamp_tgt_rate", "2"}, {"np_cnp_dscp", "300"}} {
		if err := p.Set(bad[0], bad[1]); err == nil {
			t.Errorf("Set(%s, %s): no error", bad[0], bad[1])
		}
	}
	p.NPCNPDSCP = 64
	if p.Check() == nil {
		t.Error("np_cnp_dscp 64 passed Check")
	}
}
