package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// An RDMA WRITE from device A into a buffer registered on device B. The
// two devices share an in-memory link; on a network interface,
// qp.OpenInterface opens the device instead. The QPN, PSN and GID that
// each side passes to Connect are what rc_pingpong and perftest exchange
// over TCP. README.md shows this function's body as its program.
func Example_write() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{}) // on a NIC: qp.OpenInterface(ctx, "eth1", qp.InterfaceOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	src, dst := []byte("hello, RDMA"), make([]byte, 11)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, err := pdA.RegMR(src, qp.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	mrB, err := pdB.RegMR(dst, qp.LocalWrite|qp.RemoteWrite)
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

	// Connect each QP to the other: RESET → INIT → RTR → RTS.
	gidA, _ := a.GID(a.IPv4GIDIndex())
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 200, GID: gidB}, qp.ConnectOptions{SQPSN: 100}); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 100, GID: gidA}, qp.ConnectOptions{SQPSN: 200}); err != nil {
		log.Fatal(err)
	}

	// Write src into B's buffer and wait for the completion.
	err = qa.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{mrA.SGE(0, len(src))},
		RemoteAddr: mrB.IOVA(), RKey: mrB.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	if _, err := cqA.Wait(ctx, wcs); err != nil {
		log.Fatal(err)
	}
	if err := wcs[0].Err(); err != nil {
		log.Fatal(err) // e.g. errors.Is(err, qp.WCRemAccessErr) for a bad rkey
	}
	fmt.Printf("%v wr_id %d: B's buffer holds %q\n", wcs[0].Opcode, wcs[0].WRID, dst)
	// Output:
	// RDMA_WRITE wr_id 1: B's buffer holds "hello, RDMA"
}

// A SEND with immediate data from A lands in the receive B posted first.
func Example_sendRecv() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()

	msg, inbox := []byte("ping"), make([]byte, 64)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	mrA, err := pdA.RegMR(msg, 0)
	if err != nil {
		log.Fatal(err)
	}
	mrB, err := pdB.RegMR(inbox, qp.LocalWrite) // a receive buffer needs local write
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
	if err := qa.Connect(ctx, qp.Remote{QPN: qb.QPN(), PSN: 2, GID: gidB}, qp.ConnectOptions{SQPSN: 1}); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qp.Remote{QPN: qa.QPN(), PSN: 1, GID: gidA}, qp.ConnectOptions{SQPSN: 2}); err != nil {
		log.Fatal(err)
	}

	// The receive must be posted before the SEND arrives (else the sender
	// gets RNR NAKs and retries).
	if err := qb.PostRecv(&qp.RecvWR{WRID: 7, SGL: []qp.SGE{mrB.SGE(0, len(inbox))}}); err != nil {
		log.Fatal(err)
	}
	err = qa.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRSendWithImm, Flags: qp.SendSignaled, Imm: 42,
		SGL: []qp.SGE{mrA.SGE(0, len(msg))}})
	if err != nil {
		log.Fatal(err)
	}
	wcs := make([]qp.WC, 1)
	for _, cq := range []*qp.CQ{cqA, cqB} {
		if _, err := cq.Wait(ctx, wcs); err != nil {
			log.Fatal(err)
		}
		wc := wcs[0]
		if err := wc.Err(); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v wr_id %d", wc.Opcode, wc.WRID)
		if wc.Opcode == qp.WCRecv {
			fmt.Printf(": %q, imm %d (%v)", inbox[:wc.ByteLen], wc.Imm, wc.Flags&qp.WCWithImm != 0)
		}
		fmt.Println()
	}
	// Output:
	// SEND wr_id 1
	// RECV wr_id 7: "ping", imm 42 (true)
}
