package rsock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// State bits, as rsocket's rs_connected / rs_readable / rs_writable.
const (
	stConnected = 1 << iota
	stReadable
	stWritable
)

const recvFlag = 1 << 63 // wr_id bit of receives (RS_WR_ID_FLAG_RECV)

// drainWait bounds how long Close waits for what was written to be
// acknowledged and for the disconnect message to go out.
const drainWait = 10 * time.Second

// endpoint is a connection's memory before the connection exists: the send
// and receive buffers and the target buffer list, registered on pd.
type endpoint struct {
	o          Options
	pd         *qp.PD
	release    func() // the PD's owner's release (nil: dealloc pd)
	sbuf       []byte // sbufSize bytes of ring + ctrlSize control slots
	rbuf       []byte
	tbuf       []byte // RS_SGL_SIZE sge, then iomapSize iomap entries
	smr        *qp.MR
	rmr        *qp.MR
	tmr        *qp.MR
	sbufSize   int
	rbufSize   int
	iomapSize  int
	order      binary.ByteOrder // ours, as declared in the connect data
	bigEndian  bool
	peer       connData
	peerParsed bool
}

func newEndpoint(pd *qp.PD, o Options, release func()) (*endpoint, error) {
	e := &endpoint{o: o, pd: pd, release: release, sbufSize: o.SendBuffer, rbufSize: o.RecvBuffer,
		iomapSize: scaleToValue(valueToScale(o.IOMapSize)), order: binary.LittleEndian, bigEndian: o.bigEndian}
	if e.bigEndian {
		e.order = binary.BigEndian
	}
	e.sbuf = make([]byte, e.sbufSize+ctrlSize*sgeLen)
	e.rbuf = make([]byte, e.rbufSize)
	e.tbuf = make([]byte, sglSize*sgeLen+e.iomapSize*iomapLen)
	var err error
	if e.smr, err = pd.RegMR(e.sbuf, qp.LocalWrite); err != nil {
		e.free()
		return nil, fmt.Errorf("rsock: register the send buffer: %w", err)
	}
	if e.rmr, err = pd.RegMR(e.rbuf, qp.LocalWrite|qp.RemoteWrite); err != nil {
		e.free()
		return nil, fmt.Errorf("rsock: register the receive buffer: %w", err)
	}
	if e.tmr, err = pd.RegMR(e.tbuf, qp.LocalWrite|qp.RemoteWrite); err != nil {
		e.free()
		return nil, fmt.Errorf("rsock: register the target buffer list: %w", err)
	}
	return e, nil
}

// connData is rs_format_conn_data.
func (e *endpoint) connData() []byte {
	d := connData{version: 1, flags: flagIOMap, credits: uint16(e.o.RQSize), iomapSize: valueToScale(e.iomapSize),
		targetSGL: sge{addr: e.tmr.IOVA(), key: e.tmr.RKey(), length: sglSize},
		dataBuf:   sge{addr: e.rmr.IOVA(), key: e.rmr.RKey(), length: uint32(e.rbufSize / 2)}}
	if e.bigEndian {
		d.flags |= flagNet
	}
	return d.marshal()
}

func (e *endpoint) free() {
	for _, mr := range []*qp.MR{e.smr, e.rmr, e.tmr} {
		if mr != nil {
			_ = mr.Deregister()
		}
	}
	e.smr, e.rmr, e.tmr = nil, nil, nil
	if e.release != nil {
		e.release()
	} else if e.pd != nil {
		_ = e.pd.Dealloc()
	}
	e.release, e.pd = nil, nil
}

// spareRecvs is how many receives a connection posts beyond the rqSize
// its credits count on (rsocket posts exactly rqSize and reposts one per
// receive completion as it polls). Receives it used are reposted once
// this many are owed, in one go: the peer never finds fewer than rqSize
// posted, and a ping-pong does not pay a PostRecv per message (each one a
// device call, which re-arms the link's wait deadline for the ACK held
// after a receive: a runtime timer change that can wake a thread). The
// peer cannot tell.
func spareRecvs(rqSize int) int { return min(rqSize/4, maxRecvWR-rqSize) }

// maxRecvWR is qp's largest queue (max_qp_wr).
const maxRecvWR = 1 << 16

// postRecvs posts n zero-SGE receives (rs_post_recv): a WRITE_WITH_IMM
// needs a receive only for its completion.
func postRecvs(q *qp.QP, n int) error {
	wr := qp.RecvWR{WRID: recvFlag}
	for range n {
		if err := q.PostRecv(&wr); err != nil {
			return err
		}
	}
	return nil
}

// Conn is an rsocket stream connection: a net.Conn over an RC QP. It is
// safe for concurrent use; Reads are serialised among themselves, and so
// are Writes.
type Conn struct {
	e      *endpoint
	cc     *cm.Conn
	q      *qp.QP
	cq     *qp.CQ
	log    *slog.Logger
	local  *net.TCPAddr
	remote *net.TCPAddr
	ctx    context.Context // ends at Close: stops the keepalive goroutine
	cancel context.CancelFunc

	rlock, wlock sync.Mutex // one Read, one Write at a time
	rdl, wdl     *deadline
	closed       chan struct{}
	closeOnce    sync.Once
	closeErr     error
	closing      bool // Close began (c.mu): Reads and Writes end with net.ErrClosed, not EOF

	mu    sync.Mutex
	state int
	err   error // why the connection ended (nil: an orderly end)
	dead  bool  // the QP is in ERR (flushed), or we put it there

	// Waiting (wait): the goroutine that waits for something polls the
	// CQ itself; while one does (polling), the others sleep on their
	// wake channel (sleeping counts them) and are woken after each batch
	// of completions the poller processed, and when it leaves.
	polling  bool
	wcs      []qp.WC // the poller's
	sleeping [waiters]int
	wakes    [waiters]chan struct{}

	// Send side.
	sqSize, rqSize   int
	sqeAvail         int
	sbufAvail        int
	sbufHead         int
	olen             int // the next transfer's size bound (rsocket's olen)
	sseqNo, sseqComp uint16
	target           [sglSize]sge // the peer's receive buffer halves we may write
	targetSGE        int
	nextSlot         int // the target SGL slot the peer updates next
	ctrlSeq, ctrlMax uint32
	sgl              [2]qp.SGE
	wr               qp.SendWR
	peerOrder        binary.ByteOrder
	remoteSGL        sge // the peer's target buffer list
	remoteSGE        uint32
	remoteIOMap      sge
	targetIOMap      []iomapEntry
	sendMax          int    // how far the send ring may grow (0: it keeps its size)
	peerHalf         uint32 // the largest region the peer granted
	growSend         bool   // the ring is to grow once every send completed

	// Receive side.
	spare            int      // receives posted beyond rqSize (spareRecvs)
	reposts          int      // receives used and not yet reposted (≤ spare)
	rmsg             []uint32 // lengths of unread messages (a ring of rqSize+1)
	rmsgHead, rmsgN  int
	rseqNo, rseqComp uint16
	rbufAvail        int   // free and not granted
	rbufFree         int   // offset of the half to grant next
	rbufOff          int   // where the next unread byte is
	peerRoom         int64 // bytes granted to the peer and not yet reported written
	recvMax          int   // how far the receive buffer may grow (0: it keeps its size)
	exhausted        int   // times the peer used up its room since the buffer last changed
	growRecv         int   // the size the receive buffer grows to once all was read (0: none)

	iomaps []*iomapMR // riomap'ed buffers, by peer slot
}

type iomapEntry struct {
	offset uint64
	sge    sge
}

// start turns an endpoint and an established cm connection into a Conn.
func start(e *endpoint, cc *cm.Conn, peer connData, o Options) *Conn {
	c := &Conn{e: e, cc: cc, q: cc.QP(), cq: cc.RecvCQ(), log: o.Logger,
		local: tcpAddr(cc.LocalAddr()), remote: tcpAddr(cc.RemoteAddr()),
		closed: make(chan struct{}), wcs: make([]qp.WC, 64),
		state:  stConnected | stReadable | stWritable,
		sqSize: o.SQSize, rqSize: o.RQSize, spare: spareRecvs(o.RQSize),
		rmsg: make([]uint32, o.RQSize+1), sendMax: o.sendMax, recvMax: o.recvMax,
	}
	// A deadline that passes, or moves into the past (net/http aborts its
	// background read with SetReadDeadline(aLongTimeAgo)), wakes a Read
	// or Write parked in a self-driving CQ wait at once, not at the wait's
	// next look at its context (qp's ctxSlice, 20 ms).
	c.rdl, c.wdl = newDeadline(c.cq.Interrupt), newDeadline(c.cq.Interrupt)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for i := range c.wakes {
		c.wakes[i] = make(chan struct{}, 1)
	}
	// rs_init_bufs.
	c.sqeAvail = c.sqSize - ctrlSize
	c.ctrlMax = ctrlSize
	c.sbufAvail = e.sbufSize
	c.rbufFree = e.rbufSize / 2
	c.rbufAvail = e.rbufSize / 2
	c.rseqComp = uint16(c.rqSize / 2)
	c.peerRoom = int64(e.rbufSize / 2)
	// rs_save_conn_data.
	c.remoteSGL = peer.targetSGL
	c.remoteSGE = 1 % peer.targetSGL.length
	c.peerOrder = binary.LittleEndian
	if peer.flags&flagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	if peer.flags&flagIOMap != 0 {
		c.remoteIOMap = sge{addr: peer.targetSGL.addr + sgeLen*uint64(peer.targetSGL.length),
			length: uint32(scaleToValue(peer.iomapSize)), key: peer.targetSGL.key}
	}
	c.target[0] = peer.dataBuf
	c.peerHalf = peer.dataBuf.length
	c.nextSlot = 1
	c.sseqComp = peer.credits
	c.targetIOMap = make([]iomapEntry, e.iomapSize)
	c.iomaps = make([]*iomapMR, c.remoteIOMap.length)

	c.mu.Lock()
	c.updateCredits()
	c.mu.Unlock()
	if o.KeepAlive > 0 {
		go c.keepalive(o.KeepAlive)
	}
	return c
}

func tcpAddr(ap netip.AddrPort) *net.TCPAddr { return net.TCPAddrFromAddrPort(ap) }

func (c *Conn) killQP() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.q.Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState)
}

// wakeAll wakes every goroutine sleeping in wait (c.mu held).
func (c *Conn) wakeAll() {
	for i, n := range c.sleeping {
		if n > 0 {
			select {
			case c.wakes[i] <- struct{}{}:
			default:
			}
		}
	}
}

// fail ends the connection with err (c.mu held); the caller moves the QP to
// ERR once it let go of the lock.
func (c *Conn) fail(err error) {
	if c.err == nil && c.state != 0 {
		c.err = err
		c.log.Warn("rsock: connection failed", "remote", c.remote, "err", err)
	}
	c.state = 0
}

// process is rs_poll_cq for a batch of completions (c.mu held).
func (c *Conn) process(wcs []qp.WC) {
	reposts := 0
	for i := range wcs {
		wc := &wcs[i]
		if wc.WRID&recvFlag != 0 {
			if wc.Status != qp.WCSuccess {
				c.ended(wc)
				continue
			}
			reposts++
			if wc.Flags&qp.WCWithImm == 0 {
				c.fail(fmt.Errorf("%w: a SEND (rsockets only WRITE with immediate)", ErrProtocol))
				continue
			}
			c.received(wc.Imm, wc.ByteLen)
			continue
		}
		m := uint32(wc.WRID)
		switch msgOp(m) {
		case opSGL, opCtrl:
			c.ctrlMax++
		case opIOMap:
			c.sqeAvail++
			c.sbufAvail += iomapLen
		default:
			c.sqeAvail++
			c.sbufAvail += int(msgData(m))
		}
		if wc.Status != qp.WCSuccess {
			c.ended(wc)
		}
	}
	c.reposts += reposts
	if c.state&stConnected != 0 && c.reposts > 0 && c.reposts >= c.spare {
		if err := postRecvs(c.q, c.reposts); err != nil {
			c.fail(fmt.Errorf("rsock: repost receives: %w", err))
		}
		c.reposts = 0
	}
}

// ended handles a completion in error: a flush after the peer's DREQ or our
// own ERR transition ends the connection quietly (reads see EOF after what
// was queued); any other error is the connection's error.
func (c *Conn) ended(wc *qp.WC) {
	if c.state&stConnected == 0 {
		return
	}
	c.dead = true
	if wc.Status == qp.WCWRFlushErr {
		if err := c.cc.Err(); err != nil && !errors.Is(err, cm.ErrDisconnected) {
			c.fail(err)
			return
		}
		c.state = 0 // disconnected: EOF for reads, ECONNRESET for writes
		return
	}
	c.fail(fmt.Errorf("rsock: %w", wc.Err()))
}

// received handles one WRITE_WITH_IMM (c.mu held).
func (c *Conn) received(m, byteLen uint32) {
	data := msgData(m)
	switch msgOp(m) {
	case opSGL:
		c.sseqComp = uint16(data)
		switch byteLen {
		case 0:
		case sgeLen:
			s := c.nextSlot
			if c.target[s].length != 0 {
				c.fail(fmt.Errorf("%w: SGL update of slot %d still in use", ErrProtocol, s))
				return
			}
			t := getSGE(c.e.tbuf[s*sgeLen:], c.e.order)
			if t.length == 0 || t.length > msgDataMask || t.addr+uint64(t.length) < t.addr {
				c.fail(fmt.Errorf("%w: SGL update of %d bytes at %#x", ErrProtocol, t.length, t.addr))
				return
			}
			c.target[s] = t
			c.nextSlot = (s + 1) % sglSize
			c.peerHalf = max(c.peerHalf, t.length)
		default:
			c.fail(fmt.Errorf("%w: SGL update of %d bytes", ErrProtocol, byteLen))
		}
	case opIOMap:
		if byteLen != iomapLen || int(data) >= len(c.targetIOMap) {
			c.fail(fmt.Errorf("%w: iomap update %d of %d bytes (%d entries)", ErrProtocol, data, byteLen, len(c.targetIOMap)))
			return
		}
		b := c.e.tbuf[sglSize*sgeLen+int(data)*iomapLen:]
		e := iomapEntry{offset: c.e.order.Uint64(b), sge: getSGE(b[8:], c.e.order)}
		if e.sge.addr+uint64(e.sge.length) < e.sge.addr || e.offset+uint64(e.sge.length) < e.offset {
			c.fail(fmt.Errorf("%w: iomap update %d wraps", ErrProtocol, data))
			return
		}
		c.targetIOMap[data] = e
	case opCtrl:
		switch data {
		case ctrlDisc:
			c.state = 0
		case ctrlShut:
			if c.state&stWritable != 0 {
				c.state &^= stReadable
			} else {
				c.state = 0
			}
		}
	case opWrite:
	default:
		if byteLen != data {
			c.fail(fmt.Errorf("%w: %d bytes written, %d announced", ErrProtocol, byteLen, data))
			return
		}
		if int64(data) > c.peerRoom {
			c.fail(fmt.Errorf("%w: %d bytes written, %d granted", ErrProtocol, data, c.peerRoom))
			return
		}
		if c.rmsgN >= c.rqSize {
			c.fail(fmt.Errorf("%w: more than the %d messages credited", ErrProtocol, c.rqSize))
			return
		}
		c.peerRoom -= int64(data)
		c.rmsg[(c.rmsgHead+c.rmsgN)%len(c.rmsg)] = data
		c.rmsgN++
		if c.peerRoom < int64(c.e.rbufSize/4) && c.recvMax > c.e.rbufSize && c.growRecv == 0 {
			if c.exhausted++; c.exhausted >= growAfter {
				c.growRecv = min(2*c.e.rbufSize, c.recvMax)
			}
		}
	}
}

// growAfter is how many arrivals that leave the peer less than a quarter
// of the receive buffer to write into make it grow (Options.MaxBuffer).
const growAfter = 4

// updateCredits is rs_update_credits (c.mu held), which may send more than
// one message: after the receive buffer grew, both its halves.
func (c *Conn) updateCredits() {
	if c.growRecv != 0 && c.peerRoom == 0 && c.rmsgN == 0 && c.state&stConnected != 0 {
		c.growRecvBuf()
	}
	for {
		half := c.e.rbufSize / 2
		grant := c.rbufAvail >= half && c.growRecv == 0 // growing: the old buffer is not granted again
		if !((grant || int16(c.rseqNo-c.rseqComp) >= 0) && c.ctrlSeq != c.ctrlMax && c.state&stConnected != 0) {
			return
		}
		c.ctrlSeq++
		c.rseqComp = c.rseqNo + uint16(c.rqSize/2)
		m := msg(opSGL, uint32(c.rseqNo)+uint32(c.rqSize))
		c.wr = qp.SendWR{WRID: uint64(m), Opcode: qp.WRRDMAWriteWithImm, Flags: qp.SendSignaled, Imm: m}
		if grant {
			off := c.e.sbufSize + sgeLen*int(c.ctrlSeq&(ctrlSize-1))
			sge{addr: c.e.rmr.IOVA() + uint64(c.rbufFree), key: c.e.rmr.RKey(), length: uint32(half)}.
				put(c.e.sbuf[off:], c.peerOrder)
			c.sgl[0] = qp.SGE{Addr: c.e.smr.IOVA() + uint64(off), Length: sgeLen, LKey: c.e.smr.LKey()}
			c.wr.SGL = c.sgl[:1]
			c.wr.RemoteAddr = c.remoteSGL.addr + uint64(c.remoteSGE)*sgeLen
			c.wr.RKey = c.remoteSGL.key
			c.rbufAvail -= half
			c.peerRoom += int64(half)
			c.rbufFree = (c.rbufFree + half) % c.e.rbufSize
			c.remoteSGE = (c.remoteSGE + 1) % c.remoteSGL.length
		}
		if err := c.q.PostSend(&c.wr); err != nil {
			c.fail(fmt.Errorf("rsock: post credits: %w", err))
			return
		}
	}
}

// growRecvBuf replaces the receive buffer by one of c.growRecv bytes (c.mu
// held) once everything granted in the old one was written and read: the
// peer's slots are both empty, and the next two grants are the new
// buffer's halves, in the order the peer fills its slots.
func (c *Conn) growRecvBuf() {
	size := c.growRecv
	c.growRecv, c.exhausted = 0, 0
	buf := make([]byte, size)
	mr, err := c.e.pd.RegMR(buf, qp.LocalWrite|qp.RemoteWrite)
	if err != nil {
		c.recvMax = 0 // stay as we are
		c.log.Debug("rsock: receive buffer not grown", "size", size, "err", err)
		return
	}
	old := c.e.rmr
	c.e.rbuf, c.e.rmr, c.e.rbufSize = buf, mr, size
	c.rbufOff, c.rbufFree, c.rbufAvail = 0, 0, size
	_ = old.Deregister()
}

// wantSendRing reports whether the send ring is what stops the writer
// while the peer grants regions larger than half of it (c.mu held).
func (c *Conn) wantSendRing() bool {
	return c.sendMax > c.e.sbufSize && 2*int(c.peerHalf) > c.e.sbufSize &&
		c.sbufAvail < min(sndLowat, c.e.sbufSize)
}

// growSendBuf replaces the send ring by one twice the peer's largest half
// (at most sendMax) once every send completed (c.mu held): nothing in
// flight reads the old ring or its control slots.
func (c *Conn) growSendBuf() {
	c.growSend = false
	size := min(2*int(c.peerHalf), c.sendMax)
	buf := make([]byte, size+ctrlSize*sgeLen)
	mr, err := c.e.pd.RegMR(buf, qp.LocalWrite)
	if err != nil {
		c.sendMax = 0
		c.log.Debug("rsock: send buffer not grown", "size", size, "err", err)
		return
	}
	old := c.e.smr
	c.e.sbuf, c.e.smr, c.e.sbufSize = buf, mr, size
	c.sbufHead, c.sbufAvail = 0, size
	_ = old.Deregister()
}

// canSend is rs_can_send (c.mu held).
func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= min(sndLowat, c.e.sbufSize) && c.sseqNo != c.sseqComp &&
		c.target[c.targetSGE].length != 0
}

// errLocked is the error for an operation on a connection that is no longer
// (c.mu held).
func (c *Conn) errLocked(op string) error {
	if c.closing {
		return c.opErr(op, net.ErrClosed)
	}
	if c.err != nil {
		return c.opErr(op, c.err)
	}
	return c.opErr(op, syscall.ECONNRESET)
}

func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "rsock", Source: c.local, Addr: c.remote, Err: err}
}

// Who waits (wait's who): readers, writers, and Close or CloseWrite.
const (
	waitRead = iota
	waitWrite
	waitClose
	waiters
)

// wait returns once something may have changed for the caller: its
// condition is the caller's to check again. When nobody polls the CQ, the
// caller does (qp.CQ.Wait, which on a self-driving device reads the link
// in this goroutine: the completion comes back here without a goroutine
// switch), processes what it got as rs_poll_cq does and wakes the
// sleepers; else it sleeps until the poller woke it. ctx is the deadline
// (or Close's bound); c.mu held on entry and return.
func (c *Conn) wait(op string, who int, ctx context.Context) error {
	if !c.polling {
		c.polling = true
		c.mu.Unlock()
		n, err := c.cq.Wait(ctx, c.wcs)
		c.mu.Lock()
		c.polling = false
		c.processed(n, err, ctx)
		if n > 0 || ctx.Err() == nil {
			return nil
		}
		return c.waitErr(op, ctx)
	}
	c.sleeping[who]++
	c.mu.Unlock()
	var err error
	select {
	case <-c.wakes[who]:
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.mu.Lock()
	c.sleeping[who]--
	if err != nil {
		return c.waitErr(op, ctx)
	}
	return nil
}

// pollIdle processes what completed when nobody polls (c.mu held): the
// keepalive's look at a connection nobody reads or writes.
func (c *Conn) pollIdle() {
	if c.polling {
		return
	}
	c.polling = true
	c.mu.Unlock()
	n, err := c.cq.Poll(c.wcs)
	c.mu.Lock()
	c.polling = false
	c.processed(n, err, nil)
}

// processed finishes a poll of n completions in c.wcs that ended with err
// (c.mu held): it handles them (rs_poll_cq), grants credits, moves a
// connection that failed to ERR and wakes the sleepers. err is ignored
// when ctx (nil: none) ended.
func (c *Conn) processed(n int, err error, ctx context.Context) {
	if n > 0 {
		c.process(c.wcs[:n])
		c.updateCredits()
	}
	if err != nil && (ctx == nil || ctx.Err() == nil) {
		c.fail(fmt.Errorf("rsock: completion queue: %w", err))
	}
	kill := c.state == 0 && !c.dead && c.err != nil
	if kill {
		c.dead = true
	}
	c.wakeAll() // what they wait for may have come, or it is their turn to poll
	if kill {
		c.mu.Unlock()
		c.killQP()
		c.mu.Lock()
	}
}

// waitErr is the error of a wait whose ctx ended: the Conn was closed, or
// the deadline passed.
func (c *Conn) waitErr(op string, ctx context.Context) error {
	if c.closing {
		return c.opErr(op, net.ErrClosed)
	}
	if _, ok := ctx.(*dlCtx); ok {
		return c.opErr(op, os.ErrDeadlineExceeded)
	}
	return c.opErr(op, ctx.Err())
}

// Read reads what has arrived, waiting for at least one byte (rrecv). After
// the peer's CloseWrite or Close, and the data before it, it returns io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	c.rlock.Lock()
	defer c.rlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if c.rdl.wait().Err() != nil {
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	for c.rmsgN == 0 || c.err != nil {
		if c.err != nil { // the connection failed: what it queued is not trusted
			return 0, c.opErr("read", c.err)
		}
		if c.state&stReadable == 0 {
			if c.closing {
				return 0, c.opErr("read", net.ErrClosed)
			}
			if c.err != nil {
				return 0, c.opErr("read", c.err)
			}
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := c.wait("read", waitRead, c.rdl.wait()); err != nil {
			return 0, err
		}
	}
	return c.consume(p, 0), nil
}

// consume moves up to len(p) queued bytes into p, or (p nil) drops skip
// bytes the caller already used, and frees their room (c.mu held).
func (c *Conn) consume(p []byte, skip int) int {
	n, want := 0, skip
	if p != nil {
		want = len(p)
	}
	size := c.e.rbufSize
	for c.rmsgN > 0 && n < want {
		m := &c.rmsg[c.rmsgHead]
		take := min(int(*m), want-n, size-c.rbufOff)
		if p != nil {
			copy(p[n:], c.e.rbuf[c.rbufOff:c.rbufOff+take])
		}
		n += take
		*m -= uint32(take)
		c.rbufOff = (c.rbufOff + take) % size
		c.rbufAvail += take
		if *m == 0 {
			c.rseqNo++
			c.rmsgHead = (c.rmsgHead + 1) % len(c.rmsg)
			c.rmsgN--
		}
	}
	c.updateCredits()
	return n
}

// Write writes all of p, split into transfers as credits, the send buffer
// and the peer's receive buffer allow (rsend); it blocks while none does.
func (c *Conn) Write(p []byte) (int, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	return c.write(p, nil)
}

// write sends p, or (with r) what r yields until EOF, read straight into the
// send buffer; c.wlock held.
func (c *Conn) write(p []byte, r io.Reader) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return 0, c.opErr("write", net.ErrClosed)
	}
	if c.wdl.wait().Err() != nil {
		return 0, c.opErr("write", os.ErrDeadlineExceeded)
	}
	// rsocket starts each rsend at 2 KiB and doubles up to 64 KiB; a
	// stream of writes that find sends still in flight keeps the size it
	// reached (fewer, larger WRITEs; the wire format is the same).
	n, olen := 0, c.olen
	if olen == 0 || c.sqeAvail == c.sqSize-ctrlSize {
		olen = olapStart
	}
	defer func() { c.olen = olen }()
	var rerr error
	for (r != nil && rerr == nil) || (r == nil && n < len(p)) {
		for c.state&stWritable == 0 || c.growSend || !c.canSend() {
			if c.state&stWritable == 0 {
				return n, c.errLocked("write")
			}
			if !c.growSend && c.wantSendRing() {
				c.growSend = true // post nothing more until what is in flight completed
			}
			if c.growSend && c.allSent() {
				c.growSendBuf()
				continue
			}
			if err := c.wait("write", waitWrite, c.wdl.wait()); err != nil {
				return n, err
			}
		}
		xfer := olen
		if r == nil {
			xfer = min(xfer, len(p)-n)
		}
		if olen < maxTransfer {
			olen <<= 1
		}
		xfer = min(xfer, c.sbufAvail, int(c.target[c.targetSGE].length))
		head, size := c.sbufHead, c.e.sbufSize
		first := min(xfer, size-head)
		if r != nil {
			// Read straight into the ring (one contiguous piece), outside
			// the lock: nothing else touches the bytes reserved here.
			c.mu.Unlock()
			got, err := r.Read(c.e.sbuf[head : head+first])
			c.mu.Lock()
			if got == 0 {
				if err == io.EOF {
					return n, nil
				}
				if err != nil {
					return n, err
				}
				continue
			}
			xfer, first = got, got
			if err != nil && err != io.EOF {
				rerr = err // sent what was read, then reported
			}
		} else {
			copy(c.e.sbuf[head:head+first], p[n:n+first])
			copy(c.e.sbuf[:xfer-first], p[n+first:n+xfer])
		}
		if c.state&stWritable == 0 {
			return n, c.errLocked("write")
		}
		if err := c.postData(head, first, xfer); err != nil {
			return n, c.opErr("write", err)
		}
		n += xfer
	}
	return n, rerr
}

// postData is rs_write_data for xfer bytes at head of the send ring (first
// of them before its end). c.mu held.
func (c *Conn) postData(head, first, xfer int) error {
	c.sseqNo++
	t := &c.target[c.targetSGE]
	c.post(msg(opData, uint32(xfer)), head, first, xfer, t.addr, t.key, true)
	t.addr += uint64(xfer)
	t.length -= uint32(xfer)
	if t.length == 0 {
		c.targetSGE = (c.targetSGE + 1) % sglSize
	}
	if err := c.q.PostSend(&c.wr); err != nil {
		c.fail(fmt.Errorf("rsock: post data: %w", err))
		return err
	}
	return nil
}

// ReadFrom reads r into the send buffer directly and sends it (io.ReaderFrom,
// which io.Copy uses): one copy fewer than Write.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	n, err := c.write(nil, r)
	return int64(n), err
}

// WriteTo writes what arrives to w straight from the receive buffer until
// EOF (io.WriterTo, which io.Copy uses): one copy fewer than Read.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rlock.Lock()
	defer c.rlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for {
		if c.closing {
			return total, c.opErr("read", net.ErrClosed)
		}
		for c.rmsgN == 0 || c.err != nil {
			if c.err != nil {
				return total, c.opErr("read", c.err)
			}
			if c.state&stReadable == 0 {
				if c.closing {
					return total, c.opErr("read", net.ErrClosed)
				}
				return total, nil
			}
			if err := c.wait("read", waitRead, c.rdl.wait()); err != nil {
				return total, err
			}
		}
		// The bytes queued are ours until consumed: the peer may not
		// write there before we grant them again.
		off := c.rbufOff
		b := c.e.rbuf[off : off+min(int(c.rmsg[c.rmsgHead]), c.e.rbufSize-off)]
		n := len(b)
		c.mu.Unlock()
		wn, err := w.Write(b)
		c.mu.Lock()
		c.consume(nil, wn)
		total += int64(wn)
		if err != nil {
			return total, err
		}
		if wn < n {
			return total, io.ErrShortWrite
		}
	}
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline: a Read waiting past it returns an
// error satisfying os.ErrDeadlineExceeded and net.Error's Timeout.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline, as SetReadDeadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if isClosed(c.closed) {
		return c.opErr("set deadline", net.ErrClosed)
	}
	c.wdl.set(t)
	return nil
}

// LocalAddr returns the local address (a *net.TCPAddr: rsockets live in
// rdma_cm's TCP port space).
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address (a *net.TCPAddr).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// sendCtrl posts a control message once a control slot is free (c.mu held),
// waiting at most until ctx ends.
func (c *Conn) sendCtrl(code uint32, ctx context.Context) error {
	for c.ctrlSeq == c.ctrlMax {
		if c.state&stConnected == 0 {
			return nil
		}
		if c.wait("close", waitClose, ctx) != nil {
			return errors.New("rsock: no control slot came free")
		}
	}
	if c.state&stConnected == 0 {
		return nil
	}
	c.ctrlSeq++
	m := msg(opCtrl, code)
	c.wr = qp.SendWR{WRID: uint64(m), Opcode: qp.WRRDMAWriteWithImm, Flags: qp.SendSignaled, Imm: m}
	if err := c.q.PostSend(&c.wr); err != nil {
		c.fail(fmt.Errorf("rsock: post control message: %w", err))
		return err
	}
	return nil
}

// allSent is rs_conn_all_sends_done (c.mu held).
func (c *Conn) allSent() bool {
	return int(c.ctrlMax-c.ctrlSeq)+c.sqeAvail == c.sqSize || c.state&stConnected == 0
}

// drain waits until every send completed, at most until ctx ends (c.mu
// held).
func (c *Conn) drain(ctx context.Context) bool {
	for !c.allSent() {
		if c.wait("close", waitClose, ctx) != nil {
			return false
		}
	}
	return true
}

// CloseWrite shuts down the sending side (rshutdown SHUT_WR): the peer reads
// EOF after what was written; this side can still read.
func (c *Conn) CloseWrite() error {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if isClosed(c.closed) {
		return c.opErr("close", net.ErrClosed)
	}
	if c.state&stWritable == 0 {
		return nil
	}
	c.state &^= stWritable
	code := uint32(ctrlShut)
	if c.state&stReadable == 0 {
		code = ctrlDisc
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainWait)
	defer cancel()
	if err := c.sendCtrl(code, ctx); err != nil {
		return c.opErr("close", err)
	}
	if code == ctrlDisc {
		c.state = 0
	}
	c.wakeAll()
	return nil
}

// Close sends what was written (waiting up to 10 s for the peer to take
// it), tells the peer (RS_CTRL_DISCONNECT), disconnects (DREQ) and frees
// the connection's resources. Blocked Reads and Writes return net.ErrClosed.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), drainWait)
		defer cancel()
		c.mu.Lock()
		c.closing = true
		if c.state&stConnected != 0 {
			if c.drain(ctx) {
				if err := c.sendCtrl(ctrlDisc, ctx); err == nil {
					c.state = 0 // rshutdown(SHUT_RDWR) clears readable and writable
					c.state |= stConnected
					c.drain(ctx)
				}
			}
		}
		c.state = 0
		close(c.closed)
		c.mu.Unlock()
		// Blocked Reads and Writes end (their waits' contexts are done).
		c.rdl.close()
		c.wdl.close()
		c.cancel()
		c.mu.Lock()
		for c.polling { // a Read or Write in CQ.Wait was interrupted by the deadlines' close
			c.sleeping[waitClose]++
			c.mu.Unlock()
			<-c.wakes[waitClose]
			c.mu.Lock()
			c.sleeping[waitClose]--
		}
		failed := c.err != nil
		c.mu.Unlock()
		if failed {
			// The peer may be gone: do not wait for its DREP.
			go func() {
				c.cc.Close()
				c.e.free()
			}()
			return
		}
		if err := c.cc.Close(); err != nil && !errors.Is(err, cm.ErrTimeout) {
			c.closeErr = err
		}
		c.e.free()
	})
	return c.closeErr
}
