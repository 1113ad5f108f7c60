package main

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

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// memDevices opens two goroce devices joined by an in-memory link: "a"
// (198.18.0.1) and "b" (198.18.0.2), the names -d selects in the tests.
func memDevices(t testing.TB, cfg nic.MemConfig) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return memDevicesMode(t, cfg, false)
}

// memDevicesMode is memDevices with the devices in busy-poll mode
// (qp.Config.BusyPoll: no device goroutines) when busy is set.
func memDevicesMode(t testing.TB, cfg nic.MemConfig, busy bool) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return memDevicesOpts(t, cfg, busy, nil)
}

// memDevicesWrap is memDevices with each device's link wrapped (side 0
// for "a", 1 for "b").
func memDevicesWrap(t testing.TB, cfg nic.MemConfig, wrap func(l nic.Link, side uint64) nic.Link) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	return memDevicesOpts(t, cfg, false, wrap)
}

func memDevicesOpts(t testing.TB, cfg nic.MemConfig, busy bool, wrap func(l nic.Link, side uint64) nic.Link) func(ctx context.Context, name string) (*qp.Device, error) {
	t.Helper()
	ma, mb := nic.NewMemPair(cfg)
	var la, lb nic.Link = ma, mb
	if wrap != nil {
		la, lb = wrap(ma, 0), wrap(mb, 1)
	}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	a, err := qp.Open(qp.Config{Name: "goroce-a", Link: la, IP: ipA, Seed: 1, BusyPoll: busy,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: mb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := qp.Open(qp.Config{Name: "goroce-b", Link: lb, IP: ipB, Seed: 2, BusyPoll: busy,
		Neighbors: map[netip.Addr]net.HardwareAddr{ipA: ma.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	devs := map[string]*qp.Device{"a": a, "b": b}
	return func(ctx context.Context, name string) (*qp.Device, error) {
		d, ok := devs[name]
		if !ok {
			return nil, fmt.Errorf("no device %q", name)
		}
		return d, nil
	}
}

// testIdle is the idle watchdog of the runs of runPair.
var testIdle = 20 * time.Second

// toolRun is the outcome of one tool invocation.
type toolRun struct {
	code           int
	stdout, stderr string
	final          []byte // the registered buffer at the end ("final" hook)
	initial        []byte // and after setup ("init")
}

// runPair runs a server (serverArgs, device "a") and then a client
// (clientArgs plus the server's port and 127.0.0.1, device "b") of one tool
// in this process, and returns both outcomes. The whole run is bounded.
func runPair(t *testing.T, run func(env toolEnv, args []string) int, open func(context.Context, string) (*qp.Device, error),
	serverArgs, clientArgs []string) (server, client toolRun) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	portc := make(chan int, 1)
	var wg sync.WaitGroup
	invoke := func(res *toolRun, args []string, listening func(net.Addr)) {
		defer wg.Done()
		var out, errb bytes.Buffer
		var mu sync.Mutex
		env := toolEnv{ctx: ctx, stdout: &out, stderr: &errb, open: open, listening: listening,
			idle: testIdle,
			buffers: func(stage string, buf []byte) {
				mu.Lock()
				defer mu.Unlock()
				switch stage {
				case "init":
					res.initial = buf
				case "final":
					res.final = buf
				}
			}}
		res.code = run(env, args)
		res.stdout, res.stderr = out.String(), errb.String()
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
		t.Fatalf("server never listened: code %d\n%s\n%s", server.code, server.stdout, server.stderr)
	}
	wg.Add(1)
	go invoke(&client, append([]string{"-d", "b", "-p", strconv.Itoa(port)}, append(clientArgs, "127.0.0.1")...), nil)
	wg.Wait()
	if t.Failed() || server.code != 0 || client.code != 0 {
		t.Logf("server exit %d\n%s%s", server.code, server.stdout, server.stderr)
		t.Logf("client exit %d\n%s%s", client.code, client.stdout, client.stderr)
	}
	return server, client
}
