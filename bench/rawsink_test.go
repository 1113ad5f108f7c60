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

// TestBWPeer runs two short bw streams (64 B WRITE, 4 KiB READ) with B's
// device in a process of its own (bench -child peer-bw): every message
// completes, B's ACKs and responses are counted by the child, and the
// CPU covers both processes. Root: namespaces, AF_XDP. No timing is
// asserted.
func TestBWPeer(t *testing.T) {
	pair := netns.NewPair(t, netns.Options{MTU: 1500, Prefix: "goroce-benchtest"})
	r, err := openBWPeer(pair, qp.BackendAFXDP)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, s := range []struct {
		op   qp.WROpcode
		size int
	}{{qp.WRRDMAWrite, sizeSmall}, {qp.WRRDMARead, sizeMid}} {
		tp, w0, w1, err := r.stream(s.op, s.size, limit{d: 200 * time.Millisecond, n: 20_000})
		if err != nil {
			t.Fatalf("%v %d: %v", s.op, s.size, err)
		}
		if tp.msgs == 0 || tp.msgs%bwCQMod != 0 {
			t.Errorf("%v %d: %d messages, want a multiple of %d", s.op, s.size, tp.msgs, bwCQMod)
		}
		if w1.txA == w0.txA || w1.txB == w0.txB {
			t.Errorf("%v %d: frames sent A %d, B %d: want both", s.op, s.size, w1.txA-w0.txA, w1.txB-w0.txB)
		}
		if tp.cpuErr != nil || tp.peerCPU <= 0 || tp.cpu.proc <= tp.peerCPU {
			t.Errorf("%v %d: CPU not measured: %+v (%v)", s.op, s.size, tp.cpu, tp.cpuErr)
		}
	}
}
