package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// A memory window: B registers a buffer with no remote rights of its own
// (only MW_BIND), opens 5 bytes of it to the peer with a type 2 window
// bound by a BIND_MW work request, and A writes through the window's rkey.
// A's second WRITE, one byte longer than the window, fails with
// REM_ACCESS_ERR and leaves B's buffer untouched.
func Example_memoryWindow() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	src, dst := []byte("hello!"), []byte("..........")
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, err := pdA.RegMR(src, 0)
	if err != nil {
		log.Fatal(err)
	}
	mrB, err := pdB.RegMR(dst, qp.LocalWrite|qp.MWBind) // rkey 0: not reachable by itself
	if err != nil {
		log.Fatal(err)
	}
	cqA, err := a.CreateCQ(16)
	if err != nil {
		log.Fatal(err)
	}
	cqB, err := b.CreateCQ(16)
	if err != nil {
		log.Fatal(err)
	}
	caps := qp.Caps{MaxSendWR: 16, MaxRecvWR: 16}
	qa, err := pdA.CreateQP(qp.InitAttr{SendCQ: cqA, RecvCQ: cqA, Cap: caps})
	if err != nil {
		log.Fatal(err)
	}
	qb, err := pdB.CreateQP(qp.InitAttr{SendCQ: cqB, RecvCQ: cqB, Cap: caps})
	if err != nil {
		log.Fatal(err)
	}
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 200, GID: gidB}, qp.ConnectOptions{SQPSN: 100}); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 100, GID: gidA}, qp.ConnectOptions{SQPSN: 200}); err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	wait := func(cq *qp.CQ) qp.WC {
		if _, err := cq.Wait(ctx, wcs); err != nil {
			log.Fatal(err)
		}
		return wcs[0]
	}

	// B binds a type 2 window over dst[2:7] on its QP.
	mw, err := pdB.AllocMW(qp.MWType2)
	if err != nil {
		log.Fatal(err)
	}
	rkey := qp.IncRKey(mw.RKey())
	err = qb.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRBindMW, Flags: qp.SendSignaled, BindMW: qp.BindInfo{
		MWRKey: mw.RKey(), RKey: rkey, MRLKey: mrB.LKey(), Addr: mrB.IOVA() + 2, Length: 5, Access: qp.RemoteWrite}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B:", wait(cqB).Opcode)

	// B sends rkey and address to A out of band; A writes 5 bytes, then 6.
	for i, n := range []uint32{5, 6} {
		err = qa.PostSend(&qp.SendWR{WRID: uint64(10 + i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: mrA.IOVA(), Length: n, LKey: mrA.LKey()}}, RemoteAddr: mrB.IOVA() + 2, RKey: rkey})
		if err != nil {
			log.Fatal(err)
		}
		wc := wait(cqA)
		fmt.Printf("A: %d bytes: %v, B's buffer %q\n", n, wc.Status, dst)
	}
	// Output:
	// B: BIND_MW
	// A: 5 bytes: SUCCESS, B's buffer "..hello..."
	// A: 6 bytes: REM_ACCESS_ERR, B's buffer "..hello..."
}
