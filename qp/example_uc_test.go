package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// A UC SEND from device A to device B, and an ATOMIC WRITE on RC (IBTA
// 1.5): UC connects like RC (Connect gives it UC's attributes) and its
// send completes as soon as the packets have left; nothing acknowledges
// it.
func Example_uc() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	type end struct {
		cq  *qp.CQ
		q   *qp.QP
		buf []byte
		mr  *qp.MR
	}
	open := func(d *qp.Device, typ qp.QPType) *end {
		pd := d.AllocPD()
		e := &end{buf: make([]byte, 64)}
		var err error
		if e.mr, err = pd.RegMR(e.buf, qp.LocalWrite|qp.RemoteWrite); err != nil {
			log.Fatal(err)
		}
		if e.cq, err = d.CreateCQ(8); err != nil {
			log.Fatal(err)
		}
		if e.q, err = pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq, Type: typ, Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			log.Fatal(err)
		}
		return e
	}
	connect := func(x, y *end) {
		gx, _ := a.GID(a.IPv4GIDIndex())
		gy, _ := b.GID(b.IPv4GIDIndex())
		if err := x.q.Connect(ctx, qp.Remote{QPN: y.q.QPN(), PSN: 2, GID: gy}, qp.ConnectOptions{SQPSN: 1}); err != nil {
			log.Fatal(err)
		}
		if err := y.q.Connect(ctx, qp.Remote{QPN: x.q.QPN(), PSN: 1, GID: gx}, qp.ConnectOptions{SQPSN: 2}); err != nil {
			log.Fatal(err)
		}
	}
	wait := func(cq *qp.CQ) qp.WC {
		var wc [1]qp.WC
		if _, err := cq.Wait(ctx, wc[:]); err != nil {
			log.Fatal(err)
		}
		return wc[0]
	}

	ua, ub := open(a, qp.QPTypeUC), open(b, qp.QPTypeUC)
	connect(ua, ub)
	if err := ub.q.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{{Addr: ub.mr.IOVA(), Length: 64, LKey: ub.mr.LKey()}}}); err != nil {
		log.Fatal(err)
	}
	copy(ua.buf, "over UC")
	if err := ua.q.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: ua.mr.IOVA(), Length: 7, LKey: ua.mr.LKey()}}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("UC send:", wait(ua.cq).Status)
	wc := wait(ub.cq)
	fmt.Printf("UC receive: %v %q\n", wc.Status, ub.buf[:wc.ByteLen])
	// No READ on UC.
	fmt.Println("UC READ:", ua.q.PostSend(&qp.SendWR{Opcode: qp.WRRDMARead, SGL: []qp.SGE{{Addr: ua.mr.IOVA(), Length: 8, LKey: ua.mr.LKey()}},
		RemoteAddr: ub.mr.IOVA(), RKey: ub.mr.RKey()}) != nil)

	ra, rb := open(a, qp.QPTypeRC), open(b, qp.QPTypeRC)
	connect(ra, rb)
	if err := ra.q.PostSend(&qp.SendWR{WRID: 3, Opcode: qp.WRAtomicWrite, Flags: qp.SendSignaled,
		RemoteAddr: rb.mr.IOVA() + 8, RKey: rb.mr.RKey(), AtomicData: [8]byte{'a', 't', 'o', 'm', 'i', 'c', '!', '!'}}); err != nil {
		log.Fatal(err)
	}
	wc = wait(ra.cq)
	fmt.Printf("ATOMIC_WRITE: %v %v %q\n", wc.Status, wc.Opcode, rb.buf[8:16])
	// Output:
	// UC send: SUCCESS
	// UC receive: SUCCESS "over UC"
	// UC READ: true
	// ATOMIC_WRITE: SUCCESS ATOMIC_WRITE "atomic!!"
}
