package qp

import "testing"

// WithoutRawBackends makes OpenInterface choose backends as it does outside
// Linux (withoutRawBackends) until t ends, so that Linux tests run that path.
func WithoutRawBackends(t testing.TB) {
	old := openRaw
	openRaw = withoutRawBackends
	t.Cleanup(func() { openRaw = old })
}

// RxLends reports whether the reads of d's link reader lend their frames
// (newLinkRxBatch) and, after traffic, whether the last read's first frame
// lay outside the reader's own buffers.
func RxLends(d *Device) (lends, lent bool) {
	var b *rxBatch
	switch drv := d.drv.(type) {
	case *selfDriver:
		b = drv.rb
	case *busyDriver:
		b = drv.rx
	}
	if b == nil {
		return false, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return b.lends, cap(b.bufs[0]) < d.cfg.Link.MTU()
}
