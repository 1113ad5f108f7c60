package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// ErrAddrInUse: another Listener of the device has the port.
var ErrAddrInUse = errors.New("cm: address already in use")

// listener is a Listener's state; closed and pending are under a.mu.
type listener struct {
	a       *agent
	dev     *qp.Device
	addr    netip.AddrPort
	sid     uint64
	o       Options
	backlog chan *Conn
	pending int
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// parseListenAddr accepts "ip:port", ":port" and "[::]:port".
func parseListenAddr(addr string) (netip.AddrPort, error) {
	if strings.HasPrefix(addr, ":") {
		addr = "0.0.0.0" + addr
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("cm: listen address: %w", err)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func checkLocal(dev *qp.Device, ip netip.Addr) error {
	if ip.IsUnspecified() {
		return nil
	}
	for _, g := range dev.GIDs() {
		if g.Unmap() == ip {
			return nil
		}
	}
	return fmt.Errorf("cm: %v is not an address of device %s", ip, dev.Name())
}

func listen(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*Listener, error) {
	s, err := begin(ctx, dev, addr, opts, kindListen)
	if err != nil {
		return nil, err
	}
	o, a, ap := s.o, s.a, s.addr
	// Room for the backlog and every half-open request that may complete
	// after the check of the backlog in onREQ.
	l := &listener{a: a, dev: dev, o: o, backlog: make(chan *Conn, o.Backlog+halfOpenMax)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	a.mu.Lock()
	ps, _ := connSpace(o.QPType)
	port, sid := a.listenPort(ps, ap.Port(), func(sid uint64) bool { return a.listeners[sid] != nil })
	l.addr, l.sid = netip.AddrPortFrom(ap.Addr(), port), sid
	if a.listeners[l.sid] != nil {
		a.mu.Unlock()
		a.release()
		l.cancel()
		return nil, fmt.Errorf("%w: %v", ErrAddrInUse, l.addr)
	}
	a.listeners[l.sid] = l
	a.mu.Unlock()
	return &Listener{l: l}, nil
}

func (l *listener) accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.backlog:
		return c, nil
	default:
	}
	select {
	case c := <-l.backlog:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, ErrClosed
	}
}

func (l *listener) close() error {
	l.once.Do(func() {
		a := l.a
		a.mu.Lock()
		l.closed = true
		if a.listeners[l.sid] == l {
			delete(a.listeners, l.sid)
		}
		a.mu.Unlock()
		l.cancel()
		l.wg.Wait()
		for {
			select {
			case c := <-l.backlog:
				c.Close()
				continue
			default:
			}
			break
		}
		a.release()
	})
	return nil
}

// serve is the passive side of one REQ (cma_ib_req_handler, then
// rdma_accept → cma_accept_ib): the application's decision, the QP to RTR
// and RTS (rdma_cm moves it to RTS before sending the REP), REP, and the
// wait for the RTU.
func (l *listener) serve(id *cmID, req *mad.REQ, hdr mad.CMAHeader, from madAddr) {
	defer l.wg.Done()
	a := l.a
	var out outbox
	finish := func(c *conn, reason mad.RejectReason, private []byte) {
		a.mu.Lock()
		l.pending--
		if reason != 0 {
			a.sendREJ(&out, id, reason, nil, private)
		}
		a.mu.Unlock()
		a.flush(&out)
		if c != nil {
			c.free()
		}
	}
	r := &Request{
		LocalAddr:   netip.AddrPortFrom(hdr.Dst.Unmap(), l.addr.Port()),
		RemoteAddr:  netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
		PrivateData: wholePrivate(req.PrivateData[mad.CMAHeaderLen:]),
		ServiceID:   req.ServiceID, RemoteQPN: req.LocalQPN,
		ResponderResources: req.ResponderResources, InitiatorDepth: req.InitiatorDepth,
	}
	private := l.o.PrivateData
	if l.o.Accept != nil {
		p, err := l.o.Accept(r)
		if err != nil {
			var re *RejectError
			var rp []byte
			if errors.As(err, &re) {
				rp = re.PrivateData
			}
			if len(rp) > maxREJPrivate {
				rp = rp[:maxREJPrivate]
			}
			l.o.Logger.Debug("cm: request rejected by Accept", "from", r.RemoteAddr, "err", err)
			finish(nil, mad.RejConsumerDefined, rp)
			return
		}
		if p != nil {
			private = p
		}
	}
	if len(private) > maxREPPrivate {
		finish(nil, mad.RejConsumerDefined, nil)
		return
	}
	// What the REQ asks us to take (its initiator depth) and what we may
	// issue (its responder resources), bounded by our own.
	o := l.o
	o.ResponderResources = min(l.o.ResponderResources, req.InitiatorDepth)
	o.InitiatorDepth = min(l.o.InitiatorDepth, req.ResponderResources)
	c, err := newConn(a, l.dev, &o)
	if err != nil {
		l.o.Logger.Warn("cm: cannot create the QP for a request", "from", r.RemoteAddr, "err", err)
		finish(nil, mad.RejConsumerDefined, nil)
		return
	}
	c.id = id
	c.local, c.remote = r.LocalAddr, r.RemoteAddr
	c.peerPrivate = r.PrivateData
	a.mu.Lock()
	id.localQPN = c.qp.QPN()
	ackTimeout := id.avTimeout
	a.mu.Unlock()
	rqPSN := randPSN()
	mtu := min(qp.MTU(req.PathMTU), l.dev.ActiveMTU())
	ctx, cancel := context.WithTimeout(l.ctx, id.timeout)
	a.mu.Lock()
	id.abort = cancel // eviction cancels the QP's path resolution
	a.mu.Unlock()
	err = c.connect(ctx, path{
		dgid: from.GID.Unmap(), dmac: from.MAC, flowLabel: req.Primary.FlowLabel, mtu: mtu, hopLimit: req.Primary.HopLimit, trafficClass: req.Primary.TrafficClass,
		destQPN: req.LocalQPN, rqPSN: rqPSN, sqPSN: req.StartingPSN,
		maxDestRd: o.ResponderResources, maxRd: o.InitiatorDepth,
		timeout: ackTimeout, retry: req.RetryCount, rnr: req.RNRRetryCount,
	})
	cancel()
	if err != nil {
		l.o.Logger.Warn("cm: cannot connect the QP for a request", "from", r.RemoteAddr, "err", err)
		finish(c, mad.RejConsumerDefined, nil)
		return
	}
	rep := &mad.REP{
		LocalQPN: c.qp.QPN(), StartingPSN: rqPSN,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		TargetAckDelay: a.ack, RNRRetryCount: l.o.RNRRetry, LocalCAGUID: a.guid,
	}
	copy(rep.PrivateData[:], private)
	a.mu.Lock()
	if id.state != stReqRcvd {
		a.mu.Unlock()
		finish(c, 0, nil)
		return
	}
	rep.LocalCommID, rep.RemoteCommID = id.localID, id.remoteID
	id.state = stRepSent
	// ib_send_cm_rep: timeout_ms from the REQ's local CM response
	// timeout, retried the REQ's max CM retries times.
	id.send(a, &out, marshal(id.tid, rep), id.maxRet)
	a.mu.Unlock()
	a.flush(&out)

	for {
		select {
		case e := <-id.ev:
			switch e.kind {
			case evRTU:
				a.mu.Lock()
				l.pending--
				closed := l.closed
				a.mu.Unlock()
				c.startWatch()
				cn := c.public()
				if closed {
					cn.Close()
					return
				}
				select {
				case l.backlog <- cn:
				default:
					cn.Close() // cannot happen: the channel has room for every half-open request
				}
				return
			case evREJ, evTimeout, evDREQ, evFinished:
				finish(c, 0, nil)
				return
			}
		case <-l.ctx.Done():
			finish(c, mad.RejConsumerDefined, nil)
			return
		}
	}
}
