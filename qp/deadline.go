package qp

import (
	"cmp"
	"slices"
	"time"
)

// The device's timers: a binary min-heap of the QPs whose engines have a
// deadline (retransmission, RNR, ACK timers), keyed by (deadline, creation
// order). Every engine call on a QP is followed by touch(q), which reads
// that engine's deadline and fixes its place: O(log n) per packet or post,
// and no operation scans every QP. The driver's wait deadline, Poll,
// NextDeadline all read the top.

// deadlineHeap is the heap; each QP stores its index (hidx, -1 when not in
// it) and the deadline it was placed with (dl).
type deadlineHeap []*QP

func (h deadlineHeap) less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.dl.Equal(b.dl) {
		return a.dl.Before(b.dl)
	}
	return a.seq < b.seq
}

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlineHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

func (h *deadlineHeap) push(q *QP) {
	q.hidx = len(*h)
	*h = append(*h, q)
	h.up(q.hidx)
}

func (h *deadlineHeap) remove(q *QP) {
	i := q.hidx
	if i < 0 {
		return
	}
	old := *h
	last := len(old) - 1
	if i != last {
		old.swap(i, last)
	}
	old[last] = nil
	*h = old[:last]
	q.hidx = -1
	if i != last {
		h.fix(i)
	}
}

func (h deadlineHeap) fix(i int) {
	h.down(i)
	h.up(i)
}

// touch puts q where its engine's deadline says (d.mu held): call it after
// every engine call on q.
func (d *Device) touch(q *QP) {
	dl, ok := q.eng.Deadline()
	if !ok || q.destroyed {
		d.deadlines.heap.remove(q)
		return
	}
	if q.hidx >= 0 {
		if q.dl.Equal(dl) {
			return
		}
		q.dl = dl
		d.deadlines.heap.fix(q.hidx)
		return
	}
	q.dl = dl
	d.deadlines.heap.push(q)
}

// earliest is the earliest engine deadline of the device (zero if none).
func (d *Device) earliest() time.Time {
	if len(d.deadlines.heap) == 0 {
		return time.Time{}
	}
	return d.deadlines.heap[0].dl
}

// timers runs the engine timers (d.mu held): with fire set, every engine
// whose deadline is at or before now ticks, in creation order (so a
// simulation is deterministic, whatever their deadlines). It returns how
// many ticked and the earliest deadline left (zero if none).
func (d *Device) timers(now time.Time, fire bool) (fired int, next time.Time) {
	if fire {
		due := d.deadlines.due[:0]
		for len(d.deadlines.heap) > 0 && !d.deadlines.heap[0].dl.After(now) {
			q := d.deadlines.heap[0]
			d.deadlines.heap.remove(q)
			due = append(due, q)
		}
		if len(due) > 1 {
			slices.SortFunc(due, func(a, b *QP) int { return cmp.Compare(a.seq, b.seq) })
		}
		for i, q := range due {
			q.eng.Tick(now)
			d.touch(q)
			due[i] = nil
		}
		fired = len(due)
		d.deadlines.due = due[:0]
	}
	return fired, d.earliest()
}
