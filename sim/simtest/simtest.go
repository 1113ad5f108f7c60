// Package simtest has the testing.TB helpers of package sim: a Net that is
// closed when the test ends and names its seed when the test fails, the
// seeds a test runs (GOROCE_SEED replays one), and connected QPs. It is a
// separate package so that a program importing sim does not link the
// testing package.
package simtest

import (
	"testing"

	"github.com/goroce/goroce/sim"
)

// NewPair is sim.NewPair for a test: a failure to open the pair fails the
// test, the Net is closed when the test ends, and if the test failed its
// log ends with the seed and the command that replays it.
func NewPair(t testing.TB, cfg sim.Config) *sim.Net {
	t.Helper()
	n, err := sim.NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("closing the simulated pair: %v", err)
		}
		if t.Failed() {
			t.Logf("%s: the simulation ran with seed %d (%v mode); replay: GOROCE_SEED=%d go test -run '^%s$'",
				t.Name(), n.Seed(), n.Mode(), n.Seed(), t.Name())
		}
	})
	return n
}

// Seeds returns the seeds a test runs: the one in GOROCE_SEED if it is set
// (to replay a failure), else defaults. A GOROCE_SEED that is not a number
// fails the test rather than silently running the defaults.
func Seeds(t testing.TB, defaults ...int64) []int64 {
	t.Helper()
	s, ok, err := sim.EnvSeed()
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Logf("GOROCE_SEED=%d: running that seed only", s)
		return []int64{s}
	}
	return defaults
}

// Seed returns GOROCE_SEED if it is set, else def (see Seeds).
func Seed(t testing.TB, def int64) int64 {
	t.Helper()
	return Seeds(t, def)[0]
}

// ConnectQPs is sim.ConnectQPs on n's devices; an error fails the test.
func ConnectQPs(t testing.TB, n *sim.Net, oa, ob sim.QPOptions) (a, b *sim.QPEnd) {
	t.Helper()
	a, b, err := n.ConnectQPs(oa, ob)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}
