package nic_test

import (
	"testing"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/waittest"
)

// TestMemLinkWaiter: MemLink's WaitReadBatch keeps the nic.Waiter contract.
func TestMemLinkWaiter(t *testing.T) {
	a, b := nic.NewMemPair(nic.MemConfig{})
	defer a.Close()
	frame := make([]byte, 60)
	waittest.Check(t, b, func() {
		if n, err := a.WriteBatch([][]byte{frame}); n != 1 || err != nil {
			t.Errorf("WriteBatch: %d, %v", n, err)
		}
	}, func() { b.Close() })
}
