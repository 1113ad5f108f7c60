// Package waittest checks a nic.Waiter's contract; the backends' tests
// share it.
package waittest

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
)

// liveness bounds every wait: a hang guard, not a timing threshold.
const liveness = 20 * time.Second

// Check exercises w, the receiving end of a link: send makes the peer
// transmit one frame towards w; closeW closes w. It checks that a wait
// ends at its deadline without frames, that a deadline already past ends it
// at once, that a frame ends a wait without deadline, that a deadline set
// from another goroutine wakes a parked wait, and that Close does
// (nic.ErrClosed).
func Check(t *testing.T, w nic.Waiter, send func(), closeW func()) {
	t.Helper()
	bufs, sizes := make([][]byte, 8), make([]int, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 9100)
	}
	type result struct {
		n   int
		err error
	}
	wait := func() <-chan result {
		ch := make(chan result, 1)
		go func() {
			n, err := w.WaitReadBatch(bufs, sizes)
			ch <- result{n, err}
		}()
		return ch
	}
	get := func(what string, ch <-chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(liveness):
			t.Fatalf("%s: WaitReadBatch still parked after %v", what, liveness)
			return result{}
		}
	}

	if err := w.SetWaitDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if r := get("deadline", wait()); r.n != 0 || !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("wait with a deadline and no frame: %d frames, %v; want os.ErrDeadlineExceeded", r.n, r.err)
	}
	w.SetWaitDeadline(time.Now().Add(-time.Second))
	if r := get("past deadline", wait()); r.n != 0 || !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("wait with a past deadline: %d frames, %v", r.n, r.err)
	}

	w.SetWaitDeadline(time.Time{})
	ch := wait()
	time.Sleep(10 * time.Millisecond) // let it park (not required for the outcome)
	send()
	if r := get("frame", ch); r.n < 1 || r.err != nil {
		t.Fatalf("wait for a frame: %d frames, %v", r.n, r.err)
	}

	ch = wait()
	time.Sleep(10 * time.Millisecond)
	if err := w.SetWaitDeadline(time.Now().Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if r := get("re-armed", ch); r.n != 0 || !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("parked wait after SetWaitDeadline(past) from another goroutine: %d frames, %v", r.n, r.err)
	}

	w.SetWaitDeadline(time.Time{})
	ch = wait()
	time.Sleep(10 * time.Millisecond)
	closeW()
	if r := get("close", ch); !errors.Is(r.err, nic.ErrClosed) {
		t.Fatalf("parked wait after Close: %d frames, %v; want nic.ErrClosed", r.n, r.err)
	}
	if _, err := w.WaitReadBatch(bufs, sizes); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("wait after Close: %v", err)
	}
}
