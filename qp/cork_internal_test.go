package qp

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/nic"
)

// corkDevice is a normal-mode device (driver goroutine) whose peer link
// nobody serves: its QPs' requests are never acknowledged, so every QP
// that posted stays in the deadline heap. peer reads what reached the wire.
func corkDevice(t *testing.T, n int) (d *Device, qs []*QP, mr *MR, peer *nic.MemLink) {
	t.Helper()
	la, lb := nic.NewMemPair(nic.MemConfig{Seed: 1})
	d, err := Open(Config{Link: la, IP: memoryPairIPA, Seed: 1,
		Neighbors: map[netip.Addr]net.HardwareAddr{memoryPairIPB: lb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	pd := d.AllocPD()
	if mr, err = pd.RegMR(make([]byte, 64), LocalWrite); err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(16 * n)
	gidB := netip.AddrFrom16(memoryPairIPB.As16())
	for i := range n {
		q, err := pd.CreateQP(InitAttr{SendCQ: cq, RecvCQ: cq, Cap: Caps{MaxSendWR: 16, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(context.Background(), Remote{QPN: uint32(0x100 + i), PSN: 1, GID: gidB}, ConnectOptions{SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	return d, qs, mr, lb
}

func corkWrite(t *testing.T, q *QP, mr *MR) {
	t.Helper()
	if err := q.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, 8)},
		RemoteAddr: 0x1000, RKey: 1}); err != nil {
		t.Fatal(err)
	}
}

// onWire drains what reached the peer link.
func onWire(peer *nic.MemLink) int {
	bufs, sizes := make([][]byte, 256), make([]int, 256)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	total := 0
	for {
		n, _ := peer.TryReadBatch(bufs, sizes)
		if n == 0 {
			return total
		}
		total += n
	}
}

// TestCorkManyBusyQPs: while fewer than corkQPs QPs wait for ACKs every
// post reaches the wire before PostSend returns; from then on a post's
// frame waits in the batch (corked) until corkFrames have gathered, which
// go out together, or until corkDelay passed, when the driver goroutine
// writes it; Close writes what is still corked. The clock is synctest's.
func TestCorkManyBusyQPs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = corkQPs + corkFrames
		d, qs, mr, peer := corkDevice(t, n)
		for i := range corkQPs - 1 {
			corkWrite(t, qs[i], mr)
			if got := onWire(peer); got != 1 {
				t.Fatalf("post %d with %d QPs waiting: %d frames on the wire, want 1", i, i, got)
			}
		}
		corkWrite(t, qs[corkQPs-1], mr) // the corkQPs-th waiting QP: corked
		if got := onWire(peer); got != 0 {
			t.Fatalf("%d frames on the wire after a post with %d QPs waiting, want it corked", got, corkQPs)
		}
		time.Sleep(corkDelay)
		synctest.Wait()
		if got := onWire(peer); got != 1 {
			t.Fatalf("%d frames on the wire corkDelay after the corked post, want 1", got)
		}
		for i := range corkFrames - 1 {
			corkWrite(t, qs[corkQPs+i], mr)
		}
		if got := onWire(peer); got != 0 {
			t.Fatalf("%d frames on the wire after %d corked posts, want 0", got, corkFrames-1)
		}
		corkWrite(t, qs[0], mr) // the corkFrames-th frame: the batch goes out
		if got := onWire(peer); got != corkFrames {
			t.Fatalf("%d frames on the wire once the batch held %d, want all", got, corkFrames)
		}
		corkWrite(t, qs[1], mr)
		d.mu.Lock()
		corked := d.stats.corked
		d.mu.Unlock()
		if want := uint64(1 + corkFrames - 1 + 1); corked != want {
			t.Errorf("%d posts corked, want %d", corked, want)
		}
		d.Close()
		if got := onWire(peer); got != 1 {
			t.Fatalf("%d frames on the wire after Close, want the corked one", got)
		}
	})
}
