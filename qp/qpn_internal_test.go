package qp

import "testing"

// TestFirstQPN: an unseeded device starts its QP numbers at a random
// place (two devices, and a run of firstQPN, do not all start at 0x11 as
// rxe does), a seeded one at rxe's 0x11; every start is a valid number.
func TestFirstQPN(t *testing.T) {
	seen := map[uint32]bool{}
	for range 8 {
		n := firstQPN(0)
		if n < minQPN || n > maxQPN {
			t.Fatalf("first QPN %#x outside [%#x, %#x]", n, minQPN, maxQPN)
		}
		seen[n] = true
	}
	if len(seen) < 2 {
		t.Fatalf("8 unseeded devices' first QPNs: %v (all alike)", seen)
	}
	if n := firstQPN(42); n != minQPN {
		t.Fatalf("seeded first QPN %#x, want %#x", n, minQPN)
	}
	a, b, err := OpenMemoryPair(MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	qpns := map[uint32]bool{}
	for _, d := range []*Device{a, b} {
		cq, err := d.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		q, err := d.AllocPD().CreateQP(InitAttr{SendCQ: cq, RecvCQ: cq, Cap: Caps{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qpns[q.QPN()] = true
	}
	if len(qpns) != 2 {
		t.Fatalf("two unseeded devices' first QPs have the same number %v", qpns)
	}
}
