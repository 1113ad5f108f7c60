//go:build !linux

package udp

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// Outside Linux there are no private namespaces to test in: these tests
// use two ports of the host's own 127.0.0.1, which nothing leaves.

func openLoopback(t *testing.T, port, peer uint16) *Link {
	t.Helper()
	l, err := Open(Config{Local: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), PeerPort: peer})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot bind 127.0.0.1:%d: %v", port, err)
		}
		t.Skipf("cannot bind 127.0.0.1:%d here: %v", port, err)
	}
	t.Cleanup(func() { l.Close() })
	if !isPortable(l) {
		t.Fatal("not the portable path")
	}
	return l
}

func isPortable(l *Link) bool {
	_, ok := l.s.(*connSock)
	return ok
}

// TestLoopbackRoundTrip: frames both ways between two links, intact and in
// order; a non-blocking read of an empty ring returns 0; Close wakes a
// blocked reader and later calls report ErrClosed.
func TestLoopbackRoundTrip(t *testing.T) {
	a := openLoopback(t, 14791, 24791)
	b := openLoopback(t, 24791, 14791)
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := b.TryReadBatch(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("empty: %d, %v", n, err)
	}
	sendRecv(t, a, b, 100)
	sendRecv(t, b, a, 30)

	errc := make(chan error, 1)
	go func() {
		_, err := a.ReadBatch(bufs, sizes)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it block (passes either way)
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, nic.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake ReadBatch")
	}
	if _, err := a.WriteBatch([][]byte{{1}}); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("WriteBatch after Close: %v", err)
	}
}
