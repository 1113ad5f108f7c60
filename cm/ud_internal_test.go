package cm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// SIDR over the fake GSI, the first SIDR_REQ lost: resent after rdma_cm's
// 1 << (CMA_CM_RESPONSE_TIMEOUT − 8) ms; the endpoint then sends a
// datagram to the listener's QP with the resolved AH, QPN and Q_Key.
func TestSIDR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b := setup(t, dropNth("SIDR_REQ", 1))
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var got *Request
		l, err := ListenUD(ctx, b, "198.18.0.2:7000", Options{PrivateData: []byte("welcome"),
			Accept: func(r *Request) ([]byte, error) { got = r; return nil, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		e, err := DialUD(ctx, a, "198.18.0.2:7000", Options{PrivateData: []byte("udaddy")})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if e.RemoteQPN() != l.QP().QPN() || e.RemoteQKey() != 0x01234567 || l.QKey() != 0x01234567 ||
			!bytes.Equal(e.PrivateData(), padded("welcome", mad.SIDRREPPrivateDataLen)) {
			t.Fatalf("resolved QPN %#x Q_Key %#x private %q; listener QPN %#x", e.RemoteQPN(), e.RemoteQKey(),
				e.PrivateData(), l.QP().QPN())
		}
		if got == nil || !bytes.Equal(got.PrivateData, padded("udaddy", mad.SIDRREQPrivateDataLen-mad.CMAHeaderLen)) || got.RemoteAddr != e.LocalAddr() ||
			got.ServiceID != mad.ServiceID(mad.PortSpaceUDP, 7000) {
			t.Fatalf("Accept saw %+v", got)
		}
		if g := gaps(n.times("SIDR_REQ")); len(g) != 1 || g[0] != 4096*time.Millisecond {
			t.Fatalf("SIDR_REQ resent after %v, want once after 4096 ms", g)
		}
		buf := make([]byte, qp.GRHLen+4)
		mr, err := l.PD().RegMR(buf, qp.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.QP().PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{mr.SGE(0, len(buf))}}); err != nil {
			t.Fatal(err)
		}
		src := []byte("ping")
		smr, err := e.PD().RegMR(src, qp.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.QP().PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: smr.IOVA(), Length: 4, LKey: smr.LKey()}},
			AH:  e.AH(), RemoteQPN: e.RemoteQPN(), RemoteQKey: e.RemoteQKey()}); err != nil {
			t.Fatal(err)
		}
		wcs := make([]qp.WC, 1)
		if _, err := l.RecvCQ().Wait(ctx, wcs); err != nil || wcs[0].Err() != nil {
			t.Fatalf("receive: %v %v", err, wcs[0].Err())
		}
		if string(buf[qp.GRHLen:]) != "ping" || wcs[0].SrcQP != e.QP().QPN() {
			t.Fatalf("received %q from QP %#x", buf[qp.GRHLen:], wcs[0].SrcQP)
		}
	})
}

func TestSIDRRefusedAndRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		l, err := ListenUD(ctx, b, "198.18.0.2:7000", Options{
			Accept: func(r *Request) ([]byte, error) { return nil, Reject([]byte("full")) }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = DialUD(ctx, a, "198.18.0.2:7001", Options{})
		var se *SIDRError
		if !errors.Is(err, ErrConnRefused) || !errors.As(err, &se) || se.Status != mad.SIDRUnsupported {
			t.Fatalf("DialUD to a port nobody listens on: %v", err)
		}
		_, err = DialUD(ctx, a, "198.18.0.2:7000", Options{})
		if !errors.Is(err, ErrRejected) || errors.Is(err, ErrConnRefused) || !errors.As(err, &se) ||
			se.Status != mad.SIDRReject || !bytes.Equal(se.PrivateData, padded("full", mad.SIDRREPPrivateDataLen)) {
			t.Fatalf("DialUD rejected by Accept: %v", err)
		}
		// The RC port space is another one: a UD listener does not take REQs.
		if _, err := Dial(ctx, a, "198.18.0.2:7000", Options{}); !errors.Is(err, ErrConnRefused) {
			t.Fatalf("Dial to a UD port: %v", err)
		}
	})
}
