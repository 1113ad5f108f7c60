package qp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/transport"
)

// TestConcurrentQPs: several QP pairs on the same two devices, each driven
// by its own goroutine (post, wait, verify) while the devices' receive and
// timer goroutines run; under -race this checks the device/CQ locking, and
// every message must arrive intact on its own connection.
func TestConcurrentQPs(t *testing.T) {
	bubble(t, func(t *testing.T) {
		x := newX(t, xopts{noTap: true, size: 1 << 16})
		const nq, rounds = 4, 100
		type conn struct {
			sa, sb     *qp.QP
			cqa, cqb   *qp.CQ
			bufA, bufB []byte
			mrA, mrB   *qp.MR
		}
		conns := make([]*conn, nq)
		for i := range conns {
			// More QP pairs on the same two devices, from the shared harness.
			psn := uint32(1000 * (i + 1))
			o := sim.QPOptions{BufSize: 8192, CQSize: 64, SharedCQ: true,
				Caps: qp.Caps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
			oa, ob := o, o
			oa.Connect.SQPSN, ob.Connect.SQPSN = psn, psn+1
			ea, eb, err := sim.ConnectQPs(context.Background(), x.a.dev, x.b.dev, oa, ob)
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = &conn{sa: ea.QP, sb: eb.QP, cqa: ea.SendCQ, cqb: eb.SendCQ, bufA: ea.Buf, bufB: eb.Buf, mrA: ea.MR, mrB: eb.MR}
		}
		var wg sync.WaitGroup
		errs := make(chan error, nq)
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				wait := func(cq *qp.CQ) (qp.WC, error) {
					var wc [1]qp.WC
					if _, err := cq.Wait(ctx, wc[:]); err != nil {
						return qp.WC{}, err
					}
					return wc[0], nil
				}
				for r := range rounds {
					n := 1 + (r*977+i*131)%3000
					msg := pattern(uint64(i*rounds+r), n)
					copy(c.bufA, msg)
					if err := c.sb.PostRecv(&qp.RecvWR{WRID: uint64(r), SGL: []qp.SGE{{Addr: c.mrB.IOVA(), Length: 4096, LKey: c.mrB.LKey()}}}); err != nil {
						errs <- err
						return
					}
					if err := c.sa.PostSend(&qp.SendWR{WRID: uint64(r), Opcode: transport.WRSend, Flags: transport.SendSignaled,
						SGL: []qp.SGE{{Addr: c.mrA.IOVA(), Length: uint32(n), LKey: c.mrA.LKey()}}}); err != nil {
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
	})
}

// TestLossyLink runs a mixed sequence of SEND, WRITE, READ and FETCH_ADD
// over a link that drops, corrupts, duplicates and reorders frames in both
// directions (seeded): every operation completes successfully with the
// right data, and every FETCH_ADD is executed exactly once although
// requests and ATOMIC ACKs get lost and resent.
func TestLossyLink(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const seed = 7
		f := nic.Faults{Drop: 0.02, Corrupt: 0.02, Duplicate: 0.02, Reorder: 0.02}
		x := newX(t, xopts{noTap: true, size: 1 << 18, seed: seed, faultsAB: f, faultsBA: f,
			connA: qp.ConnectOptions{Timeout: 14, RetryCnt: 7}, connB: qp.ConnectOptions{Timeout: 14, RetryCnt: 7}}) // 67 ms: a 1 ms timer timed out spuriously under -race and load
		a, b := x.a, x.b
		a.reset()
		b.reset()
		binary.LittleEndian.PutUint64(b.buf[1<<17:], 1000)
		var adds uint64
		for i := range 120 {
			n := 1 + (i*7919)%20000
			data := pattern(uint64(seed*1000+i), n)
			copy(a.buf, data)
			wrID := uint64(i)
			switch i % 4 {
			case 0:
				x.recv(b, wrID, b.sge(0, 20000))
				x.post(a, &qp.SendWR{WRID: wrID, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, n)}})
				expectWC(t, a.scq, wrID, transport.WCSuccess, transport.WCSend)
				if wc := expectWC(t, b.rcq, wrID, transport.WCSuccess, transport.WCRecv); wc.ByteLen != uint32(n) || !bytes.Equal(b.buf[:n], data) {
					t.Fatalf("seed %d op %d: SEND of %d bytes: %v, data equal %v", seed, i, n, wc, bytes.Equal(b.buf[:n], data))
				}
			case 1:
				x.post(a, &qp.SendWR{WRID: wrID, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(0, n)},
					RemoteAddr: b.mr.IOVA() + 40000, RKey: b.mr.RKey()})
				expectWC(t, a.scq, wrID, transport.WCSuccess, transport.WCRDMAWrite)
				if !bytes.Equal(b.buf[40000:40000+n], data) {
					t.Fatalf("seed %d op %d: WRITE of %d bytes differs", seed, i, n)
				}
			case 2:
				copy(b.buf[80000:], data)
				x.post(a, &qp.SendWR{WRID: wrID, Opcode: transport.WRRDMARead, Flags: transport.SendSignaled, SGL: []qp.SGE{a.sge(30000, n)},
					RemoteAddr: b.mr.IOVA() + 80000, RKey: b.mr.RKey()})
				expectWC(t, a.scq, wrID, transport.WCSuccess, transport.WCRDMARead)
				if !bytes.Equal(a.buf[30000:30000+n], data) {
					t.Fatalf("seed %d op %d: READ of %d bytes differs", seed, i, n)
				}
			case 3:
				x.post(a, &qp.SendWR{WRID: wrID, Opcode: transport.WRAtomicFetchAdd, Flags: transport.SendSignaled,
					SGL: []qp.SGE{a.sge(60000, 8)}, RemoteAddr: b.mr.IOVA() + 1<<17, RKey: b.mr.RKey(), CompareAdd: uint64(i)})
				expectWC(t, a.scq, wrID, transport.WCSuccess, transport.WCFetchAdd)
				if got := binary.LittleEndian.Uint64(a.buf[60000:]); got != 1000+adds {
					t.Fatalf("seed %d op %d: FETCH_ADD returned %d, want %d", seed, i, got, 1000+adds)
				}
				adds += uint64(i)
			}
		}
		if got := binary.LittleEndian.Uint64(b.buf[1<<17:]); got != 1000+adds {
			t.Fatalf("seed %d: counter %d, want %d (an atomic executed twice or not at all)", seed, got, 1000+adds)
		}
		sa, sb := a.link.MemStats(), b.link.MemStats()
		ca := a.qp.Counters()
		t.Logf("seed %d: faults A→B drop %d corrupt %d dup %d reorder %d; B→A drop %d corrupt %d dup %d reorder %d; A retransmitted %d, B duplicates %d",
			seed, sa.Dropped, sa.Corrupted, sa.Duplicated, sa.Reordered, sb.Dropped, sb.Corrupted, sb.Duplicated, sb.Reordered,
			ca[transport.CntRetransmittedPkts], b.qp.Counters()[transport.CntDuplicateRequest])
		if sa.Dropped+sa.Corrupted == 0 || sb.Dropped+sb.Corrupted == 0 {
			t.Fatalf("seed %d: the faults did not happen", seed)
		}
	})
}
