package cm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
)

// padded is s followed by zeros up to n bytes: a private data area as the
// peer's CM sends it.
func padded(s string, n int) []byte {
	b := make([]byte, n)
	copy(b, s)
	return b
}

// Binary private data that ends in zero bytes (an address and an rkey
// whose high bytes are zero) arrives whole in every message that carries
// it, as rdma_cm delivers it: the full area, the peer's bytes first.
func TestPrivateDataTrailingZeros(t *testing.T) {
	// 12 bytes, the last 3 of them zero: trimming made them 9 (or 11).
	req := []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 0x42, 0, 0, 0}
	rep := []byte{0x10, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0}
	rej := []byte{0x7f, 0, 0, 0}
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var seen []byte
		e := connect(t, ctx, a, b, Options{Accept: func(r *Request) ([]byte, error) {
			seen = r.PrivateData
			return rep, nil
		}}, Options{PrivateData: req})
		wantREQ := padded(string(req), mad.REQPrivateDataLen-mad.CMAHeaderLen)
		if !bytes.Equal(seen, wantREQ) {
			t.Errorf("Accept saw %x, want %x", seen, wantREQ)
		}
		if got := e.server.PrivateData(); !bytes.Equal(got, wantREQ) {
			t.Errorf("server Conn.PrivateData %x, want %x", got, wantREQ)
		}
		if got := e.client.PrivateData(); len(got) != mad.REPPrivateDataLen || !bytes.Equal(got[:len(rep)], rep) ||
			!bytes.Equal(got, padded(string(rep), mad.REPPrivateDataLen)) {
			t.Errorf("client Conn.PrivateData %x, want %x padded to %d", got, rep, mad.REPPrivateDataLen)
		}
		e.client.Close()
		<-e.server.Done()
		e.server.Close()
	})
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, err := Listen(ctx, b, addrB, Options{Accept: func(*Request) ([]byte, error) { return nil, Reject(rej) }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = Dial(ctx, a, addrB, Options{PrivateData: req})
		var re *RejectError
		if !errors.As(err, &re) || !bytes.Equal(re.PrivateData, padded(string(rej), mad.REJPrivateDataLen)) {
			t.Fatalf("Dial: %v, want a REJ with %x padded to %d", err, rej, mad.REJPrivateDataLen)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		_, a, b := setup(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var seen []byte
		l, err := ListenUD(ctx, b, "198.18.0.2:7000", Options{Accept: func(r *Request) ([]byte, error) {
			seen = r.PrivateData
			return rep, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		e, err := DialUD(ctx, a, "198.18.0.2:7000", Options{PrivateData: req})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if want := padded(string(req), mad.SIDRREQPrivateDataLen-mad.CMAHeaderLen); !bytes.Equal(seen, want) {
			t.Errorf("SIDR Accept saw %x, want %x", seen, want)
		}
		if want := padded(string(rep), mad.SIDRREPPrivateDataLen); !bytes.Equal(e.PrivateData(), want) {
			t.Errorf("UDEndpoint.PrivateData %x, want %x", e.PrivateData(), want)
		}
	})
}
