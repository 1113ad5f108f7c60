package perftest

import (
	"errors"
	"testing"
)

// TestParseUC: -c UC as perftest 4.5's change_conn_type and
// force_dependecies take it.
func TestParseUC(t *testing.T) {
	for _, c := range []struct {
		test Test
		args []string
		err  error
		rx   int
	}{
		{SendBW, []string{"-c", "UC"}, nil, 1000},                 // rx_depth 512 → min(iters, UC_MAX_RX)
		{SendBW, []string{"-c", "UC", "-n", "20000"}, nil, 16000}, // UC_MAX_RX
		{SendBW, []string{"-c", "UC", "-n", "100"}, nil, 100},     // capped at iters first
		{SendBW, []string{"-c", "UC", "-r", "64"}, nil, 64},       // an explicit depth stays
		{SendBW, []string{"-c", "RC", "-n", "20000"}, nil, 512},   // RC unchanged
		{WriteBW, []string{"--connection=UC"}, nil, 512},          // rx_depth unused by WRITE, capped
		{ReadBW, []string{"-c", "UC"}, ErrUsage, 0},               // UC connection not possible in READ/ATOMIC verbs
		{AtomicLat, []string{"-c", "UC"}, ErrUsage, 0},            // likewise
		{SendBW, []string{"-c", "UC", "-R"}, ErrUsage, 0},         // UC is not supported in librdmacm
		{SendBW, []string{"-c", "XRC"}, ErrUnsupported, 0},        // a real type goroce does not do
		{SendBW, []string{"-c", "FOO"}, ErrUsage, 0},              // Invalid Connection type
	} {
		f, err := ParseFlags(c.test, c.args)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%v %q: %v, want %v", c.test, c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %q: %v", c.test, c.args, err)
			continue
		}
		if c.test.Verb() == Send && f.RxDepth != c.rx {
			t.Errorf("%v %q: rx_depth %d, want %d", c.test, c.args, f.RxDepth, c.rx)
		}
	}
}
