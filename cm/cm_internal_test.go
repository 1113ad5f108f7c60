package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// These tests run the CM over the fake GSI (fake_internal_test.go) between
// two real devices on qp's in-memory link, inside a synctest bubble: the
// CM's timers (seconds long, from the REQ's fields) run on the bubble's
// fake clock, so a retransmission costs no real time and never fires
// because the machine was slow.

const addrB = "198.18.0.2:7174"

func devPair(t *testing.T) (a, b *qp.Device) {
	t.Helper()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
	})
	return a, b
}

// setup opens the devices and the fake network with an optional fault hook.
func setup(t *testing.T, fault func(from, to string, h mad.Header, m mad.Message) (bool, bool)) (*fakeNet, *qp.Device, *qp.Device) {
	n := &fakeNet{}
	// Registered first, run last: let the fake clock pass every timewait
	// so the agents release the GSI and every goroutine ends in the bubble.
	t.Cleanup(func() { time.Sleep(time.Minute) })
	if fault != nil {
		n.fault = func(from, to netip.Addr, h mad.Header, m mad.Message) (bool, bool) {
			return fault(from.String(), to.String(), h, m)
		}
	}
	n.install(t)
	a, b := devPair(t)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range n.trace() {
				t.Log(l)
			}
		}
	})
	return n, a, b
}

// dropNth drops the nth (1-based) message named name.
func dropNth(name string, nth int) func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
	var mu sync.Mutex
	seen := 0
	return func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
		mu.Lock()
		defer mu.Unlock()
		if m.Name() == name {
			seen++
			return seen == nth, false
		}
		return false, false
	}
}

type endpoints struct {
	client, server *Conn
}

// connect listens on b, dials from a, accepts, and checks the connection
// end to end: QP states, the PSN semantics, private data, one SEND.
func connect(t *testing.T, ctx context.Context, a, b *qp.Device, lo, do Options) endpoints {
	t.Helper()
	l, err := Listen(ctx, b, addrB, lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- res{c, err}
	}()
	c, err := Dial(ctx, a, addrB, do)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	s := r.c
	for _, x := range []*Conn{c, s} {
		if st := x.QP().State(); st != qp.StateRTS {
			t.Fatalf("QP state %v, want RTS", st)
		}
	}
	ca, sa := c.QP().Query(), s.QP().Query()
	// PROTOCOL.md "PSN semantics": each side sends with what the other
	// advertised as its receive PSN.
	if ca.SQPSN != sa.RQPSN || sa.SQPSN != ca.RQPSN {
		t.Fatalf("PSNs: client sq %d rq %d, server sq %d rq %d", ca.SQPSN, ca.RQPSN, sa.SQPSN, sa.RQPSN)
	}
	if ca.DestQPN != s.QP().QPN() || sa.DestQPN != c.QP().QPN() {
		t.Fatalf("dest QPNs %#x %#x, QPNs %#x %#x", ca.DestQPN, sa.DestQPN, c.QP().QPN(), s.QP().QPN())
	}
	if c.RemoteAddr().String() != addrB || s.RemoteAddr() != c.LocalAddr() || s.LocalAddr() != c.RemoteAddr() {
		t.Fatalf("addresses: client %v → %v, server %v → %v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	sendOne(t, ctx, c, s)
	return endpoints{c, s}
}

// sendOne SENDs 5 bytes from c to s and checks they arrive.
func sendOne(t *testing.T, ctx context.Context, c, s *Conn) {
	t.Helper()
	src, dst := []byte("hello"), make([]byte, 5)
	mrS, err := s.PD().RegMR(dst, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.QP().PostRecv(&qp.RecvWR{WRID: 9, SGL: []qp.SGE{mrS.SGE(0, 5)}}); err != nil {
		t.Fatal(err)
	}
	mrC, err := c.PD().RegMR(src, qp.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.QP().PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{mrC.SGE(0, 5)}}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	for _, cq := range []*qp.CQ{c.SendCQ(), s.RecvCQ()} {
		if _, err := cq.Wait(ctx, wcs); err != nil {
			t.Fatal(err)
		}
		if err := wcs[0].Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst, src) {
		t.Fatalf("received %q", dst)
	}
}

func TestDialAcceptClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e := connect(t, ctx, a, b,
			Options{PrivateData: []byte("rep-data")},
			Options{PrivateData: []byte("req-data")})
		if got := e.client.PrivateData(); !bytes.Equal(got, padded("rep-data", mad.REPPrivateDataLen)) {
			t.Errorf("client sees private data %q", got)
		}
		if got := e.server.PrivateData(); !bytes.Equal(got, padded("req-data", mad.REQPrivateDataLen-mad.CMAHeaderLen)) {
			t.Errorf("server sees private data %q", got)
		}
		if err := e.client.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		<-e.server.Done()
		if !errors.Is(e.server.Err(), ErrDisconnected) {
			t.Fatalf("server Err %v", e.server.Err())
		}
		if st := e.server.QP().State(); st != qp.StateErr {
			t.Fatalf("server QP %v after DREQ", st)
		}
		e.server.Close()
		for _, m := range []string{"REQ", "REP", "RTU", "DREQ", "DREP"} {
			if k := n.count(m); k != 1 {
				t.Errorf("%d %s, want 1", k, m)
			}
		}
	})
}

// TestRealGSI runs the same connection over the devices' real QP1s: the
// MADs are UD SEND_ONLY frames on the in-memory link.
func TestRealGSI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(time.Minute) })
		a, b := devPair(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		if err := e.server.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		<-e.client.Done()
		e.client.Close()
		if s := AgentStats(b); s.Received < 2 || s.Retransmits != 0 {
			t.Errorf("server agent stats %+v", s)
		}
	})
}

// TestGSIRecoveryKeepsCM: both devices' QP1s are forced into ERR (as a
// receive or send error would move them) between connections; the GSI
// brings them back and the connection manager keeps working: a second
// connection is made and closed over the recovered QP1s.
func TestGSIRecoveryKeepsCM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(time.Minute) })
		a, b := devPair(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		e.client.Close()
		<-e.server.Done()
		e.server.Close()
		for _, d := range []*qp.Device{a, b} {
			g, err := d.GSI()
			if err != nil {
				t.Fatal(err)
			}
			if err := g.QP().Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
				t.Fatal(err)
			}
		}
		const addr2 = "198.18.0.2:7175"
		l, err := Listen(ctx, b, addr2, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		accepted := make(chan *Conn, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err != nil {
				t.Errorf("Accept after the recovery: %v", err)
			}
			accepted <- c
		}()
		c, err := Dial(ctx, a, addr2, Options{})
		if err != nil {
			t.Fatalf("Dial after the recovery: %v", err)
		}
		srv := <-accepted
		if srv == nil {
			t.FailNow()
		}
		sendOne(t, ctx, c, srv)
		if err := srv.Close(); err != nil {
			t.Fatalf("Close after the recovery: %v", err)
		}
		<-c.Done()
		c.Close()
		for name, d := range map[string]*qp.Device{"client": a, "server": b} {
			g, _ := d.GSI()
			if s := g.Stats(); s.Recovered != 1 {
				t.Errorf("%s's GSI stats %+v, want 1 recovery", name, s)
			}
			if st := g.QP().State(); st != qp.StateRTS {
				t.Errorf("%s's QP1 in %v", name, st)
			}
		}
	})
}
