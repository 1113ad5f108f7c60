//go:build interop

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop"
)

// TestToolsAgainstRXE runs goroce's tools against the unmodified rdma-core
// and perftest tools of Linux rxe in a qemu VM (package interop), in both
// roles: goroce pingpong vs ibv_rc_pingpong, goroce write_bw vs
// ib_write_bw, goroce read_bw vs ib_read_bw. The full interop matrix lives
// in package interop; this is the tools' own smoke test. It boots a VM, so
// it is built only with -tags interop (package cmd/goroce's tests do not
// depend on package interop otherwise) and runs only with GOROCE_INTEROP=1
// (and root, and the VM image):
//
//	GOROCE_INTEROP=1 go test -tags interop -run TestToolsAgainstRXE -v ./cmd/goroce/
func TestToolsAgainstRXE(t *testing.T) {
	if os.Getenv("GOROCE_INTEROP") == "" {
		t.Skip("boots an rxe VM under qemu: set GOROCE_INTEROP=1 (the interop matrix in package interop covers the tools in CI)")
	}
	interop.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "goroce")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	h := interop.New(t, interop.Config{VMs: 1, MTU: 1500})
	vm := h.VMIP(0).String()
	host := h.HostIP().String()
	const port = "18515"

	type cell struct {
		name           string
		goroce, stock  string // goroce subcommand and its flags; the stock tool and its flags
		goroceIsServer bool
	}
	cells := []cell{
		{"pingpong/goroce-server", "pingpong -g 1 -n 50 -c", "ibv_rc_pingpong -g 1 -n 50 -c", true},
		{"pingpong/goroce-client", "pingpong -g 1 -n 50 -c", "ibv_rc_pingpong -g 1 -n 50 -c", false},
		{"pingpong-events-small/goroce-client", "pingpong -g 1 -n 50 -s 512 -e", "ibv_rc_pingpong -g 1 -n 50 -s 512", false},
		{"pingpong-events-big/goroce-server", "pingpong -g 1 -n 20 -s 20000 -e -c", "ibv_rc_pingpong -g 1 -n 20 -s 20000 -e -c", true},
		{"write_bw/goroce-client", "write_bw -F -x 1 -s 4096 -n 200", "ib_write_bw -F -x 1 -s 4096 -n 200", false},
		{"write_bw/goroce-server", "write_bw -F -x 1 -s 4096 -n 200", "ib_write_bw -F -x 1 -s 4096 -n 200", true},
		{"write_bw-2qps/goroce-client", "write_bw -F -x 1 -s 64 -n 100 -q 2 --report_gbits", "ib_write_bw -F -x 1 -s 64 -n 100 -q 2 --report_gbits", false},
		{"read_bw/goroce-client", "read_bw -F -x 1 -s 4096 -n 100", "ib_read_bw -F -x 1 -s 4096 -n 100", false},
		{"read_bw/goroce-server", "read_bw -F -x 1 -s 64 -n 100", "ib_read_bw -F -x 1 -s 64 -n 100", true},
		{"send_bw/goroce-server", "send_bw -F -x 1 -s 1024 -n 100", "ib_send_bw -F -x 1 -s 1024 -n 100", true},
		{"send_bw/goroce-client", "send_bw -F -x 1 -s 3000 -n 100", "ib_send_bw -F -x 1 -s 3000 -n 100", false},
		{"atomic_bw/goroce-client", "atomic_bw -F -x 1 -n 100", "ib_atomic_bw -F -x 1 -n 100", false},
		{"atomic_bw-cas/goroce-server", "atomic_bw -F -x 1 -n 100 -A CMP_AND_SWAP", "ib_atomic_bw -F -x 1 -n 100 -A CMP_AND_SWAP", true},
		{"write_lat/goroce-client", "write_lat -F -x 1 -n 100", "ib_write_lat -F -x 1 -n 100", false},
		{"write_lat/goroce-server", "write_lat -F -x 1 -n 50 -s 3000", "ib_write_lat -F -x 1 -n 50 -s 3000", true},
		{"read_lat/goroce-client", "read_lat -F -x 1 -n 50", "ib_read_lat -F -x 1 -n 50", false},
		{"read_lat/goroce-server", "read_lat -F -x 1 -n 50 -s 2000", "ib_read_lat -F -x 1 -n 50 -s 2000", true},
		{"send_lat/goroce-client", "send_lat -F -x 1 -n 50", "ib_send_lat -F -x 1 -n 50", false},
		{"send_lat/goroce-server", "send_lat -F -x 1 -n 50 -s 1500", "ib_send_lat -F -x 1 -n 50 -s 1500", true},
		{"atomic_lat/goroce-client", "atomic_lat -F -x 1 -n 50", "ib_atomic_lat -F -x 1 -n 50", false},
		{"atomic_lat/goroce-server", "atomic_lat -F -x 1 -n 50 -A CMP_AND_SWAP", "ib_atomic_lat -F -x 1 -n 50 -A CMP_AND_SWAP", true},
	}
	// Every cell on the auto backend; the ping-pong and write_bw cells on
	// each explicit backend too. GOROCE_VERBOSE makes the tool log the
	// backend it opened.
	t.Setenv("GOROCE_VERBOSE", "1")
	type run struct {
		backend string // GOROCE_BACKEND, "+busy" for GOROCE_BUSYPOLL=1, "+drop" for GOROCE_TX_DROP=0.03
		cell    cell
	}
	var runs []run
	for _, c := range cells {
		runs = append(runs, run{"auto", c})
	}
	// Not the udp backend: rxe puts a kernel-chosen IPv4 ID in its packets,
	// which the ICRC covers and a UDP socket cannot see, so rxe's packets
	// fail goroce's ICRC check there (nic/udp's package comment).
	for _, b := range []string{"afxdp", "afpacket"} {
		for _, c := range cells[:2] {
			runs = append(runs, run{b, c})
		}
		runs = append(runs, run{b, cells[4]}, run{b, cells[5]})
	}
	runs = append(runs, run{"afpacket+busy", cells[0]}, run{"afpacket+busy", cells[1]}, run{"afpacket+busy", cells[5]})
	// goroce loses 3% of what it sends (GOROCE_TX_DROP): rxe sees gaps and
	// duplicates, goroce retransmits.
	runs = append(runs, run{"auto+drop", cells[0]}, run{"auto+drop", cells[1]}, run{"auto+drop", cells[4]},
		run{"auto+drop", cells[7]}, run{"auto+drop", cells[11]})
	for _, rc := range runs {
		c := rc.cell
		t.Run(rc.backend+"/"+c.name, func(t *testing.T) {
			backend, busy := strings.CutSuffix(rc.backend, "+busy")
			backend, drop := strings.CutSuffix(backend, "+drop")
			t.Setenv("GOROCE_BACKEND", backend)
			if busy {
				t.Setenv("GOROCE_BUSYPOLL", "1")
			}
			if drop {
				t.Setenv("GOROCE_TX_DROP", "0.03")
			}
			gargs := append(strings.Fields(c.goroce), "-d", h.HostIface(), "-p", port, "--timeout", "150")
			var gr, sr interop.Result
			if c.goroceIsServer {
				p, err := h.HostStart(bin, gargs...)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.HostWaitListen(18515, time.Minute); err != nil {
					p.Kill()
					t.Fatalf("goroce server never listened: %v\n%s", err, p.Output())
				}
				sr = h.Run(0, c.stock+" -p "+port+" "+host, 3*time.Minute)
				gr = p.Wait(3 * time.Minute)
			} else {
				job := h.Start(0, c.stock+" -p "+port)
				if err := h.WaitListen(0, 18515, time.Minute); err != nil {
					job.Kill()
					t.Fatalf("stock server never listened: %v", err)
				}
				p, err := h.HostStart(bin, append(gargs, vm)...)
				if err != nil {
					t.Fatal(err)
				}
				gr = p.Wait(3 * time.Minute)
				sr = job.Wait(3 * time.Minute)
			}
			t.Logf("goroce:\n%s", gr)
			t.Logf("stock:\n%s", sr)
			if !gr.OK() || !sr.OK() {
				t.Fatalf("goroce exit %d (%v), stock exit %d (%v)", gr.ExitCode, gr.Err, sr.ExitCode, sr.Err)
			}
			done := "#bytes"
			if strings.HasPrefix(c.goroce, "pingpong") {
				done = "iters in"
			}
			for i, r := range []interop.Result{gr, sr} {
				if (i == 0) == c.goroceIsServer && (strings.HasPrefix(c.goroce, "read_lat") || strings.HasPrefix(c.goroce, "atomic_lat")) {
					continue // the read/atomic latency server prints no table
				}
				if !strings.Contains(r.Stdout, done) || strings.Contains(r.Stdout, "invalid data") {
					t.Errorf("output of %s lacks %q or reports invalid data", r.Cmd, done)
				}
			}
		})
	}
}
