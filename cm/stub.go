package cm

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/qp"
)

var errUnimplemented = errors.New("cm: not implemented yet")

type listener struct{ addr netip.AddrPort }

func listen(context.Context, *qp.Device, string, *Options) (*Listener, error) {
	return nil, errUnimplemented
}
func (l *listener) accept(context.Context) (*Conn, error) { return nil, errUnimplemented }
func (l *listener) close() error                          { return nil }

type conn struct {
	qp             *qp.QP
	pd             *qp.PD
	sendCQ, recvCQ *qp.CQ
	local, remote  netip.AddrPort
	peerPrivate    []byte
	done           chan struct{}
	mu             sync.Mutex
}

func dial(context.Context, *qp.Device, string, *Options) (*Conn, error) {
	return nil, errUnimplemented
}
func (c *conn) err() error   { return nil }
func (c *conn) close() error { return nil }

type udEndpoint struct {
	qp                    *qp.QP
	pd                    *qp.PD
	sendCQ, recvCQ        *qp.CQ
	remoteQPN, remoteQKey uint32
	local, remote         netip.AddrPort
	peerPrivate           []byte
}

func dialUD(context.Context, *qp.Device, string, *Options) (*UDEndpoint, error) {
	return nil, errUnimplemented
}
func (u *udEndpoint) close() error { return nil }

type udListener struct {
	qp             *qp.QP
	pd             *qp.PD
	sendCQ, recvCQ *qp.CQ
	qkey           uint32
	addr           netip.AddrPort
}

func listenUD(context.Context, *qp.Device, string, *Options) (*UDListener, error) {
	return nil, errUnimplemented
}
func (u *udListener) close() error { return nil }
