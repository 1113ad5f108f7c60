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
// 10 Gb/s is 1 µs; after a cut to half, 2 µs. Idle time is not saved up
// (PaceBurst 0).
func TestPacerSpacing(t *testing.T) {
	p := &pacer{cc: newDCQCN(defaultCC())}
	now := us(0)
	if p.blocked(now) {
		t.Fatal("blocked before the first packet")
	}
	p.sent(now, 1250)
	if !p.blocked(now) || p.next != us(1) {
		t.Fatalf("next %v, want blocked until 1 µs", p.next.Sub(ccEpoch))
	}
	if p.blocked(us(1)) {
		t.Fatal("blocked at 1 µs")
	}
	p.sent(us(50), 1250) // idle: no credit
	if p.next != us(51) {
		t.Fatalf("after idle next %v, want 51 µs", p.next.Sub(ccEpoch))
	}
	p.cc.p.RPMinDecFac = 50
	p.cc.onCNP(us(51))
	r := p.cc.rate(us(51))
	p.sent(us(51), 1250)
	if want := us(51).Add(bytesTime(1250, r)); p.next != want || r >= 10_000_000_000/2+10_000_000 {
		t.Fatalf("after a cut to %d next %v, want %v", r, p.next.Sub(ccEpoch), want.Sub(ccEpoch))
	}
	// A burst allowance lets PaceBurst bytes beyond one packet go at once
	// after idle time.
	q := &pacer{cc: newDCQCN(defaultCC())}
	q.cc.p.PaceBurst = 2500
	q.sent(us(0), 1250)
	q.sent(us(100), 1250)
	if q.blocked(us(100)) {
		t.Fatal("burst: second packet after idle blocked")
	}
	q.sent(us(100), 1250)
	if q.blocked(us(100)) {
		t.Fatal("burst: third packet after idle blocked")
	}
	q.sent(us(100), 1250)
	if !q.blocked(us(100)) {
		t.Fatal("burst: fourth packet at once not blocked")
	}
}
