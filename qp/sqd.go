package qp

// watchSQD notes that q was moved to SQD: checkSQD raises EventSQDrained
// for it once its send queue has drained. Called with d.mu held.
func (d *Device) watchSQD(q *QP) {
	for _, w := range d.ev.sqd {
		if w == q {
			return
		}
	}
	d.ev.sqd = append(d.ev.sqd, q)
}

// checkSQD runs after every call into the engines (afterCall, d.mu held):
// SQ_DRAINED for the watched QPs whose send queue drained. A QP that left
// SQD or was destroyed is dropped from the list; only QPs moved to SQD are
// in it, so the common case costs one length check.
func (d *Device) checkSQD() {
	if len(d.ev.sqd) == 0 {
		return
	}
	keep := d.ev.sqd[:0]
	for _, q := range d.ev.sqd {
		if q.destroyed || q.eng.State() != StateSQD {
			continue
		}
		if q.eng.SQDrained() {
			d.raise(AsyncEvent{Type: EventSQDrained, QP: q})
			continue
		}
		keep = append(keep, q)
	}
	clear(d.ev.sqd[len(keep):])
	d.ev.sqd = keep
}
