package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// SIDRError is a SIDR_REP with a status other than success. It matches
// ErrRejected, and ErrConnRefused for "service ID not supported" (nobody
// listens on the port: cm_sidr_req_handler's IB_SIDR_UNSUPPORTED).
//
// PrivateData is the SIDR_REP's whole 136-byte area (see Conn.PrivateData).
type SIDRError struct {
	Status      mad.SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	return fmt.Sprintf("cm: service ID resolution failed: SIDR_REP status %d (%v)", uint8(e.Status), e.Status)
}

// Is makes a SIDRError match ErrRejected, and ErrConnRefused for status
// "service ID not supported".
func (e *SIDRError) Is(target error) bool {
	return target == ErrRejected || (target == ErrConnRefused && e.Status == mad.SIDRUnsupported)
}

// udEndpoint is a UDEndpoint's state.
type udEndpoint struct {
	resources
	a                     *agent
	ah                    *qp.AH
	remoteQPN, remoteQKey uint32
	local, remote         netip.AddrPort
	peerPrivate           []byte
	port                  uint16
	once                  sync.Once
}

func dialUD(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*UDEndpoint, error) {
	s, err := begin(ctx, dev, addr, opts, kindDialUD)
	if err != nil {
		return nil, err
	}
	o, a, raddr, lip := s.o, s.a, s.addr, s.local
	defer a.release()
	u := &udEndpoint{a: a, remote: raddr}
	if u.resources, err = newUDQP(dev, &o, udpQKey); err != nil {
		return nil, err
	}
	if err := resolvePeer(ctx, u.pd, lip, raddr.Addr()); err != nil {
		u.close()
		return nil, err
	}
	a.mu.Lock()
	lport := o.Local.Port()
	if lport == 0 {
		lport = a.ephemeralPort()
		u.port = lport
	}
	a.mu.Unlock()
	u.local = netip.AddrPortFrom(lip, lport)

	// cma_resolve_ib_udp.
	req := &mad.SIDRREQ{PKey: defaultPKey, ServiceID: mad.ServiceID(mad.PortSpaceUDP, raddr.Port())}
	h := mad.CMAHeader{IPVersion: 4, SrcPort: lport, Src: lip, Dst: raddr.Addr()}
	if !lip.Is4() {
		h.IPVersion = 6
	}
	if err := h.Marshal(req.PrivateData[:]); err != nil {
		u.close()
		return nil, err
	}
	copy(req.PrivateData[mad.CMAHeaderLen:], o.PrivateData)
	var out outbox
	a.mu.Lock()
	id := a.newID()
	id.sidr = true
	id.state = stSIDRReqSent
	id.tid = a.formTID(id)
	id.peer = madAddr{GID: raddr.Addr(), QPN: mad.GSIQPN, QKey: mad.GSIQKey, HopLimit: 64}
	// req.timeout_ms = 1 << (CMA_CM_RESPONSE_TIMEOUT - 8), max_cm_retries
	// CMA_MAX_CM_RETRIES.
	id.timeout = cmMS(cmaCMResponseTimeout)
	id.maxRet = cmaMaxCMRetries
	req.RequestID = id.localID
	id.send(a, &out, marshal(id.tid, req), id.maxRet)
	a.mu.Unlock()
	a.flush(&out)

	for {
		select {
		case <-ctx.Done():
			// cm_destroy_id in SIDR_REQ_SENT: the request is withdrawn
			// silently.
			a.mu.Lock()
			if id.state == stSIDRReqSent {
				a.drop(&out, id)
			}
			a.mu.Unlock()
			a.flush(&out)
			u.close()
			return nil, ctx.Err()
		case e := <-id.ev:
			switch e.kind {
			case evSIDRREP:
				rep := e.sidr
				if rep.Status != mad.SIDRSuccess {
					u.close()
					return nil, &SIDRError{Status: rep.Status, PrivateData: wholePrivate(rep.PrivateData[:])}
				}
				u.remoteQPN, u.remoteQKey = rep.QPN, rep.QKey
				u.peerPrivate = wholePrivate(rep.PrivateData[:])
				ah, err := u.pd.CreateAH(ctx, qp.AHAttr{GID: raddr.Addr(), SGIDIndex: gidIndex(dev, lip), HopLimit: 64,
					FlowLabel: roceFlowLabel(lport, raddr.Port())})
				if err != nil {
					u.close()
					return nil, err
				}
				u.ah = ah
				return &UDEndpoint{resources: &u.resources, u: u}, nil
			case evTimeout, evFinished:
				u.close()
				return nil, fmt.Errorf("%w: no SIDR_REP from %v after %d SIDR_REQs", ErrTimeout, raddr, id.maxRet+1)
			}
		}
	}
}

func (u *udEndpoint) close() error {
	u.once.Do(func() {
		if u.ah != nil {
			u.ah.Destroy()
		}
		_ = u.resources.free()
		if u.port != 0 {
			u.a.mu.Lock()
			delete(u.a.ports, u.port)
			u.a.mu.Unlock()
		}
	})
	return nil
}

// udListener is a UDListener's state; closed is under a.mu.
type udListener struct {
	resources
	a      *agent
	o      Options
	qkey   uint32
	addr   netip.AddrPort
	sid    uint64
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

func listenUD(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*UDListener, error) {
	s, err := begin(ctx, dev, addr, opts, kindListenUD)
	if err != nil {
		return nil, err
	}
	o, a, ap := s.o, s.a, s.addr
	l := &udListener{a: a, o: o, qkey: udpQKey}
	if l.resources, err = newUDQP(dev, &o, udpQKey); err != nil {
		a.release()
		return nil, err
	}
	a.mu.Lock()
	port, sid := a.listenPort(mad.PortSpaceUDP, ap.Port(), func(sid uint64) bool { return a.udListeners[sid] != nil })
	l.addr, l.sid = netip.AddrPortFrom(ap.Addr(), port), sid
	if a.udListeners[l.sid] != nil {
		a.mu.Unlock()
		_ = l.free()
		a.release()
		return nil, fmt.Errorf("%w: %v (UDP)", ErrAddrInUse, l.addr)
	}
	a.udListeners[l.sid] = l
	a.mu.Unlock()
	return &UDListener{resources: &l.resources, u: l}, nil
}

func (l *udListener) close() error {
	l.once.Do(func() {
		a := l.a
		a.mu.Lock()
		l.closed = true
		if a.udListeners[l.sid] == l {
			delete(a.udListeners, l.sid)
		}
		a.mu.Unlock()
		l.wg.Wait()
		_ = l.free()
		a.release()
	})
	return nil
}

// serve answers one SIDR_REQ (cma_sidr_rep_handler's peer: rdma_accept on a
// UD id sends SIDR_REP success with the QP's number and Q_Key; rdma_reject
// sends status reject).
func (l *udListener) serve(req *mad.SIDRREQ, hdr mad.CMAHeader, tid uint64, from madAddr, key sidrKey) {
	defer l.wg.Done()
	a := l.a
	rep := &mad.SIDRREP{RequestID: req.RequestID, ServiceID: req.ServiceID}
	private := l.o.PrivateData
	if l.o.Accept != nil {
		r := &Request{
			LocalAddr:   netip.AddrPortFrom(hdr.Dst.Unmap(), l.addr.Port()),
			RemoteAddr:  netip.AddrPortFrom(hdr.Src.Unmap(), hdr.SrcPort),
			PrivateData: wholePrivate(req.PrivateData[mad.CMAHeaderLen:]),
			ServiceID:   req.ServiceID,
		}
		p, err := l.o.Accept(r)
		switch {
		case err != nil:
			rep.Status = mad.SIDRReject
			private = nil
			var re *RejectError
			if errors.As(err, &re) {
				private = re.PrivateData
			}
		case p != nil:
			private = p
		}
	}
	if rep.Status == mad.SIDRSuccess {
		rep.QPN, rep.QKey = l.qp.QPN(), l.qkey
	}
	copy(rep.PrivateData[:], private)
	var out outbox
	out.add(from, marshal(tid, rep))
	a.mu.Lock()
	delete(a.sidrPending, key)
	a.mu.Unlock()
	a.flush(&out)
}
