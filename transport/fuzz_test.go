package transport_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/memreg"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// FuzzEngineReceive runs live traffic between two engines (the harness's
// epair) and, interleaved with it, hands both engines frames the fuzzer
// builds: any opcode, PSNs near and far from the expected ones, any QPN,
// AckReq and SE, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt and IETH fields
// and payload lengths, each with a valid ICRC (they go through wire.Parse
// like every real frame). The network between the two may drop, duplicate
// and reorder. The input also drives the posts, the clock and state changes.
//
// Asserted: no panic; every completion names a WR posted on that queue and
// not completed before, and completions come in posting order; the memory
// around the registered regions (canaries) never changes, nor does a region
// that grants no write access.
func FuzzEngineReceive(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0xff, 11, 1, 6, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		newFuzzRun(t, data).run()
	})
}

// fuzzIn hands out the fuzz input as numbers; an exhausted input reads as
// zeros.
type fuzzIn struct{ b []byte }

func (in *fuzzIn) bytes(n int) []byte {
	var z [8]byte
	if len(in.b) >= n {
		v := in.b[:n]
		in.b = in.b[n:]
		return v
	}
	copy(z[:], in.b)
	in.b = nil
	return z[:n]
}

func (in *fuzzIn) u8() uint8   { return in.bytes(1)[0] }
func (in *fuzzIn) u16() uint16 { return binary.LittleEndian.Uint16(in.bytes(2)) }
func (in *fuzzIn) u32() uint32 { return binary.LittleEndian.Uint32(in.bytes(4)) }
func (in *fuzzIn) u64() uint64 { return binary.LittleEndian.Uint64(in.bytes(8)) }

const (
	fuzzCanary     = 0xA5
	fuzzGuard      = 64   // canary bytes around each region
	fuzzRegionSize = 4096 // bytes per region
	fuzzRegions    = 3    // 0: plain, 1: zero-based, 2: remote read only, IOVA near 2^64
)

// fuzzSide is one engine with its regions and what was posted on it.
type fuzzSide struct {
	*side
	mem     []byte // guard | region 0 | guard | region 1 | guard | region 2 | guard
	regions [fuzzRegions]*memreg.MR
	ro      []byte // copy of region 2, which nothing may change
	posted  map[uint64]bool
	done    map[uint64]bool
	lastWC  [2]uint64 // last WR ID completed on the send and the receive queue
	nextWR  uint64
	wrQueue map[uint64]int // 0 = send queue, 1 = receive queue
}

func regionOff(i int) int { return fuzzGuard + i*(fuzzRegionSize+fuzzGuard) }

type inflight struct {
	to  *fuzzSide
	raw []byte
}

type fuzzRun struct {
	t    *testing.T
	in   *fuzzIn
	e    *epair
	a, b *fuzzSide
	net  []inflight
	mtu  int
	pkt  wire.Packet
}

func newFuzzRun(t *testing.T, data []byte) *fuzzRun {
	in := &fuzzIn{b: data}
	o := eopts{bufSize: 64, ringFrames: 256, frameSize: 2048, sqWR: 32, maxRdAtomic: 1 + in.u8()%8}
	o.mtu = []transport.MTU{transport.MTU256, transport.MTU512, transport.MTU1024}[in.u8()%3]
	o.timeout = 1 + in.u8()%14
	o.retry, o.rnr = in.u8()%8, in.u8()%8
	o.minRNR = in.u8() % 32
	o.psnA = wire.PSN(in.u32() & wire.PSNMask)
	o.psnB = wire.PSN(in.u32() & wire.PSNMask)
	r := &fuzzRun{t: t, in: in, e: newEPair(t, o), mtu: o.mtu.Bytes()}
	r.a, r.b = r.newSide(r.e.a), r.newSide(r.e.b)
	return r
}

func (r *fuzzRun) newSide(s *side) *fuzzSide {
	fs := &fuzzSide{side: s, posted: map[uint64]bool{}, done: map[uint64]bool{}, wrQueue: map[uint64]int{}, nextWR: 1}
	fs.mem = make([]byte, regionOff(fuzzRegions))
	for i := range fs.mem {
		fs.mem[i] = fuzzCanary
	}
	iovas := [fuzzRegions]uint64{0, 0, ^uint64(0) - fuzzRegionSize}
	access := [fuzzRegions]memreg.Access{memreg.LocalWrite | memreg.RemoteAny, memreg.LocalWrite | memreg.RemoteAny, memreg.RemoteRead}
	for i := range fs.regions {
		// The region's slice keeps the capacity up to the end of mem, so a
		// range check that let an access run past the region would write
		// the next guard instead of panicking.
		buf := fs.mem[regionOff(i) : regionOff(i)+fuzzRegionSize]
		for j := range buf {
			buf[j] = byte(i*31 + j)
		}
		var err error
		if i == 0 {
			fs.regions[i], err = s.pd.Register(buf, access[i])
		} else {
			fs.regions[i], err = s.pd.RegisterIOVA(buf, iovas[i], access[i])
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	fs.ro = append([]byte(nil), fs.mem[regionOff(2):regionOff(2)+fuzzRegionSize]...)
	return fs
}

func (r *fuzzRun) peer(s *fuzzSide) *fuzzSide {
	if s == r.a {
		return r.b
	}
	return r.a
}

func (r *fuzzRun) pick() *fuzzSide {
	if r.in.u8()&1 == 0 {
		return r.a
	}
	return r.b
}

func (r *fuzzRun) run() {
	for step := 0; step < 300 && len(r.in.b) > 0; step++ {
		switch r.in.u8() % 13 {
		case 0, 1, 2, 3:
			r.postSend(r.pick())
		case 4, 5:
			r.postRecv(r.pick())
		case 6, 7, 8:
			r.deliver(int(r.in.u8()%32), true)
		case 9, 10:
			r.forge(r.pick())
		case 11:
			r.tick(r.in.u8()&1 == 0)
		case 12:
			r.modify(r.pick())
		}
		r.collect()
	}
	// Let the traffic settle, without faults, then check the memory.
	for i := 0; i < 500; i++ {
		r.deliver(len(r.net), false)
		if len(r.net) == 0 && !r.tick(true) {
			break
		}
	}
	for _, s := range []*fuzzSide{r.a, r.b} {
		for i, v := range s.mem {
			if v != fuzzCanary && !r.inRegion(i) {
				r.t.Fatalf("%s: byte %d outside every registered region changed to %#x", s.name, i, v)
			}
		}
		if got := s.mem[regionOff(2) : regionOff(2)+fuzzRegionSize]; string(got) != string(s.ro) {
			r.t.Fatalf("%s: the region without write access changed", s.name)
		}
	}
}

func (r *fuzzRun) inRegion(i int) bool {
	for k := 0; k < fuzzRegions; k++ {
		if i >= regionOff(k) && i < regionOff(k)+fuzzRegionSize {
			return true
		}
	}
	return false
}

// addr picks an address and key for n bytes in one of s's regions: mostly
// a range inside one, else the edges that matter (the end, below 0, past
// 2^64), the harness's small MR, or anything at all.
func (r *fuzzRun) addr(s *fuzzSide, n int) (va uint64, key uint32) {
	sel := r.in.u8()
	off := uint64(r.in.u16())
	mr := s.regions[sel%fuzzRegions]
	switch sel % 16 {
	case 10:
		return mr.IOVA() + fuzzRegionSize - off%64, mr.LKey() // across the end
	case 11:
		return s.regions[1].IOVA() - off%4096, s.regions[1].LKey() // below 0
	case 12:
		return s.regions[2].IOVA() + off*16, s.regions[2].LKey() // past 2^64
	case 13:
		return s.mr.IOVA() + off%64, s.mr.RKey()
	case 14:
		return r.in.u64(), r.in.u32()
	case 15:
		return mr.IOVA() + off%fuzzRegionSize, r.in.u32()
	}
	return mr.IOVA() + off%uint64(fuzzRegionSize-min(n, fuzzRegionSize)+1), mr.LKey()
}

func (r *fuzzRun) sgl(s *fuzzSide, n int) []transport.SGE {
	if n > 1 && r.in.u8()&1 == 0 {
		h := n / 2
		va, key := r.addr(s, h)
		va2, key2 := r.addr(s, n-h)
		return []transport.SGE{{Addr: va, Length: uint32(h), LKey: key}, {Addr: va2, Length: uint32(n - h), LKey: key2}}
	}
	va, key := r.addr(s, n)
	return []transport.SGE{{Addr: va, Length: uint32(n), LKey: key}}
}

var fuzzOps = []transport.WROpcode{transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRSend,
	transport.WRSendWithImm, transport.WRRDMARead, transport.WRAtomicCmpAndSwp, transport.WRAtomicFetchAdd,
	transport.WRSendWithInv, transport.WRLocalInv}

func (r *fuzzRun) postSend(s *fuzzSide) {
	in := r.in
	// The two invalidating opcodes are rare: each can take a region away.
	op := fuzzOps[int(in.u8())%(2*len(fuzzOps)-2)%len(fuzzOps)]
	n := int(in.u16()) % (fuzzRegionSize + 1)
	if in.u8()&3 != 0 {
		n %= 3 * r.mtu // mostly a few packets
	}
	if op == transport.WRAtomicCmpAndSwp || op == transport.WRAtomicFetchAdd {
		n = 8
	}
	wr := &transport.SendWR{WRID: s.nextWR, Opcode: op, Flags: transport.SendFlags(in.u8()) & 0xF, Imm: in.u32()}
	wr.SGL = r.sgl(s, n)
	wr.RemoteAddr, wr.RKey = r.addr(r.peer(s), n)
	if op == transport.WRAtomicCmpAndSwp || op == transport.WRAtomicFetchAdd {
		wr.RemoteAddr &^= 7
		wr.CompareAdd, wr.Swap = in.u64()%4, in.u64()
	}
	if op == transport.WRSendWithInv {
		_, wr.InvRKey = r.addr(r.peer(s), 0)
	}
	if op == transport.WRLocalInv {
		_, wr.InvRKey = r.addr(s, 0)
	}
	s.nextWR++
	if err := s.q.PostSend(wr, r.e.now); err == nil {
		s.posted[wr.WRID] = true
		s.wrQueue[wr.WRID] = 0
	}
}

func (r *fuzzRun) postRecv(s *fuzzSide) {
	wr := &transport.RecvWR{WRID: s.nextWR, SGL: r.sgl(s, int(r.in.u16())%(fuzzRegionSize+1))}
	s.nextWR++
	if err := s.q.PostRecv(wr); err == nil {
		s.posted[wr.WRID] = true
		s.wrQueue[wr.WRID] = 1
	}
}

// collect moves every frame the engines sent into the network and checks
// the completions.
func (r *fuzzRun) collect() {
	for _, s := range []*fuzzSide{r.a, r.b} {
		for {
			f, ok := s.out.pop()
			if !ok {
				break
			}
			r.net = append(r.net, inflight{to: r.peer(s), raw: append([]byte(nil), f...)})
		}
		for qi, c := range []*cq{s.scq, s.rcq} {
			for _, wc := range c.take() {
				switch {
				case !s.posted[wc.WRID] || s.wrQueue[wc.WRID] != qi:
					r.t.Fatalf("%s: completion %v for a WR not posted on this queue", s.name, wc)
				case s.done[wc.WRID]:
					r.t.Fatalf("%s: WR %d completed twice (%v)", s.name, wc.WRID, wc)
				case wc.WRID < s.lastWC[qi]:
					r.t.Fatalf("%s: completion %v after WR %d: out of posting order", s.name, wc, s.lastWC[qi])
				case wc.QPNum != s.q.QPN():
					r.t.Fatalf("%s: completion %v names another QP", s.name, wc)
				}
				s.done[wc.WRID] = true
				s.lastWC[qi] = wc.WRID
			}
		}
	}
}

// deliver hands up to n frames of the network to their engines; with
// faults, the input may drop, duplicate or delay each.
func (r *fuzzRun) deliver(n int, faults bool) {
	for ; n > 0 && len(r.net) > 0; n-- {
		m := r.net[0]
		r.net = r.net[1:]
		if faults {
			switch r.in.u8() % 8 {
			case 0:
				continue // lost
			case 1:
				r.net = append(r.net, m) // delayed behind the rest
				continue
			case 2:
				r.receive(m.to, m.raw) // duplicated
			}
		}
		r.receive(m.to, m.raw)
	}
}

func (r *fuzzRun) receive(to *fuzzSide, raw []byte) {
	if err := wire.Parse(raw, &r.pkt); err != nil {
		r.t.Fatalf("a frame from the engine does not parse: %v", err)
	}
	to.q.Receive(&r.pkt, r.e.now)
	r.collect()
}

// tick advances the clock to the earliest deadline (or a little) and runs
// both engines' timers. It reports whether a deadline was pending.
func (r *fuzzRun) tick(toDeadline bool) bool {
	next, ok := time.Time{}, false
	for _, s := range []*fuzzSide{r.a, r.b} {
		if d, has := s.q.Deadline(); has && (!ok || d.Before(next)) {
			next, ok = d, true
		}
	}
	switch {
	case toDeadline && ok:
		if next.After(r.e.now) {
			r.e.now = next
		}
	case !toDeadline:
		r.e.now = r.e.now.Add(time.Duration(r.in.u16()) * time.Microsecond)
	}
	r.a.q.Tick(r.e.now)
	r.b.q.Tick(r.e.now)
	r.collect()
	return ok
}

func (r *fuzzRun) modify(s *fuzzSide) {
	var st transport.State
	switch r.in.u8() % 16 {
	case 0:
		st = transport.StateSQD
	case 1:
		st = transport.StateRTS
	case 2:
		st = transport.StateErr
	default:
		return
	}
	_ = s.q.Modify(&transport.Attr{State: st}, transport.AttrState, r.e.now)
}

// forge builds a frame from the peer to s out of fuzz input and hands it to
// s's engine.
func (r *fuzzRun) forge(s *fuzzSide) {
	in := r.in
	from := r.peer(s)
	var op wire.Opcode
	if sel := in.u8(); sel&0x80 != 0 {
		op = wire.Opcode(in.u8()) // anything, UC/UD/CNP or undefined included
	} else {
		op = wire.Opcode(sel % 0x18) // RC
	}
	flags := in.u8()
	attr := s.q.Attr()
	base := attr.RQPSN // requests: around the responder's expected PSN
	if info := op.Info(); info.Valid && !info.Request {
		base = attr.SQPSN // responses: around the requester's next PSN
	}
	psn := base.Add(uint32(int32(int8(in.u8()))))
	if flags&1 != 0 {
		psn = wire.PSN(in.u32() & wire.PSNMask)
	}
	f := wire.Frame{
		SrcMAC: from.mac, DstMAC: s.mac, SrcIP: from.ip, DstIP: s.ip, HopLimit: 64,
		SrcPort: wire.RCSourcePort(from.q.QPN(), s.q.QPN()),
		BTH:     wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: s.q.QPN(), PSN: psn, AckReq: flags&2 != 0, SE: flags&4 != 0},
	}
	if flags&8 != 0 {
		f.BTH.DestQP = in.u32() & 0xFFFFFF
	}
	dmaLen := uint32(in.u16()) % (2 * fuzzRegionSize)
	va, key := r.addr(s, int(dmaLen))
	f.RETH = wire.RETHFields{VA: va, RKey: key, DMALen: dmaLen}
	if flags&16 != 0 {
		f.RETH.DMALen = in.u32()
	}
	f.AETH = wire.AETHFields{Syndrome: wire.Syndrome(in.u8()), MSN: in.u32() & wire.PSNMask}
	va, key = r.addr(s, 8)
	f.AtomicETH = wire.AtomicETHFields{VA: va, RKey: key, SwapAdd: in.u64(), Compare: in.u64()}
	f.AtomicAckETH = in.u64()
	f.ImmDt = in.u32()
	_, f.IETH = r.addr(s, 0)
	n := int(in.u16()) % (r.mtu + 9)
	if p := op.Info().Pos; p == wire.PosFirst || p == wire.PosMiddle {
		n &^= 3
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i) ^ flags
	}
	buf := make([]byte, 2048)
	m, err := wire.BuildPayload(buf, &f, payload)
	if err != nil {
		return // not a frame (undefined opcode, payload where none goes)
	}
	if err := wire.Parse(buf[:m], &r.pkt); err != nil {
		return // wire.Parse drops it before any engine sees it
	}
	s.q.Receive(&r.pkt, r.e.now)
	r.collect()
}
