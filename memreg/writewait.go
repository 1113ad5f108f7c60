package memreg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Waiting for RDMA WRITEs (a goroce extension; verbs has no equivalent).
//
// On a real HCA an application learns that a peer's RDMA WRITE (without
// immediate) has landed only by watching the memory; perftest's write_lat
// spins on the last byte of its buffer. goroce is the NIC, so it can do
// better without changing the wire: every MR counts the RDMA WRITE
// messages placed into it (WriteDone, called by the responder once the
// last packet of a WRITE or WRITE_WITH_IMM message is placed; a memory
// window's WRITEs count for its MR), and WaitWrite parks a goroutine until
// that count passes a value. A WRITE costs one atomic add and one atomic
// load when nobody waits; waiting allocates nothing in the steady state.

// ErrTableClosed is the default error WaitWrite returns after Close.
var ErrTableClosed = errors.New("memreg: table closed")

// writeWait is an MR's WRITE count and the goroutines waiting on it.
type writeWait struct {
	count atomic.Uint64 // WRITE messages placed into the MR
	nwait atomic.Int32  // waiters linked in head
	mu    sync.Mutex    // guards head, free and each linked waiter
	head  *writeWaiter
	// free are waiters to reuse. Per MR, not a global pool: a waiter's
	// channel belongs to the synctest bubble that made it, as the MR does.
	free *writeWaiter
}

// writeWaiter is one goroutine in WaitWrite (pooled).
type writeWaiter struct {
	ch     chan struct{} // cap 1: woken
	after  uint64
	linked bool
	err    error // set by the waker when the wait fails
	next   *writeWaiter
	prev   *writeWaiter
}

// get takes a waiter to use (ww.mu held).
func (ww *writeWait) get() *writeWaiter {
	w := ww.free
	if w == nil {
		return &writeWaiter{ch: make(chan struct{}, 1)}
	}
	ww.free, w.next = w.next, nil
	return w
}

// put keeps w for reuse (ww.mu held, w unlinked, its channel empty).
func (ww *writeWait) put(w *writeWaiter) {
	w.err, w.next = nil, ww.free
	ww.free = w
}

// WaitHooks let the device a table belongs to take part in WaitWrite
// (SetWaitHooks). Wait, when set, replaces WaitWrite's sleep: the device
// can make progress itself while the caller waits. Kick, when set, is
// called (with no lock of the table held, from any goroutine, possibly
// with the device's own lock held) when an MR's waiters must look again
// because the wait can no longer succeed: the MR was deregistered or
// invalidated, or the table closed.
type WaitHooks struct {
	Wait func(ctx context.Context, mr *MR, after uint64) (uint64, error)
	Kick func()
}

// SetWaitHooks installs h; call it once, before the table is used.
func (t *Table) SetWaitHooks(h WaitHooks) { t.hooks = h }

// Writes returns how many RDMA WRITE messages (with or without immediate)
// have been placed into the MR, directly or through a memory window. Once
// it returns n, the data of those n WRITEs is visible to the caller.
func (mr *MR) Writes() uint64 { return mr.ww.count.Load() }

// WaitWrite blocks until more than after RDMA WRITE messages have been
// placed into the MR (Writes() > after) and returns the count, or until ctx
// ends (its error), the MR is deregistered (ErrDeregistered) or
// invalidated (ErrInvalid), or the table closed (the error given to
// Close). The data of the WRITEs counted is visible when it returns.
// Typical use: n := mr.Writes(); …; n, err = mr.WaitWrite(ctx, n).
func (mr *MR) WaitWrite(ctx context.Context, after uint64) (uint64, error) {
	if c := mr.ww.count.Load(); c > after {
		return c, nil
	}
	if mr.pd != nil && mr.pd.t.hooks.Wait != nil {
		return mr.pd.t.hooks.Wait(ctx, mr, after)
	}
	for {
		c, err := mr.SleepWrite(ctx, after, nil)
		if err != nil || c > after {
			return c, err
		}
	}
}

// WriteErr is why a WaitWrite on the MR cannot succeed now (nil if it can).
func (mr *MR) WriteErr() error {
	switch mr.state.Load() {
	case stateDeregistered:
		return ErrDeregistered
	case stateInvalid:
		return ErrInvalid
	}
	if mr.pd != nil {
		if e := mr.pd.t.closeErr.Load(); e != nil {
			return *e
		}
	}
	return nil
}

// SleepWrite is WaitWrite's sleep, for a device's WaitHooks.Wait: it parks
// until Writes() > after, the wait fails (WriteErr), ctx ends, or a value
// arrives on other (nil: never). It returns the count and the error; a
// return for other has a count ≤ after and a nil error.
func (mr *MR) SleepWrite(ctx context.Context, after uint64, other <-chan struct{}) (uint64, error) {
	ww := &mr.ww
	ww.mu.Lock()
	if err := mr.WriteErr(); err != nil {
		ww.mu.Unlock()
		return ww.count.Load(), err
	}
	w := ww.get()
	w.after, w.err = after, nil
	ww.link(w)
	ww.nwait.Add(1)
	// After nwait: a WriteDone that added before this load is seen here,
	// and one that adds after it sees nwait > 0 and wakes us.
	if c := ww.count.Load(); c > after {
		ww.unlink(w)
		ww.put(w)
		ww.mu.Unlock()
		return c, nil
	}
	ww.mu.Unlock()
	var ctxErr error
	select {
	case <-w.ch:
	case <-other:
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	ww.mu.Lock()
	if w.linked {
		ww.unlink(w)
	} else {
		select { // woken meanwhile: leave the channel empty for reuse
		case <-w.ch:
		default:
		}
	}
	err := w.err
	ww.put(w)
	ww.mu.Unlock()
	c := ww.count.Load()
	switch {
	case c > after:
		return c, nil
	case err != nil:
		return c, err
	}
	return c, ctxErr
}

// link adds w (ww.mu held).
func (ww *writeWait) link(w *writeWaiter) {
	w.prev, w.next, w.linked = nil, ww.head, true
	if ww.head != nil {
		ww.head.prev = w
	}
	ww.head = w
}

// unlink removes w (ww.mu held).
func (ww *writeWait) unlink(w *writeWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		ww.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.linked = nil, nil, false
	ww.nwait.Add(-1)
}

// wake wakes the waiters whose count has passed, or all of them with err.
func (ww *writeWait) wake(err error) {
	ww.mu.Lock()
	c := ww.count.Load()
	for w := ww.head; w != nil; {
		next := w.next
		if err != nil || c > w.after {
			ww.unlink(w)
			w.err = err
			w.ch <- struct{}{} // cap 1, and a waiter is woken once per link
		}
		w = next
	}
	ww.mu.Unlock()
}

// failWaiters wakes every waiter of mr with err and tells the device.
func (t *Table) failWaiters(mr *MR, err error) {
	mr.ww.wake(err) // under ww.mu: a waiter either saw the state or is linked
	if t.hooks.Kick != nil {
		t.hooks.Kick()
	}
}

// WriteDone counts one RDMA WRITE message placed into the MR (or the
// memory window's MR) named by rkey, and wakes its waiters. The responder
// calls it after the message's last packet was placed. Lock-free and
// allocation-free when nobody waits.
func (t *Table) WriteDone(rkey uint32) {
	var mr *MR
	if IsMWKey(rkey) {
		mw := t.mw.lookup(rkey)
		if mw == nil {
			return
		}
		b, _ := mw.load()
		mr = b.mr
	} else if m := t.slot(rkey >> 8); m != nil && m.lkey == rkey {
		mr = m
	}
	if mr == nil {
		return
	}
	mr.ww.count.Add(1)
	if mr.ww.nwait.Load() > 0 {
		mr.ww.wake(nil)
	}
}

// Close makes every WaitWrite on the table's MRs, waiting or to come,
// return err (ErrTableClosed when nil). The device calls it when it
// closes. Calling it again does nothing.
func (t *Table) Close(err error) {
	if err == nil {
		err = ErrTableClosed
	}
	if !t.closeErr.CompareAndSwap(nil, &err) {
		return
	}
	t.mu.Lock()
	for _, c := range *t.dir.Load() {
		for i := range c {
			if mr := c[i].Load(); mr != nil {
				mr.ww.wake(err)
			}
		}
	}
	t.mu.Unlock()
	if t.hooks.Kick != nil {
		t.hooks.Kick()
	}
}
