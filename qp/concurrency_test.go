package qp

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
)

// TestConcurrentQPs: several QP pairs on the same two devices, each driven
// by its own goroutine (post, wait, verify) while the devices' receive and
// timer goroutines run; under -race this checks the device/CQ locking, and
// every message must arrive intact on its own connection.
func TestConcurrentQPs(t *testing.T) {
	x := newX(t, xopts{noTap: true, size: 1 << 16})
	const nq, rounds = 4, 100
	type conn struct {
		sa, sb     *QP
		cqa, cqb   *CQ
		bufA, bufB []byte
		mrA, mrB   *MR
	}
	conns := make([]*conn, nq)
	for i := range conns {
		c := &conn{bufA: make([]byte, 8192), bufB: make([]byte, 8192)}
		c.cqa, _ = x.a.dev.CreateCQ(64)
		c.cqb, _ = x.b.dev.CreateCQ(64)
		var err error
		caps := Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		if c.sa, err = x.a.pd.CreateQP(InitAttr{SendCQ: c.cqa, RecvCQ: c.cqa, Cap: caps}); err != nil {
			t.Fatal(err)
		}
		if c.sb, err = x.b.pd.CreateQP(InitAttr{SendCQ: c.cqb, RecvCQ: c.cqb, Cap: caps}); err != nil {
			t.Fatal(err)
		}
		if c.mrA, err = x.a.pd.RegMR(c.bufA, allAccess); err != nil {
			t.Fatal(err)
		}
		if c.mrB, err = x.b.pd.RegMR(c.bufB, allAccess); err != nil {
			t.Fatal(err)
		}
		psn := uint32(1000 * (i + 1))
		if err := c.sa.Connect(Remote{QPN: c.sb.QPN(), PSN: psn + 1, GID: ipB}, ConnectOptions{SQPSN: psn}); err != nil {
			t.Fatal(err)
		}
		if err := c.sb.Connect(Remote{QPN: c.sa.QPN(), PSN: psn, GID: ipA}, ConnectOptions{SQPSN: psn + 1}); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	var wg sync.WaitGroup
	errs := make(chan error, nq)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			wait := func(cq *CQ) (WC, error) {
				var wc [1]WC
				if _, err := cq.Wait(ctx, wc[:]); err != nil {
					return WC{}, err
				}
				return wc[0], nil
			}
			for r := range rounds {
				n := 1 + (r*977+i*131)%3000
				msg := pattern(uint64(i*rounds+r), n)
				copy(c.bufA, msg)
				if err := c.sb.PostRecv(&RecvWR{WRID: uint64(r), SGL: []SGE{{Addr: c.mrB.IOVA(), Length: 4096, LKey: c.mrB.LKey()}}}); err != nil {
					errs <- err
					return
				}
				if err := c.sa.PostSend(&SendWR{WRID: uint64(r), Opcode: transport.WRSend, Flags: transport.SendSignaled,
					SGL: []SGE{{Addr: c.mrA.IOVA(), Length: uint32(n), LKey: c.mrA.LKey()}}}); err != nil {
					errs <- err
					return
				}
				ws, err := wait(c.cqa)
				if err == nil && ws.Status != transport.WCSuccess {
					err = fmt.Errorf("send %v", ws)
				}
				wr, err2 := wait(c.cqb)
				if err == nil && err2 != nil {
					err = err2
				}
				if err == nil && (wr.Status != transport.WCSuccess || wr.ByteLen != uint32(n) || !bytes.Equal(c.bufB[:n], msg)) {
					err = fmt.Errorf("conn %d round %d: receive %v, data equal %v", i, r, wr, bytes.Equal(c.bufB[:n], msg))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
