//go:build linux

package afxdp

import (
	"testing"

	"github.com/goroce/goroce/nic/internal/waittest"
)

// TestWaiter: the XSK keeps the nic.Waiter contract, parking in the
// runtime poller until the RX ring fills (root, veth between namespaces).
func TestWaiter(t *testing.T) {
	p := newVethPair(t, 1500)
	a := p.open(t, p.nsA, p.ifA, Options{})
	b := p.open(t, p.nsB, p.ifB, Options{})
	waittest.Check(t, b, func() { sendFrames(t, a, p, p.macB, 0, 1, roceUDPPort) }, func() { b.Close() })
}
