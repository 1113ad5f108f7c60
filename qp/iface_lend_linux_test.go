//go:build linux

package qp_test

import (
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
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
