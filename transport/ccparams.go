package transport

import (
	"fmt"
	"strconv"
	"time"
)

// ccParam is one entry of the cc_params table: its mlx5 name and where it
// lives in DCQCNParams. Values are integers in the firmware's units: µs for
// times, Mb/s for rates, 0/1 for switches.
type ccParam struct {
	name string
	dur  func(*DCQCNParams) *time.Duration
	u32  func(*DCQCNParams) *uint32
	u8   func(*DCQCNParams) *uint8
	flag func(*DCQCNParams) *bool
}

var ccParams = []ccParam{
	{name: "rp_clamp_tgt_rate", flag: func(p *DCQCNParams) *bool { return &p.RPClampTgtRate }},
	{name: "rp_clamp_tgt_rate_ati", flag: func(p *DCQCNParams) *bool { return &p.RPClampTgtRateATI }},
	{name: "rp_time_reset", dur: func(p *DCQCNParams) *time.Duration { return &p.RPTimeReset }},
	{name: "rp_byte_reset", u32: func(p *DCQCNParams) *uint32 { return &p.RPByteReset }},
	{name: "rp_threshold", u32: func(p *DCQCNParams) *uint32 { return &p.RPThreshold }},
	{name: "rp_ai_rate", u32: func(p *DCQCNParams) *uint32 { return &p.RPAIRate }},
	{name: "rp_max_rate", u32: func(p *DCQCNParams) *uint32 { return &p.RPMaxRate }},
	{name: "rp_hai_rate", u32: func(p *DCQCNParams) *uint32 { return &p.RPHAIRate }},
	{name: "rp_min_dec_fac", u32: func(p *DCQCNParams) *uint32 { return &p.RPMinDecFac }},
	{name: "rp_min_rate", u32: func(p *DCQCNParams) *uint32 { return &p.RPMinRate }},
	{name: "rp_rate_to_set_on_first_cnp", u32: func(p *DCQCNParams) *uint32 { return &p.RPRateToSetOnFirstCNP }},
	{name: "rp_dce_tcp_g", u32: func(p *DCQCNParams) *uint32 { return &p.RPDCETCPG }},
	{name: "rp_dce_tcp_rtt", dur: func(p *DCQCNParams) *time.Duration { return &p.RPDCETCPRTT }},
	{name: "rp_rate_reduce_monitor_period", dur: func(p *DCQCNParams) *time.Duration { return &p.RPRateReduceMonitorPer }},
	{name: "rp_initial_alpha_value", u32: func(p *DCQCNParams) *uint32 { return &p.RPInitialAlphaValue }},
	{name: "rp_gd", u32: func(p *DCQCNParams) *uint32 { return &p.RPGD }},
	{name: "np_min_time_between_cnps", dur: func(p *DCQCNParams) *time.Duration { return &p.NPMinTimeBetweenCNPs }},
	{name: "np_cnp_dscp", u8: func(p *DCQCNParams) *uint8 { return &p.NPCNPDSCP }},
	{name: "np_cnp_prio", u8: func(p *DCQCNParams) *uint8 { return &p.NPCNPPrio }},
}

// Each calls fn with every parameter's mlx5 cc_params name and value, in
// the firmware's units (µs, Mb/s, 0/1), in the order of mlx5's list.
func (p *DCQCNParams) Each(fn func(name string, value uint64)) {
	for _, c := range ccParams {
		fn(c.name, c.get(p))
	}
}

func (c *ccParam) get(p *DCQCNParams) uint64 {
	switch {
	case c.dur != nil:
		return uint64(*c.dur(p) / time.Microsecond)
	case c.u32 != nil:
		return uint64(*c.u32(p))
	case c.u8 != nil:
		return uint64(*c.u8(p))
	}
	if *c.flag(p) {
		return 1
	}
	return 0
}

// Set sets the parameter named as in mlx5's cc_params (rp_ai_rate,
// np_min_time_between_cnps, ...) from a decimal value in the firmware's
// units, as one writes to /sys/kernel/debug/mlx5/<dev>/cc_params/<name>.
// Check still has to accept the whole set.
func (p *DCQCNParams) Set(name, value string) error {
	for _, c := range ccParams {
		if c.name != name {
			continue
		}
		v, err := strconv.ParseUint(value, 10, 32)
		if err != nil {
			return fmt.Errorf("cc_params: %s=%q: want a decimal integer: %w", name, value, ErrInvalidArgument)
		}
		switch {
		case c.dur != nil:
			*c.dur(p) = time.Duration(v) * time.Microsecond
		case c.u32 != nil:
			*c.u32(p) = uint32(v)
		case c.u8 != nil:
			if v > 255 {
				return fmt.Errorf("cc_params: %s=%d: want 0..255: %w", name, v, ErrInvalidArgument)
			}
			*c.u8(p) = uint8(v)
		default:
			if v > 1 {
				return fmt.Errorf("cc_params: %s=%d: want 0 or 1: %w", name, v, ErrInvalidArgument)
			}
			*c.flag(p) = v == 1
		}
		return nil
	}
	return fmt.Errorf("cc_params: no parameter %q: %w", name, ErrInvalidArgument)
}
