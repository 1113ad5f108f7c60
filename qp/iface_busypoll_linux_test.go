//go:build linux

package qp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// TestBusyPollEachBackend opens busy-poll devices on both ends of a veth
// pair with each backend and runs a 64 KiB WRITE, a 64 KiB READ, a SEND and
// a FETCH_ADD. A is driven only by the test's own CQ.Wait calls, B by
// Device.Progress in a goroutine (a target whose application polls
// nothing) plus the test's wait for its receive completion.
func TestInterfaceBusyPollEachBackend(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true})
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		t.Run(backend, func(t *testing.T) { busyPollBackend(t, p, backend) })
	}
}

func busyPollBackend(t *testing.T, p *netns.Pair, backend string) {
	mk := func(s netns.Side) *qp.Device {
		dev, info := open(t, p, s, qp.InterfaceOptions{Backend: backend, Mode: qp.ModeBusyPoll, Seed: int64(s) + 1})
		t.Cleanup(func() { dev.Close() })
		if dev.Mode() != qp.ModeBusyPoll || info.Backend != backend {
			t.Fatalf("mode %v, backend %s", dev.Mode(), info.Backend)
		}
		return dev
	}
	a, b := connectEnds(t, mk(netns.A), mk(netns.B), sim.QPOptions{BufSize: 256 << 10, CQSize: 64, SharedCQ: true,
		Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard only
	defer cancel()
	progress := make(chan error, 1)
	pctx, stop := context.WithCancel(ctx)
	go func() { progress <- b.dev.Progress(pctx) }()
	defer func() {
		stop()
		if err := <-progress; !errors.Is(err, context.Canceled) {
			t.Errorf("Progress: %v", err)
		}
	}()
	wait := func(e *end, wrID uint64, op qp.WCOpcode) {
		t.Helper()
		var wc [1]qp.WC
		if n, err := e.cq.Wait(ctx, wc[:]); n != 1 || err != nil {
			t.Fatalf("wait for wr %d: %d, %v", wrID, n, err)
		}
		if wc[0].WRID != wrID || wc[0].Status != qp.WCSuccess || wc[0].Opcode != op {
			t.Fatalf("completion %v, want wr %d %v", wc[0], wrID, op)
		}
	}
	sge := func(e *end, off, n int) []qp.SGE {
		return []qp.SGE{{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}
	}
	post := func(wr *qp.SendWR) {
		t.Helper()
		wr.Flags |= qp.SendSignaled
		if err := a.q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	// B's memory is written by B's Progress goroutine under B's device
	// mutex, and the test learns of it through the kernel (A's completion),
	// which the race detector cannot see: fence through that mutex before
	// touching B's memory, as the receive goroutines' users do.
	fence := func() { b.dev.Counters() }
	const n = 64 << 10
	for i := range n {
		a.buf[i] = byte(i*7 + 1)
		b.buf[n+i] = byte(i*13 + 5)
	}
	fence()
	post(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SGL: sge(a, 0, n), RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	wait(a, 1, qp.WCRDMAWrite)
	fence()
	if !bytes.Equal(b.buf[:n], a.buf[:n]) {
		t.Fatal("WRITE: data differ")
	}
	post(&qp.SendWR{WRID: 2, Opcode: qp.WRRDMARead, SGL: sge(a, n, n), RemoteAddr: b.mr.IOVA() + n, RKey: b.mr.RKey()})
	wait(a, 2, qp.WCRDMARead)
	if !bytes.Equal(a.buf[n:2*n], b.buf[n:2*n]) {
		t.Fatal("READ: data differ")
	}
	if err := b.q.PostRecv(&qp.RecvWR{WRID: 3, SGL: sge(b, 2*n, 100)}); err != nil {
		t.Fatal(err)
	}
	post(&qp.SendWR{WRID: 4, Opcode: qp.WRSend, SGL: sge(a, 0, 100)})
	wait(a, 4, qp.WCSend)
	wait(b, 3, qp.WCRecv)
	fence()
	if !bytes.Equal(b.buf[2*n:2*n+100], a.buf[:100]) {
		t.Fatal("SEND: data differ")
	}
	binary.LittleEndian.PutUint64(b.buf[3*n:], 40)
	fence()
	post(&qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAdd, SGL: sge(a, 3*n, 8), RemoteAddr: b.mr.IOVA() + 3*n,
		RKey: b.mr.RKey(), CompareAdd: 2})
	wait(a, 5, qp.WCFetchAdd)
	fence()
	if got, orig := binary.LittleEndian.Uint64(b.buf[3*n:]), binary.LittleEndian.Uint64(a.buf[3*n:]); got != 42 || orig != 40 {
		t.Fatalf("FETCH_ADD: target %d (want 42), returned %d (want 40)", got, orig)
	}
	if c := a.q.Counters(); c[qp.CntRetryExceededErr] != 0 || c[qp.CntRcvdNAKs] != 0 {
		t.Errorf("A counters: %v", c)
	}
	// AF_XDP lends the received frames in its UMEM (nic.RxLender): the
	// traffic above was read without a copy.
	if lends, lent := qp.RxLends(a.dev); lends != (backend == qp.BackendAFXDP) || lent != lends {
		t.Errorf("%s: reads lend %v, last frame lent %v", backend, lends, lent)
	}
}

// noTry is a WrapLink wrapper without TryReadBatch.
type noTry struct{ nic.Link }

// TestBusyPollNeedsTryRead: a WrapLink wrapper that hides TryReadBatch
// makes a busy-poll Open fail with a reason, releasing what it took.
func TestInterfaceBusyPollNeedsTryRead(t *testing.T) {
	p := netns.NewPair(t, netns.Options{})
	err := p.Do(netns.A, func() error {
		dev, _, err := qp.OpenInterface(context.Background(), p.A.Ifname, qp.InterfaceOptions{Backend: qp.BackendAFPacket, Mode: qp.ModeBusyPoll, Logger: quiet,
			WrapLink: func(l nic.Link) nic.Link { return noTry{l} }})
		if dev != nil {
			dev.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "TryReadBatch") {
		t.Fatalf("err %v, want one naming TryReadBatch", err)
	}
	if !portFree(t, p, netns.A, p.A.Addr) {
		t.Errorf("port held after the failed Open")
	}
}
