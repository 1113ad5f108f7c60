package rsock

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// rawPeer is a hand-driven rsocket client: a cm connection with valid
// connect data, whose messages the test writes itself.
type rawPeer struct {
	cc   *cm.Conn
	peer connData // the server's connect data
	buf  []byte
	mr   *qp.MR
}

func dialRaw(t *testing.T, p *pair) *rawPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pd := p.a.AllocPD()
	r := &rawPeer{buf: make([]byte, 64<<10)}
	var err error
	if r.mr, err = pd.RegMR(r.buf, qp.LocalWrite|qp.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	d := connData{version: 1, flags: flagIOMap, credits: 64,
		targetSGL: sge{addr: r.mr.IOVA(), key: r.mr.RKey(), length: 2},
		dataBuf:   sge{addr: r.mr.IOVA() + 4096, key: r.mr.RKey(), length: 4096}}
	r.cc, err = cm.Dial(ctx, p.a, p.addr, cm.Options{PD: pd, PrivateData: d.marshal(),
		Cap:     qp.Caps{MaxSendWR: 64, MaxRecvWR: 64},
		Prepare: func(q *qp.QP) error { return postRecvs(q, 64) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.peer, err = parseConnData(r.cc.PrivateData()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cc.Close() })
	return r
}

// send posts one WRITE_WITH_IMM of n bytes (from r.buf) to addr.
func (r *rawPeer) send(t *testing.T, imm uint32, n int, addr uint64, rkey uint32) {
	t.Helper()
	wr := qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWriteWithImm, Imm: imm, RemoteAddr: addr, RKey: rkey}
	if n > 0 {
		wr.SGL = []qp.SGE{{Addr: r.mr.IOVA(), Length: uint32(n), LKey: r.mr.LKey()}}
	}
	if err := r.cc.QP().PostSend(&wr); err != nil {
		t.Fatal(err)
	}
}

func TestHostile(t *testing.T) {
	small := &Options{RecvBuffer: 4096, RQSize: 16, IOMapSize: 1, KeepAlive: 50 * time.Millisecond}
	cases := []struct {
		name string
		run  func(t *testing.T, r *rawPeer)
	}{
		{"length lie", func(t *testing.T, r *rawPeer) {
			r.send(t, msg(opData, 100), 50, r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}},
		{"beyond the granted bytes", func(t *testing.T, r *rawPeer) {
			// The whole buffer (both halves) is granted at connect; one byte more is not.
			r.send(t, msg(opData, 4096), 4096, r.peer.dataBuf.addr, r.peer.dataBuf.key)
			r.send(t, msg(opData, 1), 1, r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}},
		{"beyond the credits", func(t *testing.T, r *rawPeer) {
			for range 17 {
				r.send(t, msg(opData, 1), 1, r.peer.dataBuf.addr, r.peer.dataBuf.key)
			}
		}},
		{"SGL update of a slot in use", func(t *testing.T, r *rawPeer) {
			copy(r.buf, make([]byte, 16))
			r.buf[12] = 1 // length 1, little-endian
			r.send(t, msg(opSGL, 100), 16, r.peer.targetSGL.addr, r.peer.targetSGL.key)
			r.send(t, msg(opSGL, 100), 16, r.peer.targetSGL.addr, r.peer.targetSGL.key)
		}},
		{"SGL update of a bad size", func(t *testing.T, r *rawPeer) {
			r.send(t, msg(opSGL, 100), 8, r.peer.targetSGL.addr, r.peer.targetSGL.key)
		}},
		{"iomap update beyond the entries", func(t *testing.T, r *rawPeer) {
			r.send(t, msg(opIOMap, 1), 24, r.peer.targetSGL.addr+32, r.peer.targetSGL.key)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, small, nil)
			good, goodS := p.conns(t, nil)
			defer good.Close()
			defer goodS.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			acc := make(chan *Conn, 1)
			go func() {
				c, err := p.l.AcceptContext(ctx)
				if err != nil {
					t.Error(err)
				}
				acc <- c
			}()
			r := dialRaw(t, p)
			s := <-acc
			if s == nil {
				return
			}
			defer s.Close()
			tc.run(t, r)
			// Nothing reads s: the keepalive's look at the idle
			// connection (every 50 ms here) finds the violation.
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				s.mu.Lock()
				err := s.err
				s.mu.Unlock()
				if err != nil {
					break
				}
				if time.Now().After(end) {
					t.Fatal("the hostile connection did not fail")
				}
			}
			s.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.ReadAll(s)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("read on the hostile connection: %v, want ErrProtocol", err)
			}
			// The other connection of the same listener is untouched.
			go good.Write([]byte("still here"))
			buf := make([]byte, 10)
			goodS.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(goodS, buf); err != nil || string(buf) != "still here" {
				t.Fatalf("the other connection: %q, %v", buf, err)
			}
		})
	}
}

// A peer that vanishes (its device closes without a word: no disconnect
// message, no DREQ) ends reads and writes with an error in bounded time,
// through the keepalive's retries.
func TestVanishedPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the transport's retries")
	}
	p := newPair(t, nil, nil)
	c, _ := p.conns(t, &Options{KeepAlive: 100 * time.Millisecond})
	defer c.Close()
	p.b.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	start := time.Now()
	_, err := io.ReadAll(c)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on a connection to a vanished peer: %v", err)
	}
	t.Logf("read ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write on a dead connection succeeded")
	}
}

// A peer that grants a buffer outside what it registered: the WRITE there is
// answered by the peer's own transport (NAK remote access error), and this
// connection ends with that error; another connection goes on.
func TestHostileSGLOutside(t *testing.T) {
	p := newPair(t, nil, nil)
	good, goodS := p.conns(t, nil)
	defer good.Close()
	defer goodS.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acc := make(chan *Conn, 1)
	go func() {
		c, _ := p.l.AcceptContext(ctx)
		acc <- c
	}()
	r := dialRaw(t, p)
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	// Slot 1 of s's target SGL: 4 KiB at an address r never registered.
	sge{addr: 0xdead0000, key: r.mr.RKey(), length: 4096}.put(r.buf, binary.LittleEndian)
	r.send(t, msg(opSGL, 1000), 16, r.peer.targetSGL.addr+16, r.peer.targetSGL.key)
	s.SetDeadline(time.Now().Add(10 * time.Second))
	// 4 KiB fill r's real buffer, the next bytes go to the bogus one.
	_, werr := s.Write(make([]byte, 8192))
	_, rerr := s.Read(make([]byte, 1))
	if werr == nil && rerr == nil || !errors.Is(rerr, qp.WCRemAccessErr) && !errors.Is(werr, qp.WCRemAccessErr) {
		t.Fatalf("write %v, read %v; want REM_ACCESS_ERR", werr, rerr)
	}
	go good.Write([]byte("still here"))
	buf := make([]byte, 10)
	goodS.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(goodS, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("the other connection: %q, %v", buf, err)
	}
}
