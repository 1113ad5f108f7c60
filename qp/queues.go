package qp

// Multi-queue devices (Config.Links, InterfaceOptions.Queues).
//
// A NIC has several receive and transmit queues; RSS spreads the flows over
// them by a hash of their headers, and a driver serves each queue from its
// own CPU. A goroce device may likewise use N links, one per queue of its
// interface (an AF_XDP socket per queue), with one reader per queue:
//
//   - Receive. Each queue has its own reader and buffers: on a threaded
//     device, queue 0's is the device's driver (selfDriver with its
//     self-driving waiters, or threadedDriver) and every other queue has a
//     goroutine of its own (queueLoop) parked on its link; in the busy-poll
//     and manual modes Device.Poll reads every queue (linkPoller). A frame
//     may arrive on any queue (the peer's NIC, not we, picked it), so every
//     reader delivers what it reads to whatever QP it addresses: the
//     engines are serialised by Device.mu as on a one-queue device, and a
//     reader holds it once per batch. Timers run on queue 0's reader.
//   - Transmit. Each queue has its own transmit batch (txBatch, with its
//     own lock) and a QP's frames go to its queue's batch: the queue its
//     UDP source port picks (pickQueue: port mod N), as RSS would pick it
//     for the flow; both ends of an RC connection compute the same port
//     (wire.RCSourcePortFL hashes both QPNs symmetrically), so on a veth
//     pair, where a frame sent on queue i arrives on the peer's queue i, a
//     connection's frames travel on one queue in both directions. Unlock
//     writes every queue's batch that has frames, each with its own
//     WriteBatch (one kick per queue).
//   - What stays per device: the engines, the QP table, the deadline heap,
//     the counters, the async events — everything under Device.mu.
//
// The 64-queue design (docs/architecture.md, "Many queues") replaces
// Device.mu by per-QP engine locks; this file is its first step: the
// links, readers and transmit batches are per queue.

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/wire"
)

// MaxQueues is the most queues (Config.Links, InterfaceOptions.Queues) a
// device may have.
const MaxQueues = 64

// checkLinks validates Config.Links and fills Link from it.
func (cfg *Config) checkLinks() error {
	if len(cfg.Links) == 0 {
		return nil
	}
	if len(cfg.Links) > MaxQueues {
		return fmt.Errorf("qp: open device: %d links: at most %d queues: %w", len(cfg.Links), MaxQueues, ErrInvalidArgument)
	}
	if cfg.Link == nil {
		cfg.Link = cfg.Links[0]
	} else if cfg.Link != cfg.Links[0] {
		return fmt.Errorf("qp: open device: Config.Link is not Config.Links[0]: %w", ErrInvalidArgument)
	}
	for i, l := range cfg.Links {
		if l == nil {
			return fmt.Errorf("qp: open device: Config.Links[%d] is nil: %w", i, ErrInvalidArgument)
		}
		if i > 0 && (l.MTU() != cfg.Link.MTU() || string(l.HardwareAddr()) != string(cfg.Link.HardwareAddr())) {
			return fmt.Errorf("qp: open device: queue %d's link has another MTU or MAC than queue 0's: %w", i, ErrInvalidArgument)
		}
	}
	if len(cfg.Links) > 1 && cfg.Mode != ModeThreaded {
		for i, l := range cfg.Links {
			if _, ok := l.(nic.Poller); !ok {
				return fmt.Errorf("qp: open device: %v mode needs links with a non-blocking TryReadBatch (queue %d's %T has none)", cfg.Mode, i, l)
			}
		}
	}
	return nil
}

// initQueues builds the transmit batches of the queues (Open).
func (d *Device) initQueues() {
	d.queues = []*txBatch{&d.tx}
	frameLen := d.cfg.Link.MTU() + wire.EthernetLen + wire.VLANTagLen + 64
	for _, l := range d.cfg.Links[min(1, len(d.cfg.Links)):] {
		b := &txBatch{}
		b.init(l, frameLen)
		b.pcap, b.now = &d.pcap, d.now
		d.queues = append(d.queues, b)
	}
}

// Queues returns the number of queues the device uses (Config.Links; 1
// for a device on one link).
func (d *Device) Queues() int { return len(d.queues) }

// Queue returns the index of the queue the QP transmits on: the one its
// UDP source port picks (port mod Device.Queues), as RSS would. It is 0 on
// a one-queue device.
func (q *QP) Queue() int {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.queue
}

// pickQueue points the QP's frames at the transmit batch of the queue its
// UDP source port picks (d.mu held): UD QPs and RC/UC QPs before RTR have
// rxe's UDSourcePort(qpn); an RC/UC QP with a path the port of its flow
// (wire.RCSourcePortFL over both QPNs and the flow label).
func (d *Device) pickQueue(q *QP) {
	if len(d.queues) == 1 {
		return
	}
	port := wire.UDSourcePort(q.eng.QPN())
	if q.eng.Type() != QPTypeUD {
		if a := q.eng.Attr(); a.DestQPN != 0 {
			port = wire.RCSourcePortFL(a.AV.FlowLabel, q.eng.QPN(), a.DestQPN)
		}
	}
	q.queue = int(port) % len(d.queues)
	q.hooks.out = d.queues[q.queue]
}

// unlockQueues is unlock on a multi-queue device: every queue's batch
// with frames is handed over under d.mu (its lock taken, in queue order)
// and written after d.mu is released, one WriteBatch per queue.
func (d *Device) unlockQueues() {
	var held uint64 // bit i: queue i's batch was handed over, its mu held
	for i, b := range d.queues {
		if b.handoff() != nil {
			held |= 1 << i
		}
	}
	d.mu.Unlock()
	for i, b := range d.queues {
		if held&(1<<i) != 0 {
			b.writeSpare() // handoff left the frames there
			b.mu.Unlock()
		}
	}
}

// flushTxLocked writes every queue's frames collected so far (d.mu held).
func (d *Device) flushTxLocked() {
	for _, b := range d.queues {
		b.flushLocked()
	}
}

// linkStats sums the queues' link counters.
func (d *Device) linkStats() nic.Stats {
	s := d.cfg.Link.Stats()
	for _, l := range d.cfg.Links[min(1, len(d.cfg.Links)):] {
		s.Add(l.Stats())
	}
	return s
}

// queueDrove is told that another queue's reader drove the device (d.mu
// held). A self-driving waiter in MR.WaitWrite reads queue 0's link and
// learns of a WRITE another reader placed only when kicked: memreg's
// WriteDone wakes sleeping waiters, not one parked on a link. (A CQ waiter
// is kicked by completed.)
func (s *selfDriver) queueDrove() {
	if s.owner == ownerWaiter && s.selfCQ == nil && !s.ownerDrive {
		s.kickOwner()
	}
}

// settleLinks are the links Settle looks at: every queue's.
func (d *Device) settleLinks() []nic.Link {
	if len(d.cfg.Links) > 1 {
		return d.cfg.Links
	}
	return []nic.Link{d.cfg.Link}
}

// newQueueRxBatch is newLinkRxBatch for a reader of a multi-queue device:
// with room for the batch's parsed frames (preparse).
func (d *Device) newQueueRxBatch(l nic.Link) *rxBatch {
	b := d.newLinkRxBatch(l)
	b.pkts, b.perr = make([]wire.Packet, len(b.bufs)), make([]error, len(b.bufs))
	return b
}

// preparse parses the n frames read into b before d.mu is taken (a
// multi-queue device's threaded readers): wire.Parse and its ICRC check are
// per-frame work that needs no engine state, so the readers of several
// queues do it at once, and drive only dispatches (inputParsed). A
// one-queue device parses under d.mu as before (b.pkts is nil). Frames
// lent by the link are parsed under d.rxUse, and not at all once the
// device is closing (its caller then finds d.closed and drops them).
func (b *rxBatch) preparse(d *Device, n int) {
	if b.pkts == nil || n == 0 {
		return
	}
	if b.lends {
		d.rxUse.RLock()
		defer d.rxUse.RUnlock()
		select {
		case <-d.done:
			return
		default:
		}
	}
	for i := range n {
		b.perr[i] = b.icrc.Parse(b.bufs[i][:b.sizes[i]], &b.pkts[i])
	}
	b.parsed = true
}

// queuePoller is one more queue's link read by Device.Poll (busy-poll and
// manual modes).
type queuePoller struct {
	poller nic.Poller
	rx     *rxBatch
}

// queuePollers returns the pollers of queues 1..N-1 (nil with one queue);
// owns: the device closes the links (newLinkPoller).
func (d *Device) queuePollers(owns bool) []queuePoller {
	if len(d.cfg.Links) < 2 {
		return nil
	}
	var ps []queuePoller
	for _, l := range d.cfg.Links[1:] {
		rx := newRxBatch(l)
		if owns {
			rx = d.newLinkRxBatch(l)
		}
		ps = append(ps, queuePoller{poller: l.(nic.Poller), rx: rx})
	}
	return ps
}

// startQueues starts the readers of queues 1..N-1 of a threaded device
// (Open, after the driver of queue 0 started).
func (d *Device) startQueues() {
	if len(d.cfg.Links) < 2 || d.cfg.Mode != ModeThreaded {
		return
	}
	for _, l := range d.cfg.Links[1:] {
		d.wg.Add(1)
		go d.queueLoop(l)
	}
}

// queueLoop is the reader of one more queue of a threaded device: it reads
// the queue's link (parked in the runtime poller where the link can, else
// blocked in ReadBatch) and drives the device with each batch. Queue 0's
// driver runs the timers; a completion this reader produces for a
// self-driving waiter on queue 0 kicks it (selfDriver.completed).
func (d *Device) queueLoop(l nic.Link) {
	defer d.wg.Done()
	b := d.newQueueRxBatch(l)
	read := l.ReadBatch
	if w, ok := nic.CanWait(l); ok {
		read = w.WaitReadBatch
	}
	for {
		n, err := read(b.bufs, b.sizes)
		if err != nil {
			if errors.Is(err, nic.ErrClosed) {
				d.linkFailed(err) // DEVICE_FATAL unless the device closed it
				return
			}
			if d.isClosed() {
				return
			}
			n = 0
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				time.Sleep(driveErrPause)
			}
		}
		if n == 0 {
			continue
		}
		b.preparse(d, n)
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return
		}
		d.drive(b, n, false)
		if s, ok := d.drv.(*selfDriver); ok {
			s.queueDrove()
		}
		d.unlock()
		d.drv.kick()
	}
}
