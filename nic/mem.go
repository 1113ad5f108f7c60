package nic

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// The in-memory link: two MemLinks joined by two one-way "pipes" (A→B and
// B→A). Each pipe is a priority queue of copied frames ordered by the time
// each frame becomes due (send time + Delay + jitter) and, for equal times,
// by the order in which frames were written. A frame is delivered by the
// receiving side's ReadBatch/TryReadBatch once its due time has come.
//
// Faults are decided by the sender, per frame, when the frame is written,
// from a PCG generator seeded with MemConfig.Seed (one stream per
// direction). Every frame draws the same six numbers in the same order
// (drop, duplicate, reorder, corrupt, jitter, corrupt position) whatever the
// probabilities are, so the decisions for frame k depend only on the seed
// and k: changing one probability does not shift the others' sequence.
//
// Fault semantics (per frame, in this order):
//   - Drop: the frame is discarded (MemStats.Dropped, Stats.TxDrops).
//   - Corrupt: one random bit of one random byte of the frame (anywhere,
//     Ethernet header included) is flipped (MemStats.Corrupted). A frame that
//     is also duplicated is corrupted before the copy, so both copies carry
//     the same flipped bit.
//   - Duplicate: the frame is delivered twice, the copy immediately after the
//     original (MemStats.Duplicated).
//   - Reorder: the frame is held back and delivered right after the next
//     frame written in the same direction, i.e. the next frame overtakes it
//     (MemStats.Reordered counts frames actually overtaken). If no later frame
//     is written within Faults.ReorderHold (default 1 ms) after the held
//     frame became due, it is delivered at that time in its original place.
//     While one frame is held, the reorder decision for the following frame
//     is ignored: at most one frame is held per direction.
//   - Delay, Jitter: the frame becomes due Delay + U[0, Jitter) after it was
//     written (after its serialization, with Rate). Jitter alone can reorder
//     frames; that is not counted.
//
// A full queue (QueueLen frames pending) drops the new frame
// (MemStats.Overflow, Stats.RingFull, Stats.TxDrops); so does a frame longer
// than MTU+18 or a frame sent towards a closed link.

// Faults are the per-direction fault probabilities (0..1 per frame) and
// delays of frames sent by one end of a MemLink pair.
type Faults struct {
	Drop, Duplicate, Reorder, Corrupt float64
	Delay, Jitter                     time.Duration
	// ReorderHold bounds how long a reordered frame waits for a later frame
	// to overtake it (0 means 1 ms).
	ReorderHold time.Duration
	// Filter, when set, sees every frame before the random faults (which
	// still draw their numbers, so the random sequence does not shift);
	// returning true drops the frame (counted as Dropped). Scenario tests use
	// it to lose exactly the frames they name. It runs with the direction's
	// lock held, so it must not call the MemLink.
	Filter func(frame []byte) (drop bool)
	// Rate limits the direction to this many bytes per second (0: no
	// limit): a frame becomes due when the previous ones have been
	// "serialized" and its own len/Rate has passed, then Delay and jitter
	// are added. With QueueLen it models a bottleneck link and its buffer.
	Rate int64
}

// MemConfig configures NewMemPair. The zero value is a fault-free 1500-byte
// link on the real clock.
type MemConfig struct {
	MTU        int              // IP MTU; default 1500. Frames up to MTU+18 bytes pass.
	Seed       int64            // seeds all fault decisions (PCG); same seed + same inputs = same outcome
	AtoB, BtoA Faults           // per direction
	Clock      func() time.Time // nil = time.Now; a fake clock for deterministic simulation
	Tap        io.Writer        // optional: every delivered frame is written here as pcap (Ethernet)
	QueueLen   int              // frames pending per direction before drops; default 4096
	MACA, MACB net.HardwareAddr // defaults 02:00:00:00:00:0a / 02:00:00:00:00:0b
}

// MemStats are the in-memory link's own counters plus the common ones.
// The fault counters of a link count faults applied to frames it sent.
type MemStats struct {
	Stats
	Dropped, Duplicated, Reordered, Corrupted uint64
	Overflow                                  uint64 // frames dropped because the queue was full
	TapErrors                                 uint64 // pcap writes that failed (the tap is then disabled)
}

const (
	memDefaultMTU      = 1500
	memDefaultQueueLen = 4096
	memBatchSize       = 64
	memDefaultHold     = time.Millisecond
	// memFakeClockPoll is how often a blocked ReadBatch re-reads a custom
	// Clock while frames are pending but not yet due.
	memFakeClockPoll = time.Millisecond
)

// MemLink is one end of an in-memory link pair. It implements Link, and adds
// non-blocking calls for a single-goroutine deterministic scheduler
// (TryReadBatch, NextDue, Pending) driven by MemConfig.Clock.
type MemLink struct {
	mtu    int
	mac    net.HardwareAddr
	clock  func() time.Time
	custom bool     // clock is not time.Now
	tx     *memPipe // frames sent by this end
	rx     *memPipe // frames towards this end
	timer  *time.Timer
	done   chan struct{}
	once   sync.Once
	w      memWait // mem_wait.go
}

var _ Link = (*MemLink)(nil)

type memFrame struct {
	buf []byte
	due time.Time
	seq uint64
}

type memPipe struct {
	mu       sync.Mutex
	rng      *rand.Rand
	faults   Faults
	queueLen int
	maxFrame int
	tap      *memTap

	q       memQueue
	held    memFrame
	heldDup bool // the held frame is to be delivered twice
	hasHeld bool
	heldEnd time.Time // deliver the held frame at this time at the latest
	seq     uint64
	// wireFree is when the simulated wire is free again (Faults.Rate).
	wireFree time.Time
	free     [][]byte

	rxClosed bool
	wake     chan struct{} // cap 1: "something changed" for the receiver

	// Sender-side counters.
	txFrames, txBytes, txDrops, ringFull             uint64
	dropped, duplicated, reordered, corrupted, overf uint64
	// Receiver-side counters.
	rxFrames, rxBytes, rxDrops, wakeups, tapErrors uint64
}

type memTap struct {
	mu  sync.Mutex
	w   *pcapfile.Writer
	bad bool
}

// NewMemPair returns the two connected ends of an in-memory link.
func NewMemPair(cfg MemConfig) (a, b *MemLink) {
	if cfg.MTU <= 0 {
		cfg.MTU = memDefaultMTU
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = memDefaultQueueLen
	}
	if cfg.MACA == nil {
		cfg.MACA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	}
	if cfg.MACB == nil {
		cfg.MACB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	}
	clock, custom := cfg.Clock, true
	if clock == nil {
		clock, custom = time.Now, false
	}
	var tap *memTap
	if cfg.Tap != nil {
		tap = &memTap{}
		w, err := pcapfile.NewWriter(cfg.Tap, pcapfile.LinkTypeEthernet)
		if err != nil {
			tap.bad = true
		}
		tap.w = w
	}
	maxFrame := cfg.MTU + 18
	newPipe := func(f Faults, stream uint64) *memPipe {
		return &memPipe{
			rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), stream)),
			faults:   f,
			queueLen: cfg.QueueLen,
			maxFrame: maxFrame,
			tap:      tap,
			wake:     make(chan struct{}, 1),
		}
	}
	ab := newPipe(cfg.AtoB, 0xA0B)
	ba := newPipe(cfg.BtoA, 0xB0A)
	mk := func(mac net.HardwareAddr, tx, rx *memPipe) *MemLink {
		return &MemLink{
			mtu:    cfg.MTU,
			mac:    append(net.HardwareAddr(nil), mac...),
			clock:  clock,
			custom: custom,
			tx:     tx,
			rx:     rx,
			done:   make(chan struct{}),
			w:      memWait{changed: make(chan struct{}, 1)},
		}
	}
	return mk(cfg.MACA, ab, ba), mk(cfg.MACB, ba, ab)
}

// BatchSize implements Link.
func (l *MemLink) BatchSize() int { return memBatchSize }

// MTU implements Link.
func (l *MemLink) MTU() int { return l.mtu }

// HardwareAddr implements Link (a copy).
func (l *MemLink) HardwareAddr() net.HardwareAddr { return append(net.HardwareAddr(nil), l.mac...) }

// SetFaults replaces the faults applied to frames sent by l from now on.
func (l *MemLink) SetFaults(f Faults) {
	p := l.tx
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
}

// WriteBatch implements Link. Every frame is accepted (the count is
// len(frames)) unless l is closed: frames lost to faults, a full queue or an
// oversize length are counted, as a wire would lose them.
func (l *MemLink) WriteBatch(frames [][]byte) (int, error) {
	select {
	case <-l.done:
		return 0, ErrClosed
	default:
	}
	now := l.clock()
	p := l.tx
	p.mu.Lock()
	for _, f := range frames {
		p.send(f, now)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return len(frames), nil
}

// send applies the faults to one frame and queues it. Called with p.mu held.
func (p *memPipe) send(f []byte, now time.Time) {
	// Always six draws per frame, in this order (see the file comment).
	rDrop, rDup, rReorder, rCorrupt := p.rng.Float64(), p.rng.Float64(), p.rng.Float64(), p.rng.Float64()
	rJitter, rPos := p.rng.Uint64(), p.rng.Uint64()
	ft := &p.faults

	if p.rxClosed || len(f) > p.maxFrame || len(f) == 0 {
		p.txDrops++
		return
	}
	if rDrop < ft.Drop || (ft.Filter != nil && ft.Filter(f)) {
		p.dropped++
		p.txDrops++
		return
	}
	pending := p.q.len()
	if p.hasHeld {
		pending++
	}
	if pending >= p.queueLen {
		p.overf++
		p.ringFull++
		p.txDrops++
		return
	}
	buf := p.alloc(len(f))
	copy(buf, f)
	if rCorrupt < ft.Corrupt {
		buf[(rPos>>3)%uint64(len(buf))] ^= 1 << (rPos & 7)
		p.corrupted++
	}
	dup := rDup < ft.Duplicate
	if dup {
		p.duplicated++
	}
	start := now
	if ft.Rate > 0 {
		// Serialization: the frame waits for the wire, then occupies it for
		// len/Rate. Frames queue behind each other (QueueLen bounds them).
		if p.wireFree.After(start) {
			start = p.wireFree
		}
		p.wireFree = start.Add(time.Duration(int64(len(f)) * int64(time.Second) / ft.Rate))
		start = p.wireFree
	}
	due := start.Add(ft.Delay)
	if ft.Jitter > 0 {
		due = due.Add(time.Duration(rJitter % uint64(ft.Jitter)))
	}
	p.txFrames++
	p.txBytes += uint64(len(f))

	if p.hasHeld && !p.heldEnd.After(now) {
		// The held frame's hold expired before this frame was written: it
		// was (logically) delivered at heldEnd, in its original place.
		p.releaseHeld(p.heldEnd)
	}
	if !p.hasHeld && rReorder < ft.Reorder {
		hold := ft.ReorderHold
		if hold <= 0 {
			hold = memDefaultHold
		}
		p.held = memFrame{buf: buf, due: due, seq: p.nextSeq()}
		p.heldDup, p.hasHeld, p.heldEnd = dup, true, due.Add(hold)
		return
	}
	p.push(buf, due)
	if dup {
		p.push(p.clone(buf), due)
	}
	if p.hasHeld {
		// This frame overtakes the held one, which follows right behind.
		p.reordered++
		at := due
		if p.held.due.After(at) {
			at = p.held.due
		}
		p.releaseHeld(at)
	}
}

func (p *memPipe) releaseHeld(at time.Time) {
	h := p.held
	p.hasHeld = false
	p.held = memFrame{}
	p.push(h.buf, at)
	if p.heldDup {
		p.push(p.clone(h.buf), at)
	}
}

func (p *memPipe) nextSeq() uint64 { p.seq++; return p.seq }

func (p *memPipe) push(buf []byte, due time.Time) {
	p.q.push(memFrame{buf: buf, due: due, seq: p.nextSeq()})
}

func (p *memPipe) alloc(n int) []byte {
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		return b[:n]
	}
	return make([]byte, n, p.maxFrame)
}

func (p *memPipe) clone(b []byte) []byte {
	c := p.alloc(len(b))
	copy(c, b)
	return c
}

// peek returns the due time of the earliest pending frame (queued or held).
func (p *memPipe) peek() (time.Time, bool) {
	switch {
	case p.q.len() > 0 && p.hasHeld:
		if p.heldEnd.Before(p.q.peek().due) {
			return p.heldEnd, true
		}
		return p.q.peek().due, true
	case p.q.len() > 0:
		return p.q.peek().due, true
	case p.hasHeld:
		return p.heldEnd, true
	}
	return time.Time{}, false
}

// take moves frames due at now into bufs. Called with p.mu held.
func (p *memPipe) take(bufs [][]byte, sizes []int, now time.Time) int {
	n := 0
	for n < len(bufs) && n < len(sizes) {
		if p.hasHeld && !p.heldEnd.After(now) && (p.q.len() == 0 || p.heldEnd.Before(p.q.peek().due)) {
			p.releaseHeld(p.heldEnd)
		}
		if p.q.len() == 0 || p.q.peek().due.After(now) {
			break
		}
		f := p.q.pop()
		if len(f.buf) > len(bufs[n]) {
			p.rxDrops++
		} else {
			sizes[n] = copy(bufs[n], f.buf)
			p.rxFrames++
			p.rxBytes += uint64(len(f.buf))
			p.writeTap(f.due, f.buf)
			n++
		}
		p.free = append(p.free, f.buf[:0])
	}
	return n
}

func (p *memPipe) writeTap(t time.Time, b []byte) {
	tp := p.tap
	if tp == nil {
		return
	}
	tp.mu.Lock()
	if !tp.bad {
		if err := tp.w.WritePacket(t, b); err != nil {
			tp.bad = true
			p.tapErrors++
		}
	}
	tp.mu.Unlock()
}

// TryReadBatch implements Poller: ReadBatch without blocking. It returns
// the frames due at Clock() (0 if none), or ErrClosed once l is closed.
func (l *MemLink) TryReadBatch(bufs [][]byte, sizes []int) (int, error) {
	select {
	case <-l.done:
		return 0, ErrClosed
	default:
	}
	p := l.rx
	now := l.clock()
	p.mu.Lock()
	n := p.take(bufs, sizes, now)
	p.mu.Unlock()
	return n, nil
}

// ReadBatch implements Link. It blocks until a frame is due or l is closed.
// Under the real clock it sleeps exactly until the earliest pending frame is
// due. Under a custom Clock nothing tells it that time moved, so while
// frames are pending but not due it re-reads the clock every millisecond of
// real time; a deterministic scheduler should use TryReadBatch and NextDue
// instead.
func (l *MemLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	p := l.rx
	for {
		select {
		case <-l.done:
			return 0, ErrClosed
		default:
		}
		now := l.clock()
		p.mu.Lock()
		n := p.take(bufs, sizes, now)
		next, ok := p.peek()
		p.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		if ok {
			d := next.Sub(now)
			if l.custom && d > memFakeClockPoll {
				d = memFakeClockPoll
			}
			if l.timer == nil {
				l.timer = time.NewTimer(d)
			} else {
				l.timer.Reset(d)
			}
			select {
			case <-p.wake:
			case <-l.timer.C:
			case <-l.done:
			}
			l.timer.Stop()
		} else {
			select {
			case <-p.wake:
			case <-l.done:
			}
		}
		p.mu.Lock()
		p.wakeups++
		p.mu.Unlock()
	}
}

// NextDue returns when the earliest frame pending towards l becomes due.
func (l *MemLink) NextDue() (time.Time, bool) {
	p := l.rx
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peek()
}

// Pending returns the number of frames queued towards l (due or not).
func (l *MemLink) Pending() int {
	p := l.rx
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.q.len()
	if p.hasHeld {
		n++
		if p.heldDup {
			n++
		}
	}
	return n
}

// Stats implements Link.
func (l *MemLink) Stats() Stats { return l.MemStats().Stats }

// MemStats returns the common counters and the fault counters of frames
// sent by l.
func (l *MemLink) MemStats() MemStats {
	var s MemStats
	t := l.tx
	t.mu.Lock()
	s.TxFrames, s.TxBytes, s.TxDrops, s.RingFull = t.txFrames, t.txBytes, t.txDrops, t.ringFull
	s.Dropped, s.Duplicated, s.Reordered, s.Corrupted, s.Overflow = t.dropped, t.duplicated, t.reordered, t.corrupted, t.overf
	t.mu.Unlock()
	r := l.rx
	r.mu.Lock()
	s.RxFrames, s.RxBytes, s.RxDrops, s.Wakeups, s.TapErrors = r.rxFrames, r.rxBytes, r.rxDrops, r.wakeups, r.tapErrors
	r.mu.Unlock()
	return s
}

// Close implements Link: it wakes l's blocked ReadBatch (ErrClosed), makes
// l's further calls fail, and drops whatever the peer sends from now on. The
// peer stays open.
func (l *MemLink) Close() error {
	l.once.Do(func() {
		close(l.done)
		p := l.rx
		p.mu.Lock()
		p.rxClosed = true
		for p.q.len() > 0 {
			f := p.q.pop()
			p.free = append(p.free, f.buf[:0])
		}
		p.hasHeld = false
		p.held = memFrame{}
		p.mu.Unlock()
	})
	return nil
}

// memQueue orders frames by (due, seq). Frames written without jitter or
// reordering arrive in that order already; they go to a FIFO (O(1)). A frame
// due before the FIFO's last one goes to a binary heap. pop takes the
// earlier of the two heads. Both are slices of values, reused, so that a
// steady state allocates nothing.
type memQueue struct {
	fifo []memFrame
	head int // fifo[head:] are queued
	heap memHeap
}

func frameLess(a, b *memFrame) bool {
	if c := a.due.Compare(b.due); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

func (q *memQueue) len() int { return len(q.fifo) - q.head + len(q.heap) }

func (q *memQueue) push(f memFrame) {
	if n := len(q.fifo); n == q.head || !frameLess(&f, &q.fifo[n-1]) {
		if q.head > 0 && n == cap(q.fifo) {
			// Slide the live part down instead of growing.
			k := copy(q.fifo, q.fifo[q.head:])
			clear(q.fifo[k:])
			q.fifo, q.head = q.fifo[:k], 0
		}
		q.fifo = append(q.fifo, f)
		return
	}
	q.heap.push(f)
}

// peek returns the earliest frame; q must not be empty.
func (q *memQueue) peek() *memFrame {
	if q.head == len(q.fifo) {
		return &q.heap[0]
	}
	if len(q.heap) > 0 && frameLess(&q.heap[0], &q.fifo[q.head]) {
		return &q.heap[0]
	}
	return &q.fifo[q.head]
}

// pop removes and returns the earliest frame; q must not be empty.
func (q *memQueue) pop() memFrame {
	if q.head == len(q.fifo) || (len(q.heap) > 0 && frameLess(&q.heap[0], &q.fifo[q.head])) {
		return q.heap.pop()
	}
	f := q.fifo[q.head]
	q.fifo[q.head] = memFrame{}
	q.head++
	if q.head == len(q.fifo) {
		q.fifo, q.head = q.fifo[:0], 0
	}
	return f
}

// memHeap is a binary min-heap of frames by (due, seq).
type memHeap []memFrame

func (h memHeap) less(i, j int) bool { return frameLess(&h[i], &h[j]) }

func (h *memHeap) push(f memFrame) {
	*h = append(*h, f)
	q := *h
	i := len(q) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *memHeap) pop() memFrame {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = memFrame{}
	q = q[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(q) && q.less(l, m) {
			m = l
		}
		if r < len(q) && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}
