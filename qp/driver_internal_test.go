package qp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic"
)

// readOnlyLink hides the in-memory link's WaitReadBatch and TryReadBatch:
// a link that can only block in ReadBatch.
type readOnlyLink struct{ nic.Link }

// TestDriverChoice: Open picks the driver once from Config.Mode and what
// the link can do, and refuses what cannot run.
func TestDriverChoice(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.1")
	for _, c := range []struct {
		mode  Mode
		plain bool // the link has neither WaitReadBatch nor TryReadBatch
		want  string
	}{
		{ModeThreaded, false, "*qp.selfDriver"},
		{ModeThreaded, true, "*qp.threadedDriver"},
		{ModeBusyPoll, false, "*qp.busyDriver"},
		{ModeManual, false, "*qp.manualDriver"},
	} {
		la, lb := nic.NewMemPair(nic.MemConfig{})
		var l nic.Link = la
		if c.plain {
			l = readOnlyLink{la}
		}
		d, err := Open(Config{Link: l, IP: ip, Mode: c.mode})
		if err != nil {
			t.Fatalf("%v (plain %v): %v", c.mode, c.plain, err)
		}
		if got := fmt.Sprintf("%T", d.drv); got != c.want || d.Mode() != c.mode {
			t.Errorf("%v (plain %v): driver %s, mode %v; want %s", c.mode, c.plain, got, d.Mode(), c.want)
		}
		d.Close()
		la.Close()
		lb.Close()
	}
	la, lb := nic.NewMemPair(nic.MemConfig{})
	defer la.Close()
	defer lb.Close()
	for _, m := range []Mode{ModeBusyPoll, ModeManual} {
		if _, err := Open(Config{Link: readOnlyLink{la}, IP: ip, Mode: m}); err == nil {
			t.Errorf("%v on a link without TryReadBatch accepted", m)
		}
	}
	if _, err := Open(Config{Link: la, IP: ip, Mode: 7}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Mode(7): %v, want ErrInvalidArgument", err)
	}
	for m, s := range map[Mode]string{ModeThreaded: "threaded", ModeBusyPoll: "busy-poll", ModeManual: "manual", 7: "Mode(7)"} {
		if m.String() != s {
			t.Errorf("Mode(%d).String() = %q, want %q", m, m.String(), s)
		}
	}
}
