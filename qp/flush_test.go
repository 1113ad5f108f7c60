package qp_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// TestFlushAtomicWriteLossy: 200 rounds of WRITE, ATOMIC_WRITE over the
// WRITE's first word, FLUSH of the range, over a link that drops,
// duplicates and reorders in both directions (seeded). Every WR completes
// successfully and in order, and each slot ends with the ATOMIC_WRITE's
// bytes behind the WRITE's: ordered like a write, executed once.
func TestFlushAtomicWriteLossy(t *testing.T) {
	seed := int64(22)
	if s, ok, err := sim.EnvSeed(); err != nil {
		t.Fatal(err)
	} else if ok {
		seed = s
	}
	t.Logf("seed %d (GOROCE_SEED replays)", seed)
	f := sim.Faults{Drop: 0.05, Duplicate: 0.03, Reorder: 0.05}
	n, err := sim.NewPair(sim.Config{Seed: seed, AtoB: f, BtoA: f})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	o := sim.QPOptions{BufSize: 1 << 16, Access: qp.LocalWrite | qp.RemoteWrite | qp.RemoteRead | qp.FlushGlobal,
		Connect: qp.ConnectOptions{Access: qp.RemoteWrite | qp.FlushGlobal, Timeout: 8}}
	a, b, err := n.ConnectQPs(o, o)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 200
	wcs := make([]qp.WC, 16)
	for i := range rounds {
		slot := uint64(i % 64 * 256)
		src := a.Buf[i%16*64 : i%16*64+64]
		for j := range src {
			src[j] = byte(i + j)
		}
		var data [8]byte
		binary.LittleEndian.PutUint64(data[:], uint64(0xA000+i))
		wrs := []qp.SendWR{
			{WRID: uint64(3 * i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{a.SGE(i%16*64, 64)},
				RemoteAddr: b.MR.IOVA() + slot, RKey: b.MR.RKey()},
			{WRID: uint64(3*i + 1), Opcode: qp.WRAtomicWrite, Flags: qp.SendSignaled, RemoteAddr: b.MR.IOVA() + slot,
				RKey: b.MR.RKey(), AtomicData: data},
			{WRID: uint64(3*i + 2), Opcode: qp.WRFlush, Flags: qp.SendSignaled, RemoteAddr: b.MR.IOVA() + slot,
				RKey: b.MR.RKey(), FlushLen: 64, FlushType: qp.FlushTypeGlobal, FlushLevel: qp.FlushLevelRange},
		}
		for k := range wrs {
			if err := a.QP.PostSend(&wrs[k]); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < 3; {
			k, err := n.Wait(a.SendCQ, wcs, 10*time.Second)
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			for _, wc := range wcs[:k] {
				want := []qp.WCOpcode{qp.WCRDMAWrite, qp.WCAtomicWrite, qp.WCFlush}[got]
				if wc.Status != qp.WCSuccess || wc.WRID != uint64(3*i+got) || wc.Opcode != want {
					t.Fatalf("round %d: completion %v", i, wc)
				}
				got++
			}
		}
		dst := b.Buf[slot : slot+64]
		if v := binary.LittleEndian.Uint64(dst); v != uint64(0xA000+i) || string(dst[8:]) != string(src[8:]) {
			t.Fatalf("round %d: slot holds %#x and % x", i, v, dst[8:16])
		}
	}
	st := n.A.LinkStats()
	t.Logf("A sent %d frames (%d dropped), retransmitted %d", st.TxFrames, st.Dropped, a.QP.Counters()[qp.CntRetransmittedPkts])
	if st.Dropped == 0 || a.QP.Counters()[qp.CntRetransmittedPkts] == 0 {
		t.Fatal("no loss exercised the retries")
	}
}

// TestFlushPersistentRefused: goroce registers no persistent memory.
func TestFlushPersistentRefused(t *testing.T) {
	n, err := sim.NewPair(sim.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pd := n.A.Dev.AllocPD()
	_, err = pd.RegMR(make([]byte, 64), qp.LocalWrite|qp.FlushPersistent)
	if !errors.Is(err, memreg.ErrNotPersistent) {
		t.Fatalf("RegMR with FLUSH_PERSISTENT: %v, want memreg.ErrNotPersistent", err)
	}
	if _, err := pd.RegMR(make([]byte, 64), qp.LocalWrite|qp.FlushGlobal); err != nil {
		t.Fatalf("RegMR with FLUSH_GLOBAL: %v", err)
	}
}
