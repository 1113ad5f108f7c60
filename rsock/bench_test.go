package rsock

import (
	"io"
	"testing"
)

// BenchmarkStream is one stream of 64 KiB Writes over a memory pair.
func BenchmarkStream(b *testing.B) {
	p := newPair(b, nil, nil)
	c, s := p.conns(b, nil)
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, s)
		close(done)
	}()
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	<-done
	s.Close()
}

// BenchmarkRoundTrip is a 64-byte request/response over a memory pair.
func BenchmarkRoundTrip(b *testing.B) {
	p := newPair(b, nil, nil)
	c, s := p.conns(b, nil)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		c.Write(buf)
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
	s.Close()
}
