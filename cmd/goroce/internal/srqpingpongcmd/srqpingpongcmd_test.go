package srqpingpongcmd

import (
	"bytes"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/goroce/internal/pingpong"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
)

var (
	localRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN (0x[0-9a-f]{6}), PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)
	remoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN (0x[0-9a-f]{6}), PSN 0x[0-9a-f]{6}, GID ::ffff:198\.18\.0\.[12]$`)
	bytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	itersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// checkOutput checks srq_pingpong's lines: nqp local lines, nqp remote
// lines (each side's remote lines are the other's local ones, in order),
// the two statistics lines.
func checkOutput(t *testing.T, s, c tooltest.Outcome, nqp int, bytesWant, itersWant string) {
	t.Helper()
	sl, cl := strings.Split(strings.TrimSuffix(s.Stdout, "\n"), "\n"), strings.Split(strings.TrimSuffix(c.Stdout, "\n"), "\n")
	for _, side := range []struct {
		name  string
		lines []string
	}{{"server", sl}, {"client", cl}} {
		l := side.lines
		if len(l) != 2*nqp+2 {
			t.Fatalf("%s printed %d lines, want %d:\n%s", side.name, len(l), 2*nqp+2, strings.Join(l, "\n"))
		}
		for i := range nqp {
			if !localRE.MatchString(l[i]) || !remoteRE.MatchString(l[nqp+i]) {
				t.Fatalf("%s line %d/%d:\n%s\n%s", side.name, i, nqp+i, l[i], l[nqp+i])
			}
		}
		if m := bytesRE.FindStringSubmatch(l[2*nqp]); m == nil || m[1] != bytesWant {
			t.Errorf("%s: %q, want %s bytes", side.name, l[2*nqp], bytesWant)
		}
		if m := itersRE.FindStringSubmatch(l[2*nqp+1]); m == nil || m[1] != itersWant {
			t.Errorf("%s: %q, want %s iters", side.name, l[2*nqp+1], itersWant)
		}
	}
	after := func(l string) string { return l[strings.Index(l, "LID"):] }
	for i := range nqp {
		if after(sl[i]) != after(cl[nqp+i]) || after(cl[i]) != after(sl[nqp+i]) {
			t.Errorf("QP %d: addresses do not cross:\nserver %q / %q\nclient %q / %q", i, sl[i], sl[nqp+i], cl[i], cl[nqp+i])
		}
	}
}

// TestSRQPingpongMem runs goroce srq_pingpong against itself over the
// in-memory link: several QPs sharing one SRQ per side, polling and CQ
// events, an rx depth just above the QP count (the SRQ refills while
// every QP has a message in flight), several packets per message.
func TestSRQPingpongMem(t *testing.T) {
	cases := []struct {
		name            string
		args            []string
		nqp, size, iter int
	}{
		{"default-qps", []string{"-g", "1", "-n", "40", "-s", "100"}, 16, 100, 40},
		{"four-events", []string{"-g", "1", "-q", "4", "-n", "20", "-e"}, 4, 4096, 20},
		{"tight-rx", []string{"--gid-idx=1", "-q4", "-r", "5", "-n", "50", "-s", "3000", "-m", "512"}, 4, 3000, 50},
		{"one-qp", []string{"-g1", "-q", "1", "-r", "1", "-n", "10", "-s", "1"}, 1, 1, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			s, cl := tooltest.RunPair(t, Run, open, c.args, c.args)
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d\nserver: %s\nclient: %s", s.Code, cl.Code, s.Stderr, cl.Stderr)
			}
			checkOutput(t, s, cl, c.nqp, strconv.Itoa(2*c.size*c.iter), strconv.Itoa(c.iter))
		})
	}
}

// No lossy run: srq_pingpong's exit is not safe under loss, in C as
// here. The counts are totals over the QPs, so one side can finish while
// the other still waits for the ACK of a SEND the first received: when
// that ACK is lost, the retransmission finds no QP and the survivor fails
// with RETRY_EXC_ERR. Loss recovery of QPs sharing an SRQ is
// qp.TestSRQUnderLoss.

// TestSRQPingpongExchange: the server reads and writes MAX_QP records
// whatever -q is, the unused ones zero, then waits for "done" — what the C
// client sends and expects.
func TestSRQPingpongExchange(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	addr := make(chan net.Addr, 1)
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open, Listening: func(a net.Addr) { addr <- a }, Idle: time.Second}
	done := make(chan int, 1)
	go func() {
		done <- Run(env, []string{"-d", "a", "-g", "1", "-q", "2", "-p", "0", "-n", "1", "--timeout=10"})
	}()
	conn, err := net.Dial("tcp", (<-addr).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := make([]pingpong.Dest, MaxQP)
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 2}
	local := make([]pingpong.Dest, MaxQP)
	local[0] = pingpong.Dest{QPN: 0x11, PSN: 1, GID: gid}
	local[1] = pingpong.Dest{QPN: 0x12, PSN: 2, GID: gid}
	if err := pingpong.ClientExchangeN(conn, local, peer); err != nil {
		t.Fatal(err)
	}
	for i, d := range peer {
		if used := d.QPN != 0; used != (i < 2) {
			t.Fatalf("record %d: %+v", i, d)
		}
	}
	conn.Close()
	// No peer QPs answer: the run fails when its idle bound passes.
	if code := <-done; code != 1 {
		t.Fatalf("exit %d", code)
	}
}

// TestSRQPingpongErrors: usage errors and srq_pingpong's own checks.
func TestSRQPingpongErrors(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	var out, errb bytes.Buffer
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: open}
	for _, args := range [][]string{{"-m", "1000"}, {"-s", "0"}, {"-p", "70000"}, {"-i", "0"}, {"-q", "0"}, {"-q", "257"}, {"-c"}, {"a", "b"}} {
		out.Reset()
		errb.Reset()
		if code := Run(env, append([]string{"-d", "a"}, args...)); code != tool.ExitUsage || !strings.Contains(errb.String(), "Usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	errb.Reset()
	if code := Run(env, []string{"-d", "a", "-q", "8", "-r", "7"}); code != 1 ||
		errb.String() != "rx_depth 7 is too small for 8 QPs -- must have at least one receive per QP.\n" {
		t.Errorf("-q 8 -r 7: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := Run(env, []string{"--help"}); code != 0 || !strings.Contains(out.String(), "--num-qp") {
		t.Errorf("--help: exit %d", code)
	}
}
