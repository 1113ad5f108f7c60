package cm

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

var errUnimplemented = errors.New("cm: not implemented yet")

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
	closed         bool
	wg             sync.WaitGroup
}

func listenUD(context.Context, *qp.Device, string, *Options) (*UDListener, error) {
	return nil, errUnimplemented
}
func (u *udListener) close() error { return nil }

func (u *udListener) serve(req *mad.SIDRREQ, hdr mad.CMAHeader, tid uint64, from madAddr, key sidrKey) {
	u.wg.Done()
}
