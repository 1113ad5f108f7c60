package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/netdev"
	"github.com/goroce/goroce/netdev/nspair"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// tryLink gives a qp device in manual mode the non-blocking read it needs.
type tryLink struct {
	nic.Link
	ap *afpacket.Link
}

func (l *tryLink) TryReadBatch(bufs [][]byte, sizes []int) int {
	n, _ := l.ap.TryReadBatch(bufs, sizes)
	return n
}

// polledPingPong is the 64-byte WRITE_WITH_IMM ping-pong with devices in
// manual mode over AF_PACKET (the only backend with a non-blocking read):
// no receive or timer goroutine; each side's one goroutine spins on
// Device.Poll (read the ring, run the engines) and CQ.Poll. It shows the
// round trip without goroutine hand-offs: the engine's floor on this link.
func polledPingPong(pair *nspair.Pair, lim limit) (latency, error) {
	type side struct {
		link nic.Link
		info *netdev.Info
		dev  *qp.Device
		cq   *qp.CQ
		q    *qp.QP
		mr   *qp.MR
	}
	var s [2]side
	peers := [2]nspair.End{pair.B, pair.A}
	defer func() {
		for _, x := range s {
			if x.dev != nil {
				x.dev.Close()
			}
			if x.link != nil {
				x.link.Close()
			}
		}
	}()
	for i, ns := range []nspair.Side{nspair.A, nspair.B} {
		x := &s[i]
		err := pair.Do(ns, func() error {
			var err error
			x.link, x.info, err = netdev.OpenLink(pair.End(ns).Ifname, netdev.Options{Backend: netdev.AFPacket, Logger: logger})
			return err
		})
		if err != nil {
			return latency{}, err
		}
		ap, ok := x.info.Link.(*afpacket.Link)
		if !ok {
			return latency{}, errors.New("not an AF_PACKET link")
		}
		x.dev, err = qp.Open(qp.Config{Link: &tryLink{Link: x.link, ap: ap}, IP: x.info.IP, Manual: true, Seed: int64(i + 1),
			Neighbors: map[netip.Addr]net.HardwareAddr{peers[i].Addr: peers[i].MAC}})
		if err != nil {
			return latency{}, err
		}
		pd := x.dev.AllocPD()
		x.cq, _ = x.dev.CreateCQ(4096)
		if x.q, err = pd.CreateQP(qp.InitAttr{SendCQ: x.cq, RecvCQ: x.cq,
			Cap: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return latency{}, err
		}
		if x.mr, err = pd.RegMR(make([]byte, 4096), memreg.LocalWrite|memreg.RemoteWrite); err != nil {
			return latency{}, err
		}
	}
	a, b := &s[0], &s[1]
	if err := a.q.Connect(qp.Remote{QPN: b.q.QPN(), PSN: 0x200, GID: pair.B.Addr}, qp.ConnectOptions{SQPSN: 0x100}); err != nil {
		return latency{}, err
	}
	if err := b.q.Connect(qp.Remote{QPN: a.q.QPN(), PSN: 0x100, GID: pair.A.Addr}, qp.ConnectOptions{SQPSN: 0x200}); err != nil {
		return latency{}, err
	}
	for _, x := range []*side{a, b} {
		for range latRecvs {
			if err := x.q.PostRecv(&qp.RecvWR{}); err != nil {
				return latency{}, err
			}
		}
	}
	write := func(from, to *side) error {
		return from.q.PostSend(&qp.SendWR{Opcode: transport.WRRDMAWriteWithImm, Flags: transport.SendSignaled,
			SGL:        []qp.SGE{{Addr: from.mr.IOVA(), Length: 64, LKey: from.mr.LKey()}},
			RemoteAddr: to.mr.IOVA(), RKey: to.mr.RKey(), Imm: 1})
	}
	var stop atomic.Bool
	// recv spins until a receive completion (send completions are skipped).
	recv := func(x *side) error {
		var wc [4]qp.WC
		deadline := time.Now().Add(stallTime)
		for {
			x.dev.Poll()
			n, err := x.cq.Poll(wc[:])
			if err != nil {
				return err
			}
			for _, c := range wc[:n] {
				if c.Status != transport.WCSuccess {
					return fmt.Errorf("completion %v", c)
				}
				if c.Opcode == transport.WCRecvRDMAWithImm {
					return x.q.PostRecv(&qp.RecvWR{})
				}
			}
			if n == 0 {
				if stop.Load() {
					return errStopped
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("no receive completion in %v", stallTime)
				}
				runtime.Gosched()
			}
		}
	}
	var wg sync.WaitGroup
	var echoErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if err := recv(b); err != nil {
				if err != errStopped {
					echoErr = err
				}
				return
			}
			if err := write(b, a); err != nil {
				echoErr = err
				return
			}
		}
	}()
	var rtts []time.Duration
	var err error
	start := time.Now()
	for len(rtts) < lim.n && time.Since(start) < lim.d {
		t0 := time.Now()
		if err = write(a, b); err != nil {
			break
		}
		if err = recv(a); err != nil {
			break
		}
		rtts = append(rtts, time.Since(t0))
	}
	stop.Store(true)
	wg.Wait()
	if err == nil {
		err = echoErr
	}
	if err != nil {
		return latency{}, err
	}
	return summarize(rtts), nil
}

var errStopped = errors.New("stopped")
