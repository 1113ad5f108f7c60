//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// TestToolsNetns runs the goroce binary's tools against each other on a
// real interface, one per network namespace (a veth pair, 198.18.X.0/24,
// no route out), through qp.OpenInterface with each backend: the path a user
// takes (`goroce pingpong -d IFACE -g 1`, GOROCE_BACKEND). It logs the
// result lines, which are the goroce↔goroce figures on veth. Needs root.
func TestToolsNetns(t *testing.T) {
	netns.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "goroce")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pair, err := netns.New(netns.Options{Prefix: "gtools"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	srvIP := pair.A.Addr.String()
	cells := []struct {
		name string
		args string
		done string
	}{
		{"pingpong", "pingpong -g 1 -n 50 -c", "iters in"},
		{"write_bw", "write_bw -s 65536 -n 300", "#bytes"},
		{"read_bw", "read_bw -s 4096 -n 300 -q 2", "#bytes"},
		{"send_lat", "send_lat -n 50", "#bytes"},
	}
	type run struct {
		backend string
		env     string // extra environment: VAR=value ...
		cell    int
	}
	var runs []run
	for _, backend := range []string{"afxdp", "afpacket", "udp"} {
		for i := range cells {
			runs = append(runs, run{backend, "", i})
		}
	}
	// Busy-poll devices (GOROCE_BUSYPOLL=1): a ping-pong, and a write_bw
	// whose server is only a target, kept answering by the progressor.
	// Transmit loss on both ends (GOROCE_TX_DROP), recovered by RC.
	runs = append(runs, run{"afpacket", "GOROCE_BUSYPOLL=1", 0}, run{"afpacket", "GOROCE_BUSYPOLL=1", 1},
		run{"afxdp", "GOROCE_TX_DROP=0.02", 0}, run{"udp", "GOROCE_TX_DROP=0.02", 1},
		run{"afpacket", "GOROCE_BUSYPOLL=1 GOROCE_TX_DROP=0.02", 0})
	for _, r := range runs {
		backend, c := r.backend, cells[r.cell]
		name := backend + "/" + c.name
		if r.env != "" {
			name += "/" + strings.ReplaceAll(r.env, " ", ",")
		}
		{
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				start := func(end netns.End, extra ...string) (*exec.Cmd, *bytes.Buffer) {
					args := append([]string{"netns", "exec", end.NS, bin}, strings.Fields(c.args)...)
					args = append(args, append([]string{"-d", end.Ifname, "--timeout", "60"}, extra...)...)
					cmd := exec.CommandContext(ctx, "ip", args...)
					cmd.Env = append(os.Environ(), "GOROCE_BACKEND="+backend)
					if r.env != "" {
						cmd.Env = append(cmd.Env, strings.Fields(r.env)...)
					}
					var out bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &out
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					return cmd, &out
				}
				srv, sout := start(pair.A)
				// The client retries the refused connection until the server
				// listens (--timeout).
				cli, cout := start(pair.B, srvIP)
				cerr := cli.Wait()
				serr := srv.Wait()
				if cerr != nil || serr != nil {
					t.Fatalf("server: %v\n%s\nclient: %v\n%s", serr, sout, cerr, cout)
				}
				for _, out := range []*bytes.Buffer{sout, cout} {
					if !strings.Contains(out.String(), c.done) || strings.Contains(out.String(), "invalid data") {
						t.Errorf("output:\n%s", out)
					}
					if strings.Contains(r.env, "GOROCE_TX_DROP") && !strings.Contains(out.String(), "GOROCE_TX_DROP dropped") {
						t.Errorf("no drop report:\n%s", out)
					}
				}
				lines := strings.Split(strings.TrimSpace(cout.String()), "\n")
				if strings.Contains(r.env, "GOROCE_TX_DROP") {
					lines = lines[:len(lines)-1] // the drop report
				}
				t.Logf("%s %s client: %s", backend, r.env, strings.Join(lastLines(lines, c.name), " | "))
			})
		}
	}
}

// lastLines picks the result lines of a tool's output.
func lastLines(lines []string, tool string) []string {
	if tool == "pingpong" {
		return lines[len(lines)-2:]
	}
	if len(lines) >= 2 {
		return lines[len(lines)-2 : len(lines)-1]
	}
	return lines
}
