package nic

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
)

// testSeed returns TEST_SEED if set, else a fixed default; tests log it so a
// failure can be replayed.
func testSeed(t testing.TB) int64 {
	seed := int64(0x5eed)
	if s := os.Getenv("TEST_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			t.Fatalf("TEST_SEED: %v", err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (rerun with TEST_SEED=%d)", seed, seed)
		}
	})
	return seed
}

// fakeClock is a manual clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// frame returns a 64-byte frame carrying seq in bytes 14..17.
func frame(seq uint32) []byte {
	f := make([]byte, 64)
	copy(f[0:6], []byte{2, 0, 0, 0, 0, 0x0b})
	copy(f[6:12], []byte{2, 0, 0, 0, 0, 0x0a})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	binary.BigEndian.PutUint32(f[14:], seq)
	for i := 18; i < len(f)-4; i++ {
		f[i] = byte(seq) + byte(i)
	}
	binary.BigEndian.PutUint32(f[len(f)-4:], crc32.ChecksumIEEE(f[:len(f)-4]))
	return f
}

// intact reports whether a frame built by frame() is unchanged.
func intact(f []byte) bool {
	return len(f) == 64 && binary.BigEndian.Uint32(f[len(f)-4:]) == crc32.ChecksumIEEE(f[:len(f)-4])
}

func bufs(n, size int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b, make([]int, n)
}

// drain reads everything due now (fake clock) or until Pending is 0.
func drainAll(t *testing.T, l *MemLink, clk *fakeClock) [][]byte {
	t.Helper()
	var out [][]byte
	bs, sz := bufs(64, 2048)
	for {
		n := tryRead(l, bs, sz)
		for i := 0; i < n; i++ {
			out = append(out, append([]byte(nil), bs[i][:sz[i]]...))
		}
		if n > 0 {
			continue
		}
		next, ok := l.NextDue()
		if !ok {
			return out
		}
		clk.Set(next)
	}
}

func TestMemOrderNoFaults(t *testing.T) {
	a, b := NewMemPair(MemConfig{})
	defer a.Close()
	defer b.Close()
	const n = 1000
	for i := 0; i < n; i += 10 {
		batch := make([][]byte, 10)
		for j := range batch {
			batch[j] = frame(uint32(i + j))
		}
		if k, err := a.WriteBatch(batch); k != 10 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
	}
	bs, sz := bufs(64, 2048)
	got := 0
	for got < n {
		k, err := b.ReadBatch(bs, sz)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < k; i++ {
			if !bytes.Equal(bs[i][:sz[i]], frame(uint32(got))) {
				t.Fatalf("frame %d: got seq %d", got, binary.BigEndian.Uint32(bs[i][14:]))
			}
			got++
		}
	}
	st := b.Stats()
	if st.RxFrames != n || st.RxBytes != n*64 || a.Stats().TxFrames != n {
		t.Fatalf("stats: a %+v b %+v", a.Stats(), st)
	}
	// The other direction works too and MACs are the defaults.
	if _, err := b.WriteBatch([][]byte{frame(7)}); err != nil {
		t.Fatal(err)
	}
	if k, err := a.ReadBatch(bs, sz); k != 1 || err != nil || !bytes.Equal(bs[0][:sz[0]], frame(7)) {
		t.Fatalf("B→A: %d %v", k, err)
	}
	if a.HardwareAddr().String() != "02:00:00:00:00:0a" || b.HardwareAddr().String() != "02:00:00:00:00:0b" {
		t.Fatalf("MACs %v %v", a.HardwareAddr(), b.HardwareAddr())
	}
}

func TestMemCopiesFrames(t *testing.T) {
	a, b := NewMemPair(MemConfig{})
	f := frame(1)
	a.WriteBatch([][]byte{f})
	f[20] ^= 0xff // the caller may reuse its buffer at once
	bs, sz := bufs(1, 2048)
	if n, _ := b.ReadBatch(bs, sz); n != 1 || !bytes.Equal(bs[0][:sz[0]], frame(1)) {
		t.Fatal("frame changed after WriteBatch returned")
	}
}

func TestMemOversize(t *testing.T) {
	a, b := NewMemPair(MemConfig{MTU: 100})
	a.WriteBatch([][]byte{make([]byte, 119), make([]byte, 118), make([]byte, 60)})
	if s := a.Stats(); s.TxDrops != 1 || s.TxFrames != 2 {
		t.Fatalf("sender stats %+v", s)
	}
	bs, sz := bufs(2, 100) // too small for the 118-byte frame
	n := tryRead(b, bs, sz)
	if n != 1 || sz[0] != 60 {
		t.Fatalf("read %d frames (%v)", n, sz)
	}
	if s := b.Stats(); s.RxDrops != 1 || s.RxFrames != 1 {
		t.Fatalf("receiver stats %+v", s)
	}
}

func TestMemQueueOverflow(t *testing.T) {
	a, b := NewMemPair(MemConfig{QueueLen: 5})
	for i := 0; i < 8; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
	}
	if s := a.MemStats(); s.Overflow != 3 || s.RingFull != 3 || s.TxDrops != 3 || s.TxFrames != 5 {
		t.Fatalf("stats %+v", s)
	}
	if b.Pending() != 5 {
		t.Fatalf("pending %d", b.Pending())
	}
}

// runFaults sends n frames A→B through the given faults on a fake clock
// (advancing 1 µs per frame) and returns the delivered frames.
func runFaults(t *testing.T, seed int64, f Faults, n int) ([][]byte, MemStats) {
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{Seed: seed, AtoB: f, Clock: clk.Now, QueueLen: n * 3})
	var out [][]byte
	bs, sz := bufs(64, 2048)
	for i := 0; i < n; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
		clk.Advance(time.Microsecond)
		k := tryRead(b, bs, sz)
		for j := 0; j < k; j++ {
			out = append(out, append([]byte(nil), bs[j][:sz[j]]...))
		}
	}
	out = append(out, drainAll(t, b, clk)...)
	return out, a.MemStats()
}

func TestMemFaultRates(t *testing.T) {
	seed := testSeed(t)
	const n = 10000
	f := Faults{Drop: 0.05, Duplicate: 0.03, Reorder: 0.04, Corrupt: 0.02}
	got, st := runFaults(t, seed, f, n)
	t.Logf("stats %+v, delivered %d", st, len(got))
	within := func(name string, c uint64, p float64) {
		// 6 sigma of a binomial: fails by chance with negligible probability
		// for any seed; with the fixed seed it is deterministic.
		mean := p * n
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(c)-mean) > 6*sd {
			t.Errorf("%s = %d, want about %.0f", name, c, mean)
		}
	}
	within("Dropped", st.Dropped, f.Drop)
	within("Duplicated", st.Duplicated, f.Duplicate*(1-f.Drop))
	within("Corrupted", st.Corrupted, f.Corrupt*(1-f.Drop))
	// A reorder only counts when a later frame overtakes (not while another is held).
	within("Reordered", st.Reordered, f.Reorder*(1-f.Drop)*(1-f.Reorder))
	if want := uint64(n) - st.Dropped + st.Duplicated; uint64(len(got)) != want {
		t.Errorf("delivered %d, want %d", len(got), want)
	}
	// Count corrupted and out-of-order frames in what was delivered.
	corrupt, late, dups := 0, 0, 0
	maxSeen := -1
	seen := map[uint32]int{}
	for _, g := range got {
		seq := binary.BigEndian.Uint32(g[14:])
		if !intact(g) {
			corrupt++
			continue
		}
		seen[seq]++
		if seen[seq] == 2 {
			dups++
			continue
		}
		if int(seq) < maxSeen {
			late++
		}
		maxSeen = max(maxSeen, int(seq))
	}
	// Duplicates of corrupted frames are corrupted too.
	if corrupt == 0 || uint64(corrupt) > 2*st.Corrupted {
		t.Errorf("delivered %d corrupted frames, stats say %d", corrupt, st.Corrupted)
	}
	if late == 0 || uint64(late) > st.Reordered {
		t.Errorf("%d late frames, stats say %d reordered", late, st.Reordered)
	}
	if dups == 0 {
		t.Errorf("no duplicates delivered")
	}
}

func TestMemReproducible(t *testing.T) {
	seed := testSeed(t)
	f := Faults{Drop: 0.05, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.05, Delay: 10 * time.Microsecond, Jitter: 20 * time.Microsecond}
	g1, s1 := runFaults(t, seed, f, 3000)
	g2, s2 := runFaults(t, seed, f, 3000)
	if s1 != s2 || len(g1) != len(g2) {
		t.Fatalf("runs differ: %+v vs %+v", s1, s2)
	}
	for i := range g1 {
		if !bytes.Equal(g1[i], g2[i]) {
			t.Fatalf("delivered frame %d differs", i)
		}
	}
	g3, _ := runFaults(t, seed+1, f, 3000)
	same := len(g3) == len(g1)
	for i := 0; same && i < len(g1); i++ {
		same = bytes.Equal(g1[i], g3[i])
	}
	if same {
		t.Fatal("a different seed gave the identical sequence")
	}
}

func TestMemCorruptFlipsOneBit(t *testing.T) {
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{Seed: testSeed(t), AtoB: Faults{Corrupt: 1}, Clock: clk.Now})
	for i := 0; i < 200; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
	}
	got := drainAll(t, b, clk)
	if len(got) != 200 {
		t.Fatalf("got %d", len(got))
	}
	for i, g := range got {
		want := frame(uint32(i))
		bits := 0
		for j := range g {
			x := g[j] ^ want[j]
			for ; x != 0; x &= x - 1 {
				bits++
			}
		}
		if bits != 1 {
			t.Fatalf("frame %d: %d bits differ", i, bits)
		}
	}
}

func TestMemReorderAfterNext(t *testing.T) {
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{AtoB: Faults{Reorder: 1}, Clock: clk.Now})
	// Every frame is selected, but only one is held at a time: 0 is held, 1
	// overtakes it, 2 is held, 3 overtakes ...
	for i := 0; i < 6; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
	}
	// Frame 4 is held; it is not due before the hold expires.
	got := drainAll(t, b, clk)
	var seqs []uint32
	for _, g := range got {
		seqs = append(seqs, binary.BigEndian.Uint32(g[14:]))
	}
	want := []uint32{1, 0, 3, 2, 5, 4}
	if len(seqs) != len(want) {
		t.Fatalf("got %v, want %v", seqs, want)
	}
	for i := range want {
		if seqs[i] != want[i] {
			t.Fatalf("got %v, want %v", seqs, want)
		}
	}
	if st := a.MemStats(); st.Reordered != 3 {
		t.Fatalf("Reordered = %d", st.Reordered)
	}

	// A lone reordered frame is delivered once its hold expires.
	a.SetFaults(Faults{Reorder: 1, ReorderHold: 5 * time.Millisecond})
	start := clk.Now()
	a.WriteBatch([][]byte{frame(9)})
	bs, sz := bufs(4, 2048)
	if n := tryRead(b, bs, sz); n != 0 {
		t.Fatal("held frame delivered early")
	}
	next, ok := b.NextDue()
	if !ok || next.Sub(start) != 5*time.Millisecond {
		t.Fatalf("NextDue = %v %v, want start+5ms", next.Sub(start), ok)
	}
	clk.Set(next)
	if n := tryRead(b, bs, sz); n != 1 || binary.BigEndian.Uint32(bs[0][14:]) != 9 {
		t.Fatalf("after hold: %d frames", n)
	}
}

func TestMemDelayFakeClock(t *testing.T) {
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{AtoB: Faults{Delay: 100 * time.Microsecond}, Clock: clk.Now})
	start := clk.Now()
	a.WriteBatch([][]byte{frame(1)})
	clk.Advance(30 * time.Microsecond)
	a.WriteBatch([][]byte{frame(2)})
	bs, sz := bufs(4, 2048)
	if b.Pending() != 2 {
		t.Fatalf("Pending = %d", b.Pending())
	}
	if n := tryRead(b, bs, sz); n != 0 {
		t.Fatalf("read %d frames before due", n)
	}
	next, ok := b.NextDue()
	if !ok || !next.Equal(start.Add(100*time.Microsecond)) {
		t.Fatalf("NextDue = %v %v", next, ok)
	}
	clk.Set(next)
	if n := tryRead(b, bs, sz); n != 1 || binary.BigEndian.Uint32(bs[0][14:]) != 1 {
		t.Fatalf("at +100µs: %d frames", n)
	}
	clk.Advance(29 * time.Microsecond)
	if n := tryRead(b, bs, sz); n != 0 {
		t.Fatal("frame 2 early")
	}
	clk.Advance(time.Microsecond)
	if n := tryRead(b, bs, sz); n != 1 || binary.BigEndian.Uint32(bs[0][14:]) != 2 {
		t.Fatalf("at +130µs: %d frames", n)
	}
	if _, ok := b.NextDue(); ok || b.Pending() != 0 {
		t.Fatal("queue not empty")
	}
}

// TestMemDelayRealClock checks that a blocked ReadBatch wakes by itself when
// a delayed frame becomes due (no further writes). It asserts only the order
// of events, not durations.
func TestMemDelayRealClock(t *testing.T) {
	a, b := NewMemPair(MemConfig{AtoB: Faults{Delay: 20 * time.Millisecond}})
	sent := time.Now()
	a.WriteBatch([][]byte{frame(5)})
	bs, sz := bufs(4, 2048)
	n, err := b.ReadBatch(bs, sz)
	if err != nil || n != 1 || binary.BigEndian.Uint32(bs[0][14:]) != 5 {
		t.Fatalf("ReadBatch = %d %v", n, err)
	}
	if time.Since(sent) < 20*time.Millisecond {
		t.Fatal("delivered before the delay")
	}
}

func TestMemCloseWakesReader(t *testing.T) {
	for _, pending := range []bool{false, true} {
		a, b := NewMemPair(MemConfig{AtoB: Faults{Delay: time.Hour}})
		if pending {
			a.WriteBatch([][]byte{frame(1)}) // due in an hour: reader sleeps on the timer
		}
		errc := make(chan error)
		go func() {
			bs, sz := bufs(4, 2048)
			_, err := b.ReadBatch(bs, sz)
			errc <- err
		}()
		b.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("pending=%v: ReadBatch after Close = %v", pending, err)
		}
		if _, err := b.WriteBatch([][]byte{frame(1)}); !errors.Is(err, ErrClosed) {
			t.Fatalf("WriteBatch after Close = %v", err)
		}
		// The peer may still write; frames are dropped and counted.
		if _, err := a.WriteBatch([][]byte{frame(2)}); err != nil {
			t.Fatal(err)
		}
		if a.Stats().TxDrops != 1 {
			t.Fatalf("peer stats %+v", a.Stats())
		}
		a.Close()
	}
}

func TestMemTapPcap(t *testing.T) {
	var tap bytes.Buffer
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{Tap: &tap, Clock: clk.Now, Seed: testSeed(t), AtoB: Faults{Drop: 0.5}})
	for i := 0; i < 20; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
		clk.Advance(time.Microsecond)
	}
	b.WriteBatch([][]byte{frame(100)})
	got := drainAll(t, b, clk)
	bs, sz := bufs(1, 2048)
	if tryRead(a, bs, sz) != 1 {
		t.Fatal("B→A frame missing")
	}
	recs, err := pcapfile.ReadAll(&tap)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(got)+1 {
		t.Fatalf("pcap has %d records, %d frames were delivered", len(recs), len(got)+1)
	}
	for i, g := range got {
		if !bytes.Equal(recs[i].Data, g) {
			t.Fatalf("record %d differs", i)
		}
	}
	if !bytes.Equal(recs[len(got)].Data, frame(100)) {
		t.Fatal("last record is not the B→A frame")
	}
	// Timestamps are the (fake) times the frames became due.
	start := time.Unix(1_700_000_000, 0)
	for i := 1; i < len(got); i++ {
		if recs[i].Time.Before(recs[i-1].Time) || recs[i-1].Time.Before(start) {
			t.Fatalf("timestamps out of order: %v", recs[i].Time)
		}
	}
}

func TestMemConcurrent(t *testing.T) {
	// Both directions at once, with the race detector: every frame arrives.
	a, b := NewMemPair(MemConfig{})
	const n = 2000
	var wg sync.WaitGroup
	for _, pair := range [][2]*MemLink{{a, b}, {b, a}} {
		tx, rx := pair[0], pair[1]
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i += 8 {
				batch := make([][]byte, 8)
				for j := range batch {
					batch[j] = frame(uint32(i + j))
				}
				tx.WriteBatch(batch)
			}
		}()
		go func() {
			defer wg.Done()
			bs, sz := bufs(32, 2048)
			got := 0
			for got < n {
				k, err := rx.ReadBatch(bs, sz)
				if err != nil {
					t.Error(err)
					return
				}
				for i := 0; i < k; i++ {
					if binary.BigEndian.Uint32(bs[i][14:]) != uint32(got) {
						t.Errorf("out of order at %d", got)
						return
					}
					got++
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkMemWriteRead(b *testing.B) {
	l1, l2 := NewMemPair(MemConfig{})
	const batch = 64
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = make([]byte, 1082)
	}
	bs, sz := bufs(batch, 1600)
	b.ReportAllocs()
	b.SetBytes(batch * 1082)
	for b.Loop() {
		l1.WriteBatch(frames)
		if n, err := l2.ReadBatch(bs, sz); n != batch || err != nil {
			b.Fatalf("read %d %v", n, err)
		}
	}
}

func BenchmarkMemWriteReadFaults(b *testing.B) {
	clk := newFakeClock()
	l1, l2 := NewMemPair(MemConfig{Clock: clk.Now, AtoB: Faults{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Jitter: time.Microsecond}})
	const batch = 64
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = make([]byte, 1082)
	}
	bs, sz := bufs(batch, 1600)
	b.ReportAllocs()
	for b.Loop() {
		l1.WriteBatch(frames)
		clk.Advance(time.Second)
		for tryRead(l2, bs, sz) > 0 {
		}
	}
}

// With jitter, frames leave in order of their due times (checked through
// the tap's timestamps), ties in write order, and none is lost.
func TestMemJitterOrder(t *testing.T) {
	var tap bytes.Buffer
	clk := newFakeClock()
	a, b := NewMemPair(MemConfig{Seed: testSeed(t), Clock: clk.Now, Tap: &tap,
		AtoB: Faults{Delay: 5 * time.Microsecond, Jitter: 50 * time.Microsecond}})
	const n = 2000
	for i := 0; i < n; i++ {
		a.WriteBatch([][]byte{frame(uint32(i))})
		clk.Advance(time.Microsecond)
		if i%7 == 0 {
			bs, sz := bufs(8, 2048)
			tryRead(b, bs, sz)
		}
	}
	drainAll(t, b, clk)
	recs, err := pcapfile.ReadAll(&tap)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d of %d frames delivered", len(recs), n)
	}
	late := 0
	for i := 1; i < n; i++ {
		if recs[i].Time.Before(recs[i-1].Time) {
			t.Fatalf("record %d due before record %d", i, i-1)
		}
		if binary.BigEndian.Uint32(recs[i].Data[14:]) < binary.BigEndian.Uint32(recs[i-1].Data[14:]) {
			late++
		}
	}
	if late == 0 {
		t.Fatal("jitter reordered nothing")
	}
}

func TestMemRate(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	// 1 MB/s: a 1000-byte frame takes 1 ms on the wire.
	a, b := NewMemPair(MemConfig{Clock: clk.Now, AtoB: Faults{Rate: 1e6, Delay: 100 * time.Microsecond}})
	f := make([]byte, 1000)
	for i := 0; i < 5; i++ {
		a.WriteBatch([][]byte{f})
	}
	bs, sz := bufs(8, 2048)
	for i := 1; i <= 5; i++ {
		next, ok := b.NextDue()
		want := start.Add(time.Duration(i)*time.Millisecond + 100*time.Microsecond)
		if !ok || !next.Equal(want) {
			t.Fatalf("frame %d due at +%v, want +%v", i, next.Sub(start), want.Sub(start))
		}
		clk.Set(next)
		if n := tryRead(b, bs, sz); n != 1 {
			t.Fatalf("frame %d: read %d", i, n)
		}
	}
	// An idle wire does not bank credit: a frame written later waits only
	// for its own serialization.
	clk.Advance(time.Second)
	later := clk.Now()
	a.WriteBatch([][]byte{f})
	if next, _ := b.NextDue(); !next.Equal(later.Add(1100 * time.Microsecond)) {
		t.Fatalf("after idle: due at +%v", next.Sub(later))
	}
}

// tryRead is TryReadBatch for tests of open links (no error expected).
func tryRead(l *MemLink, bs [][]byte, sz []int) int {
	n, err := l.TryReadBatch(bs, sz)
	if err != nil {
		panic(err)
	}
	return n
}

func TestMemTryReadClosed(t *testing.T) {
	a, b := NewMemPair(MemConfig{})
	var _ Poller = a
	bs, sz := bufs(4, 2048)
	if n, err := b.TryReadBatch(bs, sz); n != 0 || err != nil {
		t.Fatalf("empty link: %d, %v", n, err)
	}
	b.Close()
	if _, err := b.TryReadBatch(bs, sz); err != ErrClosed {
		t.Fatalf("closed link: err %v, want ErrClosed", err)
	}
	a.Close()
}
