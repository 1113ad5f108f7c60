package transport_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// ucFrames returns the UC frames of a capture in testdata/rxe.
func ucFrames(t *testing.T, name string) [][]byte {
	t.Helper()
	f, err := os.Open("../testdata/rxe/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := pcapfile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	var p wire.Packet
	for _, r := range recs {
		if wire.Parse(r.Data, &p) == nil && p.Opcode().Transport() == wire.TransportUC {
			out = append(out, r.Data)
		}
	}
	return out
}

// newUCEngine makes a UC engine connected as the rxe host that sent (or
// received) p: ibv_uc_pingpong's and perftest -c UC's modify calls.
func newUCEngine(t *testing.T, qpn uint32, p *wire.Packet, sender bool, sqPSN wire.PSN, out transport.Output,
	scq, rcq transport.CompletionQueue) (*transport.QP, *memreg.PD) {
	t.Helper()
	mrs := memreg.NewTable(1)
	pd := mrs.AllocPD()
	q, err := transport.New(transport.Config{QPN: qpn, PD: pd, MRs: mrs, Caps: transport.Caps{MaxSendWR: 4, MaxRecvWR: 4},
		SendCQ: scq, RecvCQ: rcq, Out: out, PortMaxMTU: transport.MTU1024, Type: transport.QPTypeUC})
	if err != nil {
		t.Fatal(err)
	}
	av := transport.AV{DGID: p.DstIP(), SGID: p.SrcIP(), HopLimit: p.IPv4.TTL(), TrafficClass: p.IPv4.TOS(),
		DMAC: p.Eth.Dst(), SMAC: p.Eth.Src()}
	if !sender {
		av = transport.AV{DGID: p.SrcIP(), SGID: p.DstIP(), HopLimit: 64, DMAC: p.Eth.Src(), SMAC: p.Eth.Dst()}
	}
	now := time.Unix(0, 0)
	must(t, q.Modify(&transport.Attr{State: transport.StateInit, Port: 1, AccessFlags: memreg.RemoteWrite},
		transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags, now))
	must(t, q.Modify(&transport.Attr{State: transport.StateRTR, PathMTU: transport.MTU1024, DestQPN: p.BTH.DestQP(), RQPSN: p.BTH.PSN(), AV: av},
		transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN, now))
	must(t, q.Modify(&transport.Attr{State: transport.StateRTS, SQPSN: sqPSN}, transport.AttrState|transport.AttrSQPSN, now))
	return q, pd
}

// sameAsRxe compares goroce's frame with rxe's after taking the one field
// the kernel picks, the IPv4 ID (with the header checksum and the ICRC it
// feeds), from rxe's.
func sameAsRxe(t *testing.T, got, want []byte) {
	t.Helper()
	got = append([]byte(nil), got...)
	ip := got[wire.EthernetLen:]
	copy(ip[4:6], want[wire.EthernetLen+4:wire.EthernetLen+6])
	wire.IPv4(ip).SetChecksum(wire.IPv4(ip).CalculateChecksum())
	wire.PutICRC(got[len(got)-4:], wire.ICRC(ip[:len(got)-wire.EthernetLen-4]))
	if !bytes.Equal(got, want) {
		t.Fatalf("frame differs from rxe's:\n got % x\nwant % x", got, want)
	}
}

// TestUCGoldenRxe: for every 4096-byte message of rxe's UC captures (uc_pingpong's SENDs
// both ways, write_bw -c UC's RDMA WRITEs), goroce's UC requester sends the same four frames
// byte for byte (opcodes 0x20-0x22 / 0x26-0x28, AckReq clear, the flow-label UDP source port
// of both QPNs, the RETH of the FIRST), and a goroce UC responder receives rxe's frames into
// the message rxe's peer got.
func TestUCGoldenRxe(t *testing.T) {
	for _, c := range []struct {
		file  string
		qpn   uint32 // both ends' QPN in the capture (the tools' logs)
		write bool
		msgs  int
	}{
		{"uc_pingpong.pcap", 0x11, false, 40},
		{"write_bw_uc.pcap", 0x12, true, 20},
	} {
		t.Run(c.file, func(t *testing.T) {
			frames := ucFrames(t, c.file)
			if len(frames) != 4*c.msgs {
				t.Fatalf("%d UC frames, want %d", len(frames), 4*c.msgs)
			}
			// Each sender's frames are consecutive per message; pick them by source.
			bySrc := map[string][][]byte{}
			var order []string
			var p wire.Packet
			for _, fr := range frames {
				must(t, wire.Parse(fr, &p))
				k := p.SrcIP().String()
				if bySrc[k] == nil {
					order = append(order, k)
				}
				bySrc[k] = append(bySrc[k], fr)
			}
			compared := 0
			defer func() {
				if compared != c.msgs {
					t.Errorf("compared %d messages, want %d", compared, c.msgs)
				}
			}()
			for _, src := range order {
				fs := bySrc[src]
				for m := 0; m+4 <= len(fs); m += 4 {
					msg := fs[m : m+4]
					var pk [4]wire.Packet
					var payload []byte
					for i := range msg {
						must(t, wire.Parse(msg[i], &pk[i]))
						payload = append(payload, pk[i].Payload...)
					}
					first := &pk[0]
					for i, want := range []wire.Opcode{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendMiddle, wire.UCSendLast} {
						if c.write {
							want += wire.UCRDMAWriteFirst - wire.UCSendFirst
						}
						if pk[i].Opcode() != want || pk[i].BTH.AckReq() {
							t.Fatalf("rxe packet %d: %v ackreq %v", i, pk[i].Opcode(), pk[i].BTH.AckReq())
						}
					}
					// The requester.
					out := newRing(8, frameCap)
					scq := &cq{}
					q, pd := newUCEngine(t, c.qpn, first, true, first.BTH.PSN(), out, scq, &cq{})
					mr, err := pd.Register(payload, 0)
					must(t, err)
					wr := transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.SendSignaled,
						SGL: []transport.SGE{{Addr: mr.IOVA(), Length: uint32(len(payload)), LKey: mr.LKey()}}}
					if c.write {
						wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMAWrite, first.RETH.VA(), first.RETH.RKey()
					}
					must(t, q.PostSend(&wr, time.Unix(0, 0)))
					for i := range msg {
						got, ok := out.pop()
						if !ok {
							t.Fatalf("goroce sent %d frames, rxe 4", i)
						}
						sameAsRxe(t, got, msg[i])
					}
					if wcs := scq.take(); len(wcs) != 1 || wcs[0].Status != transport.WCSuccess || wcs[0].ByteLen != 4096 {
						t.Fatalf("send completions %v", wcs)
					}

					// The responder, fed rxe's frames.
					rcq := &cq{}
					rq, rpd := newUCEngine(t, first.BTH.DestQP(), first, false, 0, newRing(2, frameCap), &cq{}, rcq)
					buf := make([]byte, 4096)
					var rmr *memreg.MR
					if c.write {
						rmr, err = rpd.RegisterIOVA(buf, first.RETH.VA(), memreg.LocalWrite|memreg.RemoteWrite)
					} else {
						rmr, err = rpd.Register(buf, memreg.LocalWrite)
						must(t, rq.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{{Addr: rmr.IOVA(), Length: 4096, LKey: rmr.LKey()}}}))
					}
					must(t, err)
					for i := range pk {
						if i == 0 && c.write {
							// The peer's key is not ours: the RETH names our region.
							pk[0].RETH.SetRKey(rmr.RKey())
						}
						rq.Receive(&pk[i], time.Unix(0, 0))
					}
					if !bytes.Equal(buf, payload) {
						t.Fatal("the responder's memory differs from the message")
					}
					if wcs := rcq.take(); !c.write && (len(wcs) != 1 || wcs[0].ByteLen != 4096 || wcs[0].Status != transport.WCSuccess) {
						t.Fatalf("receive completions %v", wcs)
					}
					compared++
					if rq.Counters[transport.CntSentPkts] != 0 || rq.Counters[transport.CntUCMsgDropped] != 0 {
						t.Fatalf("responder sent %d, dropped %d", rq.Counters[transport.CntSentPkts], rq.Counters[transport.CntUCMsgDropped])
					}
				}
			}
		})
	}
}
