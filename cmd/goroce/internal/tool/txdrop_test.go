package tool

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/nic"
)

// TestTxDropLink: a seeded fraction of the written frames disappears, the
// writer is told all were sent, TryReadBatch is there exactly when the
// link has it, and Close reports the count.
func TestTxDropLink(t *testing.T) {
	a, b := nic.NewMemPair(nic.MemConfig{Seed: 1})
	defer b.Close()
	var report bytes.Buffer
	l, d := WrapTxDrop(a, 0.25, 7, &report)
	if _, ok := l.(nic.Poller); !ok {
		t.Fatal("the in-memory link is a nic.Poller: the wrapper must forward TryReadBatch")
	}
	frame := make([]byte, 60)
	frames := make([][]byte, 8)
	for i := range frames {
		frames[i] = frame
	}
	written := 0
	for range 100 {
		n, err := l.WriteBatch(frames)
		if err != nil || n != len(frames) {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		written += n
	}
	bufs, sizes := make([][]byte, 1000), make([]int, 1000)
	for i := range bufs {
		bufs[i] = make([]byte, 100)
	}
	got, _ := b.TryReadBatch(bufs, sizes)
	f, dropped := d.Counts()
	if f != 800 || uint64(got)+dropped != 800 || dropped < 150 || dropped > 250 {
		t.Fatalf("seed 7: %d written, %d dropped, %d arrived", f, dropped, got)
	}
	l.Close()
	if want := "dropped " + strconv.Itoa(int(dropped)) + " of 800"; !strings.Contains(report.String(), want) {
		t.Errorf("report %q, want %q", report.String(), want)
	}
	for _, v := range []string{"x", "1", "-0.1"} {
		t.Setenv("GOROCE_TX_DROP", v)
		if _, _, err := TxDropFromEnv(); err == nil {
			t.Errorf("GOROCE_TX_DROP=%s accepted", v)
		}
	}
	t.Setenv("GOROCE_TX_DROP", "0.02")
	t.Setenv("GOROCE_TX_DROP_SEED", "0x10")
	if p, seed, err := TxDropFromEnv(); p != 0.02 || seed != 16 || err != nil {
		t.Errorf("env: %v %v %v", p, seed, err)
	}
}
