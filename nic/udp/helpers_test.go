package udp

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/wire"
)

// buildFrame makes an RC SEND_ONLY frame from src to dst with a payload
// derived from psn. IPID and sport are deliberately "rxe-like" (non-zero,
// per-QP) to show that they need not survive the trip.
func buildFrame(t testing.TB, src, dst netip.Addr, psn uint32, payloadLen int) []byte {
	t.Helper()
	f := &wire.Frame{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 0x0b}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 0x0a},
		SrcIP: src, DstIP: dst, HopLimit: 64, IPID: uint16(0x1234 + psn), SrcPort: 0xC132,
		BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(psn), AckReq: true},
	}
	payload := make([]byte, payloadLen)
	for i := range payload {
		payload[i] = byte(psn) + byte(i*7)
	}
	buf := make([]byte, f.Len(payloadLen))
	n, err := wire.BuildPayload(buf, f, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func readN(t testing.TB, l *Link, n int) [][]byte {
	t.Helper()
	type res struct {
		f   [][]byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var out [][]byte
		bufs := make([][]byte, 16)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, len(bufs))
		for len(out) < n {
			k, err := l.ReadBatch(bufs, sizes)
			if err != nil {
				ch <- res{out, err}
				return
			}
			for i := 0; i < k; i++ {
				out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
			}
		}
		ch <- res{out, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("after %d frames: %v", len(r.f), r.err)
		}
		return r.f
	case <-time.After(20 * time.Second):
		t.Fatalf("fewer than %d frames arrived; stats %+v", n, l.Stats())
		return nil
	}
}

// checkDelivered parses got and compares its RoCE part with sent.
func checkDelivered(t *testing.T, got, sent []byte, src, dst netip.AddrPort) {
	t.Helper()
	var p, q wire.Packet
	if err := wire.Parse(got, &p); err != nil {
		t.Fatalf("received frame does not parse: %v", err)
	}
	if err := wire.Parse(sent, &q); err != nil {
		t.Fatal(err)
	}
	if p.SrcIP() != src.Addr() || p.DstIP() != dst.Addr() || p.UDP.SrcPort() != src.Port() || p.UDP.DstPort() != 4791 {
		t.Fatalf("headers: %v:%d -> %v:%d", p.SrcIP(), p.UDP.SrcPort(), p.DstIP(), p.UDP.DstPort())
	}
	if !bytes.Equal(p.BTH, q.BTH) || !bytes.Equal(p.Payload, q.Payload) {
		t.Fatal("BTH or payload differ")
	}
}

// sendRecv sends frames from a to b in chunks the socket buffer holds and
// checks that each arrives intact, in order, with the canonical header.
func sendRecv(t *testing.T, a, b *Link, count int) {
	t.Helper()
	src, dst := a.LocalAddr(), b.LocalAddr()
	before := b.Stats().RxFrames
	for i := 0; i < count; i += 10 {
		var frames [][]byte
		for j := i; j < min(i+10, count); j++ {
			frames = append(frames, buildFrame(t, src.Addr(), dst.Addr(), uint32(j), (j*97)%1025))
		}
		if n, err := a.WriteBatch(frames); n != len(frames) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		got := readN(t, b, len(frames))
		for j := range got {
			checkDelivered(t, got[j], frames[j], src, dst)
			if len(got[j]) != len(frames[j]) {
				t.Fatalf("frame %d: %d bytes, sent %d", i+j, len(got[j]), len(frames[j]))
			}
		}
	}
	if s := b.Stats(); s.RxFrames-before != uint64(count) || s.RxDrops != 0 {
		t.Fatalf("receiver stats %+v", s)
	}
}
