package rpingcmd

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
)

// pingOnce is the smallest rping client: one ping against an rping server
// at addr, returning the data the server wrote back. README.md's
// "Connecting to a stock rping server" shows it whole (TestDocsGo).
func pingOnce(ctx context.Context, dev *qp.Device, addr string, data []byte) ([]byte, error) {
	pd := dev.AllocPD()
	ctl := make([]byte, 32) // rping's 16-byte control message out, the server's in
	ctlMR, err := pd.RegMR(ctl, qp.LocalWrite)
	if err != nil {
		return nil, err
	}
	cq, err := dev.CreateCQ(8)
	if err != nil {
		return nil, err
	}
	recv := func(q *qp.QP) error { // the receive for the server's go-ahead, posted before it can come
		return q.PostRecv(&qp.RecvWR{SGL: []qp.SGE{{Addr: ctlMR.IOVA() + 16, Length: 16, LKey: ctlMR.LKey()}}})
	}
	c, err := cm.Dial(ctx, dev, addr, cm.Options{PD: pd, SendCQ: cq, RecvCQ: cq, Prepare: recv}) // REQ → REP → RTU, as rdma_connect
	if err != nil {
		return nil, err
	}
	defer c.Close() // DREQ → DREP, as rdma_disconnect
	buf := append(append([]byte(nil), data...), 0)
	mr, err := pd.RegMR(buf, qp.LocalWrite|qp.RemoteRead|qp.RemoteWrite) // the server READs it, then WRITEs it back
	if err != nil {
		return nil, err
	}
	advertise := func() error { // rping's control message: be64 addr, be32 rkey, be32 size
		binary.BigEndian.PutUint64(ctl[0:], mr.IOVA())
		binary.BigEndian.PutUint32(ctl[8:], mr.RKey())
		binary.BigEndian.PutUint32(ctl[12:], uint32(len(buf)))
		sge := []qp.SGE{{Addr: ctlMR.IOVA(), Length: 16, LKey: ctlMR.LKey()}}
		if err := c.QP().PostSend(&qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: sge}); err != nil {
			return err
		}
		for got := 0; got < 2; { // our SEND and the server's go-ahead
			var wc [2]qp.WC
			n, err := cq.Wait(ctx, wc[:])
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if err := w.Err(); err != nil {
					return err
				}
				if w.Opcode == qp.WCRecv {
					if err := recv(c.QP()); err != nil {
						return err
					}
				}
			}
			got += n
		}
		return nil
	}
	// The start buffer (the server READs it), then the same buffer as the
	// sink (the server WRITEs the echo into it).
	if err := advertise(); err != nil {
		return nil, err
	}
	clear(buf)
	if err := advertise(); err != nil {
		return nil, err
	}
	if n := bytes.IndexByte(buf, 0); n >= 0 {
		buf = buf[:n]
	}
	return buf, nil
}

// TestReadmeRping: pingOnce, the README's rping client, pings goroce
// rping's server through package cm: the server prints the data it READ
// and the client gets it back by WRITE.
func TestReadmeRping(t *testing.T) {
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	listening := make(chan struct{})
	done := make(chan int, 1)
	env := tool.Env{Ctx: ctx, Stdout: &out, Stderr: &errb,
		Open:      func(context.Context, string) (*qp.Device, error) { return b, nil },
		Listening: func(net.Addr) { close(listening) }}
	go func() { done <- Run(env, []string{"-s", "-a", "198.18.0.2", "-v"}) }()
	select {
	case <-listening:
	case code := <-done:
		t.Fatalf("server exited %d: %s", code, errb.String())
	}
	got, err := pingOnce(ctx, a, "198.18.0.2:7174", []byte("hello rping"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello rping" {
		t.Errorf("echo %q", got)
	}
	if code := <-done; code != 0 || out.String() != "server ping data: hello rping\n" {
		t.Errorf("server exit %d, printed %q, stderr %q", code, out.String(), errb.String())
	}
}
