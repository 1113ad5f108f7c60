package qp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	satomic "sync/atomic"
	"time"

	"github.com/goroce/goroce/wire"
)

// The General Services Interface: QP1, a UD QP with the well-known Q_Key
// 0x80010000 that carries 256-byte MADs (the IB CM among them), and the
// management-class dispatch the kernel's ib_mad does
// (drivers/infiniband/core/mad.c): one handler per class; a request of a
// class nobody handles is answered "unsupported" when its method is Get or
// Set (generate_unmatched_resp) and dropped otherwise.

// MADLen is the size of every MAD on the GSI (struct ib_mad).
const MADLen = 256

// GSIQKey is the Q_Key of QP1 (IB_QP1_QKEY).
const GSIQKey = wire.GSIQKey

// MAD header fields the dispatch reads (IBTA 13.4.2, include/rdma/ib_mad.h).
const (
	madBaseVersion          = 1    // IB_MGMT_BASE_VERSION
	madMethodGet            = 0x01 // IB_MGMT_METHOD_GET
	madMethodSet            = 0x02 // IB_MGMT_METHOD_SET
	madMethodSend           = 0x03 // IB_MGMT_METHOD_SEND
	madMethodGetResp        = 0x81 // IB_MGMT_METHOD_GET_RESP
	madStatusUnsupportedAtt = 0x000C
	madClassSubnLID         = 0x01 // IB_MGMT_CLASS_SUBN_LID_ROUTED
	madClassSubnDR          = 0x81 // IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE
	madClassCM              = 0x07 // IB_MGMT_CLASS_CM
	madAttrClassPortInfo    = 0x0001
)

// gsiRecvSlots is how many receives QP1 keeps posted; each is reposted as
// soon as its MAD was handled. ib_mad posts 512 (IB_MAD_QP_RECV_SIZE).
const (
	gsiNegativeMax = 4096 // entries of the negative cache
	gsiRecvSlots   = 256
	gsiSlotLen     = GRHLen + MADLen
	gsiSendWR      = 64
)

// MADAddr is where a MAD comes from or goes to. For the CM: QPN 1 and
// QKey GSIQKey.
type MADAddr struct {
	GID                    GID
	QPN                    uint32
	QKey                   uint32
	HopLimit, TrafficClass uint8
	// MAC is the Ethernet address to send to. A received MAD's From has
	// the frame's source here, so that an answer goes back where the
	// request came from without resolving GID (as a NIC answers a MAD):
	// a source nobody answers ARP for cannot stall the sender. Nil: Send
	// resolves GID through the device's neighbour resolver.
	MAC net.HardwareAddr
}

// gsiNegativeTTL is how long a failed resolution of a MAD's destination is
// remembered: Sends to that GID meanwhile fail at once instead of waiting
// for the resolver again.
const gsiNegativeTTL = time.Second

// MAD is one received MAD. Data is the 256 bytes, valid only during the
// handler's call (the receive buffer is reposted after it returns); From
// is the sender, with the hop limit and traffic class of its packet.
type MAD struct {
	From MADAddr
	Data []byte
}

// GSIStats count the GSI's MADs.
type GSIStats struct {
	Received uint64 // MADs received (before validation)
	Sent     uint64 // MADs sent by Send
	// Dropped is the sum of the drop reasons below.
	Dropped           uint64
	DroppedNoHandler  uint64 // no handler for the class, and not a Get/Set to answer
	DroppedBadLength  uint64 // not exactly 256 bytes
	DroppedBadVersion uint64 // base version not 1
	DroppedInvalid    uint64 // ib_mad's validate_mad filters: SMPs on QP1, CM methods other than Send
	// AnsweredUnsupported are the Get/Set requests of an unhandled class
	// answered with GetResp and status "unsupported method/attribute".
	AnsweredUnsupported uint64
	SendErrors          uint64 // failed send completions
	// Recovered counts the times QP1 was found in ERR and brought back
	// to RTS with its receives posted again (GSI.recover).
	Recovered uint64
}

// GSI is a device's QP1 (Device.GSI).
type GSI struct {
	d      *Device
	pd     *PD
	qp     *QP
	cq     *CQ
	recvMR *MR
	sendMR *MR

	sendMu sync.Mutex // the one send buffer (a UD send is copied out during PostSend); held by recover

	hmu      sync.Mutex
	handlers [256]*gsiHandler

	dispatchMu sync.Mutex // one dispatcher at a time, in arrival order
	wcs        [32]WC
	resp       [MADLen]byte

	cancel context.CancelFunc // normal mode: stops the dispatch goroutine

	negMu    sync.Mutex
	negative map[netip.Addr]negEntry // failed resolutions, for gsiNegativeTTL

	received, sent, noHandler, badLength, badVersion, invalid, answered, sendErrors, recovered satomic.Uint64
}

type gsiHandler struct{ fn func(MAD) }

type negEntry struct {
	until time.Time
	err   error
}

// GSI returns the device's QP1, creating it on the first call: a UD QP
// with Q_Key GSIQKey, its receives posted. Handlers run on one dispatch
// goroutine (in manual and busy-poll modes: on the goroutine that calls
// Device.Poll, after the engines ran), in arrival order, never with the
// device's lock held; they may call Send. Device.Close stops it; a handler
// must not call Device.Close.
func (d *Device) GSI() (*GSI, error) {
	d.gsiMu.Lock()
	defer d.gsiMu.Unlock()
	if g := d.gsi.Load(); g != nil {
		return g, nil
	}
	if d.isClosed() {
		return nil, ErrClosed
	}
	g := &GSI{d: d, pd: d.AllocPD()}
	var err error
	if g.cq, err = d.CreateCQ(gsiRecvSlots + gsiSendWR); err != nil {
		return nil, err
	}
	g.cq.passive = true // its goroutine waits for good: it must not keep the link (selfdrive.go)
	g.qp, err = g.pd.createQP(InitAttr{SendCQ: g.cq, RecvCQ: g.cq, Type: QPTypeUD,
		Cap: Caps{MaxSendWR: gsiSendWR, MaxRecvWR: gsiRecvSlots}}, transportGSIQPN)
	if err != nil {
		return nil, fmt.Errorf("qp: GSI: %w", err)
	}
	fail := func(err error) (*GSI, error) {
		g.qp.Destroy()
		return nil, fmt.Errorf("qp: GSI: %w", err)
	}
	if err := g.bringUp(); err != nil {
		return fail(err)
	}
	if g.recvMR, err = g.pd.RegMR(make([]byte, gsiRecvSlots*gsiSlotLen), LocalWrite); err != nil {
		return fail(err)
	}
	if g.sendMR, err = g.pd.RegMR(make([]byte, MADLen), 0); err != nil {
		return fail(err)
	}
	if err := g.postAll(); err != nil {
		return fail(err)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fail(ErrClosed)
	}
	d.drv.startGSI(g)
	d.gsi.Store(g)
	d.mu.Unlock()
	return g, nil
}

// bringUp moves QP1 from RESET to RTS, as ib_mad_port_start does: INIT
// with the GSI Q_Key, RTR, RTS.
func (g *GSI) bringUp() error {
	ctx := context.Background()
	if err := g.qp.Modify(ctx, Attr{State: StateInit, Port: 1, QKey: GSIQKey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey); err != nil {
		return err
	}
	if err := g.qp.Modify(ctx, Attr{State: StateRTR}, AttrState); err != nil {
		return err
	}
	return g.qp.Modify(ctx, Attr{State: StateRTS}, AttrState|AttrSQPSN)
}

// postAll posts every receive slot.
func (g *GSI) postAll() error {
	for i := range gsiRecvSlots {
		if err := g.repost(uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

// recover brings QP1 back when it is in ERR (a receive or send error
// moved it there, or something else did): RESET, then INIT, RTR and RTS
// again and every receive posted anew, so that the connection manager
// and every other class keep working. The kernel's MAD layer recovers
// its QP1 from send errors (ib_mad_send_error: SQE back to RTS, the
// flushed sends posted again); goroce's UD QPs have no SQE state (an
// error moves them to ERR, as rxe's do), so recovery starts from ERR and
// reposts the receives too. The MADs flushed by the error are lost: their
// senders' retries (the CM's timeouts) send them again. The flush
// completions still queued are ignored (the QP is no longer in ERR when
// they are handled). It returns whether it recovered QP1.
func (g *GSI) recover() bool {
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	if g.qp.State() != StateErr || g.d.isClosed() {
		return false
	}
	err := g.qp.Modify(context.Background(), Attr{State: StateReset}, AttrState)
	if err == nil {
		err = g.bringUp()
	}
	if err == nil {
		err = g.postAll()
	}
	if err != nil {
		if !g.d.isClosed() {
			g.d.log.Error("goroce: GSI cannot recover QP1 from ERR", "device", g.d.Name(), "err", err)
		}
		return false
	}
	g.recovered.Add(1)
	g.d.log.Warn("goroce: GSI QP1 was in ERR: reset, moved to RTS, receives reposted", "device", g.d.Name())
	return true
}

// transportGSIQPN is QP1's number.
const transportGSIQPN = 1

// QP returns QP1 itself (its counters and state; do not post to it).
func (g *GSI) QP() *QP { return g.qp }

// Handle registers h for the MADs of management class class (0x07: the
// CM). A class has at most one handler; unregister removes it.
func (g *GSI) Handle(class uint8, h func(m MAD)) (unregister func(), err error) {
	if h == nil {
		return nil, fmt.Errorf("qp: GSI handle class %#x: nil handler: %w", class, ErrInvalidArgument)
	}
	g.hmu.Lock()
	defer g.hmu.Unlock()
	if g.handlers[class] != nil {
		return nil, fmt.Errorf("qp: GSI handle class %#x: a handler is already registered: %w", class, ErrInvalidArgument)
	}
	e := &gsiHandler{fn: h}
	g.handlers[class] = e
	return func() {
		g.hmu.Lock()
		if g.handlers[class] == e {
			g.handlers[class] = nil
		}
		g.hmu.Unlock()
	}, nil
}

// Send sends one MAD (exactly MADLen bytes) from QP1 to to.QPN as a UD
// SEND_ONLY. The DETH carries GSIQKey, as every datagram from QP1 does on
// rxe; to.QKey is checked but only matters to non-GSI peers. ctx bounds
// the resolution of the peer's MAC, which is skipped when to.MAC is set
// (an answer to a received MAD's From). A failed resolution is remembered
// for a second: Sends to that GID meanwhile fail at once.
func (g *GSI) Send(ctx context.Context, to MADAddr, mad []byte) error {
	if len(mad) != MADLen {
		return fmt.Errorf("qp: GSI send: a MAD is %d bytes, not %d: %w", MADLen, len(mad), ErrInvalidArgument)
	}
	if to.QPN == 0 || to.QPN > 0xFFFFFF {
		return fmt.Errorf("qp: GSI send: QPN %#x out of range: %w", to.QPN, ErrInvalidArgument)
	}
	if to.MAC != nil && len(to.MAC) != 6 {
		return fmt.Errorf("qp: GSI send: MAC %v is not 6 bytes: %w", to.MAC, ErrInvalidArgument)
	}
	gid := to.GID.Unmap()
	if to.MAC == nil {
		g.negMu.Lock()
		e, ok := g.negative[gid]
		if ok && time.Now().After(e.until) {
			delete(g.negative, gid)
			ok = false
		}
		g.negMu.Unlock()
		if ok {
			return fmt.Errorf("qp: GSI send: %w (cached)", e.err)
		}
	}
	ah, err := g.pd.createAH(ctx, AHAttr{GID: to.GID, HopLimit: to.HopLimit, TrafficClass: to.TrafficClass}, to.MAC)
	if err != nil {
		// A resolution that failed (not the caller's cancellation, a
		// closed device or a bad address) is remembered.
		if to.MAC == nil && !errors.Is(ctx.Err(), context.Canceled) &&
			!errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidArgument) {
			g.negMu.Lock()
			if g.negative == nil {
				g.negative = map[netip.Addr]negEntry{}
			}
			if len(g.negative) >= gsiNegativeMax {
				clear(g.negative) // a flood of spoofed addresses: start over rather than grow
			}
			g.negative[gid] = negEntry{time.Now().Add(gsiNegativeTTL), err}
			g.negMu.Unlock()
		}
		return fmt.Errorf("qp: GSI send: %w", err)
	}
	defer ah.Destroy()
	if g.qp.State() == StateErr {
		g.recover() // QP1 failed since the last completion was handled
	}
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	copy(g.sendMR.Bytes(), mad)
	err = g.qp.PostSend(&SendWR{Opcode: WRSend, AH: ah, RemoteQPN: to.QPN, RemoteQKey: to.QKey,
		SGL: []SGE{{Addr: g.sendMR.IOVA(), Length: MADLen, LKey: g.sendMR.LKey()}}})
	if err != nil {
		return fmt.Errorf("qp: GSI send: %w", err)
	}
	g.sent.Add(1)
	return nil
}

// Stats returns the GSI's counts.
func (g *GSI) Stats() GSIStats {
	s := GSIStats{
		Received: g.received.Load(), Sent: g.sent.Load(),
		DroppedNoHandler: g.noHandler.Load(), DroppedBadLength: g.badLength.Load(),
		DroppedBadVersion: g.badVersion.Load(), DroppedInvalid: g.invalid.Load(),
		AnsweredUnsupported: g.answered.Load(), SendErrors: g.sendErrors.Load(), Recovered: g.recovered.Load(),
	}
	s.Dropped = s.DroppedNoHandler + s.DroppedBadLength + s.DroppedBadVersion + s.DroppedInvalid
	return s
}

func (g *GSI) slot(i uint64) []byte {
	return g.recvMR.Bytes()[i*gsiSlotLen : (i+1)*gsiSlotLen]
}

func (g *GSI) repost(i uint64) error {
	return g.qp.PostRecv(&RecvWR{WRID: i, SGL: []SGE{{Addr: g.recvMR.IOVA() + i*gsiSlotLen, Length: gsiSlotLen, LKey: g.recvMR.LKey()}}})
}

// dispatchLoop is the dispatch goroutine of a device with its own driver.
func (g *GSI) dispatchLoop(ctx context.Context) {
	defer g.d.wg.Done()
	for {
		n, err := g.cq.Wait(ctx, g.wcs[:])
		if err != nil {
			if ctx.Err() == nil {
				g.d.log.Error("goroce: GSI completion queue failed", "device", g.d.Name(), "err", err)
			}
			return
		}
		g.dispatchMu.Lock()
		for i := range n {
			g.handle(&g.wcs[i])
		}
		g.dispatchMu.Unlock()
	}
}

// dispatchPending handles the completions already in the CQ without
// waiting: Device.Poll's dispatch in the manual and busy-poll modes. A
// handler that polls the device again finds the dispatcher busy and
// returns; the outer call continues in order.
func (g *GSI) dispatchPending() {
	if !g.dispatchMu.TryLock() {
		return
	}
	defer g.dispatchMu.Unlock()
	for {
		g.cq.mu.Lock()
		n, _ := g.cq.take(g.wcs[:])
		g.cq.mu.Unlock()
		if n == 0 {
			return
		}
		for i := range n {
			g.handle(&g.wcs[i])
		}
	}
}

// stop ends the dispatch goroutine (Device.Close).
func (g *GSI) stop() {
	if g.cancel != nil {
		g.cancel()
	}
}

// handle processes one completion of QP1 (ib_mad_recv_done).
func (g *GSI) handle(wc *WC) {
	if wc.Opcode == WCSend {
		if wc.Status != WCSuccess {
			g.sendErrors.Add(1)
			g.d.log.Warn("goroce: GSI send failed", "device", g.d.Name(), "err", wc.Err())
			g.recover()
		}
		return
	}
	if wc.Status != WCSuccess {
		// QP1 went to ERR (a receive error, or the device is closing),
		// or this is a flush from before a recovery: recover does
		// nothing then.
		g.recover()
		return
	}
	g.received.Add(1)
	i := wc.WRID
	g.deliver(wc, g.slot(i))
	if err := g.repost(i); err != nil && !g.d.isClosed() {
		g.d.log.Error("goroce: GSI cannot repost a receive", "device", g.d.Name(), "err", err)
	}
}

func (g *GSI) deliver(wc *WC, buf []byte) {
	if wc.ByteLen != gsiSlotLen {
		g.badLength.Add(1)
		return
	}
	mad := buf[GRHLen:]
	class, method := mad[1], mad[3]
	if mad[0] != madBaseVersion {
		g.badVersion.Add(1)
		return
	}
	// validate_mad: SMPs belong to QP0; CM attributes other than
	// ClassPortInfo use only the Send method.
	if class == madClassSubnLID || class == madClassSubnDR ||
		(class == madClassCM && binary.BigEndian.Uint16(mad[16:]) != madAttrClassPortInfo && method != madMethodSend) {
		g.invalid.Add(1)
		return
	}
	ah, err := AHAttrFromWC(wc, buf[:GRHLen])
	if err != nil {
		g.badLength.Add(1)
		return
	}
	from := MADAddr{GID: ah.GID, QPN: wc.SrcQP, QKey: GSIQKey, HopLimit: ah.HopLimit, TrafficClass: ah.TrafficClass}
	if wc.Flags&WCWithSMAC != 0 {
		from.MAC = net.HardwareAddr(append([]byte(nil), wc.SMAC[:]...))
	}
	g.hmu.Lock()
	h := g.handlers[class]
	g.hmu.Unlock()
	if h != nil {
		h.fn(MAD{From: from, Data: mad})
		return
	}
	if method != madMethodGet && method != madMethodSet {
		g.noHandler.Add(1)
		return
	}
	// generate_unmatched_resp: the request comes back as a GetResp with
	// status "unsupported method/attribute", sent to where it came from
	// (its Ethernet source: nothing to resolve, nothing to wait for).
	r := g.resp[:]
	copy(r, mad)
	r[3] = madMethodGetResp
	binary.BigEndian.PutUint16(r[4:], madStatusUnsupportedAtt)
	ctx, cancel := context.WithTimeout(context.Background(), gsiNegativeTTL)
	defer cancel()
	if err := g.Send(ctx, from, r); err != nil {
		g.sendErrors.Add(1)
		return
	}
	g.answered.Add(1)
}
