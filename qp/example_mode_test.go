package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// A device in ModeBusyPoll starts no goroutines: the application's own
// polling drives it. Here B only serves as the target of A's WRITE, so
// Device.Progress keeps it answering while A's CQ.Wait spins on A.
func ExampleMode() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{Mode: qp.ModeBusyPoll})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	fmt.Println(a.Mode(), b.Mode())

	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Progress(pctx) }() // B: an RDMA target nobody else polls

	src, dst := []byte("pong"), make([]byte, 4)
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

	if err := qa.PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{mrA.SGE(0, 4)},
		RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()}); err != nil {
		log.Fatal(err)
	}
	var wc [1]qp.WC
	if _, err := cqA.Wait(ctx, wc[:]); err != nil { // spins, driving A
		log.Fatal(err)
	}
	stop()
	<-done
	fmt.Printf("%v %q\n", wc[0].Status, dst)
	// Output:
	// busy-poll busy-poll
	// SUCCESS "pong"
}
