//go:build unix

package nvmeof_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/nvmeof"
)

// BenchmarkIO runs 4 KiB random reads and writes at QD 32 (32 goroutines
// over one I/O queue, as bench's nvmeof cell) between the Go host and the
// Go target over a memory pair: no kernel, so the cost per I/O is the
// NVMe layer's and the verbs engines'. cpu-µs/op is this process's CPU
// (getrusage, user + system) per I/O.
func BenchmarkIO(b *testing.B) {
	for _, m := range []struct {
		name  string
		write bool
	}{{"randread4k", false}, {"randwrite4k", true}} {
		b.Run(m.name, func(b *testing.B) {
			const size, bs, qd = 64 << 20, 4096, 32
			e := setup(b, size, bs, nil)
			ctx := ctxT(b)
			c, err := nvmeof.Dial(ctx, e.a, taddr, subNQN, &nvmeof.HostOptions{Queues: 1, QueueDepth: qd})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ns := c.Namespaces()[0]
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ReportAllocs()
			cpu0 := procCPU()
			b.ResetTimer()
			for w := range qd {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, bs)
					rng := rand.New(rand.NewPCG(uint64(w), 2))
					for left.Add(-1) >= 0 {
						off := rng.Int64N(size/bs) * bs
						var err error
						if m.write {
							_, err = ns.WriteAtContext(ctx, buf, off)
						} else {
							_, err = ns.ReadAtContext(ctx, buf, off)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((procCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
