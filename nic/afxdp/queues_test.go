//go:build linux

package afxdp

import (
	"fmt"
	"net"
	"testing"
)

// newVethQueues is newVethPair with n transmit and receive queues on each
// end (ip link add ... numtxqueues n numrxqueues n).
func newVethQueues(t testing.TB, n int) *vethPair {
	t.Helper()
	requireRoot(t)
	p := &vethPair{
		nsA: newNetNS(t), nsB: newNetNS(t),
		ifA: "veth-a", ifB: "veth-b",
		macA: net.HardwareAddr{0x02, 0, 0, 0, 0x21, 0x01},
		macB: net.HardwareAddr{0x02, 0, 0, 0, 0x21, 0x02},
		ipA:  net.IPv4(198, 18, 21, 1).To4(),
		ipB:  net.IPv4(198, 18, 21, 2).To4(),
	}
	q := fmt.Sprint(n)
	run(t, "ip", "-n", p.nsA, "link", "add", p.ifA, "address", p.macA.String(), "numtxqueues", q, "numrxqueues", q, "type", "veth",
		"peer", "name", p.ifB, "address", p.macB.String(), "numtxqueues", q, "numrxqueues", q, "netns", p.nsB)
	for _, s := range []struct{ ns, ifn, addr string }{{p.nsA, p.ifA, "198.18.21.1/24"}, {p.nsB, p.ifB, "198.18.21.2/24"}} {
		run(t, "ip", "-n", s.ns, "addr", "add", s.addr, "dev", s.ifn)
		run(t, "ip", "-n", s.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", s.ns, "link", "set", s.ifn, "up")
	}
	return p
}

// openQueues opens n queues on one end and closes them at cleanup.
func (p *vethPair) openQueues(t testing.TB, ns, ifname string, n int, opts Options) []*Link {
	t.Helper()
	var ls []*Link
	err := inNS(ns, func() (err error) {
		ls, err = OpenQueues(ifname, n, opts)
		return err
	})
	if err != nil {
		if _, ok := err.(*NotSupportedError); ok {
			skipOrFail(t, err.Error())
		}
		t.Fatalf("OpenQueues(%s, %d): %v", ifname, n, err)
	}
	t.Cleanup(func() {
		for _, l := range ls {
			l.Close()
		}
	})
	return ls
}

// TestVethQueues settles what the multi-queue design rests on: on a veth
// pair with two queues, a frame an AF_XDP socket of queue i sends arrives
// at the peer's receive queue i (veth_xmit picks the peer's rx queue from
// the skb's queue mapping, which AF_XDP's transmit sets to the socket's
// queue), where the one steering program redirects it to the socket of
// queue i (its rx_queue_index): every frame reaches that socket and none
// the other. Closing the sockets detaches the program.
func TestVethQueues(t *testing.T) {
	p := newVethQueues(t, 2)
	as := p.openQueues(t, p.nsA, p.ifA, 2, Options{})
	bs := p.openQueues(t, p.nsB, p.ifB, 2, Options{})
	t.Logf("attach mode on veth: %s, queue 1 %s", as[0].Mode(), as[1].Mode())
	const N = 500
	for q := range 2 {
		wait := readAsync(bs[q], q*N, N)
		sendFrames(t, as[q], p, p.macB, q*N, N, roceUDPPort)
		if err := wait(); err != nil {
			t.Fatalf("a queue %d → b queue %d: %v", q, q, err)
		}
	}
	for q := range 2 {
		sa, sb := as[q].Stats(), bs[q].Stats()
		t.Logf("queue %d: a tx %d, b rx %d", q, sa.TxFrames, sb.RxFrames)
		if sa.TxFrames != N || sb.RxFrames != N {
			t.Errorf("queue %d: a sent %d, b's socket received %d; want %d each (frames landed on another queue)", q, sa.TxFrames, sb.RxFrames, N)
		}
	}
	// The map holds one socket per queue; closing queue 1 leaves queue 0
	// working and the program attached.
	as[1].Close()
	if !xdpShown(t, p.nsA, p.ifA) {
		t.Fatalf("closing queue 1 detached the program")
	}
	wait := readAsync(as[0], 2*N, 10)
	sendFrames(t, bs[0], p, p.macA, 2*N, 10, roceUDPPort)
	if err := wait(); err != nil {
		t.Fatalf("b queue 0 → a queue 0 after closing a's queue 1: %v", err)
	}
	as[0].Close()
	if xdpShown(t, p.nsA, p.ifA) {
		t.Fatalf("the program is still attached after closing every queue")
	}
}

// TestOpenQueuesMissingQueue: asking for more queues than the interface
// has fails with an error naming the queue, and leaves nothing attached.
func TestOpenQueuesMissingQueue(t *testing.T) {
	p := newVethQueues(t, 1)
	var err error
	inNS(p.nsA, func() error {
		_, err = OpenQueues(p.ifA, 2, Options{})
		return nil
	})
	if err == nil {
		t.Fatal("OpenQueues of 2 queues on a 1-queue veth succeeded")
	}
	t.Logf("error: %v", err)
	if xdpShown(t, p.nsA, p.ifA) {
		t.Fatalf("a failed OpenQueues left the program attached")
	}
}
