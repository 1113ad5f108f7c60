// Package nvmecmd is goroce's NVMe over Fabrics commands: `goroce nvmet`
// serves one namespace (memory or a file) as an NVMe-oF RDMA target, and
// `goroce nvme discover|io|bench` is the host: the discovery log, a seeded
// write-read-verify, and a fio-like benchmark (package nvmeof).
package nvmecmd

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/nvmeof"
	"github.com/goroce/goroce/qp"
)

// TargetSummary and HostSummary are the commands' lines in goroce's usage.
const (
	TargetSummary = "NVMe over Fabrics RDMA target: serve one namespace (--ram SIZE or --file PATH)"
	HostSummary   = "NVMe over Fabrics RDMA host: discover, io --write-verify SIZE, bench"
)

// ParseSize parses 4096, 64k, 64K, 64M, 1G, 1T (powers of 1024).
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f sizeFlag) Set(s string) error {
	n, err := ParseSize(s)
	if err == nil {
		*f.v = n
	}
	return err
}

// signalContext is the run's context: ended by SIGINT and SIGTERM, and
// with --pcap FILE the capture that tool.Open attaches the device to
// (closed by the cancel function).
func signalContext(env tool.Env, pcap string) (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(env.Context(), os.Interrupt, syscall.SIGTERM)
	if pcap == "" {
		return ctx, cancel
	}
	env.Ctx = ctx
	pctx, pcancel := tool.RunContext(env, tool.Options{Pcap: pcap})
	return pctx, func() { pcancel(); cancel() }
}

func openDevice(ctx context.Context, env tool.Env, dev, addr string) (*qp.Device, error) {
	a, err := tool.ParseHost(addr)
	if err != nil {
		return nil, fmt.Errorf("-a %s: %v", addr, err)
	}
	return tool.OpenCMDevice(ctx, env, dev, a)
}

// RunTarget is `goroce nvmet`.
func RunTarget(env tool.Env, args []string) int {
	fs := flag.NewFlagSet("nvmet", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	dev := fs.String("d", "", "network interface of the RoCE device")
	addr := fs.String("a", "", "address to listen on (an address of the interface)")
	port := fs.Int("p", nvmeof.DefaultPort, "port (rdma_cm TCP port space)")
	nqn := fs.String("nqn", "", "subsystem NQN")
	var ram, size int64
	fs.Var(sizeFlag{&ram}, "ram", "serve a namespace of SIZE bytes in memory (suffixes k, M, G)")
	file := fs.String("file", "", "serve the file PATH (synced on Flush)")
	fs.Var(sizeFlag{&size}, "size", "with --file: the namespace size (the file is extended; default its size; SIGHUP serves the file's size then)")
	bs := fs.Int("bs", 512, "LBA size: 512 or 4096")
	verbose := fs.Bool("v", false, "log connections and errors to stderr")
	pcap := fs.String("pcap", "", "write the frames the device sends and receives to this pcap file (AF_XDP traffic included)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *addr == "" || *nqn == "" || (ram == 0) == (*file == "") || fs.NArg() > 0 {
		fmt.Fprintln(env.Stderr, "usage: goroce nvmet -d IFACE -a ADDR [-p 4420] --nqn NQN (--ram SIZE | --file PATH [--size SIZE]) [--bs 512]")
		return 2
	}
	ns := &nvmeof.Namespace{BlockSize: *bs}
	if ram > 0 {
		ns.Backend, ns.Size = nvmeof.NewMemory(ram), ram
	} else {
		f, n, err := nvmeof.OpenFile(*file, size)
		if err != nil {
			fmt.Fprintf(env.Stderr, "nvmet: %v\n", err)
			return 1
		}
		defer f.Close()
		ns.Backend, ns.Size = f, n-n%int64(*bs)
	}
	t := &nvmeof.Target{Subsystems: []*nvmeof.Subsystem{{NQN: *nqn, Namespaces: []*nvmeof.Namespace{ns}}}}
	if *verbose {
		t.Logger = slogger(env.Stderr)
	}
	if err := t.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "nvmet: %v\n", err)
		return 2
	}
	ctx, cancel := signalContext(env, *pcap)
	defer cancel()
	d, err := openDevice(ctx, env, *dev, *addr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvmet: %v\n", err)
		return 1
	}
	defer d.Close()
	a, _ := tool.ParseHost(*addr)
	l, err := t.Listen(ctx, d, netip.AddrPortFrom(a, uint16(*port)).String())
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvmet: %v\n", err)
		return 1
	}
	fmt.Fprintf(env.Stdout, "nvmet: listening on %v, subsystem %s, namespace 1: %d bytes (%d-byte blocks)\n", l.Addr(), *nqn, ns.Size, ns.BlockSize)
	if env.Listening != nil {
		env.Listening(nil)
	}
	if f, ok := ns.Backend.(*os.File); ok {
		// SIGHUP: the file's size is read again and a change served, with
		// the namespace attribute notice (nvmet's revalidate_size).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
				}
				st, err := f.Stat()
				if err != nil {
					fmt.Fprintf(env.Stderr, "nvmet: SIGHUP: %v\n", err)
					continue
				}
				n := st.Size() - st.Size()%int64(ns.BlockSize)
				if err := t.Resize(*nqn, ns.ID, n); err != nil {
					fmt.Fprintf(env.Stderr, "nvmet: SIGHUP: %v\n", err)
					continue
				}
				fmt.Fprintf(env.Stdout, "nvmet: namespace 1: %d bytes\n", ns.ServedSize())
			}
		}()
	}
	err = t.Serve(ctx, l)
	l.Close()
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvmet: %v\n", err)
		return 1
	}
	st := t.Stats()
	fmt.Fprintf(env.Stdout, "nvmet: stopped: %d connections, %d rejected, %d commands, %d errors, %d bytes read, %d written\n",
		st.Connections.Load(), st.Rejected.Load(), st.Commands.Load(), st.Errors.Load(), st.BytesRead.Load(), st.BytesWritten.Load())
	return 0
}

// RunHost is `goroce nvme discover|io|bench`.
func RunHost(env tool.Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(env.Stderr, "usage: goroce nvme discover|io|bench -d IFACE -a ADDR [-p 4420] ... (goroce nvme SUB -h for flags)")
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	fs := flag.NewFlagSet("nvme "+sub, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	dev := fs.String("d", "", "network interface of the RoCE device")
	addr := fs.String("a", "", "the target's address")
	port := fs.Int("p", nvmeof.DefaultPort, "the target's port")
	hostnqn := fs.String("hostnqn", "", "host NQN (default: a random uuid NQN)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	pcap := fs.String("pcap", "", "write the frames the device sends and receives to this pcap file (AF_XDP traffic included)")
	var nqn *string
	var wv, off, bsz int64 = 0, 0, 128 << 10
	var qd, queues *int
	var seed *uint64
	var rw *string
	var dur *time.Duration
	switch sub {
	case "discover":
	case "io", "bench":
		nqn = fs.String("nqn", "", "subsystem NQN")
		qd = fs.Int("qd", 32, "commands in flight per queue")
		queues = fs.Int("queues", 1, "I/O queues")
		if sub == "io" {
			fs.Var(sizeFlag{&wv}, "write-verify", "write SIZE bytes of seeded random data, read them back, compare")
			fs.Var(sizeFlag{&off}, "offset", "byte offset in the namespace")
			fs.Var(sizeFlag{&bsz}, "bs", "bytes per command")
			seed = fs.Uint64("seed", 1, "random seed of the data")
		} else {
			bsz = 4096
			fs.Var(sizeFlag{&bsz}, "bs", "bytes per command")
			rw = fs.String("rw", "randread", "randread, randwrite, read or write")
			dur = fs.Duration("time", 10*time.Second, "how long")
		}
	default:
		fmt.Fprintf(env.Stderr, "goroce nvme: unknown subcommand %q (discover, io, bench)\n", sub)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *addr == "" || fs.NArg() > 0 || (nqn != nil && *nqn == "") || (sub == "io" && wv == 0) {
		fmt.Fprintf(env.Stderr, "goroce nvme %s: -a ADDR%s required\n", sub, map[bool]string{true: ", --nqn NQN", false: ""}[nqn != nil])
		return 2
	}
	ctx, cancel := signalContext(env, *pcap)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, *timeout)
	defer cancel2()
	d, err := openDevice(ctx, env, *dev, *addr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvme: %v\n", err)
		return 1
	}
	defer d.Close()
	a, _ := tool.ParseHost(*addr)
	target := netip.AddrPortFrom(a, uint16(*port)).String()
	ho := &nvmeof.HostOptions{HostNQN: *hostnqn}
	if sub == "discover" {
		ents, err := nvmeof.Discover(ctx, d, target, ho)
		if err != nil {
			fmt.Fprintf(env.Stderr, "nvme discover: %v\n", err)
			return 1
		}
		printDiscovery(env.Stdout, ents)
		return 0
	}
	ho.Queues, ho.QueueDepth = *queues, *qd
	c, err := nvmeof.Dial(ctx, d, target, *nqn, ho)
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvme %s: %v\n", sub, err)
		return 1
	}
	defer c.Close()
	if len(c.Namespaces()) == 0 {
		fmt.Fprintf(env.Stderr, "nvme %s: the subsystem has no namespaces\n", sub)
		return 1
	}
	ns := c.Namespaces()[0]
	if sub == "io" {
		rc := writeVerify(ctx, env, ns, wv, off, int(bsz), *qd**queues, *seed)
		st := c.Stats()
		fmt.Fprintf(env.Stderr, "nvme io: in-capsule data up to %d bytes: %d commands with in-capsule data, %d with keyed SGLs\n",
			c.InCapsuleDataSize(), st.InCapsule, st.Keyed)
		return rc
	}
	return bench(ctx, env, ns, *rw, int(bsz), *qd**queues, *dur)
}

func printDiscovery(w io.Writer, ents []nvmeof.DiscoveryEntry) {
	fmt.Fprintf(w, "\nDiscovery Log Number of Records %d, Generation counter 1\n", len(ents))
	for i, e := range ents {
		sub := map[uint8]string{1: "discovery subsystem referral", 2: "nvme subsystem", 3: "current discovery subsystem"}[e.SubType]
		fmt.Fprintf(w, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(w, "trtype:  rdma\nadrfam:  ipv4\nsubtype: %s\ntreq:    not specified\nportid:  %d\ntrsvcid: %s\nsubnqn:  %s\ntraddr:  %s\n",
			sub, e.PortID, e.TrSvcID, e.SubNQN, e.TrAddr)
		fmt.Fprintf(w, "rdma_prtype: not specified\nrdma_qptype: connected\nrdma_cms:    rdma-cm\nrdma_pkey: 0x0000\n")
	}
}

func pattern(seed uint64, n int64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// parallel runs f over [0, total) in bs pieces with at most width at once.
func parallel(ctx context.Context, total int64, bs, width int, f func(off int64, n int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < width; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				o := next.Add(int64(bs)) - int64(bs)
				if o >= total {
					return
				}
				if err := f(o, int(min(int64(bs), total-o))); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func writeVerify(ctx context.Context, env tool.Env, ns *nvmeof.HostNamespace, size, off int64, bs, width int, seed uint64) int {
	if off+size > ns.Size() {
		fmt.Fprintf(env.Stderr, "nvme io: %d bytes at %d beyond the namespace's %d\n", size, off, ns.Size())
		return 1
	}
	data := pattern(seed, size)
	start := time.Now()
	err := parallel(ctx, size, bs, width, func(o int64, n int) error {
		_, err := ns.WriteAtContext(ctx, data[o:o+int64(n)], off+o)
		return err
	})
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvme io: write: %v\n", err)
		return 1
	}
	if err := ns.Flush(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "nvme io: flush: %v\n", err)
		return 1
	}
	wdur := time.Since(start)
	got := make([]byte, size)
	start = time.Now()
	err = parallel(ctx, size, bs, width, func(o int64, n int) error {
		_, err := ns.ReadAtContext(ctx, got[o:o+int64(n)], off+o)
		return err
	})
	if err != nil {
		fmt.Fprintf(env.Stderr, "nvme io: read: %v\n", err)
		return 1
	}
	rdur := time.Since(start)
	fmt.Fprintf(env.Stderr, "nvme io: wrote %d bytes in %v (%.1f MB/s), read back in %v (%.1f MB/s)\n",
		size, wdur.Round(time.Millisecond), float64(size)/wdur.Seconds()/1e6, rdur.Round(time.Millisecond), float64(size)/rdur.Seconds()/1e6)
	fmt.Fprintf(env.Stdout, "sha256=%x bytes=%d\n", sha256.Sum256(data), size)
	for i := range data {
		if got[i] != data[i] {
			fmt.Fprintf(env.Stderr, "nvme io: MISMATCH at byte %d (offset %d): wrote %#02x, read %#02x\n", i, off+int64(i), data[i], got[i])
			return 1
		}
	}
	return 0
}

func bench(ctx context.Context, env tool.Env, ns *nvmeof.HostNamespace, rw string, bs, width int, dur time.Duration) int {
	write := rw == "randwrite" || rw == "write"
	random := strings.HasPrefix(rw, "rand")
	if !write && rw != "randread" && rw != "read" || bs <= 0 || bs%ns.BlockSize() != 0 {
		fmt.Fprintf(env.Stderr, "nvme bench: bad --rw %q or --bs %d\n", rw, bs)
		return 2
	}
	blocks := ns.Size() / int64(bs)
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var ios, seq atomic.Int64
	lats := make([][]time.Duration, width)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	start := time.Now()
	for w := 0; w < width; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := pattern(uint64(w)+1, int64(bs))
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				var o int64
				if random {
					o = rng.Int64N(blocks) * int64(bs)
				} else {
					o = (seq.Add(1) - 1) % blocks * int64(bs)
				}
				t0 := time.Now()
				var err error
				if write {
					_, err = ns.WriteAtContext(ctx, buf, o)
				} else {
					_, err = ns.ReadAtContext(ctx, buf, o)
				}
				if err != nil {
					if ctx.Err() == nil {
						failed.Store(&err)
					}
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
				ios.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if e := failed.Load(); e != nil {
		fmt.Fprintf(env.Stderr, "nvme bench: %v\n", *e)
		return 1
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	n := ios.Load()
	iops := float64(n) / el.Seconds()
	dir := "read"
	if write {
		dir = "write"
	}
	fmt.Fprintf(env.Stdout, "%s: (bs=%d, qd=%d) IOPS=%.0f, BW=%.1fMiB/s (%.1fMB/s)(%d ios/%v)\n", dir, bs, width, iops,
		iops*float64(bs)/(1<<20), iops*float64(bs)/1e6, n, el.Round(time.Millisecond))
	if len(all) > 0 {
		p := func(q float64) int64 { return all[min(len(all)-1, int(q*float64(len(all))))].Microseconds() }
		fmt.Fprintf(env.Stdout, "    clat percentiles (usec): 1.00th=[%d], 50.00th=[%d], 90.00th=[%d], 99.00th=[%d], 99.90th=[%d], max=[%d]\n",
			p(0.01), p(0.5), p(0.9), p(0.99), p(0.999), all[len(all)-1].Microseconds())
	}
	return 0
}

func slogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
