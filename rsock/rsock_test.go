package rsock

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/qp"
	"golang.org/x/net/nettest"
)

// pair is two memory devices with a listener on b.
type pair struct {
	a, b *qp.Device
	l    *Listener
	addr string
}

func newPair(t testing.TB, lo, do *Options) *pair {
	t.Helper()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Listen(ctx, b, "198.18.0.2:7471", lo)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{a: a, b: b, l: l, addr: "198.18.0.2:7471"}
	t.Cleanup(func() {
		l.Close()
		a.Close()
		b.Close()
	})
	return p
}

// conns dials and accepts one connection.
func (p *pair) conns(t testing.TB, do *Options) (*Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := p.l.AcceptContext(ctx)
		ch <- res{c, err}
	}()
	c, err := Dial(ctx, p.a, p.addr, do)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return c, r.c
}

func TestConnData(t *testing.T) {
	d := connData{version: 1, flags: flagIOMap, credits: 384, iomapSize: valueToScale(1),
		targetSGL: sge{addr: 0x1122334455667788, key: 0xAABBCCDD, length: 2},
		dataBuf:   sge{addr: 0x10, key: 7, length: 0x10000}}
	b := d.marshal()
	if len(b) != 40 || b[0] != 1 || b[1] != 2 || b[2] != 1 || b[3] != 0x80 || b[7] != 1 ||
		b[8] != 0x11 || b[16] != 0xAA || b[23] != 2 || b[36] != 0 || b[37] != 1 || b[39] != 0 {
		t.Fatalf("rs_conn_data % x", b)
	}
	// Trailing zeros cut by a CM are restored.
	got, err := parseConnData(b[:38])
	if err != nil || got != d {
		t.Fatalf("parse: %+v %v", got, err)
	}
	if _, err := parseConnData([]byte{2}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("version 2: %v", err)
	}
	for v, s := range map[int]uint8{0: 0, 1: 1, 128: 128, 256: 0x81, 512: 0x82} {
		if valueToScale(v) != s || scaleToValue(s) != v {
			t.Errorf("scale %d: %#x", v, valueToScale(v))
		}
	}
}

func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, do *Options
	}{
		{"default", nil, nil},
		{"small buffers", &Options{RecvBuffer: 4096, SendBuffer: 4096, RQSize: 16, SQSize: 16},
			&Options{RecvBuffer: 8192, SendBuffer: 4096, RQSize: 16, SQSize: 16}},
		{"big-endian peer", &Options{bigEndian: true}, nil},
		{"both big-endian", &Options{bigEndian: true}, &Options{bigEndian: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.lo, tc.do)
			c, s := p.conns(t, tc.do)
			data := make([]byte, 3<<20+17)
			rand.Read(data)
			errc := make(chan error, 1)
			go func() {
				_, err := c.Write(data)
				if err == nil {
					err = c.CloseWrite()
				}
				errc <- err
			}()
			// Echo back from s through io.Copy (WriterTo / ReaderFrom).
			go func() {
				io.Copy(s, s)
				s.CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("echo: %d bytes, want %d (equal prefix %d)", len(got), len(data), prefix(got, data))
			}
			c.Close()
			s.Close()
		})
	}
}

func prefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestNettest(t *testing.T) {
	p := newPair(t, nil, nil)
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := p.conns(t, nil)
		return c, s, func() { c.Close(); s.Close() }, nil
	})
}

func TestCloseDrains(t *testing.T) {
	p := newPair(t, nil, nil)
	c, s := p.conns(t, nil)
	data := make([]byte, 1<<20)
	rand.Read(data)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Write(data[:100<<10]) // fits the buffers: returns before s reads
		c.Close()
	}()
	wg.Wait()
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, data[:100<<10]) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	s.Close()
}

func TestDeadline(t *testing.T) {
	p := newPair(t, nil, nil)
	c, s := p.conns(t, nil)
	defer c.Close()
	defer s.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v", err)
	}
	// Nobody reads s: the writer fills the peer's buffer and its credits, then times out.
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Write(make([]byte, 8<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n >= 8<<20 {
		t.Fatalf("write past the deadline: %d, %v", n, err)
	}
}

// TestNoRNR: many one-byte messages to a reader that reads a byte at a
// time, with 16 receives credited: the receives reposted in batches (spare
// ones, spareRecvs) always cover what the peer may send, so the receiver
// never answers RNR, and every byte arrives in order.
func TestNoRNR(t *testing.T) {
	o := &Options{RQSize: 16, SQSize: 16}
	p := newPair(t, o, o)
	c, s := p.conns(t, o)
	defer c.Close()
	defer s.Close()
	const n = 3000
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := c.Write([]byte{byte(i)}); err != nil {
				errc <- err
				return
			}
		}
		errc <- c.CloseWrite()
	}()
	b := make([]byte, 1)
	for i := range n {
		if i%500 == 0 {
			time.Sleep(5 * time.Millisecond) // let the writer use up its credits
		}
		if _, err := io.ReadFull(s, b); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
		if b[0] != byte(i) {
			t.Fatalf("byte %d is %d", i, b[0])
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if r := s.q.Counters()[qp.CntSendRNRErr]; r != 0 {
		t.Fatalf("the receiver sent %d RNR NAKs", r)
	}
}

// TestDeadlineWakesRead: a Read parked in its CQ wait (a self-driving
// device's waiter reads the link itself) returns as soon as its deadline is
// moved into the past, as net/http's server does to abort its background
// read (SetReadDeadline(aLongTimeAgo)), not at the wait's next look at its
// context (qp's ctxSlice, 20 ms). In a synctest bubble: the time measured
// is the bubble's, which passes only while every goroutine is blocked.
func TestDeadlineWakesRead(t *testing.T) {
	for _, how := range []string{"past", "soon", "close"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err := Listen(ctx, b, "198.18.0.2:7471", nil)
				if err != nil {
					t.Fatal(err)
				}
				p := &pair{a: a, b: b, l: l, addr: "198.18.0.2:7471"}
				c, s := p.conns(t, nil)
				closed := make(chan struct{})
				defer func() {
					if how == "close" {
						<-closed // the mutex of a second Close would not be durably blocked
					}
					c.Close()
					s.Close()
					l.Close()
					time.Sleep(time.Minute) // every timewait ends
					a.Close()
					b.Close()
				}()
				done := make(chan error, 1)
				go func() {
					_, err := c.Read(make([]byte, 1))
					done <- err
				}()
				synctest.Wait() // the Read waits on the link
				start := time.Now()
				want := os.ErrDeadlineExceeded
				switch how {
				case "past":
					c.SetReadDeadline(time.Unix(1, 0))
				case "soon": // set after the wait began: its slice does not know it
					c.SetReadDeadline(start.Add(time.Millisecond))
				case "close": // not EOF, though Close sent the disconnect first
					want = net.ErrClosed
					go func() {
						c.Close()
						close(closed)
					}()
				}
				err = <-done
				if waited := time.Since(start); waited > 5*time.Millisecond {
					t.Errorf("Read returned %v after the deadline was set, want at once", waited)
				}
				if !errors.Is(err, want) {
					t.Errorf("Read: %v, want %v", err, want)
				}
			})
		})
	}
}

// TestBufferGrowth: a stream grows the buffers left at their default to
// MaxBuffer (the receive buffer after the writer ran short of room, the
// send ring once the peer's halves outgrew it), the bytes arrive whole and
// in order; buffers set explicitly, or MaxBuffer negative, keep their size.
func TestBufferGrowth(t *testing.T) {
	for _, tc := range []struct {
		name               string
		lo, do             *Options // listener (reader), dialer (writer)
		wantRecv, wantSend int
	}{
		{"default", nil, nil, DefaultMaxBuffer, DefaultMaxBuffer},
		{"max 512 KiB", &Options{MaxBuffer: 512 << 10}, &Options{MaxBuffer: 512 << 10}, 512 << 10, 512 << 10},
		{"off", &Options{MaxBuffer: -1}, &Options{MaxBuffer: -1}, DefaultBuffer, DefaultBuffer},
		{"explicit", &Options{RecvBuffer: DefaultBuffer}, &Options{SendBuffer: DefaultBuffer}, DefaultBuffer, DefaultBuffer},
		// rstream's peer: its 512 KiB halves grow the writer's ring at once.
		{"big peer", &Options{RecvBuffer: 1 << 20}, nil, 1 << 20, 1 << 20},
		{"big-endian reader", &Options{bigEndian: true}, nil, DefaultMaxBuffer, DefaultMaxBuffer},
		{"small writer", nil, &Options{SendBuffer: 4096}, DefaultMaxBuffer, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.lo, tc.do)
			c, s := p.conns(t, tc.do)
			data := make([]byte, 12<<20+5)
			rand.Read(data)
			errc := make(chan error, 1)
			go func() {
				_, err := c.Write(data)
				if err == nil {
					err = c.CloseWrite()
				}
				errc <- err
			}()
			// The reader reads only once the writer used up the room it
			// was granted (what arrived taken off s's completion queue as
			// the keepalive does), as a reader slower than the grants'
			// round trip would.
			stalled := func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.pollIdle()
				return s.peerRoom == 0
			}
			writing := make(chan struct{})
			go func() {
				err := <-errc
				close(writing)
				errc <- err
			}()
			got := make([]byte, 0, len(data))
			buf := make([]byte, 2<<20)
			for {
			wait:
				for t0 := time.Now(); !stalled() && time.Since(t0) < 5*time.Second; {
					select {
					case <-writing:
						break wait
					case <-time.After(50 * time.Microsecond):
					}
				}
				n, err := s.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, want %d (equal prefix %d)", len(got), len(data), prefix(got, data))
			}
			s.mu.Lock()
			recv := s.e.rbufSize
			s.mu.Unlock()
			c.mu.Lock()
			send := c.e.sbufSize
			c.mu.Unlock()
			if recv != tc.wantRecv || send != tc.wantSend {
				t.Errorf("receive buffer %d, send ring %d; want %d, %d", recv, send, tc.wantRecv, tc.wantSend)
			}
			c.Close()
			s.Close()
		})
	}
}
