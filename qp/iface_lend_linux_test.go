//go:build linux

package qp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// passThrough is a WrapLink wrapper that forwards everything it can.
type passThrough struct{ nic.Link }

func (l passThrough) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return l.Link.(nic.Poller).TryReadBatch(bufs, sizes)
}

// TestInterfaceLendsOwnedOnly: an AF_XDP device's reader lends the frames
// (nic.RxLender) in the default mode and in busy-poll, but not through a
// WrapLink wrapper (which may keep, copy or drop frames).
func TestInterfaceLendsOwnedOnly(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true})
	for _, c := range []struct {
		name string
		o    qp.InterfaceOptions
		want bool
	}{
		{"default", qp.InterfaceOptions{Backend: qp.BackendAFXDP}, true},
		{"busy-poll", qp.InterfaceOptions{Backend: qp.BackendAFXDP, Mode: qp.ModeBusyPoll}, true},
		{"wrapped", qp.InterfaceOptions{Backend: qp.BackendAFXDP, Mode: qp.ModeBusyPoll,
			WrapLink: func(l nic.Link) nic.Link { return passThrough{l} }}, false},
	} {
		dev, _ := open(t, p, netns.A, c.o)
		lends, _ := qp.RxLends(dev)
		dev.Close()
		if lends != c.want {
			t.Errorf("%s: reads lend %v, want %v", c.name, lends, c.want)
		}
	}
}

// TestInterfaceLendsQueues: two-queue AF_XDP devices (their readers parse
// lent frames outside the device lock, preparse) move 64 KiB WRITEs on
// four QP pairs, spread over both queues, byte for byte; then device B is
// closed while A's WRITEs are still arriving, and A's next ones fail
// instead of anything touching B's freed memory.
func TestInterfaceLendsQueues(t *testing.T) {
	p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true, Queues: 2})
	o := qp.InterfaceOptions{Backend: qp.BackendAFXDP, Queues: 2, Seed: 1}
	da, _ := open(t, p, netns.A, o)
	defer da.Close()
	o.Seed = 2
	db, _ := open(t, p, netns.B, o)
	defer db.Close()
	if lends, _ := qp.RxLends(db); !lends {
		t.Fatal("a two-queue AF_XDP device does not lend")
	}
	const n = 64 << 10
	var as, bs []*end
	for i := range 4 {
		a, b := connectEnds(t, da, db, sim.QPOptions{BufSize: 2 * n, CQSize: 64, SharedCQ: true,
			Access: qp.LocalWrite | qp.RemoteWrite, Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}, uint32(10*i+1), uint32(10*i+2))
		as, bs = append(as, a), append(bs, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard only
	defer cancel()
	for round := range 4 {
		for i, a := range as {
			for j := range n {
				a.buf[j] = byte(j*7 + i + 3*round)
			}
			wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
				SGL:        []qp.SGE{{Addr: a.mr.IOVA(), Length: n, LKey: a.mr.LKey()}},
				RemoteAddr: bs[i].mr.IOVA(), RKey: bs[i].mr.RKey()}
			if err := a.q.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
		for i, a := range as {
			var wc [1]qp.WC
			if k, err := a.cq.Wait(ctx, wc[:]); k != 1 || err != nil || wc[0].Status != qp.WCSuccess {
				t.Fatalf("round %d QP %d: %v %v", round, i, wc[0], err)
			}
			db.Counters() // fence: B's memory was written under B's device lock
			if !bytes.Equal(bs[i].buf[:n], a.buf[:n]) {
				t.Fatalf("round %d QP %d: data differ", round, i)
			}
		}
		// And back: the next round's WRITEs reach B's memory through the
		// network, which the race detector cannot see; B executes them
		// under its device lock, taken here after the reads.
		db.Counters()
	}
	// Close B while A streams into it.
	for i, a := range as {
		for k := range 8 {
			wr := &qp.SendWR{WRID: uint64(100 + 8*i + k), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
				SGL:        []qp.SGE{{Addr: a.mr.IOVA(), Length: n, LKey: a.mr.LKey()}},
				RemoteAddr: bs[i].mr.IOVA(), RKey: bs[i].mr.RKey()}
			if err := a.q.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(time.Millisecond)
	if err := db.Close(); err != nil {
		t.Fatalf("close B: %v", err)
	}
}
