package rsock

import (
	"context"
	"sync"
	"time"
)

// deadline is one direction's deadline: a channel closed once it has passed
// (the pattern of net.Pipe's pipeDeadline), or once the Conn is closed
// (shut). Its current channel is also a context (dlCtx), so a Read or Write
// can hand it to qp.CQ.Wait without making one per wait.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ctx   *dlCtx
	shut  bool // the Conn is closed: the channel stays closed
	// passed is called (without mu) once the channel was closed, by set,
	// by the timer or by close: a Read or Write parked in a self-driving
	// CQ wait does not watch the channel, and is woken by it (qp's
	// CQ.Interrupt). nil: nothing to wake.
	passed func()
}

// dlCtx is a context.Context whose Done is a deadline's channel. It is
// never changed once made: set makes a new one.
type dlCtx struct {
	done chan struct{}
	at   time.Time
}

func (c *dlCtx) Deadline() (time.Time, bool) { return c.at, !c.at.IsZero() }
func (c *dlCtx) Done() <-chan struct{}       { return c.done }
func (c *dlCtx) Value(any) any               { return nil }
func (c *dlCtx) Err() error {
	if isClosed(c.done) {
		return context.DeadlineExceeded
	}
	return nil
}

func newDeadline(passed func()) *deadline {
	return &deadline{ctx: &dlCtx{done: make(chan struct{})}, passed: passed}
}

// expire closes done and tells passed (d.mu not held).
func (d *deadline) expire(done chan struct{}) {
	close(done)
	if d.passed != nil {
		d.passed()
	}
}

func (d *deadline) set(t time.Time) {
	if d.setLocked(t) && d.passed != nil {
		d.passed()
	}
}

// setLocked is set under d.mu; it reports whether it closed the channel.
func (d *deadline) setLocked(t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return false
	}
	if d.timer != nil && !d.timer.Stop() {
		<-d.ctx.done // the timer fired: wait for its close
	}
	d.timer = nil
	closed := isClosed(d.ctx.done)
	if t.IsZero() {
		if closed || !d.ctx.at.IsZero() {
			d.ctx = &dlCtx{done: make(chan struct{})}
		}
		return false
	}
	if dur := time.Until(t); dur > 0 {
		done := d.ctx.done
		if closed {
			done = make(chan struct{})
		}
		d.ctx = &dlCtx{done: done, at: t}
		d.timer = time.AfterFunc(dur, func() { d.expire(done) })
		return false
	}
	if !closed {
		close(d.ctx.done)
		return true
	}
	return false
}

// close closes the channel for good (the Conn is closed): every wait on it
// ends.
func (d *deadline) close() {
	d.mu.Lock()
	if d.shut {
		d.mu.Unlock()
		return
	}
	d.shut = true
	if d.timer != nil && !d.timer.Stop() {
		d.mu.Unlock()
		return // the timer closes (or closed) the channel
	}
	d.timer = nil
	closed := isClosed(d.ctx.done)
	if !closed {
		close(d.ctx.done)
	}
	d.mu.Unlock()
	if !closed && d.passed != nil {
		d.passed()
	}
}

// wait returns the context that ends when the deadline passes.
func (d *deadline) wait() *dlCtx {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
