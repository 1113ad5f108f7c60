package rsock

import (
	"context"
	"io"
	"net"
	"net/http"
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

// BenchmarkHTTP is sequential HTTP/1.1 GETs of a 64-byte body over one
// keep-alive connection on a memory pair (the bench's rsock HTTP cell
// without the NIC).
func BenchmarkHTTP(b *testing.B) {
	p := newPair(b, nil, nil)
	benchHTTP(b, p.l, func(ctx context.Context, _, a string) (net.Conn, error) { return Dial(ctx, p.a, a, nil) })
}

// BenchmarkHTTPTCP is BenchmarkHTTP over the kernel's loopback TCP.
func BenchmarkHTTPTCP(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var d net.Dialer
	benchHTTP(b, l, d.DialContext)
}

func benchHTTP(b *testing.B, l net.Listener, dial func(context.Context, string, string) (net.Conn, error)) {
	body := make([]byte, 64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(l)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DialContext: dial}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "http://" + l.Addr().String() + "/"
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(got) != len(body) {
			b.Fatalf("%d bytes, %v", len(got), err)
		}
	}
}
