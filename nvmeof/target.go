package nvmeof

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// Namespace is one namespace of a Subsystem.
type Namespace struct {
	// ID is the namespace ID (0: its 1-based position in the subsystem).
	ID uint32
	// Backend holds the data; Size bytes of it are served.
	Backend Backend
	Size    int64
	// BlockSize is the LBA size, 512 (the default) or 4096.
	BlockSize int
	// UUID identifies the namespace (zero: derived from the NQN and ID).
	UUID [16]byte

	served atomic.Int64 // the size served: Size, until Target.Resize
}

// ServedSize is the namespace's size as served now: Size, or what
// Target.Resize set.
func (ns *Namespace) ServedSize() int64 {
	if n := ns.served.Load(); n != 0 {
		return n
	}
	return ns.Size
}

// Subsystem is an NVM subsystem a Target serves.
type Subsystem struct {
	NQN           string
	Serial, Model string // Identify strings (defaults: derived, "goroce")
	Namespaces    []*Namespace
	// Hosts are the host NQNs allowed to connect (empty: any host).
	Hosts []string
}

// Target is an NVMe over Fabrics RDMA target (the role of the kernel's
// nvmet-rdma): it serves its subsystems and a discovery controller
// (DiscoveryNQN) on every Listener given to Serve. Set the fields before
// the first Listen; they are not changed afterwards.
type Target struct {
	Subsystems []*Subsystem
	// InlineDataSize is the in-capsule data an I/O queue accepts (default
	// 4096, as nvmet-rdma; -1: none).
	InlineDataSize int
	// MaxQueueSize bounds a queue's depth (CAP.MQES+1; default 128).
	MaxQueueSize int
	// MaxIOQueues is the number of I/O queues a controller may have
	// (default 16).
	MaxIOQueues int
	// Window is the requester window of the target's QPs (qp.QP.SetWindow:
	// PSNs of read data and responses in flight unacknowledged; 0: rxe's
	// 128). The kernel host accepts any (an RC responder has no window);
	// wider ones were not faster in bench's nvmeof cell on a loaded
	// machine (docs/performance.md, NVMe over Fabrics, 2026-12-08).
	Window int
	// Logger receives connection and error messages (nil: none).
	Logger *slog.Logger

	once    sync.Once
	mu      sync.Mutex
	ctrls   map[uint16]*controller
	nextID  uint16
	pending sync.Map // *qp.QP → *tqueue, between Prepare and Accept
	stats   TargetStats
	addr    netip.AddrPort
}

// TargetStats count what a Target did.
type TargetStats struct {
	Connections, Rejected, Controllers  atomic.Uint64
	Commands, Errors, MalformedCapsules atomic.Uint64
	KeepAliveExpired, QueueErrors       atomic.Uint64
	BytesRead, BytesWritten             atomic.Uint64
	// InCapsule are the commands whose data came in the capsule (no RDMA
	// READ), DataReads the RDMA READs of host data.
	InCapsule, DataReads atomic.Uint64
}

// Stats returns the target's counters.
func (t *Target) Stats() *TargetStats { return &t.stats }

// setWindow gives q the requester window w (HostOptions.Window,
// Target.Window; 0 or negative: rxe's 128).
func setWindow(q *qp.QP, w int) error { return q.SetWindow(max(w, 0)) }

const (
	mdts        = 5 // 2^5 × 4 KiB = 128 KiB per command
	maxTransfer = 4096 << mdts
	aerLimit    = 4
	kasUnits    = 10 // KAS: 10 × 100 ms
)

func (t *Target) init() {
	t.once.Do(func() {
		if t.InlineDataSize == 0 {
			t.InlineDataSize = 4096
		}
		if t.InlineDataSize < 0 {
			t.InlineDataSize = 0
		}
		if t.MaxQueueSize == 0 {
			t.MaxQueueSize = 128
		}
		if t.MaxIOQueues == 0 {
			t.MaxIOQueues = 16
		}
		t.ctrls = map[uint16]*controller{}
		for _, s := range t.Subsystems {
			for i, ns := range s.Namespaces {
				if ns.ID == 0 {
					ns.ID = uint32(i + 1)
				}
				if ns.BlockSize == 0 {
					ns.BlockSize = 512
				}
				if ns.UUID == ([16]byte{}) {
					h := sha256.Sum256([]byte(s.NQN + "/" + strconv.Itoa(int(ns.ID))))
					copy(ns.UUID[:], h[:16])
					ns.UUID[6] = ns.UUID[6]&0x0f | 0x40
					ns.UUID[8] = ns.UUID[8]&0x3f | 0x80
				}
			}
		}
	})
}

func (t *Target) log() *slog.Logger {
	if t.Logger != nil {
		return t.Logger
	}
	return slog.New(discardHandler{})
}

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }

func (t *Target) subsystem(nqn string) *Subsystem {
	for _, s := range t.Subsystems {
		if s.NQN == nqn {
			return s
		}
	}
	return nil
}

// Listen makes the cm Listener Serve takes: rdma_cm on the TCP port space
// at addr ("ip:port", port 4420 by default), whose connection requests are
// checked as nvmet-rdma checks them (nvmet_rdma_parse_cm_connect_req): an
// unacceptable one gets REJ "consumer defined" with the nvme_rdma_cm_rej
// status.
func (t *Target) Listen(ctx context.Context, dev *qp.Device, addr string) (*cm.Listener, error) {
	t.init()
	maxQ := t.MaxQueueSize
	opts := cm.Options{
		Cap:                qp.Caps{MaxSendWR: 3*maxQ + 8, MaxRecvWR: maxQ, MaxSendSGE: 2, MaxRecvSGE: 1},
		ResponderResources: 16,
		InitiatorDepth:     16,
		RNRRetry:           7,
		Logger:             t.Logger,
		Accept: func(r *cm.Request) ([]byte, error) {
			req, sts := t.checkCMRequest(r.PrivateData)
			if sts != 0 {
				t.stats.Rejected.Add(1)
				t.log().Warn("nvmeof: rejecting connection", "from", r.RemoteAddr, "sts", sts)
				return nil, cm.Reject(EncodeCMReject(sts))
			}
			return CMReply{CRQSize: req.HSQSize + 1}.Encode(), nil
		},
		Prepare: func(q *qp.QP) error {
			if err := setWindow(q, t.Window); err != nil {
				return err
			}
			tq, err := newTQueue(t, q)
			if err != nil {
				return err
			}
			t.pending.Store(q, tq)
			return nil
		},
	}
	l, err := cm.Listen(ctx, dev, addr, opts)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.addr = l.Addr()
	t.mu.Unlock()
	return l, nil
}

func (t *Target) checkCMRequest(pd []byte) (CMRequest, uint16) {
	req, err := DecodeCMRequest(pd)
	if err != nil {
		return req, CMInvalidLen
	}
	if req.RecFmt != 0 {
		return req, CMInvalidRecfmt
	}
	rq := int(req.HSQSize) + 1
	if req.QID == 0 && rq > AdminQueueDepth {
		return req, CMInvalidHSQSize
	}
	if rq > t.MaxQueueSize || req.HSQSize == 0 {
		return req, CMInvalidHSQSize
	}
	if req.HRQSize == 0 || int(req.HRQSize) > t.MaxQueueSize+1 {
		return req, CMInvalidHRQSize
	}
	if int(req.QID) > t.MaxIOQueues {
		return req, CMInvalidQID
	}
	return req, 0
}

// Serve accepts connections from l (made by Listen) and serves them until
// ctx ends or l is closed; it returns nil when ctx ended. Every queue runs
// on its own goroutine; Serve waits for them before returning.
func (t *Target) Serve(ctx context.Context, l *cm.Listener) error {
	t.init()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		v, ok := t.pending.LoadAndDelete(c.QP())
		if !ok {
			c.Close()
			continue
		}
		tq := v.(*tqueue)
		req, _ := DecodeCMRequest(c.PrivateData())
		tq.conn = c
		tq.cmQID = req.QID
		tq.size = int(req.HSQSize) + 1
		t.stats.Connections.Add(1)
		t.log().Debug("nvmeof: queue connected", "from", c.RemoteAddr(), "qid", req.QID, "size", tq.size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tq.run(ctx)
		}()
	}
}

// controller is one NVMe controller (admin queue and its I/O queues).
type controller struct {
	t       *Target
	id      uint16
	subsys  *Subsystem // nil: the discovery controller
	hostNQN string
	hostID  [16]byte

	mu       sync.Mutex
	cc, csts uint32
	kato     uint32 // seconds
	aen      uint32
	// Asynchronous events (nvmet's async_events, aen_masked and
	// changed_ns_list): results waiting for an AER command, the notices
	// masked until their log page is read, the changed namespaces.
	events                                       []uint32
	aenMasked                                    uint32
	changedNS                                    []uint32
	admin                                        *tqueue
	queues                                       map[uint16]*tqueue
	aers                                         []*trsp
	traffic                                      atomic.Bool
	kaReset                                      chan struct{}
	dead                                         bool
	stopKA                                       chan struct{}
	readCmds, writeCmds, unitsRead, unitsWritten atomic.Uint64
}

func (c *controller) discovery() bool { return c.subsys == nil }

func (c *controller) cap() uint64 {
	return uint64(c.t.MaxQueueSize-1) | 1<<16 | 15<<24 | 1<<37
}

// keepAlive runs nvmet's keep-alive timer: every KATO it checks that a
// command (any: traffic-based keep-alive) arrived, else the controller has
// a fatal error and its queues are disconnected.
func (c *controller) keepAlive() {
	c.mu.Lock()
	kato := c.kato
	c.mu.Unlock()
	if kato == 0 {
		return
	}
	tm := time.NewTimer(time.Duration(kato) * time.Second)
	defer tm.Stop()
	for {
		select {
		case <-c.stopKA:
			return
		case <-c.kaReset:
			tm.Reset(time.Duration(kato) * time.Second)
		case <-tm.C:
			if c.traffic.Swap(false) {
				tm.Reset(time.Duration(kato) * time.Second)
				continue
			}
			c.t.stats.KeepAliveExpired.Add(1)
			c.t.log().Warn("nvmeof: keep-alive timer expired", "ctrl", c.id, "kato", kato, "host", c.hostNQN)
			c.fatal()
			return
		}
	}
}

// fatal sets CSTS.CFS and disconnects every queue (nvmet_ctrl_fatal_error).
func (c *controller) fatal() {
	c.mu.Lock()
	c.csts |= 1 << 1
	qs := []*tqueue{c.admin}
	for _, q := range c.queues {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	for _, q := range qs {
		if q != nil {
			q.conn.Close()
		}
	}
}

func (c *controller) remove(q *tqueue) {
	c.mu.Lock()
	if q == c.admin {
		c.admin = nil
		c.dead = true
		close(c.stopKA)
		var rest []*tqueue
		for _, q := range c.queues {
			rest = append(rest, q)
		}
		c.mu.Unlock()
		for _, q := range rest {
			q.conn.Close()
		}
		c.t.mu.Lock()
		delete(c.t.ctrls, c.id)
		c.t.mu.Unlock()
		return
	}
	delete(c.queues, q.qid)
	c.mu.Unlock()
}

func (c *controller) updateCC(v uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cc
	c.cc = v
	en := func(x uint32) bool { return x&1 != 0 }
	shn := func(x uint32) uint32 { return x >> 14 & 3 }
	if en(v) && !en(old) {
		iosqes, iocqes, mps, ams, css := v>>16&0xf, v>>20&0xf, v>>7&0xf, v>>11&7, v>>4&7
		if (!c.discovery() && (iosqes != 6 || iocqes != 4)) || mps != 0 || ams != 0 || css != 0 {
			c.csts = 1 << 1
		} else {
			c.csts = 1
		}
		c.traffic.Store(true)
	}
	if !en(v) && en(old) {
		c.csts &^= 1
		c.cc = 0
	}
	if shn(v) != 0 && shn(old) == 0 {
		c.csts &^= 1
		c.cc = 0
		c.csts |= 2 << 2
	}
	if shn(v) == 0 && shn(old) != 0 {
		c.csts &^= 3 << 2
	}
}

func (c *controller) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cc&1 != 0 && c.csts&1 != 0
}

func (c *controller) namespace(nsid uint32) *Namespace {
	if c.subsys == nil {
		return nil
	}
	for _, ns := range c.subsys.Namespaces {
		if ns.ID == nsid {
			return ns
		}
	}
	return nil
}

// tqueue is one target queue (one RC connection).
type tqueue struct {
	t     *Target
	conn  *cm.Conn
	q     *qp.QP
	cmQID uint16
	qid   uint16
	size  int
	ctrl  *controller
	sqhd  atomic.Uint32 // SQ head: advanced by every completion (nvmet's cmpxchg), AERs' too

	recvMR  *qp.MR
	slotLen int
	inline  int
	free    []*trsp
	all     []*trsp
	mu      sync.Mutex // PostSend from the queue goroutine and AER completion
	closing atomic.Bool
	// batch collects the queue goroutine's work requests while it handles
	// one poll's completions; flush posts them in one PostSendList (one
	// doorbell, one link write for the whole batch).
	batch []qp.SendWR
	// The responses finish queued, in posting order, until a signaled
	// one completes: only one SEND in respSignalEvery asks for a work
	// completion, and its completion retires the responses posted before
	// it too (an RC send queue completes in order), as the WRITE streams
	// of perftest signal one WR in --cq-mod. sinceSig counts the
	// unsignaled ones since the last signaled.
	rsps     []*trsp
	rspHead  int
	sinceSig int
	recv     qp.RecvWR // postRecv's, reused
	rsge     [1]qp.SGE
	rwrs     []qp.RecvWR // repost's, one poll's
	rsges    []qp.SGE
	// The sender goroutine posts what flush handed it (sendQ), so that
	// the transmission (AF_XDP's kick, where the kernel moves the frames)
	// runs beside the queue goroutine's receiving and executing of the
	// next commands: on two CPUs, the target's one queue is not one
	// goroutine's work. Batches that arrive while it posts are posted
	// together next, in order.
	sendMu    sync.Mutex
	sendQ     []qp.SendWR
	sendSpare []qp.SendWR
	sendBusy  bool
	sendWake  chan struct{}
	sendErr   atomic.Bool
	sendStop  chan struct{}
	sendDone  chan struct{}
}

// trsp is one command in flight at the target: the SQE, its data buffer
// and the CQE's buffer.
type trsp struct {
	idx     int
	cmd     Command
	inline  []byte // in-capsule data: the receive buffer's, while capsule handles r
	dataMR  *qp.MR
	data    []byte // the transfer's bytes (dataMR's or inline)
	sgl     SGL
	xfer    int  // transfer length
	lte     bool // xfer is a minimum (nvmet_check_data_len_lte: DSM)
	toHost  bool // data goes to the host (RDMA WRITE)
	inval   bool
	queued  bool // in tqueue.rsps: posted by the queue goroutine, not yet retired
	rspMR   *qp.MR
	cqe     Completion
	q       *tqueue
	ns      *Namespace // an I/O command's namespace
	execute func(r *trsp) (status uint16)
	// The work requests of the data transfer and the response, with
	// their SGEs: reused, so posting allocates nothing.
	wr  [2]qp.SendWR
	sge [2]qp.SGE
}

const (
	kindRecv = 1
	kindRead = 2
	kindSend = 3
	kindNone = 4
)

func wrid(kind, idx int) uint64 { return uint64(kind)<<56 | uint64(idx) }

func newTQueue(t *Target, q *qp.QP) (*tqueue, error) {
	inline := t.InlineDataSize
	tq := &tqueue{t: t, q: q, inline: inline, slotLen: SQESize + inline}
	n := t.MaxQueueSize
	buf := make([]byte, n*tq.slotLen)
	mr, err := q.PD().RegMR(buf, qp.LocalWrite)
	if err != nil {
		return nil, err
	}
	tq.recvMR = mr
	for i := 0; i < n; i++ {
		if err := tq.postRecv(i); err != nil {
			mr.Deregister()
			return nil, err
		}
	}
	return tq, nil
}

func (tq *tqueue) postRecv(i int) error {
	tq.rsge[0] = qp.SGE{Addr: tq.recvMR.IOVA() + uint64(i*tq.slotLen), Length: uint32(tq.slotLen), LKey: tq.recvMR.LKey()}
	tq.recv = qp.RecvWR{WRID: wrid(kindRecv, i), SGL: tq.rsge[:]}
	return tq.q.PostRecv(&tq.recv)
}

// repost queues receive buffer i for postRecvs, which posts the buffers
// of one poll in one PostRecvList before the poll's responses are handed
// to the sender (flush): a host sends its next command as soon as it has
// a response, and that command needs a posted receive.
func (tq *tqueue) repost(i int) {
	tq.rsges = append(tq.rsges, qp.SGE{Addr: tq.recvMR.IOVA() + uint64(i*tq.slotLen), Length: uint32(tq.slotLen), LKey: tq.recvMR.LKey()})
	tq.rwrs = append(tq.rwrs, qp.RecvWR{WRID: wrid(kindRecv, i)})
}

// postRecvs posts what repost queued; false if that failed.
func (tq *tqueue) postRecvs() bool {
	if len(tq.rwrs) == 0 {
		return true
	}
	for i := range tq.rwrs {
		tq.rwrs[i].SGL = tq.rsges[i : i+1]
	}
	_, err := tq.q.PostRecvList(tq.rwrs)
	clear(tq.rwrs)
	tq.rwrs, tq.rsges = tq.rwrs[:0], tq.rsges[:0]
	return err == nil
}

func (tq *tqueue) getRsp() (*trsp, error) {
	if n := len(tq.free); n > 0 {
		r := tq.free[n-1]
		tq.free = tq.free[:n-1]
		return r, nil
	}
	r := &trsp{idx: len(tq.all), q: tq}
	mr, err := tq.q.PD().RegMR(make([]byte, CQESize), qp.LocalWrite)
	if err != nil {
		return nil, err
	}
	r.rspMR = mr
	tq.all = append(tq.all, r)
	return r, nil
}

func (tq *tqueue) putRsp(r *trsp) {
	r.execute = nil
	r.ns = nil
	r.data = nil
	r.xfer = 0
	r.inval = false
	r.lte = false
	r.toHost = false
	tq.free = append(tq.free, r)
}

// buffer returns r's registered data buffer of n bytes.
func (r *trsp) buffer(n int) ([]byte, error) {
	if r.dataMR == nil || r.dataMR.Len() < n {
		if r.dataMR != nil {
			r.dataMR.Deregister()
		}
		size := 4096
		for size < n {
			size <<= 1
		}
		mr, err := r.q.q.PD().RegMR(make([]byte, size), qp.LocalWrite)
		if err != nil {
			return nil, err
		}
		r.dataMR = mr
	}
	b := r.dataMR.Bytes()[:n]
	return b, nil
}

func (tq *tqueue) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-tq.conn.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	defer tq.teardown()
	cq := tq.conn.RecvCQ()
	wcs := make([]qp.WC, 32)
	tq.batch = make([]qp.SendWR, 0, 3*len(wcs))
	tq.rwrs, tq.rsges = make([]qp.RecvWR, 0, len(wcs)), make([]qp.SGE, 0, len(wcs))
	tq.sendQ, tq.sendSpare = make([]qp.SendWR, 0, 3*tq.t.MaxQueueSize), make([]qp.SendWR, 0, 3*tq.t.MaxQueueSize)
	tq.sendWake, tq.sendStop, tq.sendDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go tq.sender()
	for {
		n, err := cq.Wait(ctx, wcs)
		if err != nil {
			return
		}
		for i := range wcs[:n] {
			if !tq.completion(&wcs[i]) {
				tq.postRecvs()
				tq.flush()
				return
			}
		}
		if !tq.postRecvs() || !tq.flush() {
			return
		}
	}
}

// queue adds wrs to the batch the queue goroutine posts at the end of its
// poll (flush).
func (tq *tqueue) queue(wrs ...qp.SendWR) { tq.batch = append(tq.batch, wrs...) }

// flush hands the batch to the sender; false if a post failed (the QP is
// gone or in ERR).
func (tq *tqueue) flush() bool {
	if len(tq.batch) == 0 {
		return !tq.sendErr.Load()
	}
	tq.sendMu.Lock()
	tq.sendQ = append(tq.sendQ, tq.batch...)
	wake := !tq.sendBusy
	tq.sendBusy = true
	tq.sendMu.Unlock()
	clear(tq.batch) // drop the SGL references
	tq.batch = tq.batch[:0]
	if wake {
		select {
		case tq.sendWake <- struct{}{}:
		default:
		}
	}
	return !tq.sendErr.Load()
}

// sender posts the batches flush hands it, in order, until sendStop (and
// then what is left).
func (tq *tqueue) sender() {
	defer close(tq.sendDone)
	for stop := false; !stop; {
		select {
		case <-tq.sendWake:
		case <-tq.sendStop:
			stop = true
		}
		for {
			tq.sendMu.Lock()
			b := tq.sendQ
			if len(b) == 0 {
				tq.sendBusy = false
				tq.sendMu.Unlock()
				break
			}
			tq.sendQ = tq.sendSpare[:0]
			tq.sendMu.Unlock()
			tq.mu.Lock()
			_, err := tq.q.PostSendList(b)
			tq.mu.Unlock()
			clear(b)
			tq.sendMu.Lock()
			tq.sendSpare = b[:0]
			tq.sendMu.Unlock()
			if err != nil && !tq.sendErr.Swap(true) {
				tq.t.log().Debug("nvmeof: post", "qid", tq.qid, "err", err)
				tq.conn.Close() // ends the queue goroutine's wait
			}
		}
	}
}

func (tq *tqueue) teardown() {
	tq.closing.Store(true)
	if tq.sendStop != nil {
		close(tq.sendStop)
		<-tq.sendDone
	}
	if tq.ctrl != nil {
		tq.ctrl.remove(tq)
	}
	tq.conn.Close()
	tq.recvMR.Deregister()
	for _, r := range tq.all {
		r.rspMR.Deregister()
		if r.dataMR != nil {
			r.dataMR.Deregister()
		}
	}
}

// completion handles one work completion; false ends the queue.
func (tq *tqueue) completion(wc *qp.WC) bool {
	kind, idx := int(wc.WRID>>56), int(wc.WRID&0xffffffff)
	if wc.Status != qp.WCSuccess {
		if kind == kindRecv && tq.closing.Load() {
			return false
		}
		// A failed RDMA READ/WRITE or SEND (a wrong key, a length beyond
		// the host's MR) ends the queue, as nvmet_rdma_error_comp does.
		tq.t.stats.QueueErrors.Add(1)
		if wc.Status == qp.WCWRFlushErr { // the peer disconnected: the QP's queues are flushed
			tq.t.log().Debug("nvmeof: queue flushed", "qid", tq.qid)
			return false
		}
		tq.t.log().Warn("nvmeof: work completion error, disconnecting the queue", "qid", tq.qid, "wc", wc.String())
		return false
	}
	switch kind {
	case kindRecv:
		return tq.capsule(idx, int(wc.ByteLen))
	case kindRead:
		r := tq.all[idx]
		tq.finish(r, r.execute(r))
	case kindSend:
		tq.retire(tq.all[idx])
	}
	return true
}

func (tq *tqueue) capsule(slot, n int) bool {
	buf := tq.recvMR.Bytes()[slot*tq.slotLen : slot*tq.slotLen+n]
	tq.t.stats.Commands.Add(1)
	if n < SQESize {
		// nvmet_rdma_recv_done: "Ctrl Fatal Error: capsule size less
		// than 64 bytes".
		tq.t.stats.MalformedCapsules.Add(1)
		tq.t.log().Warn("nvmeof: capsule shorter than 64 bytes, disconnecting", "qid", tq.qid, "len", n)
		if tq.ctrl != nil {
			go tq.ctrl.fatal()
		}
		return false
	}
	r, err := tq.getRsp()
	if err != nil {
		return false
	}
	copy(r.cmd[:], buf[:SQESize])
	// The in-capsule data is used where it arrived: the receive buffer is
	// re-posted once the command was executed, failed or handed to an
	// RDMA READ (none of which reads it later), so a write's data is
	// copied once, into the backend.
	r.inline = buf[SQESize:]
	tq.command(r)
	r.inline = nil
	tq.repost(slot)
	return true
}

// command parses, checks and executes r, or queues the RDMA READ of its
// data (capsule).
func (tq *tqueue) command(r *trsp) {
	if tq.ctrl != nil {
		tq.ctrl.traffic.Store(true)
	}
	status := tq.parse(r)
	if status == 0 {
		status = tq.mapSGL(r)
	}
	if status != 0 {
		tq.finish(r, status)
		return
	}
	if r.xfer > 0 && !r.toHost && r.sgl.Keyed() {
		// Host data: fetch it with RDMA READ, execute on its completion.
		tq.t.stats.DataReads.Add(1)
		r.sge[0] = qp.SGE{Addr: r.dataMR.IOVA(), Length: uint32(r.xfer), LKey: r.dataMR.LKey()}
		tq.queue(qp.SendWR{WRID: wrid(kindRead, r.idx), Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
			SGL: r.sge[:1], RemoteAddr: r.sgl.Addr, RKey: r.sgl.Key})
		return
	}
	st := r.execute(r)
	if r.sgl.Type == SGLTypeInline {
		r.data = nil // the receive buffer's, re-posted next
	}
	if st == holdResponse {
		return
	}
	tq.finish(r, st)
}

const holdResponse = 0xffff

// finish queues r's completion (on the queue goroutine): RDMA WRITE of
// the data (reads that succeeded) chained with the CQE's SEND,
// SEND_WITH_INV when the host's descriptor asked for invalidation.
func (tq *tqueue) finish(r *trsp, status uint16) {
	tq.complete(r, status)
	tq.sinceSig++
	sig := tq.sinceSig >= respSignalEvery
	if sig {
		tq.sinceSig = 0
	}
	r.queued = true
	tq.rsps = append(tq.rsps, r)
	tq.queue(r.wrs(sig)...)
}

// respSignalEvery is how often a response's SEND is signaled (finish).
const respSignalEvery = 16

// retire frees r, whose signaled SEND completed, and the responses the
// queue goroutine posted before it (tqueue.rsps).
func (tq *tqueue) retire(r *trsp) {
	if !r.queued { // sendNow's: posted alone, signaled
		tq.putRsp(r)
		return
	}
	for tq.rspHead < len(tq.rsps) {
		x := tq.rsps[tq.rspHead]
		tq.rsps[tq.rspHead] = nil
		tq.rspHead++
		x.queued = false
		tq.putRsp(x)
		if x == r {
			break
		}
	}
	if tq.rspHead == len(tq.rsps) {
		tq.rsps, tq.rspHead = tq.rsps[:0], 0
	} else if tq.rspHead >= 64 && 2*tq.rspHead >= len(tq.rsps) {
		n := copy(tq.rsps, tq.rsps[tq.rspHead:])
		clear(tq.rsps[n:])
		tq.rsps, tq.rspHead = tq.rsps[:n], 0
	}
}

// complete fills r's CQE.
func (tq *tqueue) complete(r *trsp, status uint16) {
	if status != 0 {
		tq.t.stats.Errors.Add(1)
	}
	head := tq.sqhd.Load()
	if tq.size > 0 {
		for {
			head = tq.sqhd.Load()
			next := uint32((int(head) + 1) % tq.size)
			if tq.sqhd.CompareAndSwap(head, next) {
				head = next
				break
			}
		}
	}
	r.cqe.SQHead = uint16(head)
	r.cqe.SQID = tq.qid
	r.cqe.CID = r.cmd.CID()
	r.cqe.Status = status
}

// sendNow posts r's completion from outside the queue goroutine (an
// asynchronous event's).
func (tq *tqueue) sendNow(r *trsp) {
	tq.mu.Lock()
	_, err := tq.q.PostSendList(r.wrs(true))
	tq.mu.Unlock()
	if err != nil {
		tq.t.log().Debug("nvmeof: post response", "err", err)
	}
}

// wrs encodes r's CQE and returns the work requests that send it (in r's
// own storage); the SEND asks for a work completion if signaled.
func (r *trsp) wrs(signaled bool) []qp.SendWR {
	r.cqe.Encode(r.rspMR.Bytes())
	n := 0
	if r.cqe.Status == 0 && r.toHost && r.xfer > 0 {
		r.sge[0] = qp.SGE{Addr: r.dataMR.IOVA(), Length: uint32(r.xfer), LKey: r.dataMR.LKey()}
		r.wr[0] = qp.SendWR{WRID: wrid(kindNone, r.idx), Opcode: qp.WRRDMAWrite,
			SGL: r.sge[0:1], RemoteAddr: r.sgl.Addr, RKey: r.sgl.Key}
		n++
	}
	r.sge[1] = qp.SGE{Addr: r.rspMR.IOVA(), Length: CQESize, LKey: r.rspMR.LKey()}
	r.wr[n] = qp.SendWR{WRID: wrid(kindSend, r.idx), Opcode: qp.WRSend, SGL: r.sge[1:2]}
	if signaled {
		r.wr[n].Flags = qp.SendSignaled
	}
	if r.inval {
		r.wr[n].Opcode = qp.WRSendWithInv
		r.wr[n].InvRKey = r.sgl.Key
	}
	return r.wr[:n+1]
}

// mapSGL checks the data pointer (nvmet_rdma_map_sgl) and the transfer
// length the command implies (nvmet_check_transfer_len).
func (tq *tqueue) mapSGL(r *trsp) uint16 {
	s := r.cmd.SGL()
	r.sgl = s
	var length int
	switch s.Type >> 4 {
	case SGLDataBlock:
		if s.Type&0xf != SGLSubOffset {
			return StatusInvalidField | StatusDNR
		}
		if !isWrite(&r.cmd) {
			return StatusInvalidField | StatusDNR
		}
		if s.Addr+uint64(s.Length) > uint64(tq.inline) || s.Addr+uint64(s.Length) > uint64(len(r.inline)) {
			return StatusSGLInvalidOffset | StatusDNR
		}
		length = int(s.Length)
		r.data = r.inline[s.Addr : s.Addr+uint64(s.Length)]
		tq.t.stats.InCapsule.Add(1)
	case SGLKeyedDataBlock:
		switch s.Type & 0xf {
		case SGLSubAddress:
		case SGLSubInvalidate:
			if s.Length > 0 {
				r.inval = true
			}
		default:
			return StatusInvalidField | StatusDNR
		}
		length = int(s.Length)
	default:
		return StatusSGLInvalidType | StatusDNR
	}
	if r.lte && length > r.xfer && length <= maxTransfer {
		r.xfer = length // DSM: the host may send more than the ranges
	}
	if length != r.xfer {
		return StatusSGLInvalidData | StatusDNR
	}
	if length > 0 && s.Keyed() {
		if length > maxTransfer && length > ConnectDataSize {
			return StatusSGLInvalidData | StatusDNR
		}
		b, err := r.buffer(length)
		if err != nil {
			return StatusInternal | StatusDNR
		}
		r.data = b
		r.toHost = !isWrite(&r.cmd)
	}
	return 0
}

// isWrite is nvme_is_write: host-to-controller data.
func isWrite(c *Command) bool {
	if c.Opcode() == OpFabrics {
		return c.FCType()&1 != 0
	}
	return c.Opcode()&1 != 0
}

// parse picks the command's handler and its transfer length, with the
// statuses of nvmet_req_init and the nvmet_parse_* functions.
func (tq *tqueue) parse(r *trsp) uint16 {
	c := &r.cmd
	r.cqe = Completion{}
	if c.Flags()&3 != 0 || c.Flags()&cmdFlagsPSDTMask != cmdFlagsSGLMetabuf {
		return StatusInvalidField | StatusDNR
	}
	if tq.ctrl == nil {
		if c.Opcode() != OpFabrics || c.FCType() != FabricsConnect {
			return StatusInvalidOpcode | StatusDNR
		}
		r.xfer = ConnectDataSize
		r.execute = tq.connect
		return 0
	}
	if c.Opcode() == OpFabrics {
		if tq.qid != 0 {
			return StatusInvalidOpcode | StatusDNR
		}
		switch c.FCType() {
		case FabricsPropertySet:
			r.execute = tq.propSet
		case FabricsPropertyGet:
			r.execute = tq.propGet
		default:
			return StatusInvalidOpcode | StatusDNR
		}
		return 0
	}
	if tq.qid == 0 {
		return tq.parseAdmin(r)
	}
	return tq.parseIO(r)
}

func (tq *tqueue) connect(r *trsp) uint16 {
	c := &r.cmd
	recfmt, qid, sqsize, _, kato := connectFields(c)
	d, err := DecodeConnectData(r.data)
	if err != nil {
		return StatusSGLInvalidData | StatusDNR
	}
	if recfmt != 0 {
		return StatusConnectFormat | StatusDNR
	}
	t := tq.t
	if qid == 0 {
		if d.CNTLID != 0xffff {
			r.cqe.Result = 1<<16 | 16
			return StatusConnectInvParam | StatusDNR
		}
		var sub *Subsystem
		if d.SubNQN != DiscoveryNQN {
			sub = t.subsystem(d.SubNQN)
			if sub == nil {
				t.log().Warn("nvmeof: connect request for invalid subsystem", "nqn", d.SubNQN)
				r.cqe.Result = 1<<16 | 256
				return StatusConnectInvParam | StatusDNR
			}
			if !hostAllowed(sub, d.HostNQN) {
				r.cqe.Result = 1<<16 | 512
				return StatusConnectInvHost | StatusDNR
			}
		}
		if st := checkSQSize(r, sqsize, AdminQueueDepth); st != 0 {
			return st
		}
		ctrl := &controller{t: t, subsys: sub, hostNQN: d.HostNQN, hostID: d.HostID,
			kato: (kato + 999) / 1000, queues: map[uint16]*tqueue{}, admin: tq,
			stopKA: make(chan struct{}), kaReset: make(chan struct{}, 1)}
		t.mu.Lock()
		for {
			t.nextID++
			if t.nextID == 0 || t.nextID >= 0xfff0 {
				t.nextID = 1
			}
			if t.ctrls[t.nextID] == nil {
				break
			}
		}
		ctrl.id = t.nextID
		t.ctrls[ctrl.id] = ctrl
		t.mu.Unlock()
		t.stats.Controllers.Add(1)
		tq.ctrl = ctrl
		tq.qid = 0
		tq.sqhd.Store(0)
		tq.size = int(sqsize) + 1
		go ctrl.keepAlive()
		t.log().Info("nvmeof: created controller", "ctrl", ctrl.id, "subsystem", d.SubNQN, "host", d.HostNQN)
		r.cqe.Result = uint64(ctrl.id)
		return 0
	}
	t.mu.Lock()
	ctrl := t.ctrls[d.CNTLID]
	t.mu.Unlock()
	subNQN := DiscoveryNQN
	if ctrl != nil && ctrl.subsys != nil {
		subNQN = ctrl.subsys.NQN
	}
	if ctrl == nil || subNQN != d.SubNQN || ctrl.hostNQN != d.HostNQN || ctrl.discovery() {
		r.cqe.Result = 1<<16 | 16
		return StatusConnectInvParam | StatusDNR
	}
	if int(qid) > t.MaxIOQueues {
		r.cqe.Result = 42
		return StatusConnectInvParam | StatusDNR
	}
	if st := checkSQSize(r, sqsize, t.MaxQueueSize); st != 0 {
		return st
	}
	ctrl.mu.Lock()
	if ctrl.dead || ctrl.cc&1 == 0 {
		ctrl.mu.Unlock()
		return StatusCmdSeqError | StatusDNR
	}
	if ctrl.queues[qid] != nil {
		ctrl.mu.Unlock()
		return StatusCmdSeqError | StatusDNR
	}
	ctrl.queues[qid] = tq
	ctrl.mu.Unlock()
	tq.ctrl = ctrl
	tq.qid = qid
	tq.sqhd.Store(0)
	tq.size = int(sqsize) + 1
	t.log().Debug("nvmeof: added queue", "qid", qid, "ctrl", ctrl.id)
	return 0
}

func checkSQSize(r *trsp, sqsize uint16, max int) uint16 {
	if sqsize == 0 || int(sqsize) >= max {
		r.cqe.Result = 44
		return StatusConnectInvParam | StatusDNR
	}
	return 0
}

func hostAllowed(s *Subsystem, host string) bool {
	if len(s.Hosts) == 0 {
		return true
	}
	for _, h := range s.Hosts {
		if h == host {
			return true
		}
	}
	return false
}

func (tq *tqueue) propSet(r *trsp) uint16 {
	attrib, off, val := propFields(&r.cmd)
	if attrib&1 != 0 || off != RegCC {
		return StatusInvalidField | StatusDNR
	}
	tq.ctrl.updateCC(uint32(val))
	return 0
}

func (tq *tqueue) propGet(r *trsp) uint16 {
	attrib, off, _ := propFields(&r.cmd)
	c := tq.ctrl
	c.mu.Lock()
	defer c.mu.Unlock()
	if attrib&1 != 0 {
		if off != RegCAP {
			return StatusInvalidField | StatusDNR
		}
		r.cqe.Result = c.cap()
		return 0
	}
	switch off {
	case RegVS:
		r.cqe.Result = 0x10300
	case RegCC:
		r.cqe.Result = uint64(c.cc)
	case RegCSTS:
		r.cqe.Result = uint64(c.csts)
	default:
		return StatusInvalidField | StatusDNR
	}
	return 0
}

// Errors of the target's configuration.
var errNoSubsystems = errors.New("nvmeof: target has no subsystems")

// Validate checks the target's configuration: NQNs, namespace sizes and
// block sizes.
func (t *Target) Validate() error {
	t.init()
	if len(t.Subsystems) == 0 {
		return errNoSubsystems
	}
	for _, s := range t.Subsystems {
		if s.NQN == "" || len(s.NQN) > 223 || s.NQN == DiscoveryNQN {
			return fmt.Errorf("nvmeof: bad subsystem NQN %q", s.NQN)
		}
		for _, ns := range s.Namespaces {
			if ns.BlockSize != 512 && ns.BlockSize != 4096 {
				return fmt.Errorf("nvmeof: namespace %d: block size %d (512 or 4096)", ns.ID, ns.BlockSize)
			}
			if ns.Size <= 0 || ns.Size%int64(ns.BlockSize) != 0 || ns.Backend == nil {
				return fmt.Errorf("nvmeof: namespace %d: size %d is not a positive multiple of %d", ns.ID, ns.Size, ns.BlockSize)
			}
		}
	}
	return nil
}
