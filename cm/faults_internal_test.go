package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
)

var (
	ipA = netip.MustParseAddr("198.18.0.1")
	ipB = netip.MustParseAddr("198.18.0.2")
)

// The REQ's retry timeout, from its fields (ib_send_cm_req): 2 × the
// packet life time (18: 1024 ms) + the remote CM response timeout (20:
// 4096 ms). The REP's, from the REQ's local CM response timeout.
const (
	reqTimeout = 2*1024*time.Millisecond + 4096*time.Millisecond
	repTimeout = 4096 * time.Millisecond
)

func gaps(ts []time.Time) []time.Duration {
	var r []time.Duration
	for i := 1; i < len(ts); i++ {
		r = append(r, ts[i].Sub(ts[i-1]))
	}
	return r
}

// lossCase drops exactly one message and checks the connection (and its
// teardown) recovers through the retransmission the protocol prescribes.
func TestLostMessages(t *testing.T) {
	for _, tc := range []struct {
		drop  string
		check func(t *testing.T, n *fakeNet)
	}{
		{"REQ", func(t *testing.T, n *fakeNet) {
			if g := gaps(n.times("REQ")); len(g) != 1 || g[0] != reqTimeout {
				t.Errorf("REQ resent after %v, want one resend after %v", g, reqTimeout)
			}
		}},
		{"REP", func(t *testing.T, n *fakeNet) {
			if g := gaps(n.times("REP")); len(g) != 1 || g[0] != repTimeout {
				t.Errorf("REP resent after %v, want one resend after %v", g, repTimeout)
			}
			if k := n.count("REQ"); k != 1 {
				t.Errorf("%d REQs", k)
			}
		}},
		{"RTU", func(t *testing.T, n *fakeNet) {
			// The passive side resends its REP; the established active
			// side answers the duplicate with the RTU again.
			if k, r := n.count("REP"), n.count("RTU"); k != 2 || r != 2 {
				t.Errorf("%d REPs and %d RTUs, want 2 and 2", k, r)
			}
		}},
		{"DREQ", func(t *testing.T, n *fakeNet) {
			if g := gaps(n.times("DREQ")); len(g) != 1 || g[0] != reqTimeout {
				t.Errorf("DREQ resent after %v, want one resend after %v", g, reqTimeout)
			}
		}},
		{"DREP", func(t *testing.T, n *fakeNet) {
			// The passive side is in timewait: the duplicate DREQ gets
			// a DREP again.
			if k, r := n.count("DREQ"), n.count("DREP"); k != 2 || r != 2 {
				t.Errorf("%d DREQs and %d DREPs, want 2 and 2", k, r)
			}
		}},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, a, b := setup(t, dropNth(tc.drop, 1))
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				e := connect(t, ctx, a, b, Options{}, Options{})
				if err := e.client.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				<-e.server.Done()
				e.server.Close()
				tc.check(t, n)
			})
		})
	}
}

func TestDuplicateREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dupOnce := sync.OnceValue(func() bool { return true })
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			return false, m.Name() == "REQ" && dupOnce()
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		if k := n.count("REP"); k != 1 {
			t.Errorf("%d REPs for a duplicated REQ", k)
		}
		if s := AgentStats(b); s.Duplicates != 1 {
			t.Errorf("server duplicates %d", s.Duplicates)
		}
		e.client.Close()
		e.server.Close()
	})
}

// A replayed REQ of an established connection is a duplicate and dropped
// (cm_dup_req_handler); a new REQ from the same remote QP gets REJ stale
// connection, and the old connection a DREQ (cm_match_req).
func TestStaleREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var req []byte
		var hdr mad.Header
		var msg mad.REQ
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			if r, ok := m.(*mad.REQ); ok {
				mu.Lock()
				req = make([]byte, mad.MADLen)
				mad.Marshal(h, r, req)
				hdr, msg = h, *r
				mu.Unlock()
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		mu.Lock()
		n.inject(ipA, ipB, req)
		mu.Unlock()
		synctest.Wait()
		if s := AgentStats(b); s.Duplicates != 1 || s.Rejects != 0 {
			t.Fatalf("replayed REQ: server stats %+v", s)
		}
		mu.Lock()
		msg.LocalCommID++
		hdr.TID++
		mad.Marshal(hdr, &msg, req)
		n.inject(ipA, ipB, req)
		mu.Unlock()
		<-e.client.Done() // the DREQ for the old connection
		tr := n.trace()
		if r := tr[len(tr)-3:]; r[0] != "198.18.0.2>198.18.0.1 REJ" || r[1] != "198.18.0.2>198.18.0.1 DREQ" {
			t.Fatalf("a new REQ from a connected QP answered by %q", r)
		}
		if s := AgentStats(b); s.Rejects != 1 {
			t.Errorf("server stats %+v", s)
		}
		e.client.Close()
		e.server.Close()
	})
}

// Older kernels' rdma_cm active side sends an MRA for the REP; the passive
// side extends the REP's timeout by the MRA's service timeout and keeps
// the REP outstanding.
func TestMRAForREP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n *fakeNet
		var mu sync.Mutex
		mraSent := false
		const serviceTimeout = 14 // 64 ms
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			switch m := m.(type) {
			case *mad.REP:
				if !mraSent {
					mraSent = true
					mra := &mad.MRA{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID,
						MsgMRAed: mad.MsgTypeREP, ServiceTimeout: serviceTimeout}
					b := make([]byte, mad.MADLen)
					mad.Marshal(mad.CMHeader(h.TID, mad.AttrMRA), mra, b)
					go n.inject(ipA, ipB, b)
				}
			case *mad.RTU:
				return true, false // the active side "waits": only the REP's resend is answered
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := Dial(ctx, a, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		time.Sleep(5 * time.Second)
		const want = 64*time.Millisecond + 2048*time.Millisecond
		if g := gaps(n.times("REP")); len(g) < 2 || g[0] != want || g[1] != want {
			t.Errorf("REP resent after %v, want every %v: 64 ms (MRA service timeout) + 2048 ms (the path's timeout, 19)", g, want)
		}
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		defer acancel()
		if _, err := l.Accept(actx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Accept without an RTU: %v", err)
		}
	})
}

func TestNoListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		unregister, err := Register(b)
		if err != nil {
			t.Fatal(err)
		}
		defer unregister()
		_, err = Dial(ctx, a, "198.18.0.2:4000", Options{})
		var re *RejectError
		if !errors.Is(err, ErrConnRefused) || !errors.Is(err, ErrRejected) || !errors.As(err, &re) ||
			re.Reason != mad.RejInvalidServiceID {
			t.Fatalf("Dial to a port nobody listens on: %v", err)
		}
		if k := n.count("REQ"); k != 1 {
			t.Errorf("%d REQs", k)
		}
	})
}

func TestConsumerReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var got *Request
		l, err := Listen(ctx, b, addrB, Options{Accept: func(r *Request) ([]byte, error) {
			got = r
			return nil, Reject([]byte("go away"))
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = Dial(ctx, a, addrB, Options{PrivateData: []byte("let me in")})
		var re *RejectError
		if !errors.Is(err, ErrRejected) || errors.Is(err, ErrConnRefused) || !errors.As(err, &re) ||
			re.Reason != mad.RejConsumerDefined || !bytes.Equal(re.PrivateData, padded("go away", mad.REJPrivateDataLen)) {
			t.Fatalf("Dial: %v", err)
		}
		if got == nil || !bytes.Equal(got.PrivateData, padded("let me in", mad.REQPrivateDataLen-mad.CMAHeaderLen)) || got.RemoteAddr.Addr() != ipA ||
			got.LocalAddr.String() != addrB || got.ServiceID != 0x0000000001061C06 {
			t.Fatalf("Accept saw %+v", got)
		}
	})
}

// Nobody answers: the REQ is sent 1 + max CM retries (15) times, each
// after the REQ's timeout, then ErrTimeout.
func TestDialTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			return m.Name() == "REQ", false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		start := time.Now()
		_, err = Dial(ctx, a, addrB, Options{})
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Dial: %v", err)
		}
		if k := n.count("REQ"); k != 16 {
			t.Errorf("%d REQs, want 16", k)
		}
		if d := time.Since(start); d != 16*reqTimeout {
			t.Errorf("gave up after %v, want %v", d, 16*reqTimeout)
		}
	})
}

// The caller's ctx bounds Dial; the abandoned attempt is withdrawn with
// REJ timeout (cm_destroy_id in REQ_SENT), which frees the passive side.
func TestDialContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			return m.Name() == "REP", false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		if _, err := Dial(dctx, a, addrB, Options{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial: %v", err)
		}
		synctest.Wait()
		if k := n.count("REJ"); k != 1 {
			t.Fatalf("%d REJs", k)
		}
		l.l.a.mu.Lock()
		pending, ids := l.l.pending, len(l.l.a.ids)
		l.l.a.mu.Unlock()
		if pending != 0 || ids != 0 {
			t.Fatalf("server: %d pending, %d IDs after the REJ", pending, ids)
		}
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		if _, err := Dial(cctx, a, addrB, Options{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial with a cancelled ctx: %v", err)
		}
		actx, acancel := context.WithCancel(ctx)
		acancel()
		if _, err := l.Accept(actx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Accept with a cancelled ctx: %v", err)
		}
	})
}

// The passive side closes: its DREQ reaches the client, whose Done closes.
func TestCloseFromServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		if err := e.server.Close(); err != nil {
			t.Fatal(err)
		}
		<-e.client.Done()
		if !errors.Is(e.client.Err(), ErrDisconnected) {
			t.Fatalf("client Err %v", e.client.Err())
		}
		if err := e.client.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.server.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// A Listener holds at most Backlog established connections for Accept;
// more REQs get REJ "no resources". Closing it rejects what is pending and
// makes Accept return ErrClosed.
func TestBacklogAndListenerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{Backlog: 1})
		if err != nil {
			t.Fatal(err)
		}
		c1, err := Dial(ctx, a, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		synctest.Wait() // the RTU: c1 is in the backlog
		_, err = Dial(ctx, a, addrB, Options{})
		var re *RejectError
		if !errors.As(err, &re) || re.Reason != mad.RejNoResources {
			t.Fatalf("Dial beyond the backlog: %v", err)
		}
		if _, err := Listen(ctx, b, addrB, Options{}); !errors.Is(err, ErrAddrInUse) {
			t.Fatalf("second Listen on the port: %v", err)
		}
		l.Close()
		if _, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
		<-c1.Done() // the backlog's connection was closed: DREQ
		if _, err := Dial(ctx, a, addrB, Options{}); !errors.Is(err, ErrConnRefused) {
			t.Fatalf("Dial after the listener closed: %v", err)
		}
	})
}

// DialUD's ctx bounds the SIDR_REQ's retries.
func TestDialUDContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			return m.Name() == "SIDR_REQ", false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := ListenUD(ctx, b, "198.18.0.2:7000", Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		if _, err := DialUD(dctx, a, "198.18.0.2:7000", Options{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DialUD: %v", err)
		}
		if k := n.count("SIDR_REQ"); k != 3 { // at 0, 4.096 and 8.192 s
			t.Fatalf("%d SIDR_REQs in 10 s", k)
		}
	})
}

// Garbage on the CM class: MADs of every attribute with random payloads,
// truncated MADs, other class versions. Each is answered as the protocol
// says or dropped and counted; nothing panics, and a connection still works
// afterwards.
func TestGarbageMADs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		sent := 0
		for attr := uint16(0x0010); attr <= 0x001A; attr++ {
			for range 50 {
				m := make([]byte, mad.MADLen)
				for i := range m {
					m[i] = byte(rng.Uint32())
				}
				h := mad.CMHeader(rng.Uint64(), attr)
				if rng.IntN(4) == 0 {
					h.ClassVersion = 1
				}
				h.Marshal(m)
				if attr == mad.AttrREQ && rng.IntN(2) == 0 {
					// A plausible REQ for the listener: the service ID
					// and a valid cma_hdr, the rest random.
					binary.BigEndian.PutUint64(m[24+8:], mad.ServiceID(mad.PortSpaceTCP, 7174))
					hdr := mad.CMAHeader{IPVersion: 4, SrcPort: 1, Src: ipA, Dst: ipB}
					hdr.Marshal(m[24+140:])
				}
				n.inject(ipA, ipB, m)
				sent++
			}
		}
		n.inject(ipA, ipB, make([]byte, 100)) // short
		time.Sleep(10 * time.Minute)          // every retry and timewait of what got through
		s := AgentStats(b)
		t.Logf("%d garbage MADs: server agent %+v", sent, s)
		if s.Received+s.Invalid != uint64(sent+1) {
			t.Errorf("%d MADs in, %d received + %d invalid", sent+1, s.Received, s.Invalid)
		}
		l.Close()
		e := connect(t, ctx, a, b, Options{}, Options{})
		e.client.Close()
		e.server.Close()
	})
}

// Both sides close at once: the DREQs cross, each side answers the other's
// with a DREP, and neither Close waits for the DREP its DREQ will not get.
func TestCrossingDREQs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The first DREQ is held back until the other side has sent its
		// own: they cross.
		var mu sync.Mutex
		var held []byte
		var heldTo netip.Addr
		var n *fakeNet
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			if m.Name() != "DREQ" {
				return false, false
			}
			mu.Lock()
			defer mu.Unlock()
			if held == nil {
				held = make([]byte, mad.MADLen)
				mad.Marshal(h, m, held)
				heldTo = netip.MustParseAddr(to)
				return true, false
			}
			go n.inject(netip.MustParseAddr(to), heldTo, held) // from the side the second DREQ goes to
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		start := time.Now()
		var wg sync.WaitGroup
		for _, c := range []*Conn{e.client, e.server} {
			wg.Go(func() {
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if d := time.Since(start); d != 0 {
			t.Errorf("crossing Closes took %v", d)
		}
		synctest.Wait()
		if k, r := n.count("DREQ"), n.count("DREP"); k != 2 || r != 2 {
			t.Errorf("%d DREQs, %d DREPs", k, r)
		}
		tr := strings.Join(n.trace(), "\n")
		if !strings.Contains(tr, "198.18.0.1>198.18.0.2 DREP") || !strings.Contains(tr, "198.18.0.2>198.18.0.1 DREP") {
			t.Errorf("a DREP each way expected:\n%s", tr)
		}
	})
}

// An MRA for the REQ (a passive side that needs time) makes the active
// side wait its service timeout + the path's before resending the REQ.
func TestMRAForREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		first := true
		var n *fakeNet
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			mu.Lock()
			defer mu.Unlock()
			if r, ok := m.(*mad.REQ); ok && first {
				first = false
				mra := &mad.MRA{RemoteCommID: r.LocalCommID, MsgMRAed: mad.MsgTypeREQ, ServiceTimeout: 21}
				b := make([]byte, mad.MADLen)
				mad.Marshal(mad.CMHeader(h.TID, mad.AttrMRA), mra, b)
				go n.inject(ipB, ipA, b)
				return true, false // lost: only the resend reaches the listener
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		e := connect(t, ctx, a, b, Options{}, Options{})
		const want = 8192*time.Millisecond + 2048*time.Millisecond
		if g := gaps(n.times("REQ")); len(g) != 1 || g[0] != want {
			t.Errorf("REQ resent after %v, want once after %v (MRA service timeout 21 + the path's 19)", g, want)
		}
		e.client.Close()
		e.server.Close()
	})
}
