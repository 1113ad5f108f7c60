// Package democmd is the goroce demo subcommand: two endpoints in one
// process run every RC operation against each other, over an in-memory
// link with seeded faults or, with --netns, over a veth pair between two
// network namespaces it creates.
package democmd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/sim"
)

// Summary is the command's line in goroce's usage.
const Summary = "two endpoints in one process run every RC operation over an in-memory link"

type demoEnd struct {
	name string
	dev  *qp.Device
	pd   *qp.PD
	scq  *qp.CQ
	rcq  *qp.CQ
	qp   *qp.QP
	buf  []byte // registered: [0, half) local source/sink, [half, 2*half) remote target
	mr   *qp.MR
	inv  []byte // a separate region whose rkey the SEND_WITH_INV invalidates
}

// Run runs the demo with args and returns the exit code: 0 when every
// operation succeeded, 1 when one failed, 2 for bad flags.
func Run(env tool.Env, args []string) int {
	stdout, stderr := env.Stdout, env.Stderr
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pcapPath := fs.String("pcap", "", "write every frame to this pcap file")
	count := fs.Int("n", 20, "messages per operation")
	loss := fs.Float64("loss", 0, "drop probability per frame (each direction)")
	dup := fs.Float64("dup", 0, "duplicate probability per frame")
	reorder := fs.Float64("reorder", 0, "reorder probability per frame")
	corrupt := fs.Float64("corrupt", 0, "corrupt-one-bit probability per frame")
	seed := fs.Int64("seed", 1, "seed of the fault injection")
	mtu := fs.Int("mtu", 1500, "link MTU (1500 gives path MTU 1024, 9000 gives 4096)")
	linkKind := fs.String("link", "mem", "frame backend: mem (in-memory), or with --netns afxdp, afpacket, udp, auto")
	inNetns := fs.Bool("netns", false, "run between two network namespaces joined by veth, created and removed by the demo (root)")
	metricsAddr := fs.String("metrics", "", "serve /metrics (Prometheus) and /debug/vars (expvar) on this host:port during the run")
	incast := fs.Int("incast", 0, "instead: N senders write 64 KiB WRITEs to one receiver through a congested switch (simulated time)")
	ccMode := fs.String("cc", "dcqcn", "with --incast: congestion control, dcqcn or none")
	duration := fs.Duration("duration", incastDuration, "with --incast: simulated time of the run")
	var ccParams ccParamFlags
	fs.Var(&ccParams, "cc-param", "with --incast --cc dcqcn: set a DCQCN parameter, name=value as mlx5's cc_params (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := checkFlags(*count, *mtu, map[string]float64{"loss": *loss, "dup": *dup, "reorder": *reorder, "corrupt": *corrupt}); err != nil {
		fmt.Fprintf(stderr, "goroce demo: %v\nRun 'goroce demo -h' for usage.\n", err)
		return 2
	}
	if *incast != 0 {
		return runIncastDemo(env, *incast, *ccMode, *seed, *duration, ccParams)
	}
	if *linkKind != "mem" || *inNetns {
		return runDemoNetns(env, demoNetnsConfig{link: *linkKind, netns: *inNetns, pcap: *pcapPath, count: *count,
			loss: *loss, dup: *dup, reorder: *reorder, corrupt: *corrupt, seed: *seed, mtu: *mtu,
			metrics: *metricsAddr})
	}
	faulty := *loss > 0 || *dup > 0 || *reorder > 0 || *corrupt > 0
	var tap io.Writer
	if *pcapPath != "" {
		f, err := os.Create(*pcapPath)
		if err != nil {
			fmt.Fprintln(stderr, "goroce demo:", err)
			return 1
		}
		defer f.Close()
		tap = f
	}
	faults := sim.Faults{Drop: *loss, Duplicate: *dup, Reorder: *reorder, Corrupt: *corrupt}
	n, err := sim.NewPair(sim.Config{Mode: sim.Goroutines, Seed: *seed, MTU: *mtu, AtoB: faults, BtoA: faults, Tap: tap})
	if err != nil {
		fmt.Fprintln(stderr, "goroce demo:", err)
		return 1
	}
	defer n.Close()
	a, b, err := connectDemo(context.Background(), n.A.Dev, n.B.Dev)
	if err != nil {
		fmt.Fprintln(stderr, "goroce demo:", err)
		return 1
	}
	ipA, ipB := n.A.IP, n.B.IP
	_, stopMetrics := tool.StartMetrics(env, tool.Options{Metrics: *metricsAddr}, a.dev, b.dev)
	defer stopMetrics()
	mtuBytes := a.dev.ActiveMTU().Bytes()
	fmt.Fprintf(stdout, "goroce demo: A %v QPN %#06x  <->  B %v QPN %#06x, path MTU %d, in-memory link (MTU %d)\n",
		ipA, a.qp.QPN(), ipB, b.qp.QPN(), mtuBytes, *mtu)
	if faulty {
		fmt.Fprintf(stdout, "faults per frame, each direction: loss %.3g dup %.3g reorder %.3g corrupt %.3g, seed %d\n",
			*loss, *dup, *reorder, *corrupt, *seed)
	}
	ok := demoOps(stdout, a, b, *count, *seed, mtuBytes)
	if faulty || !ok {
		printDemoCounters(stdout, a, b, n.A.LinkStats(), n.B.LinkStats())
	}
	if !ok {
		return 1
	}
	return 0
}

// The link MTUs the demo runs on: the smallest leaves room for a 256-byte
// path MTU after rxe's 80 bytes of headers (qp.PathMTU), the largest is
// Ethernet's (ETH_MAX_MTU, the most a veth takes).
const (
	minLinkMTU = 256 + 80
	maxLinkMTU = 65535
)

// checkFlags reports the first flag value the demo cannot run with: a
// probability outside [0, 1], a link MTU outside [minLinkMTU, maxLinkMTU],
// a message count below 1.
func checkFlags(count, mtu int, probs map[string]float64) error {
	for _, name := range []string{"loss", "dup", "reorder", "corrupt"} {
		if p := probs[name]; !(p >= 0 && p <= 1) { // also rejects NaN
			return fmt.Errorf("--%s %v: want a probability between 0 and 1", name, p)
		}
	}
	if mtu < minLinkMTU || mtu > maxLinkMTU {
		return fmt.Errorf("--mtu %d: want a link MTU between %d and %d", mtu, minLinkMTU, maxLinkMTU)
	}
	if count < 1 {
		return fmt.Errorf("-n %d: want at least one message per operation", count)
	}
	return nil
}

// demoOps runs every operation count times between a and b, alternating
// the direction, prints one line per operation and the elapsed time, and
// reports whether all succeeded.
func demoOps(w io.Writer, a, b *demoEnd, count int, seed int64, mtuBytes int) (ok bool) {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	sizes := []int{0, 1, mtuBytes - 1, mtuBytes, mtuBytes + 1, 3 * mtuBytes, 64 << 10}
	ops := []struct {
		name string
		run  func(a, b *demoEnd, i, size int) (int, error)
	}{
		{"SEND", func(a, b *demoEnd, i, size int) (int, error) { return demoSend(a, b, i, size, qp.WRSend, rng) }},
		{"SEND_WITH_IMM", func(a, b *demoEnd, i, size int) (int, error) {
			return demoSend(a, b, i, size, qp.WRSendWithImm, rng)
		}},
		{"SEND_WITH_INV", func(a, b *demoEnd, i, size int) (int, error) {
			return demoSend(a, b, i, size, qp.WRSendWithInv, rng)
		}},
		{"RDMA_WRITE", func(a, b *demoEnd, i, size int) (int, error) {
			return demoWrite(a, b, i, size, qp.WRRDMAWrite, rng)
		}},
		{"RDMA_WRITE_WITH_IMM", func(a, b *demoEnd, i, size int) (int, error) {
			return demoWrite(a, b, i, size, qp.WRRDMAWriteWithImm, rng)
		}},
		{"RDMA_READ", func(a, b *demoEnd, i, size int) (int, error) { return demoRead(a, b, i, size, rng) }},
		{"ATOMIC_FETCH_ADD", func(a, b *demoEnd, i, size int) (int, error) { return demoFetchAdd(a, b, i) }},
		{"ATOMIC_CMP_SWAP", func(a, b *demoEnd, i, size int) (int, error) { return demoCmpSwap(a, b, i) }},
	}
	start := time.Now()
	fmt.Fprintf(w, "\n%-22s %8s %12s  %s\n", "operation", "messages", "bytes", "result")
	ok = true
	for _, op := range ops {
		var total int
		var failure error
		for i := 0; i < count && failure == nil; i++ {
			size := sizes[i%len(sizes)]
			// Alternate directions so both ends act as requester and responder.
			src, dst := a, b
			if i%2 == 1 {
				src, dst = b, a
			}
			n, err := op.run(src, dst, i, size)
			total += n
			failure = err
		}
		result := "ok"
		if failure != nil {
			result = "FAILED: " + failure.Error()
			ok = false
		}
		fmt.Fprintf(w, "%-22s %8d %12d  %s\n", op.name, count, total, result)
	}
	fmt.Fprintf(w, "\nelapsed %v\n", time.Since(start).Round(time.Millisecond))
	return ok
}

func printDemoCounters(w io.Writer, a, b *demoEnd, ma, mb sim.LinkStats) {
	printCounters(w, a.dev, b.dev)
	ra, rb := a.dev.RxStats(), b.dev.RxStats()
	fmt.Fprintf(w, "%-24s %10d %10d\n", "rx_bad_icrc_dropped", ra.BadICRC, rb.BadICRC)
	fmt.Fprintf(w, "%-24s %10d %10d\n", "rx_malformed_dropped", ra.ParseErrors+ra.NotRoCE, rb.ParseErrors+rb.NotRoCE)
	fmt.Fprintf(w, "%-24s %10d %10d\n", "link_dropped", ma.Dropped, mb.Dropped)
	fmt.Fprintf(w, "%-24s %10d %10d\n", "link_duplicated", ma.Duplicated, mb.Duplicated)
	fmt.Fprintf(w, "%-24s %10d %10d\n", "link_reordered", ma.Reordered, mb.Reordered)
	fmt.Fprintf(w, "%-24s %10d %10d\n", "link_corrupted", ma.Corrupted, mb.Corrupted)
}

// printCounters prints the devices' counters that are not zero on either,
// side by side.
func printCounters(w io.Writer, a, b *qp.Device) {
	ca, cb := a.Counters(), b.Counters()
	fmt.Fprintf(w, "\n%-24s %10s %10s\n", "counter", "A", "B")
	ca.Each(func(name string, v uint64) {
		var vb uint64
		cb.Each(func(n string, x uint64) {
			if n == name {
				vb = x
			}
		})
		if v != 0 || vb != 0 {
			fmt.Fprintf(w, "%-24s %10d %10d\n", name, v, vb)
		}
	})
}

const demoHalf = 1 << 20

// connectDemo sets up both ends (PD, 2 MiB buffer, CQs, QP) on two open
// devices with the shared harness and connects them: 67 ms local ACK
// timeout (as perftest and rc_pingpong), B's PSNs wrap around 2^24.
func connectDemo(ctx context.Context, da, db *qp.Device) (a, b *demoEnd, err error) {
	o := sim.QPOptions{BufSize: 2 * demoHalf, CQSize: 1024,
		Caps: qp.Caps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}, Connect: qp.ConnectOptions{Timeout: 14}}
	oa, ob := o, o
	oa.Connect.SQPSN, ob.Connect.SQPSN = 0x100, 0xFFFFF0
	ea, eb, err := sim.ConnectQPs(ctx, da, db, oa, ob)
	if err != nil {
		return nil, nil, err
	}
	mk := func(name string, d *qp.Device, e *sim.QPEnd) *demoEnd {
		return &demoEnd{name: name, dev: d, pd: e.PD, scq: e.SendCQ, rcq: e.RecvCQ, qp: e.QP, buf: e.Buf, mr: e.MR}
	}
	return mk("A", da, ea), mk("B", db, eb), nil
}

func (e *demoEnd) sge(off, n int) qp.SGE {
	return e.mr.SGE(off, n)
}

func waitWC(cq *qp.CQ) (qp.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]qp.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		return qp.WC{}, fmt.Errorf("no completion: %w", err)
	}
	if err := wc[0].Err(); err != nil {
		return wc[0], err
	}
	return wc[0], nil
}

// postWait posts wr on a's QP and waits for its completion, fenced before
// and after (demoFence).
func postWait(a, b *demoEnd, wr *qp.SendWR) error {
	demoFence(a, b)
	if err := a.qp.PostSend(wr); err != nil {
		return err
	}
	if _, err := waitWC(a.scq); err != nil {
		return err
	}
	demoFence(a, b)
	return nil
}

// demoFence orders this goroutine's accesses to registered memory with both
// devices' receive goroutines, which place and read it under the device
// lock (Counters takes it). Over a real link the placement happens before
// the requester's completion only through the kernel (frame, then ACK),
// which the race detector cannot see.
func demoFence(a, b *demoEnd) {
	a.dev.Counters()
	b.dev.Counters()
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func demoSend(a, b *demoEnd, i, size int, op qp.WROpcode, rng *rand.Rand) (int, error) {
	src := a.buf[:size]
	fill(rng, src)
	// The receive buffer is split over two SGEs to exercise scatter.
	clear(b.buf[:size+16])
	half := (size + 16) / 2
	if err := b.qp.PostRecv(&qp.RecvWR{WRID: uint64(i), SGL: []qp.SGE{b.sge(0, half), b.sge(half, size+16-half)}}); err != nil {
		return 0, err
	}
	wr := &qp.SendWR{WRID: uint64(i), Opcode: op, Flags: qp.SendSignaled | qp.SendSolicited,
		SGL: []qp.SGE{a.sge(0, size)}, Imm: 0xC0DE0000 + uint32(i)}
	var invMR *qp.MR
	if op == qp.WRSendWithInv {
		// B registers a region and A's message invalidates its rkey.
		var err error
		invMR, err = b.pd.RegMR(make([]byte, 64), qp.LocalWrite|qp.RemoteWrite)
		if err != nil {
			return 0, err
		}
		defer invMR.Deregister()
		wr.InvRKey = invMR.RKey()
	}
	demoFence(a, b)
	if err := a.qp.PostSend(wr); err != nil {
		return 0, err
	}
	if _, err := waitWC(a.scq); err != nil {
		return 0, fmt.Errorf("sender: %w", err)
	}
	demoFence(a, b)
	wc, err := waitWC(b.rcq)
	if err != nil {
		return 0, fmt.Errorf("receiver: %w", err)
	}
	if wc.ByteLen != uint32(size) || !bytes.Equal(b.buf[:size], src) {
		return 0, fmt.Errorf("message %d: received %d bytes, want %d identical bytes", i, wc.ByteLen, size)
	}
	switch op {
	case qp.WRSendWithImm:
		if wc.Flags&qp.WCWithImm == 0 || wc.Imm != wr.Imm {
			return 0, fmt.Errorf("message %d: immediate %#x flags %#x, want %#x", i, wc.Imm, wc.Flags, wr.Imm)
		}
	case qp.WRSendWithInv:
		if wc.Flags&qp.WCWithInv == 0 || wc.InvRKey != wr.InvRKey || invMR.Valid() {
			return 0, fmt.Errorf("message %d: rkey %#x not invalidated (wc %v)", i, wr.InvRKey, wc)
		}
	}
	return size, nil
}

func demoWrite(a, b *demoEnd, i, size int, op qp.WROpcode, rng *rand.Rand) (int, error) {
	src := a.buf[:size]
	fill(rng, src)
	dst := b.buf[demoHalf : demoHalf+size+1]
	clear(dst)
	if op == qp.WRRDMAWriteWithImm {
		if err := b.qp.PostRecv(&qp.RecvWR{WRID: uint64(i)}); err != nil {
			return 0, err
		}
	}
	wr := &qp.SendWR{WRID: uint64(i), Opcode: op, Flags: qp.SendSignaled, SGL: []qp.SGE{a.sge(0, size)},
		RemoteAddr: b.mr.IOVA() + demoHalf, RKey: b.mr.RKey(), Imm: 0xBEEF0000 + uint32(i)}
	if err := postWait(a, b, wr); err != nil {
		return 0, err
	}
	if op == qp.WRRDMAWriteWithImm {
		wc, err := waitWC(b.rcq)
		if err != nil {
			return 0, fmt.Errorf("receiver: %w", err)
		}
		if wc.Opcode != qp.WCRecvRDMAWithImm || wc.Imm != wr.Imm || wc.ByteLen != uint32(size) {
			return 0, fmt.Errorf("message %d: receive completion %v", i, wc)
		}
	}
	if !bytes.Equal(dst[:size], src) || dst[size] != 0 {
		return 0, fmt.Errorf("message %d: remote memory differs from the %d bytes written", i, size)
	}
	return size, nil
}

func demoRead(a, b *demoEnd, i, size int, rng *rand.Rand) (int, error) {
	remote := b.buf[demoHalf : demoHalf+size]
	fill(rng, remote)
	clear(a.buf[:size+1])
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(0, size)}, RemoteAddr: b.mr.IOVA() + demoHalf, RKey: b.mr.RKey()}
	if err := postWait(a, b, wr); err != nil {
		return 0, err
	}
	if !bytes.Equal(a.buf[:size], remote) || a.buf[size] != 0 {
		return 0, fmt.Errorf("read %d: local buffer differs from the %d remote bytes", i, size)
	}
	return size, nil
}

// The atomics work on one 8-byte counter in each end's remote half.
func demoFetchAdd(a, b *demoEnd, i int) (int, error) {
	target := b.buf[demoHalf : demoHalf+8]
	demoFence(a, b)
	before := binary.LittleEndian.Uint64(target)
	add := uint64(i*1000 + 1)
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRAtomicFetchAdd, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA() + demoHalf, RKey: b.mr.RKey(), CompareAdd: add}
	if err := postWait(a, b, wr); err != nil {
		return 0, err
	}
	if got := binary.LittleEndian.Uint64(a.buf[:8]); got != before {
		return 0, fmt.Errorf("fetch_add %d returned %d, want %d", i, got, before)
	}
	if after := binary.LittleEndian.Uint64(target); after != before+add {
		return 0, fmt.Errorf("fetch_add %d: counter %d, want %d (executed twice?)", i, after, before+add)
	}
	return 8, nil
}

func demoCmpSwap(a, b *demoEnd, i int) (int, error) {
	target := b.buf[demoHalf : demoHalf+8]
	demoFence(a, b)
	before := binary.LittleEndian.Uint64(target)
	compare := before
	if i%3 == 2 {
		compare = before + 1 // must fail and leave the value alone
	}
	swap := 0xABCD0000 + uint64(i)
	wr := &qp.SendWR{WRID: uint64(i), Opcode: qp.WRAtomicCmpAndSwp, Flags: qp.SendSignaled,
		SGL: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.IOVA() + demoHalf, RKey: b.mr.RKey(), CompareAdd: compare, Swap: swap}
	if err := postWait(a, b, wr); err != nil {
		return 0, err
	}
	if got := binary.LittleEndian.Uint64(a.buf[:8]); got != before {
		return 0, fmt.Errorf("cmp_swap %d returned %d, want %d", i, got, before)
	}
	want := before
	if compare == before {
		want = swap
	}
	if after := binary.LittleEndian.Uint64(target); after != want {
		return 0, fmt.Errorf("cmp_swap %d: value %#x, want %#x", i, after, want)
	}
	return 8, nil
}
