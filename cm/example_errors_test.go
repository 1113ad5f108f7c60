package cm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/qp"
)

// Errors are values to test with errors.Is and errors.As: the connection
// manager's failures have sentinels, a failed work request completes with
// a status that is an error, and every wait ends with its context.
// docs/using-go.md shows this function's body.
func Example_errors() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	l, err := cm.Listen(ctx, b, "198.18.0.2:7174", cm.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// Nobody listens on port 7175: B's CM rejects the REQ (invalid
	// service ID), which is rdma_cm's ECONNREFUSED.
	_, err = cm.Dial(ctx, a, "198.18.0.2:7175", cm.Options{})
	fmt.Println("no listener:", errors.Is(err, cm.ErrConnRefused))
	c, err := cm.Dial(ctx, a, "198.18.0.2:7174", cm.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// A WRITE with an rkey B never handed out: B's responder NAKs it and
	// A's completion says why.
	buf := make([]byte, 64)
	mr, err := c.PD().RegMR(buf, qp.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	err = c.QP().PostSend(&qp.SendWR{WRID: 7, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL: []qp.SGE{mr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0xbad})
	if err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	if _, err := c.SendCQ().Wait(ctx, wcs); err != nil {
		log.Fatal(err)
	}
	err = wcs[0].Err()
	var ce *qp.CompletionError
	if errors.As(err, &ce) {
		fmt.Println("bad rkey:", errors.Is(err, qp.WCRemAccessErr), ce.WRID, ce.Opcode, ce.Status)
	}

	// A wait for a completion that never comes ends with its context.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer wcancel()
	_, err = s.RecvCQ().Wait(wctx, wcs)
	fmt.Println("nothing to receive:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// no listener: true
	// bad rkey: true 7 RDMA_WRITE REM_ACCESS_ERR
	// nothing to receive: true
}
