package qp

// countersLocked is the device's counters with the ones the link keeps
// (d.mu held): send_err is the frames the backend could not send.
func (d *Device) countersLocked() Counters {
	c := d.stats.counters
	c[CntSendErr] = d.linkStats().TxDrops
	return c
}
