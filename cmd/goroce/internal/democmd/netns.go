package democmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

type demoNetnsConfig struct {
	link                        string
	netns                       bool
	pcap                        string
	count                       int
	loss, dup, reorder, corrupt float64
	seed                        int64
	mtu                         int
	metrics                     string // --metrics ADDR
}

// runDemoNetns runs the demo between two network namespaces it creates
// (198.18.X.1/24 and .2/24 on a veth pair, no route out), each end's
// device opened with qp.OpenInterface on the chosen backend. The namespaces are
// deleted on exit, also after SIGINT/SIGTERM.
func runDemoNetns(env tool.Env, c demoNetnsConfig) int {
	stdout, stderr := env.Stdout, env.Stderr
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goroce demo: "+format+"\n", a...)
		return 1
	}
	switch c.link {
	case qp.BackendAFXDP, qp.BackendAFPacket, qp.BackendUDP, qp.BackendAuto:
	case "mem":
		fmt.Fprintln(stderr, "goroce demo: --netns needs --link afxdp, afpacket, udp or auto")
		return 2
	default:
		fmt.Fprintf(stderr, "goroce demo: unknown --link %q (mem, afxdp, afpacket, udp, auto)\n", c.link)
		return 2
	}
	if !c.netns {
		// The demo sends real frames only inside namespaces it made itself.
		fmt.Fprintf(stderr, "goroce demo: --link %s needs --netns (the demo only sends between namespaces it creates)\n", c.link)
		return 2
	}
	if c.dup > 0 || c.reorder > 0 || c.corrupt > 0 {
		fmt.Fprintln(stderr, "goroce demo: --dup, --reorder and --corrupt need the in-memory link (use --loss)")
		return 2
	}
	// --pcap: side A's own capture (qp.PcapWriter), both directions; with
	// AF_XDP tcpdump on the veth would see none of it.
	var pw *qp.PcapWriter
	if c.pcap != "" {
		f, err := os.Create(c.pcap)
		if err != nil {
			return fail("%v", err)
		}
		defer f.Close()
		if pw, err = qp.NewPcapWriter(f); err != nil {
			return fail("--pcap: %v", err)
		}
		defer pw.Close() // after the devices closed (done below)
	}

	pair, err := netns.New(netns.Options{MTU: c.mtu, Prefix: "goroce-demo"})
	if err != nil {
		return fail("%v", err)
	}
	var cleanup sync.Once
	var devs []*qp.Device
	var devsMu sync.Mutex
	done := func() {
		cleanup.Do(func() {
			devsMu.Lock()
			for _, d := range devs {
				d.Close() // detaches XDP programs, releases port holds
			}
			devsMu.Unlock()
			pair.Close()
		})
	}
	defer done()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if s, ok := <-sig; ok {
			fmt.Fprintf(stderr, "\ngoroce demo: %v: removing namespaces %s, %s\n", s, pair.A.NS, pair.B.NS)
			done()
			if pw != nil {
				pw.Close()
			}
			os.Exit(130)
		}
	}()

	// Opening and connecting the two ends (neighbour resolution included)
	// must not take longer than this.
	ctx, cancel := context.WithTimeout(env.Context(), 30*time.Second)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var drops [2]*nic.DropLink
	open := func(side netns.Side, name string) (*qp.Device, *qp.InterfaceInfo, error) {
		o := qp.InterfaceOptions{Backend: c.link, Name: "goroce-" + name, Logger: logger}
		if side == netns.A {
			o.Pcap = pw
		}
		if c.loss > 0 {
			o.WrapLink = func(l nic.Link) nic.Link {
				w, d := nic.WithDrops(l, c.loss, uint64(c.seed), uint64(side), nil)
				drops[side] = d
				return w
			}
		}
		var dev *qp.Device
		var info *qp.InterfaceInfo
		err := pair.Do(side, func() error {
			var err error
			dev, info, err = qp.OpenInterface(ctx, pair.End(side).Ifname, o)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		devsMu.Lock()
		devs = append(devs, dev)
		devsMu.Unlock()
		return dev, info, nil
	}
	da, infoA, err := open(netns.A, "A")
	if err != nil {
		return fail("side A: %v", err)
	}
	db, infoB, err := open(netns.B, "B")
	if err != nil {
		return fail("side B: %v", err)
	}
	a, b, err := connectDemo(ctx, da, db)
	if err != nil {
		return fail("connect: %v", err)
	}
	_, stopMetrics := tool.StartMetrics(env, tool.Options{Metrics: c.metrics}, a.dev, b.dev)
	defer stopMetrics()
	ipA, ipB := pair.A.Addr, pair.B.Addr
	pmtu := min(a.dev.ActiveMTU(), b.dev.ActiveMTU())
	fmt.Fprintf(stdout, "goroce demo: A %v QPN %#06x  <->  B %v QPN %#06x, path MTU %d, veth in namespaces %s / %s (MTU %d)\n",
		ipA, a.qp.QPN(), ipB, b.qp.QPN(), pmtu.Bytes(), pair.A.NS, pair.B.NS, c.mtu)
	for _, x := range []struct {
		side string
		info *qp.InterfaceInfo
	}{{"A", infoA}, {"B", infoB}} {
		fb := ""
		if x.info.Fallback != "" {
			fb = " (fallback: " + x.info.Fallback + ")"
		}
		fmt.Fprintf(stdout, "backend %s: %s, mode %s, %s, link MTU %d, port path MTU %d%s\n", x.side, x.info.Backend, x.info.Mode,
			x.info.Ifname, x.info.LinkMTU, x.info.PathMTU, fb)
	}
	if c.loss > 0 {
		fmt.Fprintf(stdout, "loss per transmitted frame, each side: %.3g, seed %d\n", c.loss, c.seed)
	}
	ok := demoOps(stdout, a, b, c.count, c.seed, pmtu.Bytes())
	if c.loss > 0 || !ok {
		printCounters(stdout, a.dev, b.dev)
		if c.loss > 0 {
			fmt.Fprintf(stdout, "%-24s %10d %10d\n", "link_dropped", dropped(drops[0]), dropped(drops[1]))
		}
	}
	if !ok {
		return 1
	}
	return 0
}

// dropped is a DropLink's drop count (0 without one).
func dropped(d *nic.DropLink) uint64 {
	if d == nil {
		return 0
	}
	_, n := d.Counts()
	return n
}
