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
// (newLinkRxBatch; fixed when the device opens) and, for a busy-poll
// device, whose reads happen only in the caller's Poll, whether the last
// read's first frame lay outside the reader's own buffers. A self-driving
// device's reader sets its buffers outside d.mu (a multi-queue reader
// parses there too), so lent is false for it: looking would race.
func RxLends(d *Device) (lends, lent bool) {
	switch drv := d.drv.(type) {
	case *selfDriver:
		return drv.rb.lends, false
	case *busyDriver:
		d.mu.Lock()
		defer d.mu.Unlock()
		return drv.rx.lends, cap(drv.rx.bufs[0]) < d.cfg.Link.MTU()
	}
	return false, false
}
