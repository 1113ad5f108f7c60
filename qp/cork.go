package qp

import "time"

// Doorbell batching across QPs (autocorking, as TCP's tcp_autocorking).
//
// A post writes its frames to the link when its call ends (unlock): one
// nic.Link.WriteBatch, and on AF_XDP one sendto kick, which in copy mode
// runs the transmit and the peer's XDP receive there and then. An
// application that streams over many QPs posts a few WRs per QP per round
// (perftest's run_iter_bw over -q QPs), so each kick carried about three
// frames where one QP's 100-WR posts carry 32 or more: in the bench's qps
// cell (1000 QPs, 4 outstanding 64-byte WRITEs each) 0.30 kicks per
// message against one QP's 0.03, and 4.6 µs of CPU per message against 2.0.
//
// So while many QPs have work in flight, a post leaves its frames in the
// device's batch instead (cork), and the next call that ends writes them
// with its own: a later post once the batch holds corkFrames, or the
// driver goroutine's pass for the ACKs that are on their way, since
// corkQPs QPs wait for responses. The driver's wait deadline is brought to
// corkDelay from now, so a corked frame waits no longer than that even if
// nothing arrives; Close writes what is still corked. The qps cell then
// makes 0.11 kicks and spends 3.8 µs per message. A device with fewer
// busy QPs (a single stream, a ping-pong) writes every post at once, and
// so does one whose link the driver goroutine is not reading (a
// self-driving waiter or nobody owns it: the waiter may leave without
// another pass) or that is not in the threaded mode on a nic.Waiter link
// (only selfDriver corks).
const (
	// corkQPs is how many QPs must have an engine deadline (in the heap:
	// outstanding requests waiting for their ACK timers) before posts
	// cork.
	corkQPs = 16
	// corkFrames is the batch a corked post writes at: the AF_XDP copy-mode
	// transmit budget of one sendto (32 descriptors).
	corkFrames = 32
	// corkDelay bounds how long a corked frame waits for company.
	corkDelay = 20 * time.Microsecond
)

// unlockPost ends a post's call (d.mu held; endCall done): it corks the
// frames the post produced when the device is busy enough and the driver
// goroutine reads the link (see above), else writes them as unlock does.
func (s *selfDriver) unlockPost(now time.Time) {
	d := s.d
	if s.owner != ownerDriver || d.closed || len(d.queues) > 1 ||
		len(d.deadlines.heap) < corkQPs || len(d.tx.frames) == 0 || len(d.tx.frames) >= corkFrames {
		d.unlock()
		return
	}
	if e := now.Add(corkDelay); s.armed.IsZero() || e.Before(s.armed) {
		s.arm(e)
	}
	d.stats.corked++
	d.mu.Unlock()
}
