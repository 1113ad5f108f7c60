package nvmeof_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goroce/goroce/nvmeof"
)

// TestInCapsuleWrites: the host sends a write that fits the target's
// IOCCSZ as in-capsule data (no RDMA READ at the target) and a larger one
// with a keyed SGL; a target without in-capsule data (SGLS bit 20 clear)
// gets every write keyed. The data is checked byte for byte in the
// target's backend and read back through the host.
func TestInCapsuleWrites(t *testing.T) {
	for _, tc := range []struct {
		name        string
		targetSize  int // Target.InlineDataSize
		hostLimit   int // HostOptions.InCapsuleData
		wantInline  int // the host's InCapsuleDataSize
		inlineSizes []int
		keyedSizes  []int
	}{
		{"default-4k", 0, 0, 4096, []int{512, 4096}, []int{4608, 64 << 10}},
		{"target-8k", 8192, 0, 8192, []int{4096, 8192}, []int{8704, 128 << 10}},
		{"target-none", -1, 0, 0, nil, []int{512, 4096}},
		{"host-none", 0, -1, 0, nil, []int{512, 4096}},
		{"host-1k", 8192, 1024, 1024, []int{512, 1024}, []int{1536, 8192}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, 4<<20, 512, func(tg *nvmeof.Target) { tg.InlineDataSize = tc.targetSize })
			ctx := ctxT(t)
			c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{Queues: 2, QueueDepth: 8, InCapsuleData: tc.hostLimit})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.InCapsuleDataSize(); got != tc.wantInline {
				t.Fatalf("InCapsuleDataSize %d, want %d", got, tc.wantInline)
			}
			// The I/O queues' Connect (1024 bytes of data) goes in the
			// capsule too when it fits, as the Linux host's does.
			base := c.Stats()
			tbase := e.t.Stats().InCapsule.Load()
			treads := e.t.Stats().DataReads.Load()
			wantConnect := 0
			if tc.wantInline >= nvmeof.ConnectDataSize {
				wantConnect = c.Queues()
			}
			if base.InCapsule != uint64(wantConnect) || tbase != uint64(wantConnect) {
				t.Fatalf("in-capsule Connects: host %d, target %d, want %d", base.InCapsule, tbase, wantConnect)
			}
			ns := c.Namespaces()[0]
			seed := uint64(time.Now().UnixNano())
			rng := rand.New(rand.NewPCG(seed, 22))
			off := int64(0)
			check := func(n int) {
				t.Helper()
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				if _, err := ns.WriteAt(data, off); err != nil {
					t.Fatalf("seed %d: write %d B: %v", seed, n, err)
				}
				back := make([]byte, n)
				e.mem.ReadAt(back, off)
				if !bytes.Equal(back, data) {
					t.Fatalf("seed %d: %d B at %d: the target's backend differs", seed, n, off)
				}
				got := make([]byte, n)
				if _, err := ns.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("seed %d: %d B at %d read back differs (%v)", seed, n, off, err)
				}
				off += int64(n)
			}
			for _, n := range tc.inlineSizes {
				check(n)
			}
			st := c.Stats()
			if d := st.InCapsule - base.InCapsule; d != uint64(len(tc.inlineSizes)) || st.Keyed != base.Keyed+uint64(len(tc.inlineSizes)) {
				// Each check reads back through a keyed SGL.
				t.Fatalf("after the small writes: %+v (before %+v), want %d more in-capsule", st, base, len(tc.inlineSizes))
			}
			if d := e.t.Stats().InCapsule.Load() - tbase; d != uint64(len(tc.inlineSizes)) {
				t.Fatalf("target saw %d in-capsule commands, want %d", d, len(tc.inlineSizes))
			}
			if d := e.t.Stats().DataReads.Load() - treads; d != 0 {
				t.Fatalf("target issued %d RDMA READs for in-capsule writes", d)
			}
			for _, n := range tc.keyedSizes {
				check(n)
			}
			if d := e.t.Stats().InCapsule.Load() - tbase; d != uint64(len(tc.inlineSizes)) {
				t.Fatalf("target saw %d in-capsule commands after the large writes, want %d", d, len(tc.inlineSizes))
			}
			if e.t.Stats().DataReads.Load() == treads && len(tc.keyedSizes) > 0 {
				t.Fatal("the large writes caused no RDMA READ")
			}
		})
	}
}
