//go:build linux

package interop

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The same filter as the fixtures in testdata/rxe: RoCEv2 plus the tools'
// TCP exchange.
const captureFilter = "udp port 4791 or tcp"

// TestBootOneVM boots one VM and checks what a goroce peer relies on: rxe0
// ACTIVE with GID[1] = ::ffff:198.18.0.11, the MTU plumbing (at MTU 9000 rxe's
// active MTU is 4096; TestTwoVMs runs at 1500), netem available for loss
// tests, the job interface, and the host namespace reaching the VM.
func TestBootOneVM(t *testing.T) {
	h := New(t, Config{VMs: 1, MTU: 9000})

	r := h.Run(0, "ibv_devinfo -v; ip -o link show eth0", 60*time.Second).Check(t)
	for _, want := range []string{"rxe0", "PORT_ACTIVE", "active_mtu:\t\t4096 (5)", "GID[  1]:\t\t::ffff:198.18.0.11, RoCE v2", "mtu 9000"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, r.Stdout)
		}
	}

	r = h.Run(0, "tc qdisc add dev eth0 root netem loss 2% && tc qdisc show dev eth0 && tc qdisc del dev eth0 root", 30*time.Second).Check(t)
	if !strings.Contains(r.Stdout, "netem") {
		t.Errorf("netem qdisc not shown:\n%s", r.Stdout)
	}

	// Exit status, stderr and a killed job.
	r = h.Run(0, "echo out; echo err >&2; exit 7", 30*time.Second)
	if r.Err != nil || r.ExitCode != 7 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exit/stdout/stderr not carried:\n%s", r)
	}
	r = h.Run(0, "sleep 100", 2*time.Second)
	if !errors.Is(r.Err, ErrTimeout) {
		t.Errorf("sleep 100 with a 2s timeout: %s", r)
	}
	if r = h.Run(0, "ps | grep -v grep | grep 'sleep 100'", 30*time.Second); r.ExitCode != 1 {
		t.Errorf("the timed-out job still runs:\n%s", r)
	}

	// A TCP connection from the host namespace (HostDo) to a listener in the VM.
	srv := h.Start(0, "echo hello-from-vm | nc -l -p 7000")
	if err := h.WaitListen(0, 7000, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := readFromVM(h, 7000)
	if err != nil || got != "hello-from-vm\n" {
		t.Errorf("TCP from the host namespace to VM 0: %v, read %q", err, got)
	}
	// A listener opened inside HostDo stays in the host namespace: it is seen
	// listening (HostWaitListen does not connect) and a VM client reaches it.
	var ln net.Listener
	if err := h.HostDo(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(h.HostIP(), 7001).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		conn.Write([]byte("hello-from-host\n"))
		conn.Close()
	}()
	if err := h.HostWaitListen(7001, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r = h.Run(0, "nc "+h.HostIP().String()+" 7001 </dev/null", 30*time.Second).Check(t)
	if r.Stdout != "hello-from-host\n" {
		t.Errorf("VM client read %q from the host-namespace listener", r.Stdout)
	}

	// A host command in the host namespace sees only its own interface.
	p, err := h.HostStart("ip", "-o", "-4", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	hr := p.Wait(30 * time.Second).Check(t)
	if !strings.Contains(hr.Stdout, h.HostIface()+"    inet "+h.HostIP().String()+"/24") || strings.Count(hr.Stdout, "inet ") != 2 {
		t.Errorf("host namespace addresses:\n%s", hr.Stdout)
	}
	// What a RoCEv2 endpoint in the host namespace does first: hold UDP 4791
	// on HostIP (the address exists only in that namespace).
	err = h.HostDo(func() error {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.HostIP(), 4791)))
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Errorf("binding %s:4791 in the host namespace: %v", h.HostIP(), err)
	}
	srv.Wait(10 * time.Second).Check(t)

	// A VM that stops answering (here: its qemu stopped with SIGSTOP, as a
	// hung TCG guest looks from outside) is found by Alive and replaced by
	// Revive with a new boot that serves jobs and rxe again; a live VM is
	// left alone.
	if rep, err := h.Revive(30 * time.Second); err != nil || len(rep) != 0 {
		t.Fatalf("Revive of a live VM: %v, %q", err, rep)
	}
	old := h.vm(0)
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := h.Alive(0, 3*time.Second); err == nil {
		t.Fatal("Alive: a stopped VM answered")
	} else {
		t.Logf("Alive of the stopped VM: %v", err)
	}
	rep, err := h.Revive(5 * time.Second)
	for _, l := range rep {
		t.Logf("%s", l)
	}
	if err != nil {
		t.Fatalf("Revive: %v", err)
	}
	if len(rep) == 0 || h.vm(0) == old {
		t.Fatal("Revive did not replace the stopped VM")
	}
	select {
	case <-old.exited:
	default:
		t.Error("the stopped VM's qemu still runs")
	}
	r = h.Run(0, "ibv_devinfo -v", 60*time.Second).Check(t)
	if !strings.Contains(r.Stdout, "PORT_ACTIVE") || !strings.Contains(r.Stdout, "::ffff:198.18.0.11") {
		t.Errorf("the new VM's rxe0:\n%s", r.Stdout)
	}
	srv = h.Start(0, "echo hello-again | nc -l -p 7002")
	if err := h.WaitListen(0, 7002, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err = readFromVM(h, 7002)
	if err != nil || got != "hello-again\n" {
		t.Errorf("TCP from the host namespace to the rebooted VM: %v, read %q", err, got)
	}
	srv.Wait(10 * time.Second).Check(t)
}

// readFromVM connects from the host namespace to TCP port on VM 0 and
// reads until the VM's end closes.
func readFromVM(h *Harness, port uint16) (string, error) {
	var got string
	err := h.HostDo(func() error {
		conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(h.VMIP(0), port).String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		got = string(b)
		return err
	})
	return got, err
}

// TestTwoVMs runs the stock tools between two VMs: ibv_rc_pingpong, and
// perftest's ib_write_bw / ib_read_bw with 4096-byte messages, which at path
// MTU 1024 are multi-packet (FIRST/MIDDLE/LAST). With GOROCE_INTEROP_RECORD=DIR
// the perftest captures and logs are also written to DIR as write_bw_4k.* and
// read_bw_4k.* (this is how testdata/rxe got them).
func TestTwoVMs(t *testing.T) {
	h := New(t, Config{VMs: 2})
	server := h.VMIP(0).String()

	t.Run("rc_pingpong", func(t *testing.T) {
		sum, _ := runPair(t, h, "rc_pingpong", 18515,
			"ibv_rc_pingpong -g 1 -n 20", "ibv_rc_pingpong -g 1 -n 20 "+server)
		// 20 iterations each way of a 4096-byte SEND: FIRST, MIDDLE, MIDDLE, LAST.
		wantAtLeast(t, sum, map[byte]int{0x00: 40, 0x01: 80, 0x02: 40, 0x11: 1})
	})
	t.Run("rping", func(t *testing.T) {
		// RDMA CM: REQ/REP/RTU/DREQ/DREP are UD SENDs on QP1. The server
		// listens through rdma_cm, not TCP: the client starts once its
		// listener is there (runPairNoWait).
		sum := runPairNoWait(t, h, "rping",
			"rping -s -a "+server+" -C 5 -v", "rping -c -a "+server+" -C 5 -v")
		wantAtLeast(t, sum, map[byte]int{0x64: 5, 0x04: 10, 0x0a: 5, 0x0c: 5, 0x10: 5})
	})
	// The librdmacm examples and perftest -R: like rping, the client
	// starts once the server's rdma_cm listener is bound.
	t.Run("ucmatose", func(t *testing.T) {
		sum := runPairNoWait(t, h, "ucmatose", "ucmatose -b "+server+" -c 4 -C 10", "ucmatose -s "+server+" -c 4 -C 10")
		// 4 connections, each 10 SENDs each way.
		wantAtLeast(t, sum, map[byte]int{0x64: 4 * 5, 0x04: 80})
	})
	t.Run("udaddy", func(t *testing.T) {
		// SIDR_REQ/SIDR_REP on QP1, then 10 UD SEND with immediate each way.
		sum := runPairNoWait(t, h, "udaddy", "udaddy -b "+server, "udaddy -s "+server)
		wantAtLeast(t, sum, map[byte]int{0x64: 2, 0x65: 20})
	})
	t.Run("send_bw_rdma_cm", func(t *testing.T) {
		// perftest -R: a control connection and a data connection, both
		// through rdma_cm on port 18515; the exchanges are SENDs on the
		// control QP.
		sum := runPairNoWait(t, h, "send_bw_rdma_cm", "ib_send_bw -R -s 4096 -n 20",
			"ib_send_bw -R -s 4096 -n 20 "+server)
		wantAtLeast(t, sum, map[byte]int{0x64: 10, 0x00: 20})
	})
	t.Run("rping_rej", func(t *testing.T) {
		// A connect to a port nobody listens on: the passive kernel answers
		// the REQ with a REJ (reason 8, invalid service ID).
		pcap := filepath.Join(t.TempDir(), "rping_rej.pcap")
		c, err := h.Capture(pcap, captureFilter)
		if err != nil {
			t.Fatal(err)
		}
		srv := Result{Cmd: "(none: nothing listens on port 7175)"}
		cli := h.Run(1, "rping -c -a "+server+" -p 7175 -C 1 -v", 60*time.Second)
		if _, err := c.Stop(); err != nil {
			t.Error(err)
		}
		if cli.OK() || !strings.Contains(cli.Output(), "RDMA_CM_EVENT_REJECTED") {
			t.Fatalf("rping to an unused port: %s", cli)
		}
		sum, err := SummarizePcap(pcap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rping_rej: %s", sum)
		wantAtLeast(t, sum, map[byte]int{0x64: 2})
		if dir := os.Getenv("GOROCE_INTEROP_RECORD"); dir != "" && !t.Failed() {
			record(t, h, dir, "rping_rej", pcap, srv, cli)
		}
	})
	t.Run("uc_pingpong", func(t *testing.T) {
		// UC: 20 iterations each way of a 4096-byte SEND at path MTU
		// 1024, UC SEND FIRST, MIDDLE, MIDDLE, LAST; nothing answers them.
		sum, _ := runPair(t, h, "uc_pingpong", 18515,
			"ibv_uc_pingpong -g 1 -n 20", "ibv_uc_pingpong -g 1 -n 20 "+server)
		wantAtLeast(t, sum, map[byte]int{0x20: 40, 0x21: 80, 0x22: 40})
		if n := sum.Opcodes[0x11] + sum.Opcodes[0x12]; n != 0 {
			t.Errorf("%d ACKs in a UC capture", n)
		}
	})
	t.Run("write_bw_uc", func(t *testing.T) {
		sum, _ := runPair(t, h, "write_bw_uc", 18515,
			"ib_write_bw -c UC -F -x 1 -s 4096 -n 20", "ib_write_bw -c UC -F -x 1 -s 4096 -n 20 "+server)
		wantAtLeast(t, sum, map[byte]int{0x26: 20, 0x27: 40, 0x28: 20})
	})
	t.Run("write_bw", func(t *testing.T) {
		sum, _ := runPair(t, h, "write_bw_4k", 18515,
			"ib_write_bw -F -x 1 -s 4096 -n 20", "ib_write_bw -F -x 1 -s 4096 -n 20 "+server)
		wantAtLeast(t, sum, map[byte]int{0x06: 20, 0x07: 40, 0x08: 20, 0x11: 1})
	})
	t.Run("read_bw", func(t *testing.T) {
		sum, _ := runPair(t, h, "read_bw_4k", 18515,
			"ib_read_bw -F -x 1 -s 4096 -n 20", "ib_read_bw -F -x 1 -s 4096 -n 20 "+server)
		wantAtLeast(t, sum, map[byte]int{0x0c: 20, 0x0d: 20, 0x0e: 40, 0x0f: 20})
	})
}

// perftestCMCrash reports whether a stock perftest -R client died the way
// perftest 4.5-0.17 does when the server rejects its data connection (REJ
// reason 8: the server, which listens for the data connections only after
// the handshake that precedes them, was not listening yet): its retry
// reuses the destroyed rdma_cm IDs and crashes (perftest 3d9d8d0, "Fix
// crashes and logical flaws in RDMA CM connection retry"). Seen between two
// rxe VMs on a loaded machine, about one run in ten.
func perftestCMCrash(r Result) bool {
	return r.ExitCode == 139 && strings.Contains(r.Stderr, "RDMA_CM_EVENT_REJECTED")
}

// runPairNoWait is runPair for a server that listens through rdma_cm, not
// on TCP: the client starts once the server's first word has an rdma_cm
// listener.
func runPairNoWait(t *testing.T, h *Harness, name, serverCmd, clientCmd string) PcapSummary {
	t.Helper()
	sum, _ := runPair(t, h, name, 0, serverCmd, clientCmd)
	return sum
}

// runPair captures the bridge while serverCmd runs in VM 0 and clientCmd in
// VM 1 (once the server listens on TCP port, or through rdma_cm if port is
// 0), checks that both succeed and returns the capture's summary and path.
func runPair(t *testing.T, h *Harness, name string, port int, serverCmd, clientCmd string) (PcapSummary, string) {
	t.Helper()
	pcap := filepath.Join(t.TempDir(), name+".pcap")
	var (
		cli, sr Result
		stats   CaptureStats
		elapsed time.Duration
	)
	for attempt := 1; ; attempt++ {
		c, err := h.Capture(pcap, captureFilter)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		srv := h.Start(0, serverCmd)
		if port == 0 {
			// An rdma_cm server: wait for its listener.
			if err := h.WaitCMListen(0, strings.Fields(serverCmd)[0], 60*time.Second); err != nil {
				srv.Kill()
				t.Fatalf("%v\n%s", err, srv.Wait(time.Second))
			}
		} else if err := h.WaitListen(0, port, 60*time.Second); err != nil {
			srv.Kill()
			t.Fatalf("%v\n%s", err, srv.Wait(time.Second))
		}
		cli = h.Run(1, clientCmd, 120*time.Second)
		crashed := perftestCMCrash(cli)
		if crashed && attempt < 3 {
			// The server waits for a data connection that will not come.
			srv.Kill()
			srv.Wait(10 * time.Second)
			c.Stop()
			t.Logf("%s: attempt %d: the stock perftest client crashed after a REJ of its data connection "+
				"(perftest 4.5-0.17's rdma_cm retry, fixed upstream in 3d9d8d0): running the pair again\n%s", name, attempt, cli)
			continue
		}
		sr = srv.Wait(60 * time.Second)
		elapsed = time.Since(t0)
		stats, err = c.Stop()
		if err != nil {
			t.Error(err)
		}
		break
	}
	cli.Check(t)
	sr.Check(t)
	noteJob(t, cli)
	noteJob(t, sr)
	sum, err := SummarizePcap(pcap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: tools took %.1fs; capture: %s (tcpdump: %d captured, %d dropped by kernel)",
		name, elapsed.Seconds(), sum, stats.Captured, stats.DroppedByKernel)
	if stats.DroppedByKernel > 0 {
		t.Errorf("tcpdump dropped %d packets", stats.DroppedByKernel)
	}
	if sum.Frames != stats.Captured {
		t.Errorf("pcap holds %d frames, tcpdump says %d captured", sum.Frames, stats.Captured)
	}
	if dir := os.Getenv("GOROCE_INTEROP_RECORD"); dir != "" && !t.Failed() {
		record(t, h, dir, name, pcap, sr, cli)
	}
	return sum, pcap
}

func wantAtLeast(t *testing.T, sum PcapSummary, want map[byte]int) {
	t.Helper()
	for op, n := range want {
		if got := sum.Opcodes[op]; got < n {
			t.Errorf("capture has %d %s packets, want at least %d (%s)", got, OpcodeName(op), n, sum)
		}
	}
}

// record copies a capture into dir with a log of both tools' output, in the
// format of testdata/rxe/*.log.
func record(t *testing.T, h *Harness, dir, name, pcap string, srv, cli Result) {
	t.Helper()
	b, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pcap"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	fmt.Fprintf(&log, "### %s  (MTU %d, GID index 1, capture snaplen 262144, filter %q)\n", name, h.MTU(), captureFilter)
	fmt.Fprintf(&log, "### server (vm0 %s): %s   -> exit %d\n%s%s\n", h.VMIP(0), srv.Cmd, srv.ExitCode, srv.Stderr, srv.Stdout)
	fmt.Fprintf(&log, "### client (vm1 %s): %s   -> exit %d, %.1fs host wall\n%s%s", h.VMIP(1), cli.Cmd, cli.ExitCode, cli.Elapsed.Seconds(), cli.Stderr, cli.Stdout)
	if err := os.WriteFile(filepath.Join(dir, name+".log"), []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s/%s.{pcap,log}", dir, name)
}
