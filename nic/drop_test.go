package nic

import "testing"

func TestWithDrops(t *testing.T) {
	a, b := NewMemPair(MemConfig{Seed: 1})
	defer b.Close()
	var closedF, closedD uint64
	l, d := WithDrops(a, 0.25, 7, 1, func(f, dr uint64) { closedF, closedD = f, dr })
	if _, ok := l.(Poller); !ok {
		t.Fatal("the in-memory link is a Poller: the wrapper must forward TryReadBatch")
	}
	frame := make([]byte, 60)
	frames := [][]byte{frame, frame, frame, frame, frame, frame, frame, frame}
	for range 100 {
		if n, err := l.WriteBatch(frames); n != len(frames) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
	}
	bs, sz := bufs(1000, 100)
	got := tryRead(b, bs, sz)
	f, dropped := d.Counts()
	if f != 800 || uint64(got)+dropped != 800 || dropped < 150 || dropped > 250 {
		t.Fatalf("%d written, %d dropped, %d arrived", f, dropped, got)
	}
	l.Close()
	if closedF != 800 || closedD != dropped {
		t.Fatalf("onClose got %d/%d", closedF, closedD)
	}
}
