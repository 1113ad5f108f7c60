//go:build linux

package main

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
)

// TestMain lets the child processes bench starts (peer.go: this binary
// with -child NAME) run from the test binary too.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-child") {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestRateSink runs the AF_XDP raw rate with its receiving end in a
// process of its own (bench -child raw-sink) for a moment: the sink counts
// frames, no more than were sent, and the frames are 64 B WRITEs
// (138 bytes). Root: namespaces, AF_XDP. No timing is asserted.
func TestRateSink(t *testing.T) {
	pair := netns.NewPair(t, netns.Options{MTU: 1500, Prefix: "goroce-benchtest"})
	r, err := rateSink(pair, qp.BackendAFXDP, sizeSmall, limit{d: 300 * time.Millisecond, n: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	if r.frames == 0 || r.frames > uint64(r.sent) {
		t.Fatalf("the sink counted %d frames of %d sent", r.frames, r.sent)
	}
	if r.frameLen != 138 {
		t.Errorf("frames of %d bytes, want 138 (a 64 B WRITE ONLY)", r.frameLen)
	}
	if r.cpuErr != nil || r.cpu.proc <= 0 {
		t.Errorf("CPU not measured: %v, %+v", r.cpuErr, r.cpu)
	}
}
