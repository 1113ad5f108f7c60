//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/probe"
	"github.com/goroce/goroce/internal/netns"
)

// TestProbeNetns runs `goroce probe` against `goroce write_bw` servers on
// a veth pair between two namespaces (no route out), the way a user runs it
// against a stock server: the server restarted after each connection, the
// probe's frames on an AF_PACKET link. Needs root.
func TestProbeNetns(t *testing.T) {
	netns.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "goroce")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pair := netns.NewPair(t, netns.Options{Prefix: "gprobe"})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	env := append(os.Environ(), "GOROCE_BACKEND=afpacket")

	// The server loop: one write_bw server per connection, bounded.
	const maxServers = 16
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		logs bytes.Buffer
	)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range maxServers {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", pair.A.NS, bin, "write_bw", "-d", pair.A.Ifname, "--timeout", "20")
			cmd.Env = env
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run() // a check that kills the QP may end the server with an error
			mu.Lock()
			logs.Write(out.Bytes())
			mu.Unlock()
		}
	}()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", pair.B.NS, bin, "probe", "-d", pair.B.Ifname, "--json", pair.A.Addr.String())
	cmd.Env = env
	out, err := cmd.Output()
	close(stop)
	cancel() // ends the server waiting for its next connection
	wg.Wait()
	var res struct {
		Results []probe.Result
		Summary probe.Summary
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("probe: %v %v\n%s\nservers:\n%s", err, jerr, out, logs.String())
	}
	if res.Summary.Pass != 12 || len(res.Results) != 12 { // every check but misaligned-atomic (atomic_bw)
		t.Fatalf("results %+v", res)
	}
	t.Logf("goroce probe %s (goroce write_bw):\n%s", pair.A.Addr, probe.Text(res.Results))
	for _, r := range res.Results {
		if r.Check == "wrong-rkey" && !strings.Contains(r.Observed, "NAK(REMOTE_ACCESS_ERROR)") {
			t.Errorf("wrong-rkey: %s", r.Observed)
		}
	}
}
