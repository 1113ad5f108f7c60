package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/qp"
)

// resources are the verbs objects behind a Conn, UDEndpoint, UDListener or
// Multicast: the QP, the PD it belongs to (Options.PD, or the endpoint's
// own) and its completion queues (Options.SendCQ and RecvCQ, or the
// endpoint's own). Embedded, they give each of those its QP, PD, SendCQ and
// RecvCQ methods.
type resources struct {
	qp             *qp.QP
	pd             *qp.PD
	ownPD          bool
	sendCQ, recvCQ *qp.CQ
}

// QP is the queue pair, in RTS: a Conn's RC (or UC) QP; the UD QP of a
// UDEndpoint, UDListener or Multicast, with Q_Key RDMA_UDP_QKEY.
func (r *resources) QP() *qp.QP { return r.qp }

// PD is the protection domain the QP belongs to (Options.PD or the
// endpoint's own).
func (r *resources) PD() *qp.PD { return r.pd }

// SendCQ is the QP's send completion queue.
func (r *resources) SendCQ() *qp.CQ { return r.sendCQ }

// RecvCQ is the QP's receive completion queue.
func (r *resources) RecvCQ() *qp.CQ { return r.recvCQ }

// newResources takes the PD and CQs o gives and makes those it does not: a
// PD of the endpoint's own, one CQ of Cap.MaxSendWR + Cap.MaxRecvWR entries
// for both queues (or of Cap.MaxRecvWR for the receive queue when only the
// send CQ is given). The caller creates the QP; on an error, what was made
// is freed.
func newResources(dev *qp.Device, o *Options) (resources, error) {
	r := resources{pd: o.PD, sendCQ: o.SendCQ, recvCQ: o.RecvCQ}
	if r.pd == nil {
		r.pd, r.ownPD = dev.AllocPD(), true
	} else if r.pd.Device() != dev {
		return resources{}, errors.New("cm: Options.PD belongs to another device")
	}
	var err error
	if r.sendCQ == nil {
		if r.sendCQ, err = dev.CreateCQ(o.Cap.MaxSendWR + o.Cap.MaxRecvWR); err != nil {
			r.free()
			return resources{}, err
		}
		if r.recvCQ == nil {
			r.recvCQ = r.sendCQ
		}
	}
	if r.recvCQ == nil {
		if r.recvCQ, err = dev.CreateCQ(o.Cap.MaxRecvWR); err != nil {
			r.free()
			return resources{}, err
		}
	}
	return r, nil
}

// free destroys the QP and deallocates the PD if it is the endpoint's own.
func (r *resources) free() error {
	var err error
	if r.qp != nil {
		err = r.qp.Destroy()
	}
	if r.ownPD {
		_ = r.pd.Dealloc()
	}
	return err
}

// newUDQP makes the resources of a UD endpoint: its QP with Q_Key qkey in
// RTS (cma_init_ud_qp: INIT with the port space's Q_Key, RTR, RTS with SQ
// PSN 0), calling Prepare in INIT.
func newUDQP(dev *qp.Device, o *Options, qkey uint32) (resources, error) {
	r, err := newResources(dev, o)
	if err != nil {
		return resources{}, err
	}
	fail := func(err error) (resources, error) {
		r.free()
		return resources{}, err
	}
	if r.qp, err = r.pd.CreateQP(qp.InitAttr{Type: qp.QPTypeUD, SendCQ: r.sendCQ, RecvCQ: r.recvCQ, Cap: o.Cap,
		BlockSelfMcastLoopback: o.BlockSelfMcastLoopback}); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.qp.Modify(ctx, qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
		return fail(err)
	}
	if o.Prepare != nil {
		if err := o.Prepare(r.qp); err != nil {
			return fail(fmt.Errorf("cm: Prepare: %w", err))
		}
	}
	if err := r.qp.Modify(ctx, qp.Attr{State: qp.StateRTR}, qp.AttrState); err != nil {
		return fail(err)
	}
	if err := r.qp.Modify(ctx, qp.Attr{State: qp.StateRTS, SQPSN: 0}, qp.AttrState|qp.AttrSQPSN); err != nil {
		return fail(err)
	}
	return r, nil
}

// endpointKind is what the prologue of dial, dialUD, listen and listenUD
// checks: the message the caller's private data goes in, its room, and
// whether the address is a peer's (dial: the call's name for a parse
// error) or one to listen on.
type endpointKind struct {
	msg        string // "REQ", "SIDR_REQ", "REP", "SIDR_REP"
	maxPrivate int
	dial       string // "Dial", "DialUD"; "" for a listener
}

var (
	kindDial     = endpointKind{msg: "REQ", maxPrivate: maxREQPrivate, dial: "Dial"}
	kindDialUD   = endpointKind{msg: "SIDR_REQ", maxPrivate: maxSIDRREQPrivate, dial: "DialUD"}
	kindListen   = endpointKind{msg: "REP", maxPrivate: maxREPPrivate}
	kindListenUD = endpointKind{msg: "SIDR_REP", maxPrivate: maxSIDRREPPrivate}
)

// prologue is what begin found.
type prologue struct {
	o     Options        // opts with the defaults
	a     *agent         // dev's CM agent, acquired: the caller releases it
	addr  netip.AddrPort // the peer's address (dial) or the one to listen on
	local netip.Addr     // dial: the source address for the peer
}

// begin is the prologue of dial, dialUD, listen and listenUD: the options
// with their defaults, the private data's size, the address (a peer's, for
// which a local address of dev is chosen; or one to listen on, unspecified
// or dev's), ctx still live, and the device's agent acquired.
func begin(ctx context.Context, dev *qp.Device, addr string, opts *Options, k endpointKind) (prologue, error) {
	s := prologue{o: opts.withDefaults()}
	if len(s.o.PrivateData) > k.maxPrivate {
		return prologue{}, fmt.Errorf("cm: %d bytes of %s private data, at most %d", len(s.o.PrivateData), k.msg, k.maxPrivate)
	}
	var err error
	if k.dial != "" {
		if s.addr, err = netip.ParseAddrPort(addr); err != nil {
			return prologue{}, fmt.Errorf("cm: %s: %w", k.dial, err)
		}
		s.addr = netip.AddrPortFrom(s.addr.Addr().Unmap(), s.addr.Port())
		if s.local, err = localAddr(dev, s.o.Local.Addr(), s.addr.Addr()); err != nil {
			return prologue{}, err
		}
	} else {
		if s.addr, err = parseListenAddr(addr); err != nil {
			return prologue{}, err
		}
		if err := checkLocal(dev, s.addr.Addr()); err != nil {
			return prologue{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return prologue{}, err
	}
	if s.a, err = acquireAgent(dev, s.o.Logger); err != nil {
		return prologue{}, err
	}
	return s, nil
}
