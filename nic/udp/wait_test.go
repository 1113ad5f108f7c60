//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/nic/internal/waittest"
)

// TestWaiter: the Linux socket path keeps the nic.Waiter contract
// (parking in the runtime poller), over loopback; the portable path says
// it cannot wait.
func TestWaiter(t *testing.T) {
	a, err := Open(Config{Local: netip.MustParseAddrPort("127.0.0.1:47911"), PeerPort: 47912})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(Config{Local: netip.MustParseAddrPort("127.0.0.2:47912"), PeerPort: 47911})
	if err != nil {
		t.Fatal(err)
	}
	frame := buildFrame(t, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), 1, 8)
	waittest.Check(t, b, func() {
		if n, err := a.WriteBatch([][]byte{frame}); n != 1 || err != nil {
			t.Errorf("WriteBatch: %d, %v", n, err)
		}
	}, func() { b.Close() })

	p, err := Open(Config{Local: netip.MustParseAddrPort("127.0.0.1:47913"), portable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SetWaitDeadline(time.Time{}); err == nil {
		t.Fatal("portable path: SetWaitDeadline accepted; it cannot wait in the poller")
	}
}
