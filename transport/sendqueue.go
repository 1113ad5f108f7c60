package transport

import "github.com/goroce/goroce/wire"

// wqeState is where a send WQE is in its life. A WQE moves forward
// posted → sending → sent → complete; go-back-N moves a sent WQE back to
// sending, and an error or a flush moves any WQE to complete.
type wqeState uint8

const (
	wqePosted   wqeState = iota // no PSN assigned yet
	wqeSending                  // PSNs assigned, not every packet sent yet
	wqeSent                     // every packet (or the READ request) sent
	wqeComplete                 // completed or flushed; waiting to be retired in order
)

// sendWQE is one send work request as the engine keeps it.
type sendWQE struct {
	wr       SendWR
	sgl      [MaxSGE]SGE
	inline   []byte // SendInline data, copied at post time
	length   uint32 // total bytes of the SGL (or the inline data)
	state    wqeState
	firstPSN wire.PSN
	lastPSN  wire.PSN
	npkts    uint32
	readDone uint32 // bytes of READ response placed so far
	status   WCStatus
}

// sendQueue is the send queue shared by the requester and the completer: a
// ring of WQEs indexed by three counters (head and tail only grow, req moves
// back on go-back-N),
//
//	head ≤ req ≤ tail,  tail − head ≤ len(ring)
//
// [head, tail) are the WQEs posted and not yet retired. The requester works
// at req: every WQE before it has its PSNs and all its packets sent (or is
// complete); [req, tail) still have packets to send. The WQEs still posted
// (no PSN yet) are a suffix of [req, tail). The completer retires WQEs at
// head, in posting order, once they are complete.
type sendQueue struct {
	ring            []sendWQE
	head, req, tail uint64
	// rdAtomic counts the READ and atomic WQEs in flight (sending or sent),
	// against max_rd_atomic.
	rdAtomic int
}

func (sq *sendQueue) at(i uint64) *sendWQE { return &sq.ring[i%uint64(len(sq.ring))] }

func (sq *sendQueue) full() bool { return sq.tail-sq.head >= uint64(len(sq.ring)) }

// oldest returns the oldest WQE that is not complete, or nil.
func (sq *sendQueue) oldest() *sendWQE {
	for i := sq.head; i < sq.tail; i++ {
		if w := sq.at(i); w.state != wqeComplete {
			return w
		}
	}
	return nil
}

// rdAtomicBefore reports whether an uncompleted READ or atomic precedes idx.
func (sq *sendQueue) rdAtomicBefore(idx uint64) bool {
	for i := sq.head; i < idx; i++ {
		w := sq.at(i)
		if w.state != wqeComplete && w.wr.Opcode.isReadOrAtomic() {
			return true
		}
	}
	return false
}

// begin gives w, which is posted, the n PSNs from first on.
func (sq *sendQueue) begin(w *sendWQE, first wire.PSN, n uint32) {
	w.npkts = n
	w.firstPSN = first
	w.lastPSN = first.Add(n - 1)
	w.state = wqeSending
	if w.wr.Opcode.isReadOrAtomic() {
		sq.rdAtomic++
	}
}

// complete marks w complete with status; the completer's retire delivers
// the completions in order.
func (sq *sendQueue) complete(w *sendWQE, status WCStatus) {
	if w.state == wqeComplete {
		return
	}
	if w.state != wqePosted && w.wr.Opcode.isReadOrAtomic() {
		sq.rdAtomic--
	}
	w.state = wqeComplete
	w.status = status
}

// flush completes every WQE not yet complete with WR_FLUSH_ERR.
func (sq *sendQueue) flush() {
	for i := sq.head; i < sq.tail; i++ {
		sq.complete(sq.at(i), WCWRFlushErr)
	}
	sq.rdAtomic = 0
}

func (sq *sendQueue) reset() {
	clear(sq.ring)
	sq.head, sq.req, sq.tail = 0, 0, 0
	sq.rdAtomic = 0
}
