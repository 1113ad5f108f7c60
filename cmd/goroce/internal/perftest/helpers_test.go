package perftest

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestTargetVAddr(t *testing.T) {
	// 64-byte messages, cycle buffer 4096, one QP: one BuffSize (a page)
	// past the buffer's start, as the page-aligned vaddrs of the captures.
	if got := TargetVAddr(0x55e227702000, 1, 0, 64, 4096); got != 0x55e227703000 {
		t.Fatalf("TargetVAddr = %#x", got)
	}
	if got := TargetVAddr(0x1000, 2, 1, 65536, 4096); got != 0x1000+3*65536 {
		t.Fatalf("TargetVAddr = %#x", got)
	}
	if BuffSize(8, -1) != 8 {
		t.Fatal("BuffSize with a negative cycle buffer")
	}
}

func BenchmarkEncodeKeyMsg(b *testing.B) {
	k := KeyMsg{OutReads: 0x80, QPN: 0x16, PSN: 0xd73a80, RKey: 0x7a0, VAddr: 0x55980184a000}
	b.ReportAllocs()
	for b.Loop() {
		_ = EncodeKeyMsg(k)
	}
}

func BenchmarkDecodeKeyMsg(b *testing.B) {
	m := EncodeKeyMsg(KeyMsg{OutReads: 0x80, QPN: 0x16, PSN: 0xd73a80, RKey: 0x7a0, VAddr: 0x55980184a000})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeKeyMsg(m[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestListenDialRun runs a whole write_bw through the CLI helpers, on
// 127.0.0.1, with per-port reports (nine blobs).
func TestListenDialRun(t *testing.T) {
	ln, err := Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	rep := BWReport{Size: 65536, Iters: 5000, BWPeak: 1, BWAvg: 2, MsgRateAvg: 3, BWAvgP1: 4, MsgRateAvgP1: 5, BWAvgP2: 6, MsgRateAvgP2: 7}
	setup := func(Negotiated) ([]KeyMsg, error) { return keysFor(9, 1), nil }
	type res struct {
		out Outcome
		err error
	}
	srvc := make(chan res, 1)
	go func() {
		conn, err := AcceptOne(ln)
		if err != nil {
			srvc <- res{err: err}
			return
		}
		conn.SetDeadline(time.Now().Add(time.Minute))
		out, err := Run(context.Background(), conn, Config{Test: WriteBW, Server: true, ReportPerPort: true}, Hooks{Setup: setup})
		srvc <- res{out, err}
	}()
	conn, err := Dial("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(time.Minute))
	var sent []string
	_, err = Run(context.Background(), conn, Config{Test: WriteBW, ReportPerPort: true, Plan: PlanConfig{Size: 65536},
		Trace: func(out bool, what string, b []byte) {
			if out {
				sent = append(sent, what)
			}
		}},
		Hooks{Setup: setup, Traffic: func(uint64, []KeyMsg) (BWReport, error) { return rep, nil }})
	if err != nil {
		t.Fatal(err)
	}
	r := <-srvc
	if r.err != nil || r.out.RemoteReport != rep {
		t.Fatalf("server: %+v, %v", r.out.RemoteReport, r.err)
	}
	want := strings.Fields("version cycle cache MTU key key key key report report report report report report report report report key done")
	if len(sent) != len(want) {
		t.Fatalf("client sent %q", sent)
	}
	for i, w := range want {
		if !strings.HasPrefix(sent[i], w) {
			t.Fatalf("client message %d is %q, want %q…", i, sent[i], w)
		}
	}
	if s := (&StepError{Index: 3, Step: Step{Kind: StepSync}, Err: io.EOF}).Error(); s != "perftest: step 3 (sync): EOF" {
		t.Fatalf("StepError: %q", s)
	}
	if StepKind(99).String() != "StepKind(99)" || Test(99).String() != "Test(99)" {
		t.Fatal("String of unknown values")
	}
}
