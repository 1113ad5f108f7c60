package cm_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// Listen on one device, Dial from the other, SEND one message over the
// connected RC QPs and disconnect. The receive is posted in Prepare, before
// the connection is established, as rping does before rdma_accept.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{}) // 198.18.0.1 and 198.18.0.2
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	// Server: one buffer, its receive posted before the REP goes out.
	pdB := b.AllocPD()
	buf := make([]byte, 64)
	mrB, err := pdB.RegMR(buf, qp.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	l, err := cm.Listen(ctx, b, "198.18.0.2:7174", cm.Options{PD: pdB,
		Prepare: func(q *qp.QP) error {
			return q.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{mrB.SGE(0, 64)}})
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	// Client: REQ → REP → RTU; the QP comes back in RTS.
	c, err := cm.Dial(ctx, a, "198.18.0.2:7174", cm.Options{PrivateData: []byte("hi")})
	if err != nil {
		log.Fatal(err)
	}
	s, err := l.Accept(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// The REQ's private data area is 56 bytes, whole as rdma_cm delivers
	// it: the client's 2 bytes, then zero padding.
	fmt.Printf("connected %v → %v, the server got %q in the REQ\n", c.LocalAddr().Addr(), c.RemoteAddr(), s.PrivateData()[:2])

	msg := []byte("hello over rdma_cm")
	mrA, err := c.PD().RegMR(msg, qp.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	err = c.QP().PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{mrA.SGE(0, len(msg))}})
	if err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	if _, err := s.RecvCQ().Wait(ctx, wcs); err != nil || wcs[0].Err() != nil {
		log.Fatal(err, wcs[0].Err())
	}
	fmt.Printf("server received %q\n", buf[:wcs[0].ByteLen])

	// DREQ → DREP: the server's Done closes.
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	<-s.Done()
	fmt.Println("server:", s.Err())
	s.Close()
	// Output:
	// connected 198.18.0.1 → 198.18.0.2:7174, the server got "hi" in the REQ
	// server received "hello over rdma_cm"
	// server: cm: disconnected by the peer
}
