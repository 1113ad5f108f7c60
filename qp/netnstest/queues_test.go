package netnstest

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/qp"
)

// TestQueuesOverVeth runs every operation class on eight QP pairs between
// two-queue AF_XDP devices on a veth pair made with numtxqueues 2
// numrxqueues 2, at MTU 1500 and 9000 (path MTU 4096: multi-buffer AF_XDP
// on both queues' sockets): the QPs spread over
// both queues by their UDP source ports, each queue's socket carries
// frames both ways, and every byte arrives (run checks them).
func TestQueuesOverVeth(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) { testQueuesOverVeth(t, mtu) })
	}
}

func testQueuesOverVeth(t *testing.T, mtu int) {
	a, b, pmtu := open(t, setup{backA: qp.BackendAFXDP, backB: qp.BackendAFXDP, mtu: mtu, nqp: 8, queues: 2})
	if a.info.Queues != 2 || a.dev.Queues() != 2 || b.dev.Queues() != 2 {
		t.Fatalf("queues: info %d, devices %d and %d; want 2", a.info.Queues, a.dev.Queues(), b.dev.Queues())
	}
	var perQueue [2]int
	for i, c := range a.conns {
		qa, qb := c.qp.Queue(), b.conns[i].qp.Queue()
		if qa != qb {
			t.Fatalf("QP pair %d: A's on queue %d, B's on %d (the same UDP source port picks the same queue)", i, qa, qb)
		}
		perQueue[qa]++
	}
	run(t, a, b, pmtu, 3)
	for _, e := range []*endpoint{a, b} {
		s := e.dev.Stats()
		t.Logf("%s: QPs per queue %v; per queue tx/rx frames: %d/%d, %d/%d", e.name, perQueue,
			s.Queues[0].TxFrames, s.Queues[0].RxFrames, s.Queues[1].TxFrames, s.Queues[1].RxFrames)
		for q, qs := range s.Queues {
			if qs.TxFrames == 0 || qs.RxFrames == 0 {
				t.Errorf("%s: queue %d sent %d and received %d frames", e.name, q, qs.TxFrames, qs.RxFrames)
			}
		}
	}
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Fatalf("the QPs did not spread: %v per queue", perQueue)
	}
}
