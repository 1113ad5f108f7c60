package nic

import (
	"io"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// TapLink wraps any Link and writes every frame it receives or sends to a
// pcap stream (Ethernet), in the order the calls return. It is the capture
// point for backends where tcpdump cannot see everything: with AF_PACKET's
// qdisc bypass the host's packet taps never see transmitted frames, and the
// UDP backend's frames only exist in goroce. Timestamps are the time of the
// ReadBatch/WriteBatch return.
type TapLink struct {
	Link
	mu    sync.Mutex
	w     *pcapfile.Writer
	err   error
	clock func() time.Time
}

// NewTap writes the pcap file header to w and returns the wrapped link. A
// write error stops the capture (see TapErr); the link keeps working.
func NewTap(l Link, w io.Writer) (*TapLink, error) {
	pw, err := pcapfile.NewWriter(w, pcapfile.LinkTypeEthernet)
	if err != nil {
		return nil, err
	}
	return &TapLink{Link: l, w: pw, clock: time.Now}, nil
}

// ReadBatch implements Link and records the frames read.
func (t *TapLink) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n, err := t.Link.ReadBatch(bufs, sizes)
	if n > 0 {
		t.record(n, func(i int) []byte { return bufs[i][:sizes[i]] })
	}
	return n, err
}

// WriteBatch implements Link and records the frames the link accepted.
func (t *TapLink) WriteBatch(frames [][]byte) (int, error) {
	n, err := t.Link.WriteBatch(frames)
	if n > 0 {
		t.record(n, func(i int) []byte { return frames[i] })
	}
	return n, err
}

func (t *TapLink) record(n int, frame func(int) []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	now := t.clock()
	for i := 0; i < n; i++ {
		if err := t.w.WritePacket(now, frame(i)); err != nil {
			t.err = err
			return
		}
	}
}

// TapErr returns the first write error of the capture, if any.
func (t *TapLink) TapErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
