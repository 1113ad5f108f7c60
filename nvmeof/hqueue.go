package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// hqueue is one host queue: an RC connection, depth command slots, each
// with its capsule buffer (the SQE and room for inline bytes of in-capsule
// data), a data buffer in one registered MR and a type 2 memory window
// over it that is bound afresh (a new rkey) for every keyed command and
// invalidated by the target's SEND_WITH_INV or a LOCAL_INV.
type hqueue struct {
	conn   *cm.Conn
	pd     *qp.PD
	qid    uint16
	depth  int
	slotSz int
	inline int // in-capsule data bytes a write may carry (0: none)
	capLen int // a slot's stride in sqeMR: SQESize + inline
	sqeMR  *qp.MR
	cqeMR  *qp.MR
	dataMR *qp.MR
	slots  []hslot
	free   chan int
	mu     sync.Mutex // posts
	// Posts are combined: a submitter adds its work requests to pending
	// and, unless another is posting (posting), posts pending in one
	// PostSendList until it is empty, so commands submitted while a post
	// is under way share the next (one doorbell and link write for many).
	// While the poller hands completions to their submitters (corked),
	// the submitters it woke add their next commands to pending without
	// posting; the poller yields to them until they all queued (a few
	// times at most) and posts what they queued in one list (dispatch).
	pmu      sync.Mutex
	pending  []qp.SendWR
	spare    []qp.SendWR
	posting  bool
	corked   bool
	joined   atomic.Int32 // commands queued while corked (dispatch's yield)
	recvs    []qp.RecvWR  // one per response buffer, reused
	recvSGEs []qp.SGE
	rbatch   []qp.RecvWR  // deliver's receives to re-post, reused
	got      []Completion // deliver's completions to hand over, reused
	dead     chan struct{}
	timeout  time.Duration // a command unanswered this long fails the queue (0: never)
	errv     error
	once     sync.Once
	log      *slog.Logger

	inCapsule, keyed atomic.Uint64 // commands sent with in-capsule data, with a keyed SGL and data
	sends            atomic.Uint32 // command SENDs posted (one in cmdSignalEvery is signaled)
}

// cmdSignalEvery is how often a command's SEND is signaled: the host needs
// no send completion (a slot is reused when the target's response came,
// which the target sends after it received the command), so only one in
// this many asks for one, for the send queue's accounting (verbs frees an
// unsignaled WR's slot with a later signaled one's completion).
const cmdSignalEvery = 16

type hslot struct {
	sge   [1]qp.SGE    // the command SEND's
	since atomic.Int64 // when the command was posted (UnixNano; 0: no command, or one without a timeout)
	ch    chan Completion
	mw    *qp.MW
	rkey  uint32 // the window's current rkey
	bound bool   // bound and not yet invalidated
}

const (
	hkRecv = 1
	hkSend = 2
	hkNone = 3
)

// defaultInCapsule bounds in-capsule data by default (HostOptions.
// InCapsuleData): nvmet-rdma's largest, NVMET_RDMA_MAX_INLINE_DATA_SIZE
// (16 KiB with 4 KiB pages); a slot's capsule buffer is this much larger.
const defaultInCapsule = 16 << 10

func dialQueue(ctx context.Context, dev *qp.Device, addr string, qid uint16, depth, slotSz, inline, window int, timeout time.Duration, log *slog.Logger) (*hqueue, error) {
	pd := dev.AllocPD()
	q := &hqueue{pd: pd, qid: qid, depth: depth, slotSz: slotSz, inline: inline, capLen: SQESize + inline,
		free: make(chan int, depth), timeout: timeout,
		dead: make(chan struct{}), slots: make([]hslot, depth), log: log}
	var err error
	cleanup := func() {
		for i := range q.slots {
			if mw := q.slots[i].mw; mw != nil {
				mw.Dealloc()
			}
		}
		for _, mr := range []*qp.MR{q.sqeMR, q.cqeMR, q.dataMR} {
			if mr != nil {
				mr.Deregister()
			}
		}
		pd.Dealloc()
	}
	if q.sqeMR, err = pd.RegMR(make([]byte, depth*q.capLen), qp.LocalWrite); err == nil {
		if q.cqeMR, err = pd.RegMR(make([]byte, depth*CQESize), qp.LocalWrite); err == nil {
			q.dataMR, err = pd.RegMR(make([]byte, depth*slotSz), qp.LocalWrite|qp.RemoteRead|qp.RemoteWrite|qp.MWBind)
		}
	}
	if err != nil {
		cleanup()
		return nil, err
	}
	q.pending, q.spare = make([]qp.SendWR, 0, 3*depth), make([]qp.SendWR, 0, 3*depth)
	q.recvs, q.recvSGEs = make([]qp.RecvWR, depth), make([]qp.SGE, depth)
	for i := range q.recvs {
		q.recvSGEs[i] = qp.SGE{Addr: q.cqeMR.IOVA() + uint64(i*CQESize), Length: CQESize, LKey: q.cqeMR.LKey()}
		q.recvs[i] = qp.RecvWR{WRID: uint64(hkRecv)<<56 | uint64(i), SGL: q.recvSGEs[i : i+1]}
	}
	for i := range q.slots {
		mw, err := pd.AllocMW(qp.MWType2)
		if err != nil {
			cleanup()
			return nil, err
		}
		s := &q.slots[i]
		s.ch, s.mw, s.rkey = make(chan Completion, 1), mw, mw.RKey()
		q.free <- i
	}
	req := CMRequest{QID: qid, HRQSize: uint16(depth), HSQSize: uint16(depth - 1)}
	conn, err := cm.Dial(ctx, dev, addr, cm.Options{
		PD:                 pd,
		Cap:                qp.Caps{MaxSendWR: 3*depth + 4, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1},
		PrivateData:        req.Encode(),
		ResponderResources: 16,
		InitiatorDepth:     1,
		Logger:             nil,
		Prepare: func(p *qp.QP) error {
			if err := setWindow(p, window); err != nil {
				return err
			}
			for i := 0; i < depth; i++ {
				if err := p.PostRecv(q.recvWR(i)); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		cleanup()
		var rej *cm.RejectError
		if errors.As(err, &rej) && rej.Reason == cm.RejectConsumerDefined && len(rej.PrivateData) > 0 {
			return nil, &RejectError{Sts: DecodeCMReject(rej.PrivateData), Err: err}
		}
		return nil, fmt.Errorf("nvmeof: connect queue %d: %w", qid, err)
	}
	q.conn = conn
	go q.poll()
	if timeout > 0 {
		go q.watchdog()
	}
	return q, nil
}

// ErrTimeout is why a queue failed whose command the target did not answer
// within HostOptions.IOTimeout.
var ErrTimeout = errors.New("nvmeof: command timed out")

// watchdog fails the queue when a command stays unanswered longer than
// the timeout (the Linux host's nvme_rdma_timeout, which starts error
// recovery; this host does not reconnect), so a target or path that went
// silent ends its callers' waits with ErrTimeout instead of a hang.
func (q *hqueue) watchdog() {
	t := time.NewTicker(max(q.timeout/8, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-q.dead:
			return
		case now := <-t.C:
			for i := range q.slots {
				if since := q.slots[i].since.Load(); since != 0 && now.Sub(time.Unix(0, since)) > q.timeout {
					q.fail(fmt.Errorf("%w: queue %d: command %d unanswered for %v", ErrTimeout, q.qid, i, q.timeout))
					return
				}
			}
		}
	}
}

func (q *hqueue) recvWR(i int) *qp.RecvWR { return &q.recvs[i] }

// post posts wrs, combined with those of concurrent submitters (see
// hqueue.pending).
func (q *hqueue) post(wrs []qp.SendWR) error {
	q.pmu.Lock()
	q.pending = append(q.pending, wrs...)
	if q.corked {
		q.joined.Add(1)
	}
	if q.posting || q.corked {
		q.pmu.Unlock()
		return nil // the poster (or the poller at uncork) posts them, or fails the queue
	}
	return q.drain()
}

// drain posts pending until it is empty; called with pmu held, returns
// with it released.
func (q *hqueue) drain() error {
	q.posting = true
	for len(q.pending) > 0 {
		batch := q.pending
		q.pending = q.spare[:0]
		q.pmu.Unlock()
		q.mu.Lock()
		_, err := q.conn.QP().PostSendList(batch)
		q.mu.Unlock()
		clear(batch)
		q.pmu.Lock()
		q.spare = batch[:0]
		if err != nil {
			q.posting = false
			q.pending = q.pending[:0]
			q.pmu.Unlock()
			return err
		}
	}
	q.posting = false
	q.pmu.Unlock()
	return nil
}

func (q *hqueue) err() error {
	select {
	case <-q.dead:
		return q.errv
	default:
		return nil
	}
}

func (q *hqueue) fail(err error) {
	q.once.Do(func() {
		q.errv = err
		close(q.dead)
		q.conn.Close()
	})
}

func (q *hqueue) close() {
	q.fail(ErrClosed)
	for i := range q.slots {
		q.slots[i].mw.Dealloc()
	}
	q.sqeMR.Deregister()
	q.cqeMR.Deregister()
	q.dataMR.Deregister()
	q.pd.Dealloc()
}

func (q *hqueue) poll() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-q.conn.Done():
			q.fail(fmt.Errorf("%w: queue %d disconnected: %v", ErrClosed, q.qid, q.conn.Err()))
		case <-q.dead:
		}
		cancel()
	}()
	cq := q.conn.RecvCQ()
	wcs := make([]qp.WC, 32)
	q.rbatch, q.got = make([]qp.RecvWR, 0, len(wcs)), make([]Completion, 0, len(wcs))
	for {
		n, err := cq.Wait(ctx, wcs)
		if err != nil {
			return
		}
		if !q.dispatch(wcs[:n]) {
			return
		}
	}
}

// dispatch hands one poll's completions to their submitters. It corks the
// queue's posts while it does, then yields until the submitters it woke
// (queued on this P) ran and queued their next commands, maxYields times
// at most, and posts those in one PostSendList: one doorbell (an AF_XDP kick) for the batch
// instead of one per command, as the Linux host's blk-mq batch ends with
// one commit. A woken submitter that runs later posts itself. False if the
// queue failed.
func (q *hqueue) dispatch(wcs []qp.WC) bool {
	q.pmu.Lock()
	q.corked = true
	q.pmu.Unlock()
	q.joined.Store(0)
	woke := 0
	ok := q.deliver(wcs, &woke)
	// Yield until the woken submitters queued their next commands, a
	// few times at most (one that is done or waits elsewhere never does).
	for i := 0; i < maxYields && int(q.joined.Load()) < woke; i++ {
		runtime.Gosched()
	}
	q.pmu.Lock()
	q.corked = false
	if len(q.pending) == 0 || q.posting {
		q.pmu.Unlock()
		return ok
	}
	if err := q.drain(); err != nil {
		q.fail(fmt.Errorf("nvmeof: post command: %w", err))
		return false
	}
	return ok
}

// maxYields bounds dispatch's yields to the submitters it woke.
const maxYields = 4

// deliver handles wcs; woke counts the completions handed over. It
// re-posts the poll's response buffers in one PostRecvList before it hands
// any completion over: a submitter woken here may send its next command at
// once, and the target's response to it needs a posted receive.
func (q *hqueue) deliver(wcs []qp.WC, woke *int) bool {
	recvs, got := q.rbatch[:0], q.got[:0]
	for i := range wcs {
		wc := &wcs[i]
		kind, idx := int(wc.WRID>>56), int(wc.WRID&0xffffffff)
		if wc.Status != qp.WCSuccess {
			q.fail(fmt.Errorf("%w: queue %d: work completion %v", ErrClosed, q.qid, wc.Status))
			return false
		}
		if kind != hkRecv {
			continue
		}
		cqe, err := DecodeCompletion(q.cqeMR.Bytes()[idx*CQESize : idx*CQESize+int(wc.ByteLen)])
		if err == nil && int(cqe.CID) >= q.depth {
			err = fmt.Errorf("%w: completion for unknown command %d", ErrProtocol, cqe.CID)
		}
		if err != nil {
			q.fail(err)
			return false
		}
		s := &q.slots[cqe.CID]
		if wc.Flags&qp.WCWithInv != 0 {
			if !s.bound || wc.InvRKey != s.rkey {
				q.fail(fmt.Errorf("%w: bogus remote invalidation of rkey %#x", ErrProtocol, wc.InvRKey))
				return false
			}
			s.bound = false
		}
		recvs = append(recvs, q.recvs[idx])
		got = append(got, cqe)
	}
	if len(recvs) > 0 {
		q.mu.Lock()
		_, err := q.conn.QP().PostRecvList(recvs)
		q.mu.Unlock()
		if err != nil {
			q.fail(err)
			return false
		}
	}
	for _, cqe := range got {
		select {
		case q.slots[cqe.CID].ch <- cqe:
		default:
			q.fail(fmt.Errorf("%w: duplicate completion for command %d", ErrProtocol, cqe.CID))
			return false
		}
		*woke++
	}
	return true
}

// submit sends cmd (its CID and SGL are set here) with data: host-to-
// controller data is copied into the slot's buffer, controller-to-host data
// (toHost) copied out of it after the completion.
func (q *hqueue) submit(ctx context.Context, cmd *Command, data []byte, toHost bool) (Completion, error) {
	if len(data) > q.slotSz {
		return Completion{}, fmt.Errorf("nvmeof: %d bytes in one command (at most %d)", len(data), q.slotSz)
	}
	var idx int
	select {
	case idx = <-q.free:
	case <-q.dead:
		return Completion{}, q.errv
	case <-ctx.Done():
		return Completion{}, ctx.Err()
	}
	s := &q.slots[idx]
	le.PutUint16(cmd[2:], uint16(idx))
	cmd[1] = cmd[1]&^cmdFlagsPSDTMask | cmdFlagsSGLMetabuf
	var wrs [3]qp.SendWR
	nwr := 0
	if s.bound {
		// The target did not invalidate the last command's window.
		wrs[nwr] = qp.SendWR{WRID: uint64(hkNone) << 56, Opcode: qp.WRLocalInv, InvRKey: s.rkey}
		nwr++
		s.bound = false
	}
	capsule := q.sqeMR.Bytes()[idx*q.capLen : (idx+1)*q.capLen]
	sendLen := SQESize
	switch {
	case len(data) > 0 && !toHost && len(data) <= q.inline:
		// In-capsule data (nvme_rdma_map_sg_inline): after the SQE in the
		// same SEND, an SGL data block with the offset subtype at ICDOFF 0.
		copy(capsule[SQESize:], data)
		sendLen += len(data)
		cmd.SetSGL(SGL{Addr: 0, Length: uint32(len(data)), Type: SGLTypeInline})
		q.inCapsule.Add(1)
	case len(data) > 0:
		addr := q.dataMR.IOVA() + uint64(idx*q.slotSz)
		buf := q.dataMR.Bytes()[idx*q.slotSz : idx*q.slotSz+len(data)]
		if !toHost {
			copy(buf, data)
		}
		next := qp.IncRKey(s.rkey)
		wrs[nwr] = qp.SendWR{WRID: uint64(hkNone) << 56, Opcode: qp.WRBindMW, BindMW: qp.BindInfo{
			MWRKey: s.rkey, RKey: next, MRLKey: q.dataMR.LKey(), Addr: addr, Length: uint64(len(data)),
			Access: qp.RemoteRead | qp.RemoteWrite}}
		nwr++
		s.rkey = next
		s.bound = true
		cmd.SetSGL(SGL{Addr: addr, Length: uint32(len(data)), Key: next, Type: SGLTypeKeyedInval})
		q.keyed.Add(1)
	default:
		cmd.SetSGL(SGL{Type: SGLTypeKeyed})
	}
	copy(capsule, cmd[:])
	s.sge[0] = qp.SGE{Addr: q.sqeMR.IOVA() + uint64(idx*q.capLen), Length: uint32(sendLen), LKey: q.sqeMR.LKey()}
	if !(q.qid == 0 && cmd.Opcode() == AdminAsyncEvent) { // an AER waits for an event as long as it takes
		s.since.Store(time.Now().UnixNano())
	}
	wrs[nwr] = qp.SendWR{WRID: uint64(hkSend)<<56 | uint64(idx), Opcode: qp.WRSend, SGL: s.sge[:]}
	if q.sends.Add(1)%cmdSignalEvery == 0 {
		wrs[nwr].Flags = qp.SendSignaled
	}
	nwr++
	if err := q.post(wrs[:nwr]); err != nil {
		q.fail(fmt.Errorf("nvmeof: post command: %w", err))
		return Completion{}, err
	}
	var cqe Completion
	select {
	case cqe = <-s.ch:
		s.since.Store(0)
	case <-q.dead:
		return Completion{}, q.errv
	case <-ctx.Done():
		// The slot stays taken until the target answers: its buffer and
		// window must not serve another command before that.
		go func() {
			select {
			case <-s.ch:
				s.since.Store(0)
				q.free <- idx
			case <-q.dead:
			}
		}()
		return Completion{}, ctx.Err()
	}
	if toHost && len(data) > 0 && cqe.Status == 0 {
		copy(data, q.dataMR.Bytes()[idx*q.slotSz:idx*q.slotSz+len(data)])
	}
	q.free <- idx
	if cqe.Status != 0 {
		return cqe, &StatusError{Opcode: cmd.Opcode(), Status: cqe.Status, Result: cqe.Result}
	}
	return cqe, nil
}
