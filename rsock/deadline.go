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

func newDeadline() *deadline { return &deadline{ctx: &dlCtx{done: make(chan struct{})}} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return
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
		return
	}
	if dur := time.Until(t); dur > 0 {
		done := d.ctx.done
		if closed {
			done = make(chan struct{})
		}
		d.ctx = &dlCtx{done: done, at: t}
		d.timer = time.AfterFunc(dur, func() { close(done) })
		return
	}
	if !closed {
		close(d.ctx.done)
	}
}

// close closes the channel for good (the Conn is closed): every wait on it
// ends.
func (d *deadline) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shut {
		return
	}
	d.shut = true
	if d.timer != nil && !d.timer.Stop() {
		return // the timer closes (or closed) the channel
	}
	d.timer = nil
	if !isClosed(d.ctx.done) {
		close(d.ctx.done)
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
