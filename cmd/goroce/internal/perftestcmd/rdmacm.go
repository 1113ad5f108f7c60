package perftestcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/perftest"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// perftest -R: the control connection and the data QPs are both made
// through rdma_cm on the tool's port (perftest_communication.c
// rdma_client_connect / rdma_server_connect for the first,
// create_rdma_cm_connection for the others), and the exchanges of package
// perftest travel as SENDs on the control QP (msgConn).

// ctrlMsgSize is the control QP's message buffer: sizeof(struct
// pingpong_dest), the length of the one receive perftest keeps posted
// (post_one_recv_wqe); nothing larger is ever sent on it.
const ctrlMsgSize = perftest.CMKeyMsgSize

// dataConnectRetries and dataConnectDelay are rdma_cm_client_connection's
// retries of the data connection (max_retries 10, 100 ms apart): the
// server listens again only after the handshake that precedes it.
const (
	dataConnectRetries = 10
	dataConnectDelay   = 100 * time.Millisecond
)

// connectCM makes the control connection: the server listens on the port
// and accepts one connection (then stops listening, as rdma_server_connect
// destroys cm_id_control), the client connects to host:port. The control
// QP has one SEND and two RECVs (perftest: tx and rx depth 1); it asks for
// no responder resources, and retries and RNR retries 7.
func (r *runner) connectCM() (net.Conn, error) {
	m := &msgConn{}
	pd := r.dev.AllocPD()
	cq, err := r.dev.CreateCQ(8)
	if err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	m.cq = cq
	m.buf = make([]byte, 3*ctrlMsgSize) // the send, then two receive slots
	if m.mr, err = pd.RegMR(m.buf, qp.LocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	opts := cm.Options{PD: pd, SendCQ: cq, RecvCQ: cq, Cap: qp.Caps{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1},
		RetryCount: 7, RNRRetry: 7, Prepare: m.prepare}
	addr := netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(r.f.Port))
	if r.server {
		r.out(perftest.WaitingBanner)
		l, err := cm.Listen(r.ctx, r.dev, addr.String(), opts)
		if err != nil {
			return nil, fmt.Errorf(" rdma_bind_addr failed: %w", err)
		}
		if r.env.Listening != nil {
			r.env.Listening(tool.CMAddr(l.Addr()))
		}
		c, err := l.Accept(r.ctx)
		l.Close()
		if err != nil {
			return nil, fmt.Errorf("Unable to perform rdma_server function: %w", err)
		}
		m.conn = c
	} else {
		host, err := tool.ParseHost(r.f.Host)
		if err != nil {
			return nil, fmt.Errorf("Problem in resolving basic address and port: %w", err)
		}
		c, err := tool.DialRetry(r.ctx, r.dev, netip.AddrPortFrom(host, uint16(r.f.Port)), opts)
		if err != nil {
			ev, status := tool.CMEvent(err)
			return nil, fmt.Errorf("Unexpected CM event %s (%d): %w\n Unable to perform rdma_client function", ev, status, err)
		}
		m.conn = c
	}
	m.q = m.conn.QP()
	m.kick = make(chan struct{})
	r.ctrl = m
	return m, nil
}

// cmListen (the server) makes create_rdma_cm_connection's resources and
// listens for the data connections before the handshake that precedes it
// (perftest.Hooks.CMListen says why); cmConnect then accepts them.
func (r *runner) cmListen(n perftest.Negotiated) error {
	if err := r.alloc(n); err != nil {
		return err
	}
	addr := netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(r.f.Port))
	l, err := cm.Listen(r.ctx, r.dev, addr.String(), r.dataOptions())
	if err != nil {
		return fmt.Errorf("Failed to bind RDMA CM address on the server: %w", err)
	}
	r.dataLn = l
	return nil
}

// dataOptions are the data connections' options: QPs sized as ctx_init
// sizes them; READ and atomic tests ask for out_reads responder resources
// and initiator depth.
func (r *runner) dataOptions() cm.Options {
	f := r.f
	maxRecv := 1
	if r.verb == perftest.Send {
		maxRecv = f.RxDepth
	}
	opts := cm.Options{PD: r.pd, SendCQ: r.scq, RecvCQ: r.rcq,
		Cap:        qp.Caps{MaxSendWR: f.TxDepth, MaxRecvWR: maxRecv, MaxSendSGE: 1, MaxRecvSGE: 1},
		RetryCount: 7, RNRRetry: 7}
	if r.verb == perftest.Read || r.verb == perftest.Atomic {
		opts.ResponderResources, opts.InitiatorDepth = uint8(r.outReads), uint8(r.outReads)
	}
	return opts
}

// cmConnect is create_rdma_cm_connection between its handshakes: the
// buffer, MR and CQs (ctx_init; the server made them in cmListen), then
// NumQPs data connections through rdma_cm.
func (r *runner) cmConnect(n perftest.Negotiated) error {
	f := r.f
	if r.server {
		if r.dataLn == nil { // no CMListen hook ran
			if err := r.cmListen(n); err != nil {
				return err
			}
		}
		l := r.dataLn
		r.dataLn = nil
		defer l.Close()
		for range f.NumQPs {
			c, err := l.Accept(r.ctx)
			if err != nil {
				return fmt.Errorf("Failed to create RDMA CM connection: %w", err)
			}
			r.dataConns = append(r.dataConns, c)
			r.qps = append(r.qps, c.QP())
		}
		r.cmConnected()
		return nil
	}
	if err := r.alloc(n); err != nil {
		return err
	}
	opts := r.dataOptions()
	host, err := tool.ParseHost(f.Host)
	if err != nil {
		return fmt.Errorf("Failed to get RDMA CM address: %w", err)
	}
	addr := netip.AddrPortFrom(host, uint16(f.Port))
	for range f.NumQPs {
		var c *cm.Conn
		for try := 0; ; try++ {
			c, err = cm.Dial(r.ctx, r.dev, addr.String(), opts)
			if err == nil || !errors.Is(err, cm.ErrConnRefused) || try+1 == dataConnectRetries {
				break
			}
			select {
			case <-r.ctx.Done():
				return context.Cause(r.ctx)
			case <-time.After(dataConnectDelay):
			}
		}
		if err != nil {
			return fmt.Errorf("Failed to connect RDMA CM client, tried %d times: %w", dataConnectRetries, err)
		}
		r.dataConns = append(r.dataConns, c)
		r.qps = append(r.qps, c.QP())
	}
	r.cmConnected()
	return nil
}

// cmConnected notes what connectQPs would have set: the PSN the peer's
// first packet carries is the one rdma_cm gave our receive side
// (write_lat follows the peer's WRITEs by it).
func (r *runner) cmConnected() {
	r.peerPSN = r.qps[0].Query().RQPSN
}

// closeCM disconnects the data connections and then the control one, in
// the order destroy_ctx tears them down.
func (r *runner) closeCM() {
	if r.dataLn != nil {
		r.dataLn.Close()
		r.dataLn = nil
	}
	var wg sync.WaitGroup
	for _, c := range r.dataConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
	if r.ctrl != nil && r.ctrl.conn != nil {
		r.ctrl.conn.Close()
	}
}

// msgConn is the rdma_cm control connection as the net.Conn package
// perftest runs its exchanges on: each Write is one signalled SEND, waited
// for; each Read takes the next received message (rdma_read_data: the
// first len(b) bytes of it, whatever its length). Two receives stay
// posted. The peer's disconnect reads as io.EOF. Close does not
// disconnect: closeCM does, after the data QPs.
type msgConn struct {
	conn *cm.Conn
	q    *qp.QP
	cq   *qp.CQ
	buf  []byte
	mr   *qp.MR
	wcs  [4]qp.WC

	sent        int      // SEND completions not yet claimed by Write
	sendFlushed int      // flushed SENDs not yet claimed by Write
	received    int      // messages received in all
	recvd       []uint64 // received slots, in order, not yet read
	lens        map[uint64]uint32

	mu       sync.Mutex
	deadline time.Time
	kick     chan struct{} // closed and replaced when the deadline changes
	closed   bool
}

func (m *msgConn) slot(i uint64) []byte {
	off := int(1+i) * ctrlMsgSize
	return m.buf[off : off+ctrlMsgSize]
}

func (m *msgConn) postRecv(q *qp.QP, i uint64) error {
	sge := []qp.SGE{m.mr.SGE(int(1+i)*ctrlMsgSize, ctrlMsgSize)}
	return q.PostRecv(&qp.RecvWR{WRID: i, SGL: sge})
}

// prepare posts the receives before the connection is established (the
// peer's first message may follow its RTU at once).
func (m *msgConn) prepare(q *qp.QP) error {
	m.lens = map[uint64]uint32{}
	for i := range uint64(2) {
		if err := m.postRecv(q, i); err != nil {
			return err
		}
	}
	return nil
}

// errCtrlClosed is what a Read or Write of a closed msgConn returns.
var errCtrlClosed = fmt.Errorf("rdma_cm control connection: %w", net.ErrClosed)

// handle files one completion. The peer's DREQ moves the QP to ERR, which
// flushes our receives (nothing more will come: Read sees io.EOF) and may
// flush a SEND whose ACK had not arrived yet (Write decides what it means).
func (m *msgConn) handle(wc *qp.WC) error {
	if wc.Status == qp.WCWRFlushErr {
		if wc.Opcode == qp.WCSend || wc.WRID == sendWRID {
			m.sendFlushed++
		}
		return nil
	}
	if wc.Status != qp.WCSuccess {
		return fmt.Errorf("rdma_cm control QP: %w", wc.Err())
	}
	switch wc.Opcode {
	case qp.WCSend:
		m.sent++
	case qp.WCRecv:
		m.recvd = append(m.recvd, wc.WRID)
		m.lens[wc.WRID] = wc.ByteLen
		m.received++
	}
	return nil
}

// waitFor handles completions until cond holds, the deadline passes
// (os.ErrDeadlineExceeded), or the peer disconnects (io.EOF).
func (m *msgConn) waitFor(cond func() bool) error {
	for {
		n, err := m.cq.Poll(m.wcs[:])
		for i := range n {
			if err := m.handle(&m.wcs[i]); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
		if cond() {
			return nil
		}
		if n > 0 {
			continue
		}
		m.mu.Lock()
		d, kick, closed := m.deadline, m.kick, m.closed
		m.mu.Unlock()
		if closed {
			return errCtrlClosed
		}
		select {
		case <-m.conn.Done():
			return io.EOF
		default:
		}
		if !d.IsZero() && !time.Now().Before(d) {
			return os.ErrDeadlineExceeded
		}
		ctx, cancel := context.WithCancel(context.Background())
		if !d.IsZero() {
			ctx, cancel = context.WithDeadline(context.Background(), d)
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-kick:
			case <-m.conn.Done():
			case <-stop:
			}
			cancel()
		}()
		n, err = m.cq.Wait(ctx, m.wcs[:])
		close(stop)
		cancel()
		for i := range n {
			if err := m.handle(&m.wcs[i]); err != nil {
				return err
			}
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// Write sends b (at most ctrlMsgSize bytes) as one SEND and waits for its
// completion.
func (m *msgConn) Write(b []byte) (int, error) {
	if len(b) > ctrlMsgSize {
		return 0, fmt.Errorf("rdma_cm control message of %d bytes > %d", len(b), ctrlMsgSize)
	}
	copy(m.buf, b)
	sge := []qp.SGE{m.mr.SGE(0, len(b))}
	if err := m.q.PostSend(&qp.SendWR{WRID: sendWRID, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: sge}); err != nil {
		return 0, err
	}
	before := m.received
	if err := m.waitFor(func() bool { return m.sent > 0 || m.sendFlushed > 0 }); err != nil {
		return 0, err
	}
	if m.sent > 0 {
		m.sent--
		return len(b), nil
	}
	m.sendFlushed--
	// Flushed by the peer's disconnect before its ACK came. The exchanges
	// alternate (each side answers only what it has read), so if the peer
	// sent anything since, it had read this message; otherwise it is gone.
	if m.received > before {
		return len(b), nil
	}
	return 0, io.EOF
}

// sendWRID marks the control QP's SENDs (its receives are the slot
// numbers 0 and 1).
const sendWRID = 1 << 32

// Read fills b from the next received message and reposts its receive.
func (m *msgConn) Read(b []byte) (int, error) {
	if err := m.waitFor(func() bool { return len(m.recvd) > 0 }); err != nil {
		return 0, err
	}
	i := m.recvd[0]
	m.recvd = m.recvd[1:]
	n := copy(b, m.slot(i))
	if err := m.postRecv(m.q, i); err != nil {
		select {
		case <-m.conn.Done():
			// The peer's last message, read after its DREQ put the QP
			// in ERR: nothing more will come, nothing to receive into.
		default:
			return 0, err
		}
	}
	return n, nil
}

func (m *msgConn) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.kick)
		m.kick = make(chan struct{})
	}
	return nil
}

func (m *msgConn) LocalAddr() net.Addr  { return tool.CMAddr(m.conn.LocalAddr()) }
func (m *msgConn) RemoteAddr() net.Addr { return tool.CMAddr(m.conn.RemoteAddr()) }

func (m *msgConn) SetDeadline(t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deadline = t
	close(m.kick)
	m.kick = make(chan struct{})
	return nil
}

func (m *msgConn) SetReadDeadline(t time.Time) error  { return m.SetDeadline(t) }
func (m *msgConn) SetWriteDeadline(t time.Time) error { return m.SetDeadline(t) }
