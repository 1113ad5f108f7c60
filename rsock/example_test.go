package rsock_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/rsock"
)

// An HTTP server on an rsock listener, and a client whose transport dials
// rsock: net/http runs over RDMA unchanged.
func Example_http() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{}) // 198.18.0.1 and 198.18.0.2
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	l, err := rsock.Listen(ctx, b, "198.18.0.2:8080", nil)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s over rsock", r.URL.Path[1:])
	})}
	go srv.Serve(l)
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return rsock.Dial(ctx, a, addr, nil)
		}}}
	for _, who := range []string{"alice", "bob"} {
		resp, err := client.Get("http://198.18.0.2:8080/" + who)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status, string(body))
	}
	// Output:
	// 200 OK hello alice over rsock
	// 200 OK hello bob over rsock
}

// A file transfer with io.Copy: the sender's Conn reads the file straight
// into its send buffer (io.ReaderFrom), the receiver's writes out of its
// receive buffer (io.WriterTo).
func Example_copy() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	file := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	l, err := rsock.Listen(ctx, b, "198.18.0.2:7427", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := rsock.Dial(ctx, a, "198.18.0.2:7427", nil)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(c, bytes.NewReader(file))
		c.Close() // waits until the peer has every byte
	}()
	s, err := l.Accept()
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	h := sha256.New()
	n, err := io.Copy(h, s)
	if err != nil {
		log.Fatal(err)
	}
	want := sha256.Sum256(file)
	fmt.Printf("%d bytes, SHA-256 matches: %v\n", n, bytes.Equal(h.Sum(nil), want[:]))
	// Output:
	// 4194304 bytes, SHA-256 matches: true
}
