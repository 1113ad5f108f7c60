package qp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

func mad(class, method uint8, attr uint16, tid uint64) []byte {
	m := make([]byte, qp.MADLen)
	m[0], m[1], m[2], m[3] = 1, class, 2, method
	binary.BigEndian.PutUint64(m[8:], tid)
	binary.BigEndian.PutUint16(m[16:], attr)
	for i := 24; i < len(m); i++ {
		m[i] = byte(i)
	}
	return m
}

func TestGSIExchange(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		n, err := sim.NewPair(sim.Config{Seed: 5, IPv6: ipv6})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		ga, err := n.A.Dev.GSI()
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := n.A.Dev.GSI(); again != ga {
			t.Fatal("second Device.GSI made another QP1")
		}
		if ga.QP().QPN() != 1 {
			t.Fatalf("GSI QPN %d", ga.QP().QPN())
		}
		gb, err := n.B.Dev.GSI()
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var atA, atB []qp.MAD
		// A answers every CM MAD with a copy whose TID is one higher, from
		// inside its handler.
		if _, err := ga.Handle(0x07, func(m qp.MAD) {
			atA = append(atA, qp.MAD{From: m.From, Data: append([]byte(nil), m.Data...)})
			r := append([]byte(nil), m.Data...)
			binary.BigEndian.PutUint64(r[8:], binary.BigEndian.Uint64(r[8:])+1)
			if err := ga.Send(ctx, m.From, r); err != nil {
				t.Errorf("Send from a handler: %v", err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := ga.Handle(0x07, func(qp.MAD) {}); !errors.Is(err, qp.ErrInvalidArgument) {
			t.Fatalf("second handler for class 7: %v", err)
		}
		record := func(m qp.MAD) { atB = append(atB, qp.MAD{From: m.From, Data: append([]byte(nil), m.Data...)}) }
		for _, c := range []uint8{0x07, 0x0A} {
			if _, err := gb.Handle(c, record); err != nil {
				t.Fatal(err)
			}
		}
		toA := qp.MADAddr{GID: n.A.GID(), QPN: 1, QKey: qp.GSIQKey}
		// A CM REQ-like MAD, answered by A's handler.
		if err := gb.Send(ctx, toA, mad(0x07, 0x03, 0x0010, 41)); err != nil {
			t.Fatal(err)
		}
		// A Get of a class nobody handles at A: answered "unsupported".
		if err := gb.Send(ctx, toA, mad(0x0A, 0x01, 0x0020, 50)); err != nil {
			t.Fatal(err)
		}
		// A Send of a class nobody handles: dropped. A CM Get of a non
		// ClassPortInfo attribute: invalid (validate_mad), dropped.
		if err := gb.Send(ctx, toA, mad(0x0B, 0x03, 0x0020, 60)); err != nil {
			t.Fatal(err)
		}
		if err := gb.Send(ctx, toA, mad(0x07, 0x01, 0x0010, 61)); err != nil {
			t.Fatal(err)
		}
		bad := mad(0x07, 0x03, 0x0010, 62)
		bad[0] = 2
		if err := gb.Send(ctx, toA, bad); err != nil {
			t.Fatal(err)
		}
		if err := n.RunUntil(func() bool { return len(atB) >= 2 }, time.Second); err != nil {
			t.Fatalf("ipv6=%v seed %d: %v (at A %d, at B %d)", ipv6, n.Seed(), err, len(atA), len(atB))
		}
		if err := n.RunFor(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if len(atA) != 1 || atA[0].From.QPN != 1 || atA[0].From.GID != n.B.GID() || atA[0].From.QKey != qp.GSIQKey ||
			binary.BigEndian.Uint64(atA[0].Data[8:]) != 41 {
			t.Fatalf("at A: %+v", atA)
		}
		if len(atB) != 2 {
			t.Fatalf("at B: %d MADs", len(atB))
		}
		if tid := binary.BigEndian.Uint64(atB[0].Data[8:]); tid != 42 || atB[0].From.GID != n.A.GID() {
			t.Fatalf("answer: tid %d from %v", tid, atB[0].From.GID)
		}
		r := atB[1].Data
		if r[1] != 0x0A || r[3] != 0x81 || binary.BigEndian.Uint16(r[4:]) != 0x000C || binary.BigEndian.Uint64(r[8:]) != 50 ||
			r[100] != 100 {
			t.Fatalf("unsupported answer: % x", r[:24])
		}
		s := ga.Stats()
		if s.Received != 5 || s.AnsweredUnsupported != 1 || s.DroppedNoHandler != 1 || s.DroppedInvalid != 1 ||
			s.DroppedBadVersion != 1 || s.Dropped != 3 || s.Sent != 2 {
			t.Fatalf("A's stats %+v", s)
		}
		if s := gb.Stats(); s.Sent != 5 || s.Received != 2 {
			t.Fatalf("B's stats %+v", s)
		}

		// Bad sizes and addresses are refused.
		for _, l := range []int{0, 255, 257} {
			if err := gb.Send(ctx, toA, make([]byte, l)); !errors.Is(err, qp.ErrInvalidArgument) {
				t.Fatalf("Send of %d bytes: %v", l, err)
			}
		}
		if err := gb.Send(ctx, qp.MADAddr{GID: n.A.GID()}, mad(7, 3, 0x10, 1)); !errors.Is(err, qp.ErrInvalidArgument) {
			t.Fatalf("Send to QPN 0: %v", err)
		}
		if _, err := gb.Handle(3, nil); !errors.Is(err, qp.ErrInvalidArgument) {
			t.Fatalf("nil handler: %v", err)
		}
	}
}

// TestGSIRealTime runs QP1 on devices with their own goroutines: the
// dispatch goroutine delivers, and Device.Close stops it.
func TestGSIRealTime(t *testing.T) {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ga, err := a.GSI()
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.GSI()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan qp.MAD, 1)
	unregister, err := ga.Handle(0x07, func(m qp.MAD) { got <- qp.MAD{From: m.From, Data: append([]byte(nil), m.Data...)} })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := gb.Send(ctx, qp.MADAddr{GID: gidA, QPN: 1, QKey: qp.GSIQKey}, mad(7, 3, 0x10, 9)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.From.GID != gidB || binary.BigEndian.Uint64(m.Data[8:]) != 9 {
			t.Fatalf("got %+v", m.From)
		}
	case <-ctx.Done():
		t.Fatal("no MAD")
	}
	unregister()
	if _, err := ga.Handle(0x07, func(qp.MAD) {}); err != nil {
		t.Fatalf("class 7 after unregister: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ga.Send(ctx, qp.MADAddr{GID: gidB, QPN: 1}, mad(7, 3, 0x10, 1)); !errors.Is(err, qp.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// A MAD is answered at its Ethernet source: B has no neighbour entry for A
// (a spoofed source nobody answers ARP for looks the same to it), yet its
// "unsupported" GetResp reaches A without resolving anything, and the
// received MAD's From carries the MAC. A Send without a MAC to an address
// that does not resolve fails, and within a second fails again at once
// (negative cache) without asking the resolver.
func TestGSIAnswersL2Source(t *testing.T) {
	la, lb := nic.NewMemPair(nic.MemConfig{})
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	a, err := qp.Open(qp.Config{Name: "a", Link: la, IP: ipA,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: lb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var resolves atomic.Int32
	b, err := qp.Open(qp.Config{Name: "b", Link: lb, IP: ipB,
		Resolve: func(ctx context.Context, ip netip.Addr) (net.HardwareAddr, error) {
			resolves.Add(1)
			return nil, errors.New("no ARP answer")
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ga, err := a.GSI()
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.GSI()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan qp.MAD, 2)
	if _, err := ga.Handle(0x0A, func(m qp.MAD) { got <- qp.MAD{From: m.From, Data: append([]byte(nil), m.Data...)} }); err != nil {
		t.Fatal(err)
	}
	seen := make(chan qp.MADAddr, 1)
	if _, err := gb.Handle(0x07, func(m qp.MAD) { seen <- m.From }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gidB, _ := b.GID(b.IPv4GIDIndex())
	toB := qp.MADAddr{GID: gidB, QPN: 1, QKey: qp.GSIQKey}
	if err := ga.Send(ctx, toB, mad(0x0A, 0x01, 0x20, 70)); err != nil {
		t.Fatal(err)
	}
	if err := ga.Send(ctx, toB, mad(0x07, 0x03, 0x10, 71)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Data[3] != 0x81 || binary.BigEndian.Uint64(m.Data[8:]) != 70 {
			t.Fatalf("answer % x", m.Data[:24])
		}
	case <-ctx.Done():
		t.Fatalf("no answer from B (B's GSI stats %+v)", gb.Stats())
	}
	select {
	case f := <-seen:
		if f.MAC.String() != la.HardwareAddr().String() {
			t.Fatalf("From.MAC %v, want A's %v", f.MAC, la.HardwareAddr())
		}
	case <-ctx.Done():
		t.Fatal("B's CM handler saw nothing")
	}
	if n := resolves.Load(); n != 0 {
		t.Fatalf("B resolved %d times to answer", n)
	}
	gidA, _ := a.GID(a.IPv4GIDIndex())
	for i := range 3 {
		err := gb.Send(ctx, qp.MADAddr{GID: gidA, QPN: 1, QKey: qp.GSIQKey}, mad(7, 3, 0x10, 80))
		if err == nil {
			t.Fatalf("Send %d to an unresolvable address succeeded", i)
		}
	}
	if n := resolves.Load(); n != 1 {
		t.Fatalf("%d resolutions for 3 Sends within the negative cache's second", n)
	}
}

// TestGSIRecovery: QP1 forced into ERR (as a receive or send error would
// move it) is reset, brought back to RTS and its receives reposted: by
// the dispatcher, which finds the flushed receives, or by the next Send,
// whichever comes first. MADs flow again both ways; the flushed
// completions are not counted as MADs.
func TestGSIRecovery(t *testing.T) {
	n, err := sim.NewPair(sim.Config{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ga, err := n.A.Dev.GSI()
	if err != nil {
		t.Fatal(err)
	}
	gb, err := n.B.Dev.GSI()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var atA, atB []uint64
	if _, err := ga.Handle(0x07, func(m qp.MAD) { atA = append(atA, binary.BigEndian.Uint64(m.Data[8:])) }); err != nil {
		t.Fatal(err)
	}
	if _, err := gb.Handle(0x07, func(m qp.MAD) { atB = append(atB, binary.BigEndian.Uint64(m.Data[8:])) }); err != nil {
		t.Fatal(err)
	}
	toA := qp.MADAddr{GID: n.A.GID(), QPN: 1, QKey: qp.GSIQKey}
	toB := qp.MADAddr{GID: n.B.GID(), QPN: 1, QKey: qp.GSIQKey}
	exchange := func(tid uint64) {
		t.Helper()
		if err := gb.Send(ctx, toA, mad(0x07, 0x03, 0x0010, tid)); err != nil {
			t.Fatal(err)
		}
		if err := ga.Send(ctx, toB, mad(0x07, 0x03, 0x0010, tid+1)); err != nil {
			t.Fatal(err)
		}
		if err := n.RunUntil(func() bool { return len(atA) > 0 && atA[len(atA)-1] == tid && len(atB) > 0 && atB[len(atB)-1] == tid+1 }, time.Second); err != nil {
			t.Fatalf("seed %d: MADs %d/%d: %v (at A %v, at B %v)", n.Seed(), tid, tid+1, err, atA, atB)
		}
	}
	exchange(10)
	// A's QP1 to ERR: its dispatcher finds the 256 flushed receives.
	if err := ga.QP().Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := n.RunUntil(func() bool { return ga.QP().State() == qp.StateRTS }, time.Second); err != nil {
		t.Fatalf("A's QP1 stayed in %v: %v", ga.QP().State(), err)
	}
	exchange(20)
	// B's QP1 to ERR, and B sends at once: Send recovers first.
	if err := gb.QP().Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	exchange(30)
	for name, g := range map[string]*qp.GSI{"A": ga, "B": gb} {
		if s := g.Stats(); s.Recovered != 1 || s.Received != 3 || s.Dropped != 0 {
			t.Errorf("%s's stats %+v, want 1 recovery and 3 MADs received", name, s)
		}
	}
	if len(atA) != 3 || len(atB) != 3 {
		t.Errorf("MADs at A %v, at B %v", atA, atB)
	}
}
