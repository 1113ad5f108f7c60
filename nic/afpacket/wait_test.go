//go:build linux

package afpacket

import (
	"testing"

	"github.com/goroce/goroce/nic/internal/waittest"
)

// TestWaiter: both ring versions keep the nic.Waiter contract, parking in
// the runtime poller on the packet socket (root, two namespaces).
func TestWaiter(t *testing.T) { ringModes(t, testWaiter) }

func testWaiter(t *testing.T, opts Options) {
	pl := openPair(t, 1500, opts)
	p := pl.p
	frame := roceFrame(p.B.MAC, p.A.MAC, p.A.Addr, p.B.Addr, 4791, 1, 100)
	waittest.Check(t, pl.b, func() {
		if n, err := pl.a.WriteBatch([][]byte{frame}); n != 1 || err != nil {
			t.Errorf("WriteBatch: %d, %v", n, err)
		}
	}, func() { pl.b.Close() })
}
