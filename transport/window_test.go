package transport_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// TestSetWindow: a QP with a wider window (a goroce extension) sends up to
// compPSN + window before the first ACK; a go-back-N narrows it to rxe's
// 128 until the PSNs then in flight and a whole wide window after them
// were acknowledged, then it is wide again; CntWindowFull counts the
// stops. The responder needs nothing: B is an unchanged engine.
func TestSetWindow(t *testing.T) {
	e := newEPair(t, eopts{bufSize: 4 << 20, timeout: 14, retry: 7})
	if err := e.a.q.SetWindow(transport.MaxWindow + 1); !errors.Is(err, transport.ErrInvalidArgument) {
		t.Fatalf("SetWindow beyond MaxWindow: %v", err)
	}
	if w := e.a.q.Window(); w != transport.MaxUnackedPSNs {
		t.Fatalf("default window %d", w)
	}
	const wide = 512
	must(t, e.a.q.SetWindow(wide))
	for i := range e.a.buf {
		e.a.buf[i] = byte(i * 7)
	}
	write := func(id uint64, off, n int) int {
		t.Helper()
		h := e.a.out.tail - e.a.out.head
		e.post(e.a, &transport.SendWR{WRID: id, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []transport.SGE{e.a.sge(off, n)}, RemoteAddr: e.b.mr.IOVA() + uint64(off), RKey: e.b.mr.RKey()})
		return e.a.out.tail - e.a.out.head - h
	}
	done := func(id uint64) {
		t.Helper()
		e.run(100)
		if w := e.a.scq.take(); len(w) != 1 || w[0].Status != transport.WCSuccess || w[0].WRID != id {
			t.Fatalf("completions %v", w)
		}
	}
	// Wide: 513 packets (comp_psn + window inclusive, as rxe's 128 + 1).
	if n := write(1, 0, 900*1024); n != wide+1 {
		t.Fatalf("%d packets sent before any ACK with window %d", n, wide)
	}
	full := e.a.q.Counters[transport.CntWindowFull]
	if full == 0 {
		t.Fatal("window_full not counted")
	}
	done(1)
	// One data packet lost: the go-back-N narrows the window.
	dropped := false
	e.hook = func(from *side, p *wire.Packet) bool {
		if from == e.a && !dropped && p.BTH.PSN() == 900+10 {
			dropped = true
			return false
		}
		return true
	}
	write(2, 900*1024, 900*1024)
	done(2)
	if !dropped || e.a.q.Counters[transport.CntRcvdSeqErr] == 0 {
		t.Fatalf("no loss recovered: dropped %v, rcvd_seq_err %d", dropped, e.a.q.Counters[transport.CntRcvdSeqErr])
	}
	// compPSN 1800 is short of the 900+513 PSNs in flight at the loss plus
	// 512: still narrow.
	if w := e.a.q.Window(); w != transport.MaxUnackedPSNs {
		t.Fatalf("window %d after a go-back-N, want %d", w, transport.MaxUnackedPSNs)
	}
	if n := write(3, 1800*1024, 900*1024); n != transport.MaxUnackedPSNs+1 {
		t.Fatalf("%d packets sent before any ACK after a go-back-N, want %d", n, transport.MaxUnackedPSNs+1)
	}
	done(3)
	// Acknowledged past the mark: wide again.
	if w := e.a.q.Window(); w != wide {
		t.Fatalf("window %d after a clean window, want %d", w, wide)
	}
	if n := write(4, 2700*1024, 900*1024); n != wide+1 {
		t.Fatalf("%d packets sent before any ACK, wide again, want %d", n, wide+1)
	}
	done(4)
	if !bytes.Equal(e.b.buf[:3600*1024], e.a.buf[:3600*1024]) {
		t.Fatal("data differs")
	}
	// 0 restores rxe's window.
	must(t, e.a.q.SetWindow(0))
	if n := write(5, 0, 900*1024); n != transport.MaxUnackedPSNs+1 {
		t.Fatalf("%d packets sent with the window reset", n)
	}
	done(5)
}
