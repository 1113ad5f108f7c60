package nic_test

import (
	"fmt"
	"time"

	"github.com/goroce/goroce/nic"
)

// A single-goroutine deterministic scheduler drives a MemLink pair with a
// fake clock: write, ask when the next frame is due, move the clock there,
// read without blocking.
func ExampleNewMemPair() {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	a, b := nic.NewMemPair(nic.MemConfig{
		Seed:  1,
		Clock: clock,
		AtoB:  nic.Faults{Delay: 10 * time.Microsecond, Duplicate: 1},
	})
	frame := make([]byte, 60)
	a.WriteBatch([][]byte{frame})

	bufs := [][]byte{make([]byte, 1514), make([]byte, 1514)}
	sizes := make([]int, 2)
	n, _ := b.TryReadBatch(bufs, sizes)
	fmt.Println("due now:", n, "pending:", b.Pending())
	due, _ := b.NextDue()
	now = due
	n, _ = b.TryReadBatch(bufs, sizes)
	fmt.Println("at", due.Sub(time.Unix(0, 0)), "read:", n)
	st := a.MemStats()
	fmt.Println("duplicated:", st.Duplicated, "sent:", st.TxFrames)
	// Output:
	// due now: 0 pending: 2
	// at 10µs read: 2
	// duplicated: 1 sent: 1
}
