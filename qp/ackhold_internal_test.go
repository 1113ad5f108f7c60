package qp

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/wire"
)

// batchLog records the opcodes of every WriteBatch of a link.
type batchLog struct {
	mu      sync.Mutex
	batches [][]wire.Opcode
}

func (b *batchLog) hook(frames [][]byte) {
	var ops []wire.Opcode
	var p wire.Packet
	for _, f := range frames {
		if wire.Parse(f, &p) == nil {
			ops = append(ops, p.Opcode())
		}
	}
	b.mu.Lock()
	b.batches = append(b.batches, ops)
	b.mu.Unlock()
}

func (b *batchLog) take() [][]wire.Opcode {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.batches
	b.batches = nil
	return r
}

// TestAckRidesWithAnswer: in a write_lat-shaped exchange the side that
// waited in MR.WaitWrite for the peer's WRITE sends the ACK of that WRITE
// in the same WriteBatch as its own answering WRITE (one kick, one wake-up
// of the peer), and the peer's WRITE still completes. An application that
// does not answer gets its owed ACK sent by the hold's end.
func TestAckRidesWithAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSelfPair(t, ConnectOptions{})
		var logB batchLog
		p.lb.writes = logB.hook
		ctx := context.Background()
		const rounds = 20
		done := make(chan struct{})
		seen0 := p.mrb.Writes() // before A's first WRITE can land
		go func() {             // B: wait for A's WRITE, answer it
			defer close(done)
			seen := seen0
			for i := range rounds {
				var err error
				if seen, err = p.mrb.WaitWrite(ctx, seen); err != nil {
					t.Error(err)
					return
				}
				p.write(t, p.qb, p.mrb, p.mra, uint64(i))
				if wc := wait1(t, p.cqb); wc.Status != WCSuccess {
					t.Errorf("B's WRITE %d: %v", i, wc.Status)
					return
				}
			}
		}()
		seen := p.mra.Writes()
		for i := range rounds {
			p.write(t, p.qa, p.mra, p.mrb, uint64(i))
			if wc := wait1(t, p.cqa); wc.Status != WCSuccess {
				t.Fatalf("A's WRITE %d: %v", i, wc.Status)
			}
			var err error
			if seen, err = p.mra.WaitWrite(ctx, seen); err != nil {
				t.Fatal(err)
			}
		}
		<-done
		// The first rounds may find B's driver goroutine on the link, which
		// ACKs at once; it gives the link up after a pass that found a
		// waiter asleep. From the first answer that carried its ACK on,
		// every one does.
		all := logB.take()
		together, steady := 0, false
		for _, b := range all {
			both := len(b) == 2 && b[0] == wire.RCAcknowledge && b[1] == wire.RCRDMAWriteOnly
			if both {
				together++
				steady = true
			} else if steady {
				t.Fatalf("batch %v after the waiters took over: %v", b, all)
			}
		}
		for _, q := range []*QP{p.qa, p.qb} {
			if c := q.Counters(); c[CntRetransmittedPkts] != 0 {
				t.Fatalf("QP %#x retransmitted %d packets: a held ACK was late", q.QPN(), c[CntRetransmittedPkts])
			}
		}
		if together < rounds/2 {
			t.Fatalf("%d of %d answers left with the ACK in one batch: %v", together, rounds, all)
		}

		// B takes A's WRITE in its own wait and then does not answer: the
		// ACK leaves by the hold's end, or after the ping-pong above by the
		// resume timer's next firing (resumeKeep), and A's WRITE completes.
		seenB := p.mrb.Writes()
		p.write(t, p.qa, p.mra, p.mrb, 100)
		if _, err := p.mrb.WaitWrite(ctx, seenB); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if wc := wait1(t, p.cqa); wc.Status != WCSuccess || wc.WRID != 100 {
			t.Fatalf("A's unanswered WRITE: %v", wc)
		}
		if waited := time.Since(start); waited > resumeKeep+ackHold {
			t.Fatalf("the held ACK left after %v, later than resumeKeep+ackHold %v", waited, resumeKeep+ackHold)
		}
		if c := p.qa.Counters(); c[CntRetransmittedPkts] != 0 {
			t.Fatalf("A retransmitted %d packets waiting for the held ACK", c[CntRetransmittedPkts])
		}
	})
}

// TestOneSidedTargetHold: B's application takes each of A's WRITEs in its
// own MR.WaitWrite and then does something else (it blocks on a channel)
// without posting: a one-sided target. With the hold on, at most one of
// B's ACKs waits for the hold's end (ackHold, on the bubble's fake clock):
// the first held ACK that leaves unanswered turns the hold off for the QP
// (holdSkip), and every later WRITE completes at once. With SetAckHold(false)
// none waits.
func TestOneSidedTargetHold(t *testing.T) {
	for _, on := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			p := newSelfPair(t, ConnectOptions{})
			p.b.SetAckHold(on)
			ctx := context.Background()
			const rounds = 8
			arrived, next := make(chan struct{}), make(chan struct{})
			seen0 := p.mrb.Writes()
			go func() {
				seen := seen0
				for range rounds {
					var err error
					if seen, err = p.mrb.WaitWrite(ctx, seen); err != nil {
						t.Error(err)
					}
					arrived <- struct{}{}
					<-next
				}
			}()
			var lat []time.Duration
			held := 0
			for i := range rounds {
				start := time.Now()
				p.write(t, p.qa, p.mra, p.mrb, uint64(i))
				if wc := wait1(t, p.cqa); wc.Status != WCSuccess {
					t.Fatalf("A's WRITE %d: %v", i, wc.Status)
				}
				l := time.Since(start)
				lat = append(lat, l)
				switch {
				case l == ackHold:
					held++
				case l != 0:
					t.Errorf("a completion after %v, neither at once nor at ackHold", l)
				}
				<-arrived
				next <- struct{}{}
			}
			t.Logf("hold %v: A's completion times %v", on, lat)
			if on && held > 1 || !on && held > 0 {
				t.Errorf("hold %v: %d of A's completions waited for ackHold %v: %v", on, held, ackHold, lat)
			}
			if c := p.qa.Counters(); c[CntRetransmittedPkts] != 0 {
				t.Errorf("A retransmitted %d packets", c[CntRetransmittedPkts])
			}
		})
	}
}
