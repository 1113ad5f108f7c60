package qp

import "testing"

// WithoutRawBackends makes OpenInterface choose backends as it does outside
// Linux (withoutRawBackends) until t ends, so that Linux tests run that path.
func WithoutRawBackends(t testing.TB) {
	old := openRaw
	openRaw = withoutRawBackends
	t.Cleanup(func() { openRaw = old })
}
