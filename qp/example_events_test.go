package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// A responder that receives an RDMA WRITE with a wrong rkey NAKs it and
// goes to ERR; its device reports QP_ACCESS_ERR with the QP, the
// requester's completion says REM_ACCESS_ERR.
func ExampleDevice_AsyncEvent() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, _ := pdA.RegMR(make([]byte, 64), qp.LocalWrite)
	mrB, _ := pdB.RegMR(make([]byte, 64), qp.LocalWrite|qp.RemoteWrite)
	cqA, _ := a.CreateCQ(4)
	cqB, _ := b.CreateCQ(4)
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}
	qa, _ := pdA.CreateQP(qp.InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	qb, _ := pdB.CreateQP(qp.InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 1, GID: gidB}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 1, GID: gidA}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		log.Fatal(err)
	}
	err = qa.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{mrA.SGE(0, 64)},
		RemoteAddr: mrB.IOVA(), RKey: mrB.RKey() + 1})
	if err != nil {
		log.Fatal(err)
	}
	ev, err := b.AsyncEvent(ctx)
	if err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	if _, err := cqA.Wait(ctx, wcs); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Type, ev.QP == qb, ev.QP.State())
	fmt.Println(wcs[0].Status)
	// Output:
	// QP_ACCESS_ERR true ERR
	// REM_ACCESS_ERR
}
