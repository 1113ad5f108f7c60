package wire

// PSN is a 24-bit packet sequence number (IBTA 9.7.1). All arithmetic wraps
// modulo 2^24 and comparisons are only meaningful within a window of ±2^23,
// exactly like rxe's psn_compare: (int32)((a-b) << 8).
type PSN uint32

// PSNMask keeps the low 24 bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & PSNMask) }

// Diff returns the signed distance p-q, in the range [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Compare returns -1, 0 or +1 when p is before, equal to, or after q.
func (p PSN) Compare(q PSN) int {
	d := p.Diff(q)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p lies in [start, start+size).
func (p PSN) InWindow(start PSN, size uint32) bool {
	d := p.Diff(start)
	return d >= 0 && uint32(d) < size
}

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }
