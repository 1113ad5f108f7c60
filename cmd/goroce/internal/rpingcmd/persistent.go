package rpingcmd

import (
	"io"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// runPersistent is rping_run_persistent_server: bind and listen once,
// then for every connection request a clone of the control block
// (clone_cb) served by its own goroutine (rping_persistent_server_thread:
// rping_setup_qp, rping_setup_buffers, the first receive, rdma_accept,
// rping_test_server, rdma_disconnect, free everything). A failed
// connection is that goroutine's business, as in rping, whose threads'
// failures never reach main; the server ends when the run's context does
// (--timeout, a signal), after the connections still open ended, or when
// listening fails.
func (cb *controlBlock) runPersistent() int {
	// The connections' goroutines print concurrently, as rping's threads
	// do through stdio: one line is one write, never interleaved.
	cb.env.Stdout = &lockedWriter{w: cb.env.Stdout}
	cb.env.Stderr = &lockedWriter{w: cb.env.Stderr}
	var mu sync.Mutex
	pending := map[*qp.QP]*controlBlock{}
	opts := cm.Options{
		// No PD or CQ: each connection makes its own, as rping_setup_qp
		// does for each clone. Its CQ has 18 entries where rping's has
		// 32: at most 16 sends and 2 receives are outstanding.
		Cap:                qp.Caps{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1},
		ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetry: 7,
		Prepare: func(q *qp.QP) error {
			c := cb.clone()
			c.pd = q.PD()
			cb.debugf("created pd %p\n", c.pd)
			cb.debugf("created qp %p\n", q)
			if err := c.setupBuffers(); err != nil {
				cb.errf("rping_setup_buffers failed: %d\n", -1)
				c.freeBuffers()
				return err
			}
			if err := q.PostRecv(&c.rqWR); err != nil {
				cb.errf("ibv_post_recv failed: %d\n", -1)
				c.freeBuffers()
				return err
			}
			mu.Lock()
			pending[q] = c
			mu.Unlock()
			return nil
		}}
	l := cb.listen(opts)
	if l == nil {
		return exitFail
	}
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept(cb.ctx)
		if err != nil {
			if cb.ctx.Err() != nil {
				return 0 // the run ended: a persistent server's only end
			}
			cb.errf("wait for CONNECT_REQUEST state %d\n", stError)
			return cb.cmEventError(err)
		}
		mu.Lock()
		c := pending[conn.QP()]
		delete(pending, conn.QP())
		mu.Unlock()
		if c == nil { // cannot happen: Prepare ran for every accepted QP
			conn.Close()
			continue
		}
		cb.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id %p (child)\n", conn)
		cb.debugf("ESTABLISHED\n")
		c.conn, c.q, c.cq = conn, conn.QP(), conn.RecvCQ()
		c.state = stConnected
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.serveOne()
		}()
	}
}

// clone is clone_cb: a control block for one connection of a persistent
// server, with the listener's options and no resources yet. Its
// Progressor is empty: the listener's keeps a busy-poll device going for
// all of them.
func (cb *controlBlock) clone() *controlBlock {
	return &controlBlock{env: cb.env, f: cb.f, ctx: cb.ctx, server: true, dev: cb.dev}
}

// serveOne is the rest of rping_persistent_server_thread: the ping-pong,
// the disconnect, the buffers freed (the connection's PD, CQ and QP go
// with it).
func (c *controlBlock) serveOne() {
	stop := c.watchConn()
	if ret := c.testServer(); ret != 0 {
		c.debugf("rping_test_server: %d\n", ret)
	}
	stop()
	c.conn.Close()
	c.freeBuffers()
}

// lockedWriter serialises the writes of the connections' goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
