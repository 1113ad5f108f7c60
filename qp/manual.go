package qp

import (
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// manualRx is the receive side of a device in manual mode.
type manualRx struct {
	link  nic.Poller
	bufs  [][]byte
	sizes []int
	pkt   wire.Packet
}

func newManualRx(tr nic.Poller, l nic.Link) *manualRx {
	m := &manualRx{link: tr, bufs: make([][]byte, 64), sizes: make([]int, 64)}
	for i := range m.bufs {
		m.bufs[i] = make([]byte, l.MTU()+wire.EthernetLen+wire.VLANTagLen+64)
	}
	return m
}

// busyPollBatches bounds the link batches one busy-poll Device.Poll reads:
// it holds the device mutex, so a peer flooding the link must not keep
// posts and other pollers out; the rest waits for the next poll.
const busyPollBatches = 4

// Poll (manual and busy-poll modes) processes the frames that are due on
// the link and every engine deadline that has passed at the device clock's
// current time: in manual mode every due frame (the simulator's clock
// stands still meanwhile, so there is an end), in busy-poll mode at most
// busyPollBatches batches of them. It returns the number of frames and timer expiries handled,
// so a simulator knows whether anything happened. In the normal mode, and
// on a closed busy-poll device, it does nothing.
func (d *Device) Poll() int {
	m := d.manual
	if m == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.busy && d.closed {
		return 0
	}
	events := 0
	for batches := 0; !d.busy || batches < busyPollBatches; batches++ {
		// An error (a closed link) ends this look at the link, like the
		// receive goroutine stops on one; a transient one is retried at the
		// next poll.
		n, err := m.link.TryReadBatch(m.bufs, m.sizes)
		if err != nil {
			n = 0
		}
		if n == 0 {
			break
		}
		now := d.now()
		for i := 0; i < n; i++ {
			d.input(m.bufs[i][:m.sizes[i]], &m.pkt, now)
		}
		d.endCall(now)
		events += n
	}
	now := d.now()
	for _, q := range d.qpList {
		if dl, ok := q.eng.Deadline(); ok && !dl.After(now) {
			q.eng.Tick(now)
			events++
		}
	}
	d.endCall(now)
	return events
}

// NextDeadline returns the earliest engine deadline of the device.
func (d *Device) NextDeadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var next time.Time
	for _, q := range d.qpList {
		if dl, ok := q.eng.Deadline(); ok && (next.IsZero() || dl.Before(next)) {
			next = dl
		}
	}
	return next, !next.IsZero()
}
