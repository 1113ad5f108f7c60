package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// The target of an RDMA WRITE learns that it landed without polling its
// buffer: MR.WaitWrite (a goroce extension) sleeps until the MR's count of
// placed WRITE messages passes the one it was given.
func ExampleMR_WaitWrite() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	src, dst := []byte("ping"), make([]byte, 4)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, _ := pdA.RegMR(src, qp.LocalWrite)
	mrB, _ := pdB.RegMR(dst, qp.LocalWrite|qp.RemoteWrite)
	cqA, _ := a.CreateCQ(4)
	cqB, _ := b.CreateCQ(4)
	caps := qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}
	qa, _ := pdA.CreateQP(qp.InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	qb, _ := pdB.CreateQP(qp.InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 200, GID: gidB}, qp.ConnectOptions{SQPSN: 100}); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 100, GID: gidA}, qp.ConnectOptions{SQPSN: 200}); err != nil {
		log.Fatal(err)
	}

	seen := mrB.Writes() // before the peer may write
	if err := qa.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{mrA.SGE(0, 4)},
		RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()}); err != nil {
		log.Fatal(err)
	}
	n, err := mrB.WaitWrite(ctx, seen) // B's side: no completion, no polling
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d WRITE landed: %q\n", n-seen, dst)
	// Output: 1 WRITE landed: "ping"
}
