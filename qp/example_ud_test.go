package qp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goroce/goroce/qp"
)

// A UD datagram from device A to device B, and the answer B sends back
// along the GRH of what it received: the receive buffer starts with the
// 40-byte GRH area, and AHAttrFromWC turns it into the sender's address.
func Example_ud() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	const qkey = 0x11111111

	// One UD QP per device, moved RESET → INIT (Q_Key) → RTR → RTS.
	type end struct {
		pd  *qp.PD
		cq  *qp.CQ
		q   *qp.QP
		buf []byte
		mr  *qp.MR
	}
	open := func(d *qp.Device) *end {
		e := &end{pd: d.AllocPD(), buf: make([]byte, qp.GRHLen+64)}
		var err error
		if e.mr, err = e.pd.RegMR(e.buf, qp.LocalWrite); err != nil {
			log.Fatal(err)
		}
		if e.cq, err = d.CreateCQ(8); err != nil {
			log.Fatal(err)
		}
		if e.q, err = e.pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq, Type: qp.QPTypeUD,
			Cap: qp.Caps{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			log.Fatal(err)
		}
		for _, s := range []struct {
			a    qp.Attr
			mask qp.AttrMask
		}{
			{qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
			{qp.Attr{State: qp.StateRTR}, qp.AttrState},
			{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
		} {
			if err := e.q.Modify(ctx, s.a, s.mask); err != nil {
				log.Fatal(err)
			}
		}
		// Receives get the GRH area, then the payload.
		if err := e.q.PostRecv(&qp.RecvWR{WRID: 1, SGL: []qp.SGE{{Addr: e.mr.IOVA(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}}}); err != nil {
			log.Fatal(err)
		}
		return e
	}
	ea, eb := open(a), open(b)
	send := func(from *end, ah *qp.AH, qpn uint32, msg string) {
		copy(from.buf[qp.GRHLen:], msg)
		wr := qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey,
			SGL: []qp.SGE{{Addr: from.mr.IOVA() + qp.GRHLen, Length: uint32(len(msg)), LKey: from.mr.LKey()}}}
		if err := from.q.PostSend(&wr); err != nil {
			log.Fatal(err)
		}
	}
	recv := func(e *end) qp.WC {
		for {
			var wc [1]qp.WC
			if _, err := e.cq.Wait(ctx, wc[:]); err != nil {
				log.Fatal(err)
			}
			if wc[0].Opcode == qp.WCRecv {
				return wc[0]
			}
		}
	}

	gidB, _ := b.GID(b.IPv4GIDIndex())
	ah, err := ea.pd.CreateAH(ctx, qp.AHAttr{GID: gidB})
	if err != nil {
		log.Fatal(err)
	}
	send(ea, ah, eb.q.QPN(), "ping")
	wc := recv(eb)
	fmt.Printf("B got %q: %d bytes (40 + 4) from A's QP: %v\n", eb.buf[qp.GRHLen:wc.ByteLen], wc.ByteLen, wc.SrcQP == ea.q.QPN())

	back, err := qp.AHAttrFromWC(&wc, eb.buf[:qp.GRHLen])
	if err != nil {
		log.Fatal(err)
	}
	ahB, err := eb.pd.CreateAH(ctx, back)
	if err != nil {
		log.Fatal(err)
	}
	send(eb, ahB, wc.SrcQP, "pong")
	wc = recv(ea)
	fmt.Printf("A got %q from %v\n", ea.buf[qp.GRHLen:wc.ByteLen], back.GID)
	// Output:
	// B got "ping": 44 bytes (40 + 4) from A's QP: true
	// A got "pong" from ::ffff:198.18.0.1
}

// QP1 on two devices: B handles the CM class (0x07) and A sends it one
// 256-byte MAD; B's handler sees where it came from.
func ExampleDevice_GSI() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ga, err := a.GSI()
	if err != nil {
		log.Fatal(err)
	}
	gb, err := b.GSI()
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan string, 1)
	if _, err := gb.Handle(0x07, func(m qp.MAD) {
		// m.Data is valid only during the call: copy what is kept.
		got <- fmt.Sprintf("class %#x method %#x from %v QP %d", m.Data[1], m.Data[3], m.From.GID, m.From.QPN)
	}); err != nil {
		log.Fatal(err)
	}
	mad := make([]byte, qp.MADLen)
	mad[0], mad[1], mad[2], mad[3] = 1, 0x07, 2, 0x03 // base version 1, CM, class version 2, Send
	gidB, _ := b.GID(b.IPv4GIDIndex())
	if err := ga.Send(ctx, qp.MADAddr{GID: gidB, QPN: 1, QKey: qp.GSIQKey}, mad); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)
	// Output: class 0x7 method 0x3 from ::ffff:198.18.0.1 QP 1
}
