package rsock_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/rsock"
	"golang.org/x/net/nettest"
)

// TestNetns runs rsock between two network namespaces over each real frame
// backend: nettest.TestConn, then 10 000 HTTP/1.1 requests over one
// keep-alive connection pool, every response body checked.
func TestNetns(t *testing.T) {
	netns.RequireRoot(t)
	for _, backend := range []string{qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP} {
		t.Run(backend, func(t *testing.T) {
			p := netns.NewPair(t, netns.Options{MTU: 1500, NoDAD: true})
			quiet := slog.New(slog.DiscardHandler)
			devs := map[netns.Side]*qp.Device{}
			for _, side := range []netns.Side{netns.A, netns.B} {
				err := p.Do(side, func() error {
					d, _, err := qp.OpenInterface(context.Background(), p.End(side).Ifname,
						qp.InterfaceOptions{Backend: backend, Logger: quiet})
					devs[side] = d
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { devs[side].Close() })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			addr := net.JoinHostPort(p.End(netns.B).Addr.String(), "7471")
			l, err := rsock.Listen(ctx, devs[netns.B], addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()

			t.Run("nettest", func(t *testing.T) {
				nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
					type res struct {
						c   net.Conn
						err error
					}
					// The Accept ends with the Dial: a failed Dial cancels it
					// and waits for it, so no Accept is left behind to take
					// the next pipe's connection.
					actx, acancel := context.WithCancel(ctx)
					defer acancel()
					ch := make(chan res, 1)
					go func() {
						c, err := l.AcceptContext(actx)
						if err != nil {
							ch <- res{nil, err} // a typed nil *Conn would not be a nil net.Conn
							return
						}
						ch <- res{c, nil}
					}()
					c, err := rsock.Dial(ctx, devs[netns.A], addr, nil)
					if err != nil {
						acancel()
						if r := <-ch; r.c != nil {
							r.c.Close()
						}
						return nil, nil, nil, err
					}
					r := <-ch
					if r.err != nil {
						c.Close()
						return nil, nil, nil, r.err
					}
					return c, r.c, func() { c.Close(); r.c.Close() }, nil
				})
			})

			t.Run("http", func(t *testing.T) {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n, _ := strconv.Atoi(r.URL.Query().Get("n"))
					w.Write(body(n))
				})}
				go srv.Serve(l)
				defer srv.Close()
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4,
					DialContext: func(ctx context.Context, _, a string) (net.Conn, error) {
						return rsock.Dial(ctx, devs[netns.A], a, nil)
					}}}
				defer client.CloseIdleConnections()
				const requests, workers = 10000, 4
				var wg sync.WaitGroup
				errc := make(chan error, workers)
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < requests; i += workers {
							n := i % 5000
							resp, err := client.Get(fmt.Sprintf("http://%s/?n=%d", addr, n))
							if err != nil {
								errc <- err
								return
							}
							b, err := io.ReadAll(resp.Body)
							resp.Body.Close()
							if err != nil || !bytes.Equal(b, body(n)) {
								errc <- fmt.Errorf("request %d: %d bytes, %v", i, len(b), err)
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errc)
				for err := range errc {
					t.Fatal(err)
				}
			})
		})
	}
}

// body is the n-byte response to request n.
func body(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + n)
	}
	return b
}
