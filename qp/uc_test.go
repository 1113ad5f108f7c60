package qp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/wire"
)

// ucPair connects two UC QPs over the simulator with cfg's faults.
func ucPair(t *testing.T, cfg sim.Config) (*sim.Net, *sim.QPEnd, *sim.QPEnd) {
	t.Helper()
	n, err := sim.NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	o := sim.QPOptions{Type: qp.QPTypeUC, BufSize: 1 << 20}
	a, b, err := n.ConnectQPs(o, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.QP.Type() != qp.QPTypeUC {
		t.Fatalf("type %v", a.QP.Type())
	}
	return n, a, b
}

const ucMsgLen = 3000 // three packets at path MTU 1024

// ucSend sends message id: its first 4 bytes are id, the rest a pattern.
func ucSend(t *testing.T, a *sim.QPEnd, id int) {
	t.Helper()
	off := id % 64 * 4096
	m := a.Buf[off : off+ucMsgLen]
	for i := range m {
		m[i] = byte(id + i*13)
	}
	binary.BigEndian.PutUint32(m, uint32(id))
	if err := a.QP.PostSend(&qp.SendWR{WRID: uint64(id), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGL: []qp.SGE{a.SGE(off, ucMsgLen)}}); err != nil {
		t.Fatal(err)
	}
}

// ucReceived runs the simulation and returns the ids of the messages B
// received, checking each one byte for byte.
func ucReceived(t *testing.T, n *sim.Net, a, b *sim.QPEnd, sent int, next *int) []int {
	t.Helper()
	if err := n.RunFor(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wcs := make([]qp.WC, 256)
	k, err := a.SendCQ.Poll(wcs)
	if err != nil || k != sent {
		t.Fatalf("send completions %d (%v), want %d: UC completes every send", k, err, sent)
	}
	k, err = b.RecvCQ.Poll(wcs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for i, wc := range wcs[:k] {
		// One receive per delivered message, in posting order: a lost
		// message's partly filled receive is reused.
		if wc.Status != qp.WCSuccess || wc.ByteLen != ucMsgLen || wc.WRID != uint64(*next) {
			t.Fatalf("receive %d: %v, want wr_id %d", i, wc, *next)
		}
		*next++
		got := b.Buf[int(wc.WRID)*4096 : int(wc.WRID)*4096+ucMsgLen]
		id := int(binary.BigEndian.Uint32(got))
		want := a.Buf[id%64*4096 : id%64*4096+ucMsgLen]
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d arrived corrupted", id)
		}
		ids = append(ids, id)
	}
	return ids
}

func postUCRecvs(t *testing.T, b *sim.QPEnd, n int) {
	t.Helper()
	for i := range n {
		if err := b.QP.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{b.SGE(i*4096, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUCLossMidMessage: the frame that carries the middle of message 1
// is lost on the wire; message 1 is dropped silently at B, messages 0, 2
// and 3 arrive intact, B sends nothing back, and the QPs stay in RTS.
func TestUCLossMidMessage(t *testing.T) {
	var first wire.PSN = 0 // ConnectQPs' default send PSN
	var pkt wire.Packet
	filter := func(frame []byte) bool {
		if wire.Parse(frame, &pkt) != nil {
			return false
		}
		return pkt.BTH.PSN() == first.Add(4) // message 1, packet 1
	}
	n, a, b := ucPair(t, sim.Config{Seed: 1, AtoB: sim.Faults{Filter: filter}})
	postUCRecvs(t, b, 4)
	for id := range 4 {
		ucSend(t, a, id)
	}
	next := 0
	ids := ucReceived(t, n, a, b, 4, &next)
	if len(ids) != 3 || ids[0] != 0 || ids[1] != 2 || ids[2] != 3 {
		t.Fatalf("received %v, want [0 2 3]", ids)
	}
	if got := b.QP.Counters()[qp.CntUCMsgDropped]; got != 1 {
		t.Fatalf("uc_msg_dropped %d, want 1", got)
	}
	if s := n.B.LinkStats(); s.TxFrames != 0 {
		t.Fatalf("B sent %d frames: UC has no ACKs", s.TxFrames)
	}
	if a.QP.State() != qp.StateRTS || b.QP.State() != qp.StateRTS {
		t.Fatalf("states %v %v", a.QP.State(), b.QP.State())
	}
}

// TestUCSeededLoss: 5% random loss, duplication and reordering on the
// wire; whatever arrives is whole, in order, each message at most once.
func TestUCSeededLoss(t *testing.T) {
	seed := int64(25)
	if s, ok, err := sim.EnvSeed(); err != nil {
		t.Fatal(err)
	} else if ok {
		seed = s
	}
	t.Logf("seed %d (GOROCE_SEED replays)", seed)
	n, a, b := ucPair(t, sim.Config{Seed: seed, AtoB: sim.Faults{Drop: 0.05, Duplicate: 0.02, Reorder: 0.02}})
	postUCRecvs(t, b, 200)
	const msgs = 100
	var ids []int
	sent, next := 0, 0
	for round := range 4 {
		for i := range msgs / 4 {
			ucSend(t, a, round*msgs/4+i)
			sent++
		}
		ids = append(ids, ucReceived(t, n, a, b, msgs/4, &next)...)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("received %v: out of order or twice", ids)
		}
	}
	lost := sent - len(ids)
	t.Logf("%d of %d messages arrived; uc_msg_dropped %d", len(ids), sent, b.QP.Counters()[qp.CntUCMsgDropped])
	if len(ids) < sent/2 || lost == 0 {
		t.Fatalf("%d of %d arrived: the faults did not act as configured", len(ids), sent)
	}
}

func TestUCPostErrors(t *testing.T) {
	_, a, b := ucPair(t, sim.Config{Seed: 2})
	for _, op := range []qp.WROpcode{qp.WRRDMARead, qp.WRAtomicFetchAdd, qp.WRAtomicCmpAndSwp, qp.WRSendWithInv} {
		err := a.QP.PostSend(&qp.SendWR{Opcode: op, SGL: []qp.SGE{a.SGE(0, 8)}, RemoteAddr: b.MR.IOVA(), RKey: b.MR.RKey()})
		if !errors.Is(err, qp.ErrInvalidArgument) {
			t.Errorf("%v on UC: %v, want ErrInvalidArgument", op, err)
		}
	}
}
