package qp

// White-box tests of how often the busy-poll waits give way: OS yields
// (osYield) and goroutine yields (gosched) are counted through their
// variables; the devices are idle, so every look is fruitless.

import (
	"context"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic"
)

type yieldCount struct{ os, gosched int }

func countYields(t *testing.T, onGosched func(n int)) *yieldCount {
	t.Helper()
	c := &yieldCount{}
	savedOS, savedG := osYield, gosched
	osYield = func() { c.os++ }
	gosched = func() {
		c.gosched++
		if onGosched != nil {
			onGosched(c.gosched)
		}
	}
	t.Cleanup(func() { osYield, gosched = savedOS, savedG })
	return c
}

func openIdleBusy(t *testing.T) (*Device, *nic.MemLink) {
	t.Helper()
	la, lb := nic.NewMemPair(nic.MemConfig{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	d, err := Open(Config{Link: lb, IP: netip.MustParseAddr("198.18.0.2"), Mode: ModeBusyPoll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, la
}

// TestBusyDevicePollYields: Device.Poll called directly (write_lat's
// arrival wait spins on it) yields the OS thread every yieldEvery-th
// fruitless call in a row, as CQ.Poll does; a Poll that handles a frame
// starts the count again. It never calls gosched: giving way to
// goroutines is the waits' business.
func TestBusyDevicePollYields(t *testing.T) {
	c := countYields(t, nil)
	d, peer := openIdleBusy(t)
	for range 3 * yieldEvery {
		d.Poll()
	}
	if c.os != 3 {
		t.Fatalf("%d fruitless Polls: %d OS yields, want 3", 3*yieldEvery, c.os)
	}
	for range yieldEvery - 1 {
		d.Poll()
	}
	peer.WriteBatch([][]byte{make([]byte, 60)}) // a frame (dropped, but handled)
	if n := d.Poll(); n == 0 {
		t.Fatal("the Poll after the frame handled nothing")
	}
	for range yieldEvery - 1 {
		d.Poll()
	}
	if c.os != 3 {
		t.Fatalf("the count did not restart after a Poll that found work: %d OS yields, want 3", c.os)
	}
	d.Poll()
	if c.os != 4 || c.gosched != 0 {
		t.Fatalf("OS yields %d (want 4), gosched %d (want 0)", c.os, c.gosched)
	}
}

// TestBusyWaitsGoschedEvery: CQ.Wait, CQ.WaitEvent, Device.Progress and
// MR.WaitWrite on an idle busy-poll device give way to other goroutines
// once every goschedEvery fruitless looks, not at each, and the OS thread every
// yieldEvery looks meanwhile. The counting gosched ends each wait at its
// second call, after 2*goschedEvery looks.
func TestBusyWaitsGoschedEvery(t *testing.T) {
	waits := map[string]func(ctx context.Context, d *Device, cq *CQ) error{
		"CQ.Wait": func(ctx context.Context, d *Device, cq *CQ) error {
			_, err := cq.Wait(ctx, make([]WC, 1))
			return err
		},
		"CQ.WaitEvent": func(ctx context.Context, d *Device, cq *CQ) error {
			cq.ReqNotify(false)
			return cq.WaitEvent(ctx)
		},
		"Device.Progress": func(ctx context.Context, d *Device, cq *CQ) error {
			return d.Progress(ctx)
		},
		"MR.WaitWrite": func(ctx context.Context, d *Device, cq *CQ) error {
			mr, err := d.AllocPD().RegMR(make([]byte, 64), LocalWrite|RemoteWrite)
			if err != nil {
				return err
			}
			_, err = mr.WaitWrite(ctx, mr.Writes())
			return err
		},
	}
	for name, wait := range waits {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := countYields(t, func(n int) {
				if n == 2 {
					cancel()
				}
			})
			d, _ := openIdleBusy(t)
			cq, err := d.CreateCQ(4)
			if err != nil {
				t.Fatal(err)
			}
			if err := wait(ctx, d, cq); err != context.Canceled {
				t.Fatalf("wait ended with %v, want context.Canceled", err)
			}
			if c.gosched != 2 || c.os != 2*goschedEvery/yieldEvery {
				t.Fatalf("%d looks: gosched %d (want 2), OS yields %d (want %d)",
					2*goschedEvery, c.gosched, c.os, 2*goschedEvery/yieldEvery)
			}
		})
	}
}

// TestBusyIdlePollAllocates: a fruitless poll of a busy-poll device, its
// yields included, allocates nothing (CQ.Poll and Device.Poll).
func TestBusyIdlePollAllocates(t *testing.T) {
	c := countYields(t, nil)
	d, _ := openIdleBusy(t)
	cq, err := d.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]WC, 4)
	if a := testing.AllocsPerRun(1000, func() { cq.Poll(wcs) }); a != 0 {
		t.Errorf("idle CQ.Poll: %v allocations per poll", a)
	}
	if a := testing.AllocsPerRun(1000, func() { d.Poll() }); a != 0 {
		t.Errorf("idle Device.Poll: %v allocations per poll", a)
	}
	if c.os == 0 {
		t.Fatal("2002 idle polls and no OS yield")
	}
}
