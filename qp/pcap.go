package qp

import (
	"bufio"
	"io"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// PcapWriter is a device's own capture: the frames a Device receives and
// sends, written as a pcap stream (Ethernet, nanosecond timestamps) that
// Wireshark, tshark, tcpdump -r and `goroce dump` read.
//
// It is the way to see an AF_XDP device's traffic: XDP redirects the
// frames to the socket before the kernel's packet taps, so tcpdump (and
// `goroce dump -i`) on the interface sees none of them, and AF_PACKET's
// qdisc bypass hides the transmitted ones. The device records each frame
// it hands to the link or reads from it, in both directions, with the
// time of the device's clock (Config.Now: the fake clock of a simulated
// device) when it does.
//
// Several devices may share one PcapWriter (one file for both ends of a
// pair). Frames are buffered and written in batches: no allocation and no
// system call per frame. The buffer is flushed when it fills, within
// FlushDelay of the first frame written after a flush, by Flush, by
// Device.Close and by Close. The first write error stops the capture
// (Err) without disturbing the devices.
//
// Attach one with Config.Pcap, InterfaceOptions.Pcap or Device.SetPcap:
//
//	f, _ := os.Create("goroce.pcap")
//	pw, _ := qp.NewPcapWriter(f)
//	dev, _, err := qp.OpenInterface(ctx, "eth1", qp.InterfaceOptions{Pcap: pw})
//	...
//	dev.Close()
//	pw.Close() // flushes; then close the file
//	f.Close()
type PcapWriter struct {
	mu    sync.Mutex
	bw    *bufio.Writer
	pw    *pcapfile.Writer
	err   error
	timer *time.Timer // flushes FlushDelay after the first unflushed frame
	armed bool        // timer is set
	dirty bool        // frames since the last flush
	done  bool        // closed
}

// FlushDelay bounds how long a captured frame may wait in a PcapWriter's
// buffer: a capture that is killed loses at most the frames of the last
// FlushDelay.
const FlushDelay = 100 * time.Millisecond

// pcapBuffer is the size of a PcapWriter's buffer.
const pcapBuffer = 256 << 10

// NewPcapWriter writes the pcap file header to w and returns the writer to
// attach to devices. w is not closed by the PcapWriter.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	bw := bufio.NewWriterSize(w, pcapBuffer)
	pw, err := pcapfile.NewWriter(bw, pcapfile.LinkTypeEthernet)
	if err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	p := &PcapWriter{bw: bw, pw: pw}
	p.timer = time.AfterFunc(time.Hour, p.timerFlush)
	p.timer.Stop()
	return p, nil
}

// write records frames, all with the time now() returns once the writer
// is held. Called by the devices once per batch.
func (p *PcapWriter) write(now func() time.Time, frames [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || p.done {
		return
	}
	t := now()
	for _, f := range frames {
		if err := p.pw.WritePacket(t, f); err != nil {
			p.err = err
			return
		}
	}
	p.dirty = true
	if !p.armed {
		p.armed = true
		p.timer.Reset(FlushDelay)
	}
}

// writeRx records the n frames of a receive batch.
func (p *PcapWriter) writeRx(now func() time.Time, b *rxBatch, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || p.done {
		return
	}
	t := now()
	for i := 0; i < n; i++ {
		if err := p.pw.WritePacket(t, b.bufs[i][:b.sizes[i]]); err != nil {
			p.err = err
			return
		}
	}
	p.dirty = true
	if !p.armed {
		p.armed = true
		p.timer.Reset(FlushDelay)
	}
}

func (p *PcapWriter) timerFlush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	p.flushLocked()
}

func (p *PcapWriter) flushLocked() {
	if !p.dirty || p.err != nil {
		return
	}
	p.dirty = false
	if err := p.bw.Flush(); err != nil {
		p.err = err
	}
}

// Flush writes the buffered frames to the underlying writer and returns
// the capture's first error, if any.
func (p *PcapWriter) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	return p.err
}

// Err returns the first write error of the capture, if any.
func (p *PcapWriter) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close flushes the capture and stops it: frames the devices send or
// receive afterwards are not recorded. It does not close the underlying
// writer, and returns the capture's first error, if any.
func (p *PcapWriter) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	p.done = true
	p.timer.Stop()
	p.armed = false
	return p.err
}

// SetPcap starts recording the device's frames to p, or stops it (nil).
// Frames already in flight may be recorded or not; for a complete capture
// attach p before creating QPs, or open the device with it (Config.Pcap,
// InterfaceOptions.Pcap). The device does not close p: Device.Close only
// flushes it.
func (d *Device) SetPcap(p *PcapWriter) { d.pcap.Store(p) }
