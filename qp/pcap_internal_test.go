package qp

import (
	"io"
	"testing"
	"time"
)

// TestPcapWriterAllocs: recording a batch allocates nothing (the record
// headers and the buffer are the writer's own), either direction.
func TestPcapWriterAllocs(t *testing.T) {
	p, err := NewPcapWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	frames := make([][]byte, 32)
	for i := range frames {
		frames[i] = make([]byte, 1100)
	}
	rx := &rxBatch{bufs: frames, sizes: make([]int, len(frames))}
	for i := range rx.sizes {
		rx.sizes[i] = 1000
	}
	if n := testing.AllocsPerRun(200, func() {
		p.write(time.Now, frames)
		p.writeRx(time.Now, rx, len(frames))
	}); n != 0 {
		t.Errorf("%v allocations per batch", n)
	}
}
