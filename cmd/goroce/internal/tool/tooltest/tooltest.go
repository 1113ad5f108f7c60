// Package tooltest runs goroce's tool subcommands in tests: two devices
// joined by an in-memory link that a subcommand opens by name through its
// tool.Env, and a server and a client of one tool run against each other
// in the test's process.
package tooltest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// MemDevices opens two goroce devices joined by an in-memory link: "a"
// (198.18.0.1) and "b" (198.18.0.2), the names -d selects in the tests.
func MemDevices(t testing.TB, cfg nic.MemConfig) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return MemDevicesMode(t, cfg, qp.ModeThreaded)
}

// MemDevicesMode is MemDevices with the devices in mode (qp.ModeBusyPoll:
// no device goroutines).
func MemDevicesMode(t testing.TB, cfg nic.MemConfig, mode qp.Mode) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return memDevicesOpts(t, cfg, mode, nil)
}

// MemDevicesWrap is MemDevices with each device's link wrapped (side 0
// for "a", 1 for "b").
func MemDevicesWrap(t testing.TB, cfg nic.MemConfig, wrap func(l nic.Link, side uint64) nic.Link) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return memDevicesOpts(t, cfg, qp.ModeThreaded, wrap)
}

func memDevicesOpts(t testing.TB, cfg nic.MemConfig, mode qp.Mode, wrap func(l nic.Link, side uint64) nic.Link) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	ma, mb := nic.NewMemPair(cfg)
	var la, lb nic.Link = ma, mb
	if wrap != nil {
		la, lb = wrap(ma, 0), wrap(mb, 1)
	}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	a, err := qp.Open(qp.Config{Name: "goroce-a", Link: la, IP: ipA, Seed: 1, Mode: mode,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: mb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := qp.Open(qp.Config{Name: "goroce-b", Link: lb, IP: ipB, Seed: 2, Mode: mode,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipA: ma.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	devs := map[string]*qp.Device{"a": a, "b": b}
	return func(ctx context.Context, name string) (*qp.Device, error) {
		d, ok := devs[name]
		if !ok {
			return nil, fmt.Errorf("no device %q: %w", name, qp.ErrNoInterface) // as qp.OpenInterface
		}
		return d, nil
	}
}

// Idle is the idle watchdog (tool.Env.Idle) of the runs of RunPair.
const Idle = 20 * time.Second

// Outcome is the outcome of one tool invocation.
type Outcome struct {
	Code           int
	Stdout, Stderr string
	Final          []byte // the registered buffer at the end ("final" hook)
	Initial        []byte // and after setup ("init")
}

// RunPair runs a server (serverArgs, device "a") and then a client
// (clientArgs plus the server's port and 127.0.0.1, device "b") of one tool
// in this process, and returns both outcomes. The whole run is bounded.
func RunPair(t *testing.T, run func(env tool.Env, args []string) int, open func(context.Context, string) (*qp.Device, error),
	serverArgs, clientArgs []string) (server, client Outcome) {
	t.Helper()
	return RunPairIdle(t, Idle, run, open, serverArgs, clientArgs)
}

// RunPairIdle is RunPair with the idle watchdog at idle.
func RunPairIdle(t *testing.T, idle time.Duration, run func(env tool.Env, args []string) int,
	open func(context.Context, string) (*qp.Device, error), serverArgs, clientArgs []string) (server, client Outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	portc := make(chan int, 1)
	var wg sync.WaitGroup
	invoke := func(res *Outcome, args []string, listening func(net.Addr)) {
		defer wg.Done()
		var out, errb bytes.Buffer
		var mu sync.Mutex
		env := tool.Env{Ctx: ctx, Stdout: &out, Stderr: &errb, Open: open, Listening: listening,
			Idle: idle,
			Buffers: func(stage string, buf []byte) {
				mu.Lock()
				defer mu.Unlock()
				switch stage {
				case "init":
					res.Initial = buf
				case "final":
					res.Final = buf
				}
			}}
		res.Code = run(env, args)
		res.Stdout, res.Stderr = out.String(), errb.String()
	}
	wg.Add(1)
	go invoke(&server, append([]string{"-d", "a", "-p", "0"}, serverArgs...), func(a net.Addr) {
		portc <- a.(*net.TCPAddr).Port
	})
	var port int
	select {
	case port = <-portc:
	case <-ctx.Done():
		wg.Wait()
		t.Fatalf("server never listened: code %d\n%s\n%s", server.Code, server.Stdout, server.Stderr)
	}
	wg.Add(1)
	go invoke(&client, append([]string{"-d", "b", "-p", strconv.Itoa(port)}, append(clientArgs, "127.0.0.1")...), nil)
	wg.Wait()
	if t.Failed() || server.Code != 0 || client.Code != 0 {
		t.Logf("server exit %d\n%s%s", server.Code, server.Stdout, server.Stderr)
		t.Logf("client exit %d\n%s%s", client.Code, client.Stdout, client.Stderr)
	}
	return server, client
}

// RunCMPair runs an rdma_cm tool (rping, ucmatose, udaddy, perftest -R):
// the server (serverArgs, which name its device with --dev a or -d a), and
// once it listens (Env.Listening) the client (clientArgs, naming the
// server's address 198.18.0.1 themselves). Both run in this process; the
// whole run is bounded.
func RunCMPair(t *testing.T, run func(env tool.Env, args []string) int, open func(context.Context, string) (*qp.Device, error),
	serverArgs, clientArgs []string) (server, client Outcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	listening := make(chan struct{}, 1)
	var wg sync.WaitGroup
	invoke := func(res *Outcome, args []string, l func(net.Addr)) {
		defer wg.Done()
		var out, errb bytes.Buffer
		var mu sync.Mutex
		env := tool.Env{Ctx: ctx, Stdout: &out, Stderr: &errb, Open: open, Listening: l, Idle: Idle,
			Buffers: func(stage string, buf []byte) {
				mu.Lock()
				defer mu.Unlock()
				if stage == "final" {
					res.Final = buf
				} else {
					res.Initial = buf
				}
			}}
		res.Code = run(env, args)
		res.Stdout, res.Stderr = out.String(), errb.String()
	}
	wg.Add(1)
	srvDone := make(chan struct{})
	go func() {
		invoke(&server, serverArgs, func(net.Addr) { listening <- struct{}{} })
		close(srvDone)
	}()
	select {
	case <-listening:
	case <-srvDone:
		t.Fatalf("server ended before listening: code %d\n%s\n%s", server.Code, server.Stdout, server.Stderr)
	case <-ctx.Done():
		wg.Wait()
		t.Fatalf("server never listened: code %d\n%s\n%s", server.Code, server.Stdout, server.Stderr)
	}
	wg.Add(1)
	go invoke(&client, clientArgs, nil)
	wg.Wait()
	if t.Failed() || server.Code != 0 || client.Code != 0 {
		t.Logf("server exit %d\n%s%s", server.Code, server.Stdout, server.Stderr)
		t.Logf("client exit %d\n%s%s", client.Code, client.Stdout, client.Stderr)
	}
	return server, client
}
