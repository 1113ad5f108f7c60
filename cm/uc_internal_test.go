package cm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/qp"
)

// TestDialAcceptUC: a UC connection through the connection manager. The
// REQ names rdma_cm's IB port space (0x013F0000 | port) and transport type
// UC and asks for no READ/atomic depth; both QPs end up UC in RTS with the
// PSN semantics of RC, and a SEND goes through. An RC Dial to the UC
// listener's port finds no listener (another port space).
func TestDialAcceptUC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reqs []*mad.REQ
		n, a, b := setup(t, func(from, to string, h mad.Header, m mad.Message) (bool, bool) {
			if r, ok := m.(*mad.REQ); ok {
				mu.Lock()
				reqs = append(reqs, r)
				mu.Unlock()
			}
			return false, false
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		uc := Options{QPType: qp.QPTypeUC}
		e := connect(t, ctx, a, b, uc, uc)
		for _, c := range []*Conn{e.client, e.server} {
			if c.QP().Type() != qp.QPTypeUC {
				t.Fatalf("QP type %v", c.QP().Type())
			}
		}
		mu.Lock()
		if len(reqs) != 1 {
			t.Fatalf("%d REQs", len(reqs))
		}
		r := reqs[0]
		mu.Unlock()
		if r.ServiceID != mad.ServiceID(mad.PortSpaceIB, 7174) || r.TransportType != mad.TransportUC ||
			r.ResponderResources != 0 || r.InitiatorDepth != 0 {
			t.Fatalf("REQ service ID %#x transport %v resources %d/%d", r.ServiceID, r.TransportType, r.ResponderResources, r.InitiatorDepth)
		}
		// RC to the same port: the TCP space has no listener there.
		if _, err := Dial(ctx, a, addrB, Options{}); !errors.Is(err, ErrConnRefused) {
			t.Fatalf("RC Dial to a UC listener's port: %v", err)
		}
		e.client.Close()
		<-e.server.Done()
		e.server.Close()
		if k := n.count("REJ"); k != 1 {
			t.Errorf("%d REJs, want the RC dial's one", k)
		}
	})
}
