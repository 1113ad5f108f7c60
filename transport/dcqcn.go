package transport

import (
	"fmt"
	"time"
)

// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA
// Deployments", SIGCOMM 2015) as NVIDIA's ConnectX firmware runs it: the
// reaction point (RP) of one QP. The notification point (a receiver that
// answers ECN-CE-marked packets with CNPs) lives in package qp, which owns
// the link; this file is the pure rate algorithm plus the token bucket the
// requester paces its packets with.
//
// State per QP: the current rate RC, the target rate RT, α (a /1024 fixed
// point, as the firmware keeps it), the increase stage counters T (timer)
// and BC (byte counter).
//
//	CNP          RT := RC (see clamp below); RC := RC·(1 − α/2^rp_gd),
//	             at most one cut per rp_rate_reduce_monitor_period, never
//	             below RC·rp_min_dec_fac% nor rp_min_rate; T, BC := 0
//	α period     every rp_dce_tcp_rtt: α := α·g/1024 + (1024 − g) if a CNP
//	             arrived in the period, else α := α·g/1024 (g = rp_dce_tcp_g)
//	timer        every rp_time_reset after a cut: T++, increase
//	byte counter every rp_byte_reset×64 bytes sent after a cut: BC++, increase
//	increase     max(T,BC) ≤ rp_threshold: fast recovery, RC := (RT+RC)/2
//	             min(T,BC) > rp_threshold: hyper, RT += i·rp_hai_rate,
//	             i = min(T,BC) − rp_threshold; RC := (RT+RC)/2
//	             otherwise: additive, RT += rp_ai_rate; RC := (RT+RC)/2
//
// Nothing here runs on a timer of its own: every event (α periods, timer
// increases, a cut postponed to the end of the monitor period) happens at a
// time fixed by the earlier events, and advance applies all of them up to
// now, in time order, whenever the rate is consulted (every packet the
// requester paces, every CNP). The outcome is the same as if each had run
// at its own time, and a QP at line rate costs nothing.

// DCQCNParams are the congestion-control parameters of a device, named as
// mlx5's debugfs cc_params (drivers/infiniband/hw/mlx5/cong.c) and with
// NVIDIA's defaults (DefaultDCQCNParams; docs/congestion.md lists each
// default and its source). Rates are in Mb/s, as the firmware takes them.
type DCQCNParams struct {
	// PortRate is the line rate in bits per second that rp_max_rate 0
	// stands for (the port speed); 0 means 10 Gb/s.
	PortRate int64

	RPClampTgtRate         bool          // rp_clamp_tgt_rate: every cut sets RT := RC
	RPClampTgtRateATI      bool          // rp_clamp_tgt_rate_ati: a cut after a timer increase sets RT := RC
	RPTimeReset            time.Duration // rp_time_reset: rate-increase timer period
	RPByteReset            uint32        // rp_byte_reset: byte-counter period, in 64-byte units (0: off)
	RPThreshold            uint32        // rp_threshold: F, the fast-recovery stage count
	RPAIRate               uint32        // rp_ai_rate: additive increase step, Mb/s
	RPHAIRate              uint32        // rp_hai_rate: hyper increase step, Mb/s
	RPMaxRate              uint32        // rp_max_rate: Mb/s, 0 = PortRate
	RPMinRate              uint32        // rp_min_rate: Mb/s
	RPMinDecFac            uint32        // rp_min_dec_fac: a cut keeps at least this % of RC
	RPRateToSetOnFirstCNP  uint32        // rp_rate_to_set_on_first_cnp: Mb/s, 0 = cut as usual
	RPDCETCPG              uint32        // rp_dce_tcp_g: α gain g, /1024
	RPDCETCPRTT            time.Duration // rp_dce_tcp_rtt: α update period
	RPRateReduceMonitorPer time.Duration // rp_rate_reduce_monitor_period: at most one cut per period
	RPInitialAlphaValue    uint32        // rp_initial_alpha_value: α at the first CNP, /1024
	RPGD                   uint32        // rp_gd: a cut is RC·α/2^rp_gd

	NPMinTimeBetweenCNPs time.Duration // np_min_time_between_cnps: per QP
	NPCNPDSCP            uint8         // np_cnp_dscp
	NPCNPPrio            uint8         // np_cnp_prio: 802.1p priority of a CNP on a VLAN

	// PaceBurst is how many bytes beyond one packet the pacer lets a QP
	// send at once after an idle time (the token bucket's depth). 0 sends
	// every packet at exactly its rate's spacing.
	PaceBurst int
}

// DefaultDCQCNParams returns NVIDIA's documented defaults for ConnectX-4
// and later (DOCA "DCQCN CC Parameters"; the values that page leaves out
// are the commonly cited ones, docs/congestion.md).
func DefaultDCQCNParams() DCQCNParams {
	return DCQCNParams{
		RPClampTgtRate:         false,
		RPClampTgtRateATI:      true,
		RPTimeReset:            300 * time.Microsecond,
		RPByteReset:            32767,
		RPThreshold:            1,
		RPAIRate:               5,
		RPHAIRate:              50,
		RPMaxRate:              0,
		RPMinRate:              1,
		RPMinDecFac:            50,
		RPRateToSetOnFirstCNP:  0,
		RPDCETCPG:              1019,
		RPDCETCPRTT:            time.Microsecond,
		RPRateReduceMonitorPer: 4 * time.Microsecond,
		RPInitialAlphaValue:    1023,
		RPGD:                   11,
		NPMinTimeBetweenCNPs:   4 * time.Microsecond,
		NPCNPDSCP:              48,
		NPCNPPrio:              6,
	}
}

// DefaultPortRate is the line rate PortRate 0 stands for.
const DefaultPortRate = 10_000_000_000

// Check reports the first parameter out of its firmware range.
func (p *DCQCNParams) Check() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("cc_params: %s %v: want %s: %w", name, v, want, ErrInvalidArgument)
	}
	switch {
	case p.PortRate < 0:
		return bad("port rate", p.PortRate, "bits per second ≥ 0")
	case p.RPTimeReset <= 0:
		return bad("rp_time_reset", p.RPTimeReset, "> 0")
	case p.RPDCETCPRTT <= 0:
		return bad("rp_dce_tcp_rtt", p.RPDCETCPRTT, "> 0")
	case p.RPDCETCPG > 1023:
		return bad("rp_dce_tcp_g", p.RPDCETCPG, "0..1023")
	case p.RPInitialAlphaValue > 1023:
		return bad("rp_initial_alpha_value", p.RPInitialAlphaValue, "0..1023")
	case p.RPMinDecFac > 100:
		return bad("rp_min_dec_fac", p.RPMinDecFac, "0..100")
	case p.RPGD > 31:
		return bad("rp_gd", p.RPGD, "0..31")
	case p.RPMinRate == 0:
		return bad("rp_min_rate", p.RPMinRate, "≥ 1 Mb/s")
	case p.NPCNPDSCP > 63:
		return bad("np_cnp_dscp", p.NPCNPDSCP, "0..63")
	case p.NPCNPPrio > 7:
		return bad("np_cnp_prio", p.NPCNPPrio, "0..7")
	case p.PaceBurst < 0:
		return bad("pace burst", p.PaceBurst, "≥ 0")
	}
	return nil
}

// maxRate is RP's ceiling in bits per second.
func (p *DCQCNParams) maxRate() int64 {
	port := p.PortRate
	if port <= 0 {
		port = DefaultPortRate
	}
	if p.RPMaxRate != 0 && int64(p.RPMaxRate)*1e6 < port {
		return int64(p.RPMaxRate) * 1e6
	}
	return port
}

// DCQCNState is a snapshot of one QP's reaction point.
type DCQCNState struct {
	CurrentRate int64  // RC, bits per second
	TargetRate  int64  // RT, bits per second
	Alpha       uint32 // α, /1024
	CNPs        uint64 // CNPs handled
	Cuts        uint64 // rate cuts applied
}

// dcqcn is the reaction point of one QP.
type dcqcn struct {
	p   *DCQCNParams
	max int64 // ceiling, bits per second

	rc, rt int64 // current and target rate, bits per second
	// alpha is α in 1/2^20: the firmware's parameters are /1024, but with
	// α itself truncated to 10 bits, α·g/1024 loses a whole unit per period
	// below α = 205 and α settles far below the fraction of periods with a
	// CNP (the EWMA's fixed point).
	alpha uint32

	// active: a cut happened and the rate has not recovered to max; the
	// increase timer and byte counter run only then.
	active bool
	seen   bool // a CNP was ever handled (α runs from then on)

	alphaNext   time.Time // end of the current α period
	cnpInPeriod bool

	lastCut    time.Time
	pendingCut bool // a CNP inside the monitor period: cut at its end

	timerNext time.Time // next timer increase
	bytes     int64     // bytes sent since the last byte-counter event
	t, bc     uint32    // stage counters since the last cut
	incSince  bool      // RC increased since the last cut
	timeSince bool      // ... by the timer

	cnps, cuts uint64
}

func newDCQCN(p *DCQCNParams) dcqcn {
	m := p.maxRate()
	return dcqcn{p: p, max: m, rc: m, rt: m, alpha: p.RPInitialAlphaValue << alphaShift}
}

func mbps(v uint32) int64 { return int64(v) * 1e6 }

// alphaShift: α is kept with 10 more fraction bits than the parameters.
const alphaShift = 10

// state returns the snapshot at now.
func (d *dcqcn) state(now time.Time) DCQCNState {
	d.advance(now)
	return DCQCNState{CurrentRate: d.rc, TargetRate: d.rt, Alpha: d.alpha >> alphaShift, CNPs: d.cnps, Cuts: d.cuts}
}

// rate returns RC at now.
func (d *dcqcn) rate(now time.Time) int64 {
	d.advance(now)
	return d.rc
}

// onCNP handles one CNP for this QP at now.
func (d *dcqcn) onCNP(now time.Time) {
	d.advance(now)
	d.cnps++
	if !d.seen {
		d.seen = true
		d.alpha = d.p.RPInitialAlphaValue << alphaShift
		d.alphaNext = now.Add(d.p.RPDCETCPRTT)
		d.cnpInPeriod = true
		d.cut(now, true)
		return
	}
	d.cnpInPeriod = true
	if d.pendingCut {
		return
	}
	if now.Sub(d.lastCut) < d.p.RPRateReduceMonitorPer {
		d.pendingCut = true
		return
	}
	d.cut(now, false)
}

// cut reduces the rate (a CNP, now or postponed to at).
func (d *dcqcn) cut(at time.Time, first bool) {
	p := d.p
	d.cuts++
	d.pendingCut = false
	if first && p.RPRateToSetOnFirstCNP != 0 {
		d.rc = min(mbps(p.RPRateToSetOnFirstCNP), d.max)
		d.rt = d.rc
	} else {
		if first || p.RPClampTgtRate || (d.incSince && (p.RPClampTgtRateATI || !d.timeSince)) {
			d.rt = d.rc
		}
		// RC·α/2^gd with α in 1/1024: RC·α >> gd (α = 1023, gd = 11: RC/2).
		dec := int64(uint64(d.rc) * uint64(d.alpha) >> (p.RPGD + alphaShift))
		floor := d.rc * int64(p.RPMinDecFac) / 100
		d.rc = max(d.rc-dec, floor, mbps(p.RPMinRate))
		d.rc = min(d.rc, d.max)
	}
	d.active = true
	d.lastCut = at
	d.t, d.bc, d.bytes = 0, 0, 0
	d.incSince, d.timeSince = false, false
	d.timerNext = at.Add(p.RPTimeReset)
}

// sent counts n bytes sent at now for the byte counter.
func (d *dcqcn) sent(now time.Time, n int) {
	d.advance(now)
	if !d.active || d.p.RPByteReset == 0 {
		return
	}
	d.bytes += int64(n)
	period := int64(d.p.RPByteReset) * 64
	for d.active && d.bytes >= period {
		d.bytes -= period
		d.bc++
		d.increase(false)
	}
}

// increase runs one rate-increase event.
func (d *dcqcn) increase(byTimer bool) {
	p := d.p
	f := p.RPThreshold
	switch {
	case max(d.t, d.bc) <= f: // fast recovery towards RT
	case min(d.t, d.bc) > f:
		d.rt += int64(min(d.t, d.bc)-f) * mbps(p.RPHAIRate)
	default:
		d.rt += mbps(p.RPAIRate)
	}
	d.rt = min(d.rt, d.max)
	d.rc = (d.rt + d.rc) / 2
	d.incSince = true
	if byTimer {
		d.timeSince = true
	}
	// Within one additive step of the ceiling is the ceiling: the halving
	// towards it would otherwise never end.
	if d.rt == d.max && d.max-d.rc <= max(mbps(p.RPAIRate), 1) {
		d.rc = d.max
		d.active = false
	}
}

// advance applies every event due at or before now, in time order: α
// periods, the postponed cut, timer increases.
func (d *dcqcn) advance(now time.Time) {
	if !d.seen {
		return
	}
	for {
		// The earliest of the timed events that change RC or RT; α
		// periods before it are applied first (they only matter to a cut).
		var next time.Time
		cutAt := d.lastCut.Add(d.p.RPRateReduceMonitorPer)
		timer := d.active
		switch {
		case d.pendingCut && (!timer || !d.timerNext.Before(cutAt)):
			next, timer = cutAt, false
		case timer:
			next = d.timerNext
		}
		if next.IsZero() || next.After(now) {
			d.advanceAlpha(now)
			return
		}
		d.advanceAlpha(next)
		if timer {
			d.t++
			d.timerNext = d.timerNext.Add(d.p.RPTimeReset)
			d.increase(true)
		} else {
			d.cut(next, false)
		}
	}
}

// advanceAlpha applies the α periods that ended at or before now.
func (d *dcqcn) advanceAlpha(now time.Time) {
	g := uint64(d.p.RPDCETCPG)
	for !now.Before(d.alphaNext) {
		if d.cnpInPeriod {
			d.alpha = uint32(uint64(d.alpha)*g/1024 + (1024-g)<<alphaShift)
			d.cnpInPeriod = false
		} else {
			if d.alpha == 0 {
				// Nothing changes until the next CNP: skip to the period
				// that holds now.
				per := d.p.RPDCETCPRTT
				k := now.Sub(d.alphaNext)/per + 1
				d.alphaNext = d.alphaNext.Add(k * per)
				return
			}
			d.alpha = uint32(uint64(d.alpha) * g / 1024)
		}
		d.alpha = min(d.alpha, 1023<<alphaShift)
		d.alphaNext = d.alphaNext.Add(d.p.RPDCETCPRTT)
	}
}

// pacer is the token bucket a QP's requester sends through: credit fills
// at the current rate, up to PaceBurst bytes; a packet may leave when the
// credit is not negative, and takes its length from it. While the credit
// is negative the requester waits until the rate has paid the debt, or
// until the rate changes (a timer increase, a postponed cut), whichever
// comes first, and looks again.
type pacer struct {
	cc dcqcn
	// credit is in 1/8e9 byte (one bit·ns per second): the fill over dt ns
	// at r bit/s is dt·r with no rounding.
	credit int64
	at     time.Time // credit is up to date at at
	rate   int64     // the rate credit fills with since at
	wait   bool      // the requester stopped for the bucket: next is its deadline
	next   time.Time
	// now is the time of the packet being sent; ackReqAt when the last
	// packet with AckReq left.
	now, ackReqAt time.Time
}

// byteCredit is one byte in credit units.
const byteCredit = 8 * int64(time.Second)

// maxFill bounds one update's fill so that dt·r fits in an int64 up to
// 400 Gb/s; a longer gap is filled by the next update.
const maxFill = 10 * time.Millisecond

// update brings the credit up to now and takes the rate at now.
func (p *pacer) update(now time.Time) {
	if p.at.IsZero() {
		p.at, p.rate = now, p.cc.rate(now)
		return
	}
	if dt := now.Sub(p.at); dt > 0 {
		p.credit += int64(min(dt, maxFill)) * p.rate
		if lim := int64(p.cc.p.PaceBurst) * byteCredit; p.credit > lim {
			p.credit = lim
		}
		p.at = now
	}
	p.rate = p.cc.rate(now)
}

// blocked reports whether a packet must wait at now, and sets next.
func (p *pacer) blocked(now time.Time) bool {
	p.now = now
	p.update(now)
	if p.credit >= 0 {
		return false
	}
	p.wait = true
	p.next = now.Add(time.Duration((-p.credit + p.rate - 1) / p.rate))
	if t, ok := p.cc.nextChange(); ok && t.Before(p.next) && t.After(now) {
		p.next = t
	}
	return true
}

// sent charges n bytes sent at now.
func (p *pacer) sent(now time.Time, n int) {
	p.update(now)
	p.credit -= int64(n) * byteCredit
	p.cc.sent(now, n)
}

// nextChange returns the next time RC changes without a CNP: the next
// timer increase or the postponed cut.
func (d *dcqcn) nextChange() (time.Time, bool) {
	var t time.Time
	if d.active {
		t = d.timerNext
	}
	if d.pendingCut {
		if c := d.lastCut.Add(d.p.RPRateReduceMonitorPer); t.IsZero() || c.Before(t) {
			t = c
		}
	}
	return t, !t.IsZero()
}

// bytesTime is how long n bytes take at r bits per second.
func bytesTime(n int, r int64) time.Duration {
	return time.Duration(int64(n) * 8 * int64(time.Second) / r)
}
