package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// Two QPs on B take their receives from one shared receive queue: each
// message uses the oldest WR posted to the SRQ, whichever QP it arrives
// on, and the completion names that QP. The limit armed at creation
// raises SRQ_LIMIT_REACHED once the SRQ runs low.
func Example_sharedReceiveQueue() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	msgs, inbox := []byte("to QP 0to QP 1"), make([]byte, 4*16)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, err := pdA.RegMR(msgs, 0)
	if err != nil {
		log.Fatal(err)
	}
	mrB, err := pdB.RegMR(inbox, qp.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	srq, err := pdB.CreateSRQ(qp.SRQInitAttr{MaxWR: 4, Limit: 3})
	if err != nil {
		log.Fatal(err)
	}
	for i := range uint64(4) {
		if err := srq.PostRecv(&qp.RecvWR{WRID: i, SGL: []qp.SGE{{Addr: mrB.IOVA() + 16*i, Length: 16, LKey: mrB.LKey()}}}); err != nil {
			log.Fatal(err)
		}
	}
	cqA, err := a.CreateCQ(16)
	if err != nil {
		log.Fatal(err)
	}
	cqB, err := b.CreateCQ(16)
	if err != nil {
		log.Fatal(err)
	}
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	var senders []*qp.QP
	qpOf := map[uint32]int{}
	for i := range 2 {
		qa, err := pdA.CreateQP(qp.InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 1}})
		if err != nil {
			log.Fatal(err)
		}
		qb, err := pdB.CreateQP(qp.InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: qp.Caps{MaxSendWR: 1}, SRQ: srq})
		if err != nil {
			log.Fatal(err)
		}
		if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), GID: gidB}, qp.ConnectOptions{}); err != nil {
			log.Fatal(err)
		}
		if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), GID: gidA}, qp.ConnectOptions{}); err != nil {
			log.Fatal(err)
		}
		senders, qpOf[qb.QPN()] = append(senders, qa), i
	}

	// QP 1 sends first: it takes WR 0.
	wcs := make([]qp.WC, 1)
	for _, i := range []int{1, 0} {
		err := senders[i].PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: mrA.IOVA() + uint64(7*i), Length: 7, LKey: mrA.LKey()}}})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := cqB.Wait(ctx, wcs); err != nil || wcs[0].Err() != nil {
			log.Fatal(err, wcs[0].Err())
		}
		fmt.Printf("WR %d on QP %d: %q\n", wcs[0].WRID, qpOf[wcs[0].QPNum], inbox[16*wcs[0].WRID:][:wcs[0].ByteLen])
	}
	ev, err := b.AsyncEvent(ctx)
	if err != nil {
		log.Fatal(err)
	}
	attr, _ := srq.Query()
	fmt.Printf("%v, limit now %d\n", ev.Type, attr.Limit)
	// Output:
	// WR 0 on QP 1: "to QP 1"
	// WR 1 on QP 0: "to QP 0"
	// SRQ_LIMIT_REACHED, limit now 0
}
