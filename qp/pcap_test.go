package qp_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/pcapfile"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
	"github.com/goroce/goroce/wire"
)

// TestPcapWriter: each device's own capture holds exactly the frames that
// crossed the link in both directions (the in-memory link's tap is the
// reference), every one a RoCEv2 packet with a good ICRC, with timestamps
// from the run, in order; one PcapWriter shared by both devices holds
// each frame twice (sent by one, received by the other).
func TestPcapWriter(t *testing.T) {
	var linkTap, bufA, bufB, bufBoth tapBuf
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{Tap: &linkTap})
	if err != nil {
		t.Fatal(err)
	}
	pwA, err := qp.NewPcapWriter(&bufA)
	if err != nil {
		t.Fatal(err)
	}
	pwB, _ := qp.NewPcapWriter(&bufB)
	pwBoth, _ := qp.NewPcapWriter(&bufBoth)
	start := time.Now()
	// A from the start, B attached later: SetPcap before the QPs exist
	// misses nothing either.
	a.SetPcap(pwA)
	b.SetPcap(pwB)
	ea, eb := connectEnds(t, a, b, sim.QPOptions{}, 100, 200)
	// Three WRITEs of three packets each (64 KiB buffer, 1024-byte path
	// MTU) and a READ back, each with its ACK or response.
	for i := range 3 {
		x := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: ea.mr.IOVA(), Length: 3000, LKey: ea.mr.LKey()}}, RemoteAddr: eb.mr.IOVA(), RKey: eb.mr.RKey()}
		if err := ea.q.PostSend(x); err != nil {
			t.Fatal(err)
		}
		waitWC(t, ea.cq)
	}
	// settle waits until every frame the link carried is in the captures
	// twice (at its sender and at its receiver): a frame still on the link
	// when the writers are swapped or the devices closed would be in one
	// capture only. Bounded; the assertions below report what is missing.
	settle := func() {
		t.Helper()
		count := func(buf *tapBuf) int {
			recs, _ := pcapfile.ReadAll(bytes.NewReader(buf.snapshot()))
			return len(recs)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for _, pw := range []*qp.PcapWriter{pwA, pwB, pwBoth} {
				if err := pw.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if count(&bufA)+count(&bufB)+count(&bufBoth) == 2*count(&linkTap) {
				return
			}
		}
	}
	settle()
	a.SetPcap(pwBoth) // from here A's frames go to the shared writer
	b.SetPcap(pwBoth)
	if err := ea.q.PostSend(&qp.SendWR{WRID: 9, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: ea.mr.IOVA(), Length: 2048, LKey: ea.mr.LKey()}}, RemoteAddr: eb.mr.IOVA(), RKey: eb.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, ea.cq)
	settle() // the READ's trailing frames, if any
	a.Close()
	b.Close()
	end := time.Now()
	for _, pw := range []*qp.PcapWriter{pwA, pwB, pwBoth} {
		if err := pw.Close(); err != nil {
			t.Fatal(err)
		}
	}

	read := func(name string, buf *tapBuf) []pcapfile.Record {
		t.Helper()
		recs, err := pcapfile.ReadAll(bytes.NewReader(buf.snapshot()))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var pkt wire.Packet
		for i, r := range recs {
			if err := wire.Parse(r.Data, &pkt); err != nil {
				t.Errorf("%s: record %d: %v", name, i, err)
			}
		}
		return recs
	}
	ref := read("link tap", &linkTap)
	capA, capB, both := read("A", &bufA), read("B", &bufB), read("both", &bufBoth)
	if len(ref) < 3*3+3+3 {
		t.Fatalf("the link carried %d frames", len(ref))
	}
	frames := func(rs []pcapfile.Record) []string {
		var out []string
		for _, r := range rs {
			out = append(out, string(r.Data))
		}
		slices.Sort(out)
		return out
	}
	// The shared capture has each of its frames twice (sent by one
	// device, received by the other); A's and B's captures, each with one
	// copy of the shared one's, are the link's frames, both directions.
	bf := frames(both)
	var half []string
	for i := 0; i < len(bf); i += 2 {
		if i+1 == len(bf) || bf[i] != bf[i+1] {
			t.Errorf("the shared capture has a frame once")
			break
		}
		half = append(half, bf[i])
	}
	refAll := frames(ref)
	for name, c := range map[string][]pcapfile.Record{"A": capA, "B": capB} {
		got := append(frames(c), half...)
		slices.Sort(got)
		if !slices.Equal(got, refAll) {
			t.Errorf("%s's capture and the shared one: %d frames; the link carried %d", name, len(got), len(refAll))
		}
	}
	for name, rs := range map[string][]pcapfile.Record{"A": capA, "B": capB, "both": both} {
		for i, r := range rs {
			if r.Time.Before(start.Truncate(time.Microsecond)) || r.Time.After(end) {
				t.Errorf("%s: record %d at %v, outside the run (%v to %v)", name, i, r.Time, start, end)
			}
			if i > 0 && r.Time.Before(rs[i-1].Time) {
				t.Errorf("%s: record %d at %v, before record %d (%v)", name, i, r.Time, i-1, rs[i-1].Time)
			}
		}
	}
	t.Logf("link %d frames; A %d, B %d, shared %d", len(ref), len(capA), len(capB), len(both))
}

// failWriter fails every write after the first n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n < len(p) {
		return 0, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

// TestPcapWriterError: a failing writer stops the capture with its error;
// the devices keep working.
func TestPcapWriterError(t *testing.T) {
	pw, err := qp.NewPcapWriter(&failWriter{n: 24})
	if err != nil {
		t.Fatal(err)
	}
	a, b, err := qp.OpenMemoryPair(qp.MemoryPairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	a.SetPcap(pw)
	ea, eb := connectEnds(t, a, b, sim.QPOptions{}, 1, 2)
	for i := range 4 {
		if err := ea.q.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: ea.mr.IOVA(), Length: 4096, LKey: ea.mr.LKey()}}, RemoteAddr: eb.mr.IOVA(), RKey: eb.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, ea.cq); wc.Status != qp.WCSuccess {
			t.Fatalf("WRITE %d: %v", i, wc.Status)
		}
	}
	if err := pw.Flush(); err == nil || pw.Err() == nil || pw.Close() == nil {
		t.Errorf("a capture into a full disk: Flush %v, Err %v", err, pw.Err())
	}
}
