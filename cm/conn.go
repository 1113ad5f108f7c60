package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/wire"
)

// ErrDisconnected is Conn.Err after the peer's DREQ (or a REJ on an
// established connection).
var ErrDisconnected = errors.New("cm: disconnected by the peer")

// closeWait bounds how long Close waits for the DREP. The DREQ's own
// retries (its timeout from the REQ's fields, max CM retries) may run
// longer; they continue in the background and the ID enters timewait.
const closeWait = 10 * time.Second

const defaultBacklog = 128

// Private data room (cm_msgs.h sizes less the cma_hdr).
const (
	maxREQPrivate     = mad.REQUserDataLen
	maxREPPrivate     = mad.REPPrivateDataLen
	maxREJPrivate     = mad.REJPrivateDataLen
	maxSIDRREQPrivate = mad.SIDRREQUserDataLen
	maxSIDRREPPrivate = mad.SIDRREPPrivateDataLen
)

// options is Options with the defaults filled in.
func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Cap.MaxSendWR == 0 {
		r.Cap.MaxSendWR = 16
	}
	if r.Cap.MaxRecvWR == 0 {
		r.Cap.MaxRecvWR = 16
	}
	if r.Cap.MaxSendSGE == 0 {
		r.Cap.MaxSendSGE = 1
	}
	if r.Cap.MaxRecvSGE == 0 {
		r.Cap.MaxRecvSGE = 1
	}
	if r.ResponderResources == 0 {
		r.ResponderResources = 1
	}
	if r.InitiatorDepth == 0 {
		r.InitiatorDepth = 1
	}
	if !r.ZeroRetry {
		if r.RetryCount == 0 {
			r.RetryCount = 7
		}
		if r.RNRRetry == 0 {
			r.RNRRetry = 7
		}
	}
	r.RetryCount = min(r.RetryCount, 7)
	r.RNRRetry = min(r.RNRRetry, 7)
	if r.QPType == qp.QPTypeUC {
		r.ResponderResources, r.InitiatorDepth = 0, 0 // no READ or atomics on UC
	}
	if r.Backlog <= 0 {
		r.Backlog = defaultBacklog
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}

// conn is a Conn's state.
type conn struct {
	resources
	a             *agent
	id            *cmID
	dev           *qp.Device
	local, remote netip.AddrPort
	peerPrivate   []byte
	log           *slog.Logger
	port          uint16 // the ephemeral port Dial reserved (0: none)

	done        chan struct{}
	closing     chan struct{} // closed when the DREQ got its DREP (or gave up)
	mu          sync.Mutex
	reason      error
	doneOnce    sync.Once
	closeOnce   sync.Once
	closeErr    error
	closingOnce sync.Once
	watching    bool
}

// newQP creates the connection's PD, CQs and RC QP (as Options say) and
// moves the QP to INIT with the access flags cm_init_qp_init_attr gives:
// REMOTE_WRITE, plus READ and ATOMIC when we take RDMA READs/atomics.
func newConn(a *agent, dev *qp.Device, o *Options) (*conn, error) {
	r, err := newResources(dev, o)
	if err != nil {
		return nil, err
	}
	c := &conn{resources: r, a: a, dev: dev, log: o.Logger, done: make(chan struct{}), closing: make(chan struct{})}
	if o.QPType != qp.QPTypeRC && o.QPType != qp.QPTypeUC {
		c.free()
		return nil, fmt.Errorf("cm: QP type %v cannot be connected (RC or UC)", o.QPType)
	}
	if c.qp, err = c.pd.CreateQP(qp.InitAttr{SendCQ: c.sendCQ, RecvCQ: c.recvCQ, Cap: o.Cap, Type: o.QPType}); err != nil {
		c.free()
		return nil, err
	}
	access := qp.RemoteWrite
	if o.ResponderResources > 0 {
		access |= qp.RemoteRead | qp.RemoteAtomic
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.qp.Modify(ctx, qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: access},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		c.free()
		return nil, err
	}
	if o.Prepare != nil {
		if err := o.Prepare(c.qp); err != nil {
			c.free()
			return nil, fmt.Errorf("cm: Prepare: %w", err)
		}
	}
	return c, nil
}

// free destroys what the connection created.
func (c *conn) free() {
	if c.qp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.qp.Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState)
		cancel()
	}
	_ = c.resources.free()
	if c.port != 0 {
		c.a.mu.Lock()
		delete(c.a.ports, c.port)
		c.a.mu.Unlock()
		c.port = 0
	}
}

// path is what both sides need to move the QP to RTR and RTS.
type path struct {
	dgid         netip.Addr
	dmac         net.HardwareAddr // the passive side: the REQ's Ethernet source (nil: resolve dgid)
	flowLabel    uint32
	mtu          qp.MTU
	hopLimit     uint8
	trafficClass uint8
	destQPN      uint32
	rqPSN        uint32
	sqPSN        uint32
	maxDestRd    uint8 // max_dest_rd_atomic: our responder resources
	maxRd        uint8 // max_rd_atomic: our initiator depth
	timeout      uint8 // local ACK timeout
	retry, rnr   uint8
}

// connect is cm_init_qp_rtr_attr and cm_init_qp_rts_attr applied.
func (c *conn) connect(ctx context.Context, p path) error {
	av := qp.AV{DGID: p.dgid, SGIDIndex: c.sgidIndex(), HopLimit: p.hopLimit, TrafficClass: p.trafficClass,
		FlowLabel: p.flowLabel}
	if len(p.dmac) == 6 {
		// As cm_req_handler: the path's MAC is the REQ's source, so a
		// REQ costs no neighbour resolution (which a spoofed source
		// would make wait for as long as the setup may take).
		av.DMAC = [6]byte(p.dmac)
	}
	if c.qp.Type() == qp.QPTypeUC {
		// cm_init_qp_rtr_attr / cm_init_qp_rts_attr for IB_QPT_UC: the
		// path, MTU, QPN and PSNs only.
		if err := c.qp.Modify(ctx, qp.Attr{State: qp.StateRTR, PathMTU: p.mtu, DestQPN: p.destQPN,
			RQPSN: wire.PSN(p.rqPSN), AV: av}, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN); err != nil {
			return fmt.Errorf("cm: QP to RTR: %w", err)
		}
		if err := c.qp.Modify(ctx, qp.Attr{State: qp.StateRTS, SQPSN: wire.PSN(p.sqPSN)}, qp.AttrState|qp.AttrSQPSN); err != nil {
			return fmt.Errorf("cm: QP to RTS: %w", err)
		}
		return nil
	}
	if err := c.qp.Modify(ctx, qp.Attr{State: qp.StateRTR, PathMTU: p.mtu, DestQPN: p.destQPN,
		RQPSN: wire.PSN(p.rqPSN), MaxDestRdAtomic: p.maxDestRd, MinRNRTimer: 0, AV: av},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|
			qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
		return fmt.Errorf("cm: QP to RTR: %w", err)
	}
	if err := c.qp.Modify(ctx, qp.Attr{State: qp.StateRTS, Timeout: p.timeout, RetryCnt: p.retry,
		RNRRetry: p.rnr, SQPSN: wire.PSN(p.sqPSN), MaxRdAtomic: p.maxRd},
		qp.AttrState|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrSQPSN|
			qp.AttrMaxQPRdAtomic); err != nil {
		return fmt.Errorf("cm: QP to RTS: %w", err)
	}
	return nil
}

// sgidIndex is the GID index of the connection's local address.
func (c *conn) sgidIndex() uint8 { return gidIndex(c.dev, c.local.Addr()) }

// resolvePeer resolves the peer's MAC before the first MAD, as
// rdma_resolve_addr does before rdma_connect: an address nobody answers
// ARP or NDP for fails here, bounded by ctx (or the device's resolve
// timeout when ctx has no deadline), instead of after every retry of a REQ
// that can never be sent. The result stays in the device's neighbour
// cache for the MADs and the QP.
func resolvePeer(ctx context.Context, pd *qp.PD, lip, peer netip.Addr) error {
	ah, err := pd.CreateAH(ctx, qp.AHAttr{GID: peer, SGIDIndex: gidIndex(pd.Device(), lip)})
	if err != nil {
		return fmt.Errorf("cm: address resolution: %w", err)
	}
	ah.Destroy()
	return nil
}

func gidIndex(dev *qp.Device, ip netip.Addr) uint8 {
	for i, g := range dev.GIDs() {
		if g.Unmap() == ip.Unmap() {
			return uint8(i)
		}
	}
	return 1
}

// localAddr picks the device's address for a peer: Options.Local's IP, or
// the first GID of the peer's family that is not link-local.
func localAddr(dev *qp.Device, want netip.Addr, peer netip.Addr) (netip.Addr, error) {
	if want.IsValid() && !want.IsUnspecified() {
		for _, g := range dev.GIDs() {
			if g.Unmap() == want.Unmap() {
				return want.Unmap(), nil
			}
		}
		return netip.Addr{}, fmt.Errorf("cm: %v is not an address of device %s", want, dev.Name())
	}
	for _, g := range dev.GIDs() {
		g = g.Unmap()
		if g.Is4() == peer.Unmap().Is4() && !g.IsLinkLocalUnicast() {
			return g, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("cm: device %s has no address for %v", dev.Name(), peer)
}

func gid16(ip netip.Addr) [16]byte { return ip.Unmap().As16() } // IPv4: ::ffff:a.b.c.d

// roceFlowLabel is cma_get_roce_udp_flow_label for IPv4 (and IPv6 without
// a flow label of its own): a hash of the ports, which the QPs turn into
// their UDP source port.
func roceFlowLabel(sport, dport uint16) uint32 { return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF }

func randPSN() uint32 { return rand.Uint32() & 0xFFFFFF }

// connSpace is the rdma_cm port space and the REQ's transport type of a
// connection's QP type: RC in the TCP port space, UC in the IB one.
func connSpace(t qp.QPType) (mad.PortSpace, mad.TransportType) {
	if t == qp.QPTypeUC {
		return mad.PortSpaceIB, mad.TransportUC
	}
	return mad.PortSpaceTCP, mad.TransportRC
}

// ephemeralPort picks a free local port as cma_alloc_any_port does, from
// the kernel's default ip_local_port_range. Called with a.mu held.
func (a *agent) ephemeralPort() uint16 {
	for {
		p := uint16(32768 + rand.IntN(60999-32768+1))
		if !a.ports[p] {
			a.ports[p] = true
			return p
		}
	}
}

// listenPort is the port a listener in port space ps binds, an
// ephemeral one not taken there when port is 0, and its service ID; taken
// reports whether a service ID has a listener. Called with a.mu held.
func (a *agent) listenPort(ps mad.PortSpace, port uint16, taken func(sid uint64) bool) (uint16, uint64) {
	if port == 0 {
		for port == 0 || taken(mad.ServiceID(ps, port)) {
			port = a.ephemeralPort()
			delete(a.ports, port)
		}
	}
	return port, mad.ServiceID(ps, port)
}

func dial(ctx context.Context, dev *qp.Device, addr string, opts *Options) (*Conn, error) {
	s, err := begin(ctx, dev, addr, opts, kindDial)
	if err != nil {
		return nil, err
	}
	o, a, raddr, lip := s.o, s.a, s.addr, s.local
	defer a.release()
	c, err := newConn(a, dev, &o)
	if err != nil {
		return nil, err
	}
	if err := resolvePeer(ctx, c.pd, lip, raddr.Addr()); err != nil {
		c.free()
		return nil, err
	}
	a.mu.Lock()
	lport := o.Local.Port()
	if lport == 0 {
		lport = a.ephemeralPort()
		c.port = lport
	}
	a.mu.Unlock()
	c.local = netip.AddrPortFrom(lip, lport)
	c.remote = raddr

	// cma_connect_ib and cm_format_req.
	var priv [mad.REQPrivateDataLen]byte
	h := mad.CMAHeader{IPVersion: 4, SrcPort: lport, Src: lip, Dst: raddr.Addr()}
	if !lip.Is4() {
		h.IPVersion = 6
	}
	if err := h.Marshal(priv[:]); err != nil {
		c.free()
		return nil, err
	}
	copy(priv[mad.CMAHeaderLen:], o.PrivateData)
	rqPSN := randPSN()
	mtu := dev.ActiveMTU()
	const hopLimit = 64
	ps, transport := connSpace(o.QPType)
	req := &mad.REQ{
		ServiceID:   mad.ServiceID(ps, raddr.Port()),
		LocalCAGUID: a.guid, LocalQPN: c.qp.QPN(),
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RemoteCMResponseTimeout: cmaCMResponseTimeout, TransportType: transport,
		StartingPSN: rqPSN, LocalCMResponseTimeout: cmaCMResponseTimeout, RetryCount: o.RetryCount,
		PKey: defaultPKey, PathMTU: uint8(mtu), RNRRetryCount: o.RNRRetry, MaxCMRetries: cmaMaxCMRetries,
		Primary: mad.Path{
			// hop_limit > 1: the permissive LIDs (cm_format_req).
			LocalLID: permissiveLID, RemoteLID: permissiveLID,
			LocalGID: gid16(lip), RemoteGID: gid16(raddr.Addr()),
			HopLimit: hopLimit, LocalAckTimeout: cmAckTimeout(a.ack, cmaPacketLifetime),
			FlowLabel: roceFlowLabel(lport, raddr.Port()),
		},
		PrivateData: priv,
	}

	var out outbox
	a.mu.Lock()
	id := a.newID()
	c.id = id
	req.LocalCommID = id.localID
	id.state = stReqSent
	id.tid = a.formTID(id)
	id.localQPN = c.qp.QPN()
	id.peer = madAddr{GID: raddr.Addr(), QPN: mad.GSIQPN, QKey: mad.GSIQKey, HopLimit: hopLimit}
	// ib_send_cm_req: timeout_ms = 2 × the packet life time + the remote
	// CM response timeout; av.timeout = packet life time + 1.
	id.timeout = 2*cmMS(cmaPacketLifetime) + cmMS(req.RemoteCMResponseTimeout)
	id.maxRet = int(req.MaxCMRetries)
	id.avTimeout = cmaPacketLifetime + 1
	id.send(a, &out, marshal(id.tid, req), id.maxRet)
	a.mu.Unlock()
	a.flush(&out)

	fail := func(err error) (*Conn, error) {
		c.free()
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			// cm_destroy_id in REQ_SENT: REJ timeout with our CA GUID as
			// the ARI; after the REP, REJ consumer defined.
			a.mu.Lock()
			var ari [8]byte
			binary.BigEndian.PutUint64(ari[:], a.guid)
			if id.state == stReqSent || id.state == stMRAReqRcvd {
				a.sendREJ(&out, id, mad.RejTimeout, ari[:], nil)
			} else {
				a.sendREJ(&out, id, mad.RejConsumerDefined, nil, nil)
			}
			a.mu.Unlock()
			a.flush(&out)
			return fail(ctx.Err())
		case e := <-id.ev:
			switch e.kind {
			case evREP:
				if cn, err := c.established(ctx, id, e.rep, rqPSN, mtu, hopLimit, &o); err != nil {
					return fail(err)
				} else {
					return cn, nil
				}
			case evREJ:
				return fail(rejectError(e.rej))
			case evTimeout:
				return fail(fmt.Errorf("%w: no REP from %v after %d REQs", ErrTimeout, raddr, id.maxRet+1))
			case evFinished:
				return fail(fmt.Errorf("%w: connection attempt to %v ended", ErrRejected, raddr))
			}
		}
	}
}

// established is the active side after the REP (cma_rep_recv): QP to RTR
// and RTS with the REP's values, then RTU.
func (c *conn) established(ctx context.Context, id *cmID, rep *mad.REP, rqPSN uint32, mtu qp.MTU,
	hopLimit uint8, o *Options) (*Conn, error) {
	a := c.a
	a.mu.Lock()
	ackTimeout := id.avTimeout // cm_rep_handler: cm_ack_timeout(target_ack_delay, packet life time)
	a.mu.Unlock()
	c.peerPrivate = wholePrivate(rep.PrivateData[:])
	err := c.connect(ctx, path{
		dgid: c.remote.Addr(), flowLabel: roceFlowLabel(c.local.Port(), c.remote.Port()), mtu: mtu,
		hopLimit: hopLimit, destQPN: rep.LocalQPN,
		rqPSN: rqPSN, sqPSN: rep.StartingPSN,
		// The REP's initiator depth is what we must answer; its
		// responder resources what we may issue (cm_rep_handler).
		maxDestRd: rep.InitiatorDepth, maxRd: rep.ResponderResources,
		timeout: ackTimeout, retry: o.RetryCount, rnr: rep.RNRRetryCount,
	})
	var out outbox
	a.mu.Lock()
	if err == nil && id.state != stRepRcvd {
		err = fmt.Errorf("%w: connection to %v ended during setup (%v)", ErrRejected, c.remote, id.state)
	}
	if err != nil {
		a.sendREJ(&out, id, mad.RejConsumerDefined, nil, nil)
		a.mu.Unlock()
		a.flush(&out)
		return nil, err
	}
	id.rtu = marshal(id.tid, &mad.RTU{LocalCommID: id.localID, RemoteCommID: id.remoteID})
	id.state = stEstablished
	out.add(id.peer, id.rtu)
	a.mu.Unlock()
	a.flush(&out)
	c.startWatch()
	return c.public(), nil
}

// wholePrivate copies a received private data area whole, as rdma_cm hands
// it to the consumer (cma.c sets private_data_len to the area's size: REQ
// 92 − 36-byte cma_hdr = 56, REP 196, REJ 148, SIDR_REQ 216 − 36 = 180,
// SIDR_REP 136). The CM carries no length, so the bytes after what the peer
// wrote are the zeros it padded with; a consumer that knows its format
// reads its length from the front. Trimming trailing zeros would cut
// binary data that ends in a zero byte.
func wholePrivate(b []byte) []byte {
	return append([]byte(nil), b...)
}

func rejectError(m *mad.REJ) error {
	return &RejectError{Reason: m.Reason, PrivateData: wholePrivate(m.PrivateData[:])}
}

// public is the Conn the application gets.
func (c *conn) public() *Conn { return &Conn{resources: &c.resources, c: c} }

// startWatch hands the ID's events to a goroutine for the connection's
// life: DREQ from the peer, DREP for Close, the end of timewait.
func (c *conn) startWatch() {
	c.mu.Lock()
	c.watching = true
	c.mu.Unlock()
	go c.watch()
}

func (c *conn) watch() {
	for e := range c.id.ev {
		switch e.kind {
		case evDREQ, evREJ:
			// Also the answer to our own DREQ when both sides close at
			// once (the DREQs cross; each side DREPs the other's).
			c.disconnected(ErrDisconnected)
			c.closed()
		case evDREP, evTimeout:
			c.closed()
		case evFinished:
			c.closed()
			c.disconnected(ErrClosed)
			return
		}
	}
}

// disconnected ends the connection from the peer's side: QP to ERR (its
// queues flush), Done closed.
func (c *conn) disconnected(reason error) {
	c.doneOnce.Do(func() {
		c.mu.Lock()
		c.reason = reason
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.qp.Modify(ctx, qp.Attr{State: qp.StateErr}, qp.AttrState)
		cancel()
		close(c.done)
	})
}

func (c *conn) closed() { c.closingOnce.Do(func() { close(c.closing) }) }

func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

func (c *conn) close() error {
	c.closeOnce.Do(func() {
		a := c.a
		var out outbox
		a.mu.Lock()
		wait := c.id.state == stEstablished
		a.sendDREQ(&out, c.id)
		a.mu.Unlock()
		a.flush(&out)
		if wait {
			t := time.NewTimer(closeWait)
			select {
			case <-c.closing:
			case <-t.C:
				c.closeErr = fmt.Errorf("%w: no DREP from %v", ErrTimeout, c.remote)
			}
			t.Stop()
		}
		c.disconnected(ErrClosed)
		c.free()
	})
	return c.closeErr
}
