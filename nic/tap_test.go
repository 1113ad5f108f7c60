package nic

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/pcapfile"
)

func TestTapLink(t *testing.T) {
	a, b := NewMemPair(MemConfig{})
	var capture bytes.Buffer
	ta, err := NewTap(a, &capture)
	if err != nil {
		t.Fatal(err)
	}
	var _ Link = ta
	ta.WriteBatch([][]byte{frame(1), frame(2)})
	b.WriteBatch([][]byte{frame(3)})
	bs, sz := bufs(4, 2048)
	if n, err := ta.ReadBatch(bs, sz); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d %v", n, err)
	}
	recs, err := pcapfile.ReadAll(&capture)
	if err != nil || ta.TapErr() != nil {
		t.Fatal(err, ta.TapErr())
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	for i, want := range [][]byte{frame(1), frame(2), frame(3)} {
		if !bytes.Equal(recs[i].Data, want) {
			t.Fatalf("record %d differs", i)
		}
	}
	if ta.MTU() != 1500 || ta.Stats().TxFrames != 2 {
		t.Fatal("wrapped methods")
	}
}

func BenchmarkTapLink(b *testing.B) {
	l1, l2 := NewMemPair(MemConfig{})
	tl, _ := NewTap(l1, discard{})
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = make([]byte, 1082)
	}
	bs, sz := bufs(64, 1600)
	b.ReportAllocs()
	for b.Loop() {
		tl.WriteBatch(frames)
		l2.ReadBatch(bs, sz)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
