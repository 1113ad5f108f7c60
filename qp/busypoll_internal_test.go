package qp

// The white-box test of busy-poll mode: it replaces osYield to count the
// yields. The black-box ones are in busypoll_test.go (package qp_test).

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic"
)

// TestBusyPollYieldsWhenIdle: polling an idle busy-poll device gives the OS
// thread away once every yieldEvery fruitless polls (and a poll that finds
// work starts the count again); a manual device never yields.
func TestBusyPollYieldsWhenIdle(t *testing.T) {
	var yields int
	saved := osYield
	osYield = func() { yields++ }
	defer func() { osYield = saved }()
	la, lb := nic.NewMemPair(nic.MemConfig{})
	defer la.Close()
	defer lb.Close()
	d, err := Open(Config{Link: lb, IP: netip.MustParseAddr("198.18.0.2"), Mode: ModeBusyPoll})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cq, _ := d.CreateCQ(4)
	for range 3*yieldEvery + 1 {
		cq.Poll(nil)
	}
	if yields != 3 {
		t.Fatalf("%d idle polls: %d yields, want 3", 3*yieldEvery+1, yields)
	}
	la.WriteBatch([][]byte{make([]byte, 60)}) // work: the count restarts
	for range yieldEvery {
		cq.Poll(nil)
	}
	if yields != 3 {
		t.Fatalf("after a busy poll and %d idle ones: %d yields, want 3", yieldEvery-1, yields)
	}
	cq.Poll(nil)
	if yields != 4 {
		t.Fatalf("yields %d, want 4", yields)
	}
	m, err := Open(Config{Link: la, IP: netip.MustParseAddr("198.18.0.1"), Mode: ModeManual})
	if err != nil {
		t.Fatal(err)
	}
	mcq, _ := m.CreateCQ(4)
	for range 2 * yieldEvery {
		mcq.Poll(nil)
		m.Poll()
	}
	if yields != 4 {
		t.Fatalf("a manual device yielded (%d)", yields)
	}
}
