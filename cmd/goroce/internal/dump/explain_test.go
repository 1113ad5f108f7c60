package dump

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// lossRun is goroce's own stack on the simulator (fake clock, one
// goroutine) with planted faults, captured twice: where the frames leave
// their sender (before the faults: "entry") and where they are delivered
// (after them: "exit", the link's tap).
type lossRun struct {
	t           *testing.T
	n           *sim.Net
	entry, exit bytes.Buffer
	entryW      *pcapfile.Writer
	dropAB      func(p *wire.Packet) bool
	dropBA      func(p *wire.Packet) bool
	a, b        *lossEnd
}

type lossEnd struct {
	pd  *qp.PD
	cq  *qp.CQ
	qp  *qp.QP
	mem []byte
	mr  *qp.MR
}

const lossSQPSN, lossRQPSN = 0x1000, 0x2000

func newLossRun(t *testing.T, seed int64, faults nic.Faults, opts qp.ConnectOptions) *lossRun {
	return newLossRunMTU(t, seed, faults, opts, 0)
}

func newLossRunMTU(t *testing.T, seed int64, faults nic.Faults, opts qp.ConnectOptions, mtu int) *lossRun {
	r := &lossRun{t: t}
	n, err := sim.NewPair(sim.Config{Seed: seed, Tap: &r.exit, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r.n = n
	if r.entryW, err = pcapfile.NewWriter(&r.entry, pcapfile.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	filter := func(drop *func(*wire.Packet) bool) func([]byte) bool {
		return func(frame []byte) bool {
			if err := r.entryW.WritePacket(n.Clock().Now(), frame); err != nil {
				t.Error(err)
			}
			var p wire.Packet
			if wire.Parse(frame, &p) != nil || *drop == nil {
				return false
			}
			return (*drop)(&p)
		}
	}
	fa, fb := faults, faults
	fa.Filter, fb.Filter = filter(&r.dropAB), filter(&r.dropBA)
	n.A.Link.SetFaults(fa)
	n.B.Link.SetFaults(fb)
	// Fixed IOVAs: the RETHs (and so the capture) do not depend on where
	// the buffers happen to be.
	mk := func(ep *sim.Endpoint, iova uint64) *lossEnd {
		e := &lossEnd{pd: ep.Dev.AllocPD(), mem: make([]byte, 1<<20)}
		e.cq, _ = ep.Dev.CreateCQ(1024)
		e.qp, err = e.pd.CreateQP(qp.InitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64}})
		if err != nil {
			t.Fatal(err)
		}
		e.mr, err = e.pd.RegMRIOVA(e.mem, iova, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead|memreg.RemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	r.a, r.b = mk(n.A, 0x7f0000100000), mk(n.B, 0x7f0000900000)
	oa, ob := opts, opts
	oa.SQPSN, ob.SQPSN = lossSQPSN, lossRQPSN
	if err := r.a.qp.Connect(context.Background(), qp.Remote{QPN: r.b.qp.QPN(), PSN: lossRQPSN, GID: n.B.IP}, oa); err != nil {
		t.Fatal(err)
	}
	if err := r.b.qp.Connect(context.Background(), qp.Remote{QPN: r.a.qp.QPN(), PSN: lossSQPSN, GID: n.A.IP}, ob); err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *lossEnd) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

// wait runs the simulation until cq has yielded at least n completions,
// all successful, and returns how many it yielded.
func (r *lossRun) wait(cq *qp.CQ, n int) int {
	r.t.Helper()
	var wc [16]qp.WC
	got := 0
	err := r.n.RunUntil(func() bool {
		k, _ := cq.Poll(wc[:])
		for _, c := range wc[:k] {
			if c.Status != transport.WCSuccess {
				r.t.Fatalf("completion %v (seed %d)", c, r.n.Seed())
			}
		}
		got += k
		return got >= n
	}, time.Hour)
	if err != nil {
		r.t.Fatal(err)
	}
	return got
}

// plantedCapture runs three operations with one planted fault each:
//
//  1. a 10-packet WRITE whose 5th packet (PSN 0x1004) is lost once: the
//     responder NAKs PSN 0x1004 (sequence error), the requester resends
//     0x1004..0x1009;
//  2. a SEND whose ACK is lost once: the requester times out (67 ms) and
//     resends; the responder re-ACKs the duplicate;
//  3. a SEND with no receive posted: RNR NAK (timer 12 = 640 µs) and
//     resends until a receive is posted after the second one.
func plantedCapture(t *testing.T) *lossRun {
	r := newLossRun(t, 1, nic.Faults{}, qp.ConnectOptions{})
	lostWrite, lostAck := false, false
	r.dropAB = func(p *wire.Packet) bool {
		if p.BTH.PSN() == lossSQPSN+4 && !lostWrite {
			lostWrite = true
			return true
		}
		return false
	}
	r.dropBA = func(p *wire.Packet) bool {
		if p.Opcode() == wire.RCAcknowledge && p.BTH.PSN() == lossSQPSN+10 && !lostAck {
			lostAck = true
			return true
		}
		return false
	}
	if err := r.a.qp.PostSend(&qp.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []qp.SGE{r.a.sge(0, 10240)}, RemoteAddr: r.b.mr.IOVA(), RKey: r.b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	r.wait(r.a.cq, 1)
	if err := r.b.qp.PostRecv(&qp.RecvWR{WRID: 2, SGL: []qp.SGE{r.b.sge(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.a.qp.PostSend(&qp.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []qp.SGE{r.a.sge(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	r.wait(r.a.cq, 1)
	r.wait(r.b.cq, 1)
	if err := r.a.qp.PostSend(&qp.SendWR{WRID: 4, Opcode: transport.WRSend, Flags: transport.SendSignaled,
		SGL: []qp.SGE{r.a.sge(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.n.RunUntil(func() bool { return countRNR(r.exit.Bytes()) >= 2 }, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := r.b.qp.PostRecv(&qp.RecvWR{WRID: 5, SGL: []qp.SGE{r.b.sge(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	r.wait(r.a.cq, 1)
	r.wait(r.b.cq, 1)
	return r
}

// countRNR counts the RNR NAKs in a pcap stream.
func countRNR(capture []byte) int {
	recs, _ := pcapfile.ReadAll(bytes.NewReader(capture))
	n := 0
	for _, rec := range recs {
		var p wire.Packet
		if wire.Parse(rec.Data, &p) == nil && p.AETH != nil && p.AETH.Syndrome().Kind() == wire.SynRNRNAK {
			n++
		}
	}
	return n
}

// frameNos returns the 1-based frame numbers of the packets matching f.
func frameNos(t *testing.T, capture []byte, f func(p *wire.Packet) bool) []int {
	t.Helper()
	recs, err := pcapfile.ReadAll(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i, rec := range recs {
		var p wire.Packet
		if wire.Parse(rec.Data, &p) == nil && f(&p) {
			out = append(out, i+1)
		}
	}
	return out
}

func findAnomaly(as []dumpjson.Anomaly, kind, cause string, psn uint32) *dumpjson.Anomaly {
	for i := range as {
		if as[i].Kind == kind && as[i].Cause == cause && as[i].PSN == psn {
			return &as[i]
		}
	}
	return nil
}

func eqInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExplainPlantedLoss(t *testing.T) {
	r := plantedCapture(t)
	psn := func(v uint32) func(p *wire.Packet) bool {
		return func(p *wire.Packet) bool { return p.BTH.PSN() == wire.PSN(v) }
	}
	isReq := func(p *wire.Packet) bool { return p.Opcode().Info().Request }

	for _, side := range []struct {
		name    string
		capture []byte
	}{{"exit", r.exit.Bytes()}, {"entry", r.entry.Bytes()}} {
		t.Run(side.name, func(t *testing.T) {
			c := side.capture
			out, s := runBytes(t, c, Options{Explain: true})
			t.Log(out)
			if len(s.Verdicts) != 1 {
				t.Fatalf("verdicts %+v", s.Verdicts)
			}
			// 1. Sequence NAK for 0x1004, drawn by 0x1005 at the exit
			// (0x1004 never got there) and by 0x1005 at the entry too.
			nak := frameNos(t, c, func(p *wire.Packet) bool {
				return p.AETH != nil && p.AETH.Syndrome() == wire.NAKSyndrome(wire.NAKPSNSequenceError)
			})
			if len(nak) != 1 {
				t.Fatalf("sequence NAKs in the capture: %v", nak)
			}
			a := findAnomaly(s.Anomalies, KindSeqNAK, "", lossSQPSN+4)
			drew := frameNos(t, c, func(p *wire.Packet) bool { return isReq(p) && psn(lossSQPSN+5)(p) })[0]
			if a == nil || !eqInts(a.Packets, []int{drew, nak[0]}) {
				t.Fatalf("sequence NAK anomaly %+v, want packets [%d %d]", a, drew, nak[0])
			}
			resent := []int{nak[0]}
			for v := uint32(lossSQPSN + 4); v <= lossSQPSN+9; v++ {
				nos := frameNos(t, c, func(p *wire.Packet) bool { return isReq(p) && psn(v)(p) })
				resent = append(resent, nos[len(nos)-1])
			}
			a = findAnomaly(s.Anomalies, KindRetransmission, CauseSeqNAK, lossSQPSN+4)
			if a == nil || a.PSNLast != lossSQPSN+9 || !eqInts(a.Packets, resent) {
				t.Fatalf("retransmission anomaly %+v, want PSN 0x1004..0x1009 on packets %v", a, resent)
			}
			where := "lost before it"
			if side.name == "entry" {
				where = "lost after it"
			}
			if !strings.HasPrefix(a.Text, "retransmission of PSN 4100..4105 (6 packets") ||
				!strings.Contains(a.Text, ") after sequence NAK #"+itoa(nak[0])+": PSN 4100 ") ||
				!strings.Contains(a.Text, where) {
				t.Fatalf("text %q", a.Text)
			}

			// 2. The SEND at 0x100a resent after a timeout of 67.1 ms.
			sends := frameNos(t, c, func(p *wire.Packet) bool { return isReq(p) && psn(lossSQPSN+10)(p) })
			if len(sends) != 2 {
				t.Fatalf("SEND 0x100a captured %v", sends)
			}
			a = findAnomaly(s.Anomalies, KindRetransmission, CauseTimeout, lossSQPSN+10)
			if a == nil || !eqInts(a.Packets, sends) || a.WaitedUs == nil || *a.WaitedUs != 67108 {
				t.Fatalf("timeout anomaly %+v, want packets %v (the first transmission, the resend) and a 67108 µs wait", a, sends)
			}
			// At the entry the lost ACK was captured: the resend is a
			// duplicate, and the responder re-ACKed it.
			acks := frameNos(t, c, func(p *wire.Packet) bool { return p.Opcode() == wire.RCAcknowledge && psn(lossSQPSN+10)(p) })
			d := findAnomaly(s.Anomalies, KindDuplicate, "", lossSQPSN+10)
			if side.name == "entry" {
				if len(acks) != 2 || d == nil || !eqInts(d.Packets, []int{sends[1], acks[1]}) ||
					!strings.Contains(d.Text, "duplicate request PSN 4106 (#"+itoa(sends[1])+"): the responder had already answered it (#"+itoa(acks[0])+"); it re-ACKed it (#"+itoa(acks[1])+")") {
					t.Fatalf("duplicate anomaly %+v (ACKs %v)", d, acks)
				}
			} else if d != nil || len(acks) != 1 {
				t.Fatalf("exit: duplicate %+v, ACKs %v: the lost ACK is not in this capture", d, acks)
			}

			// 3. RNR NAKs for 0x100b, each followed by a resend 640 µs later.
			rnr := frameNos(t, c, func(p *wire.Packet) bool {
				return p.AETH != nil && p.AETH.Syndrome().Kind() == wire.SynRNRNAK
			})
			if len(rnr) < 2 {
				t.Fatalf("RNR NAKs %v", rnr)
			}
			n := 0
			for _, x := range s.Anomalies {
				switch {
				case x.Kind == KindRNRNAK:
					if x.PSN != lossSQPSN+11 || !strings.Contains(x.Text, "timer 12 = 640.0 µs") {
						t.Fatalf("RNR anomaly %+v", x)
					}
				case x.Kind == KindRetransmission && x.Cause == CauseRNRNAK:
					if x.Packets[0] != rnr[n] || x.WaitedUs == nil || *x.WaitedUs != 640 {
						t.Fatalf("retransmission after RNR %+v, want NAK #%d and a 640 µs wait", x, rnr[n])
					}
					n++
				}
			}
			if n != len(rnr) {
				t.Fatalf("%d retransmissions after RNR NAK, want %d", n, len(rnr))
			}
			// Nothing else is anomalous: no gap, no unacknowledged end.
			for _, x := range s.Anomalies {
				if x.Kind == KindGap || x.Kind == KindUnacked || x.Kind == KindICRC {
					t.Fatalf("unexpected anomaly %+v", x)
				}
			}
			v := s.Verdicts[0]
			if v.Operations != 3 || v.Completed != 3 || !strings.Contains(v.Text, "after a sequence NAK") ||
				!strings.Contains(v.Text, "after an RNR NAK") || !strings.Contains(v.Text, "after a timeout") {
				t.Fatalf("verdict %+v", v)
			}
		})
	}
}

// The synthetic capture (synth_test.go) exercises the lines the simulator
// does not produce: an error NAK with the request's RETH, an ICRC failure,
// an operation left unanswered.
func TestExplainSynthetic(t *testing.T) {
	out, s := runBytes(t, mixedCapture(t).pcap(), Options{Explain: true})
	for _, want := range []string{
		"  #14    t=0.000205 RNR NAK for RC_SEND_ONLY #13 psn 108: the responder had no receive posted; it asks the requester to wait timer 12 = 640.0 µs\n",
		"  #15    t=0.001000 retransmission of PSN 108 (1 packet, first sent #13) after RNR NAK #14: waited 795.0 µs (the NAK asked for timer 12 = 640.0 µs)\n",
		"  #18    t=0.001105 NAK REMOTE_ACCESS_ERROR for RC_RDMA_WRITE_ONLY #17 psn 109 (rkey 0x99 va 0xdead0000 len 16): the R_Key is not valid",
		"  #19    t=0.001150 ICRC failure on RC_SEND_ONLY psn 110 (got ",
		"  end    t=0.001200 the flow ended with 1 operation unacknowledged (PSN 110; last request #20)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if len(s.Anomalies) != 5 || s.Anomalies[2].Kind != KindNAK || !eqInts(s.Anomalies[2].Packets, []int{17, 18}) {
		t.Fatalf("anomalies %+v", s.Anomalies)
	}
	v := s.Verdicts[0]
	if v.Operations != 8 || v.Completed != 6 || v.Failed != 1 || v.Unanswered != 1 || v.RespDQPN == nil || *v.RespDQPN != 0x22 {
		t.Fatalf("verdict %+v", v)
	}
}

// The rxe captures are clean except for a few retransmissions by rxe's
// requester after its timer (the ACK was in flight).
func TestExplainRXE(t *testing.T) {
	_, s := dumpFileUTC(t, rxeDir+"rc_pingpong_small.pcap", Options{Explain: true})
	if len(s.Anomalies) != 1 {
		t.Fatalf("anomalies %+v", s.Anomalies)
	}
	if a := s.Anomalies[0]; a.Kind != KindRetransmission || a.Cause != CauseTimeout || a.Src != "198.18.0.11" || a.PSN != 0xfce7b7+27 {
		t.Fatalf("anomaly %+v", a)
	}
	for _, f := range []string{"read_bw_4k.pcap", "write_bw_4k.pcap", "atomic_fadd.pcap", "send_bw_small.pcap"} {
		_, s := dumpFileUTC(t, rxeDir+f, Options{Explain: true})
		if len(s.Anomalies) != 0 || len(s.Verdicts) != 1 || !strings.Contains(s.Verdicts[0].Text, "clean") {
			t.Errorf("%s: %+v %+v", f, s.Anomalies, s.Verdicts)
		}
	}
}
