//go:build linux

package interop

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The interoperability matrix: the stock rdma-core and perftest tools run by
// rxe in a VM against goroce's own tools on the host side, in both roles,
// each run captured on the bridge and judged from `goroce dump --json` of
// that capture. TestMatrix (matrix_test.go) lists the cells; this file has
// the tools, the cells and the runner (Matrix.Run), matrix_endpoint.go the
// two sides a cell runs (rxe in a VM, goroce on the host), matrix_judge.go
// the verdict on a run and its capture, matrix_oracle.go the wire profiles
// (an independent RoCEv2 parser) and matrix_report.go the tables of
// docs/interop.md.
//
// A cell is one tool invocation pair (server and client with the same flags,
// as the tools require) in one direction:
//
//	goroce→rxe  goroce's tool is the client (it connects, and for the bw/lat
//	            tests it is the requester), rxe's tool the server in VM 0
//	rxe→goroce  rxe's tool in VM 0 is the client, goroce's tool the server
//
// A cell passes when both programs exit 0 (and print their result line),
// tcpdump lost nothing, every RoCEv2 packet of the capture has a valid ICRC
// and parses, there is no NAK, RNR NAK, PSN gap or retransmission unless the
// cell expects them (loss, RNR), and, for atomics, the value chain seen on
// the wire is consistent: each ATOMIC_ACKNOWLEDGE's original value equals
// what the earlier operations on the same address imply. A loss cell's
// capture is also judged from `goroce dump --explain --json` (judgeExplain):
// every retransmission explained by loss, in the data flow, and every
// operation of that flow completed.
//
// With MatrixPeerVM the "goroce" side is rxe in VM 1 running the same stock
// tool: that proves the runner and the judge against a known-good pair, and
// its wire profiles must come out identical.

// Tool names one program in both implementations.
type Tool struct {
	RXE     string // the stock binary in the VM, e.g. "ib_write_bw"
	Goroce  string // the goroce subcommand, e.g. "write_bw"
	GIDFlag string // "-g" (ibv_rc_pingpong) or "-x" (perftest)
	Done    string // a line every successful run prints ("iters in", "#bytes")
	// SilentServer: the server prints no result (ib_read_lat: only the
	// client measures).
	SilentServer bool
	// CM, when set, is an rdma_cm tool (rping, ucmatose, udaddy, perftest
	// -R): it listens through rdma_cm instead of TCP and names addresses
	// by flags.
	CM *CMTool
}

// CMTool is how an rdma_cm tool is started. There is no TCP listener to
// wait for: the server gets a head start and the client retries while its
// connection is refused (REJ or SIDR_REP "no such service": nothing
// listens yet), the stock tool in a shell loop, goroce's with --timeout.
type CMTool struct {
	// ServerArgs and ClientArgs select the role (rping -s / -c).
	ServerArgs, ClientArgs []string
	// ServerAddrFlag gives the server its own address (rping -a,
	// cmatose/udaddy -b; "" none); ClientAddrFlag the client the server's
	// ("-a", "-s"; "" as the positional host, perftest).
	ServerAddrFlag, ClientAddrFlag string
	// DevFlag names goroce's interface ("--dev"; "" is "-d").
	DevFlag string
	// Refused is what the stock client prints when nobody listens yet.
	Refused string
}

var (
	cmExamples = CMTool{DevFlag: "--dev", Refused: "RDMA_CM_EVENT_REJECTED|RDMA_CM_EVENT_UNREACHABLE"}
	cmPerftest = CMTool{Refused: "Unexpected CM event|Unable to perform rdma_client function|Failed to connect RDMA CM"}

	ToolRping = Tool{RXE: "rping", Goroce: "rping", Done: "ping data: ",
		CM: &CMTool{ServerArgs: []string{"-s"}, ClientArgs: []string{"-c"}, ServerAddrFlag: "-a", ClientAddrFlag: "-a",
			DevFlag: cmExamples.DevFlag, Refused: cmExamples.Refused}}
	ToolUcmatose = Tool{RXE: "ucmatose", Goroce: "ucmatose", Done: "return status 0",
		CM: &CMTool{ServerAddrFlag: "-b", ClientAddrFlag: "-s", DevFlag: cmExamples.DevFlag, Refused: cmExamples.Refused}}
	ToolUdaddy = Tool{RXE: "udaddy", Goroce: "udaddy", Done: "return status 0",
		CM: &CMTool{ServerAddrFlag: "-b", ClientAddrFlag: "-s", DevFlag: cmExamples.DevFlag, Refused: cmExamples.Refused}}
	ToolSendBWCM  = Tool{"ib_send_bw", "send_bw", "-x", "#bytes", false, &cmPerftest}
	ToolWriteBWCM = Tool{"ib_write_bw", "write_bw", "-x", "#bytes", false, &cmPerftest}
	ToolReadLatCM = Tool{"ib_read_lat", "read_lat", "-x", "#bytes", true, &cmPerftest}

	ToolPingpong  = Tool{"ibv_rc_pingpong", "pingpong", "-g", "iters in", false, nil}
	ToolWriteBW   = Tool{"ib_write_bw", "write_bw", "-x", "#bytes", false, nil}
	ToolReadBW    = Tool{"ib_read_bw", "read_bw", "-x", "#bytes", false, nil}
	ToolSendBW    = Tool{"ib_send_bw", "send_bw", "-x", "#bytes", false, nil}
	ToolAtomicBW  = Tool{"ib_atomic_bw", "atomic_bw", "-x", "#bytes", false, nil}
	ToolWriteLat  = Tool{"ib_write_lat", "write_lat", "-x", "#bytes", false, nil}
	ToolReadLat   = Tool{"ib_read_lat", "read_lat", "-x", "#bytes", true, nil}
	ToolSendLat   = Tool{"ib_send_lat", "send_lat", "-x", "#bytes", false, nil}
	ToolAtomicLat = Tool{"ib_atomic_lat", "atomic_lat", "-x", "#bytes", true, nil}
	// ToolUDPingpong exchanges the same records on the same port as
	// ibv_rc_pingpong, over a UD QP.
	ToolUDPingpong = Tool{"ibv_ud_pingpong", "ud_pingpong", "-g", "iters in", false, nil}
)

// ToolUCPingpong is ibv_uc_pingpong: rc_pingpong's exchange over a UC QP.
var ToolUCPingpong = Tool{"ibv_uc_pingpong", "uc_pingpong", "-g", "iters in", false, nil}

// ToolSRQPingpong is ibv_srq_pingpong: several RC QPs per side sharing
// one SRQ.
var ToolSRQPingpong = Tool{"ibv_srq_pingpong", "srq_pingpong", "-g", "iters in", false, nil}

// toolPort is the TCP port of both tool families' exchange (18515).
const toolPort = 18515

// Expect says which trouble a cell provokes on purpose.
type Expect struct {
	// Loss allows sequence NAKs, PSN gaps and retransmissions.
	Loss bool
	// RNR requires at least one RNR NAK and allows the retransmissions it
	// causes.
	RNR bool
	// Atomic checks the chain of original values of the atomics.
	Atomic bool
	// RNRTimer, when set, is the timer code every RNR NAK must carry (the
	// responder's min_rnr_timer; both tool families set 12, 640 µs).
	RNRTimer uint8
	// PathMTU, when set, must be the largest RoCEv2 payload in the capture
	// (proves the path MTU the two tools settled on).
	PathMTU int
	// TOS, when set, must be the IPv4 TOS byte of every RoCEv2 packet both
	// sides sent (the GRH traffic class, perftest --tclass).
	TOS *uint8
	// UDQKey, when set, makes the cell a UD one: every RoCEv2 packet must
	// be a UD SEND with a DETH carrying this Q_Key, AckReq clear, and
	// nothing answers it (no ACK, no NAK); PSNs still rise by one per send
	// and per sender, which the gap check sees (UD never retransmits).
	UDQKey uint32
	// UC makes the cell a UC one: every RoCEv2 packet (outside QP1) must be
	// a UC SEND or RDMA WRITE request (opcodes 0x20-0x2B) and nothing
	// answers them (no ACK, no NAK). A PSN gap is a lost message: UC never
	// retransmits, so the gap check counts it as it stands.
	UC bool
}

// Cell is one line of the matrix (both directions unless Skip says).
type Cell struct {
	Name   string
	Tool   Tool
	Args   []string // for both sides
	Server []string // server side only (e.g. a tiny rx depth)
	Client []string // client side only
	Expect Expect
	// VMSetup runs in VM 0 before the cell and VMTeardown after it (e.g.
	// netem loss on eth0: rxe's outgoing frames).
	VMSetup, VMTeardown string
	// GoroceEnv is added to the goroce process's environment.
	GoroceEnv []string
	// GoroceArgs are added to the goroce side's arguments, in either role
	// (goroce's own options, e.g. ud_pingpong --srq; such a cell is
	// GoroceSpecific, the stock tool would refuse them).
	GoroceArgs []string
	// Skip gives a planned skip per direction, with the reason.
	Skip map[Dir]string
	// Note goes to the doc's table.
	Note string
	// GoroceSpecific cells test a property of goroce (e.g. its AF_XDP path
	// MTU limit): skipped in the VM↔VM self-test.
	GoroceSpecific bool
	// InterruptClient, when set, sends SIGINT to the client this long after
	// it started (perftest --run_infinitely runs until interrupted). An
	// interrupted stock tool dies of the signal (exit 130): that counts as
	// success when it printed its result line; goroce's tools end the run
	// and exit 0.
	InterruptClient time.Duration
	// LogOutput logs both programs' output (cells whose point is what the
	// tools print, not only the wire).
	LogOutput bool
}

// CellResult is the outcome of one cell in one direction.
type CellResult struct {
	Cell     string
	Dir      Dir
	MTU      int // link MTU of the harness
	Status   string
	Reason   string         // skip reason or the first problem
	Problems []string       // every failed check
	Packets  int            // RoCEv2 packets in the capture
	NAKs     int            // NAKs other than RNR
	NAKKinds map[string]int // NAKs by code
	RNRNAKs  int
	// RXERNRNAKs counts the RNR NAKs rxe sent in a cell built for none:
	// its stock tool reposted receives slower than goroce sent (tolerated,
	// with goroce's recovery checked; see judge).
	RXERNRNAKs int
	Retrans    int // retransmitted request PSNs
	Gaps       int
	Atomics    int // atomic operations whose original value was checked against the chain
	// RetransBy counts retransmitted PSNs by the implementation that sent them.
	RetransBy map[string]int
	// Warnings are tolerated oddities (timeout retransmissions in a clean cell).
	Warnings  []string
	Elapsed   time.Duration
	Pcap      string
	Server    Result
	Client    Result
	Profiles  map[string]WireProfile // by impl, from the capture
	Note      string
	Summaries []string // dump's flow lines, for the log
	// Explained counts the anomalies `goroce dump --explain` found in a
	// loss cell's capture, ExplainedBy its retransmissions by cause, and
	// Completed the operations of the data flow its verdict counts completed.
	Explained   int
	ExplainedBy map[string]int
	Completed   int
	// MADs counts the packets to QP1 (the CM's REQ, REP, RTU, DREQ, DREP,
	// SIDR_REQ, SIDR_REP, REJ, MRA).
	MADs int
}

// gsiQPN is QP1, the GSI: where every CM MAD goes.
const gsiQPN = 1

// Result statuses.
const (
	StatusPass = "pass"
	StatusFail = "FAIL"
	StatusSkip = "skip"
)

// Matrix collects the results of a run.
type Matrix struct {
	Bin  string // the goroce binary (for dump)
	Peer string // "goroce" or "vm" (VM↔VM self-test)
	Dir  string // where captures go

	mu      sync.Mutex
	results []*CellResult
	started time.Time
}

// NewMatrix starts a report; bin is the goroce binary.
func NewMatrix(bin, peer, dir string) *Matrix {
	return &Matrix{Bin: bin, Peer: peer, Dir: dir, started: time.Now()}
}

// Results returns the results so far, in run order.
func (m *Matrix) Results() []*CellResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*CellResult(nil), m.results...)
}

func (m *Matrix) add(r *CellResult) {
	m.mu.Lock()
	m.results = append(m.results, r)
	m.mu.Unlock()
}

// forget drops r, an attempt run again, from the results.
func (m *Matrix) forget(r *CellResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.results = slices.DeleteFunc(m.results, func(x *CellResult) bool { return x == r })
}

// noRNRProblem is judge's problem for an RNR cell that saw no RNR NAK.
const noRNRProblem = "no RNR NAK (the cell is built to provoke them)"

// Skip records a skipped cell.
func (m *Matrix) Skip(c Cell, d Dir, mtu int, reason string) *CellResult {
	r := &CellResult{Cell: c.Name, Dir: d, MTU: mtu, Status: StatusSkip, Reason: reason, Note: c.Note}
	m.add(r)
	return r
}

var safeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Run runs cell c in direction d between gor (the goroce side) and rxe (VM
// 0), captured on h's bridge, and judges it. Problems are returned in the
// result (the caller decides how to report them); t gets progress logs.
func (m *Matrix) Run(t testing.TB, h *Harness, c Cell, d Dir, gor, rxe Endpoint) *CellResult {
	r := &CellResult{Cell: c.Name, Dir: d, MTU: h.MTU(), Note: c.Note}
	m.add(r)
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	defer func() {
		if len(r.Problems) > 0 {
			r.Status, r.Reason = StatusFail, r.Problems[0]
		} else {
			r.Status = StatusPass
		}
	}()

	if c.VMSetup != "" {
		if res := h.Run(0, c.VMSetup, time.Minute); !res.OK() {
			fail("VM setup failed: %s", res)
			return r
		}
	}
	if c.VMTeardown != "" {
		defer func() {
			if res := h.Run(0, c.VMTeardown, time.Minute); !res.OK() {
				fail("VM teardown failed: %s", res)
			}
		}()
	}

	r.Pcap = filepath.Join(m.Dir, fmt.Sprintf("%d-%s-%s.pcap", h.MTU(), safeName.ReplaceAllString(c.Name, "_"),
		map[Dir]string{GoroceClient: "goroce-client", RXEClient: "rxe-client"}[d]))
	capture, err := h.Capture(r.Pcap, captureFilterMatrix)
	if err != nil {
		fail("capture: %v", err)
		return r
	}
	server, client := rxe, gor
	if d == RXEClient {
		server, client = gor, rxe
	}
	env := func(e Endpoint) []string {
		if e.Impl() == "goroce" {
			return c.GoroceEnv
		}
		return nil
	}
	args := func(e Endpoint, role []string) []string {
		a := append(append([]string(nil), c.Args...), role...)
		if e.Impl() == "goroce" {
			a = append(a, c.GoroceArgs...)
		}
		return a
	}
	t0 := time.Now()
	sp, err := server.Start(c.Tool, args(server, c.Server), netip.Addr{}, env(server))
	if err != nil {
		capture.Stop()
		fail("server: %v", err)
		return r
	}
	if c.Tool.CM != nil {
		// No TCP listener: a stock server's rdma_cm listener is waited
		// for (cmListenWaiter); goroce's gets a head start. The client
		// retries a refused connection in any case.
		if w, ok := server.(cmListenWaiter); ok {
			if err := w.WaitCMListen(c.Tool, 90*time.Second); err != nil {
				sp.Kill()
				r.Server = sp.Wait(5 * time.Second)
				capture.Stop()
				fail("%s: %v\n%s", server.Label(), err, r.Server)
				return r
			}
		} else {
			time.Sleep(time.Second)
		}
		if !sp.Running() {
			r.Server = sp.Wait(5 * time.Second)
			capture.Stop()
			fail("%s ended before the client started:\n%s", server.Label(), r.Server)
			return r
		}
	} else if err := server.WaitListen(toolPort, sp, 90*time.Second); err != nil {
		sp.Kill()
		r.Server = sp.Wait(5 * time.Second)
		capture.Stop()
		fail("%s: %v\n%s", server.Label(), err, r.Server)
		return r
	}
	cp, err := client.Start(c.Tool, args(client, c.Client), server.IP(), env(client))
	if err != nil {
		sp.Kill()
		r.Server = sp.Wait(5 * time.Second)
		capture.Stop()
		fail("client: %v", err)
		return r
	}
	if c.InterruptClient > 0 {
		time.Sleep(c.InterruptClient)
		if err := cp.Interrupt(); err != nil {
			fail("interrupting the client: %v", err)
		}
	}
	r.Client = cp.Wait(180 * time.Second)
	r.Server = sp.Wait(60 * time.Second)
	r.Elapsed = time.Since(t0)
	stats, err := capture.Stop()
	if err != nil {
		fail("%v", err)
	}
	for _, p := range []struct {
		who string
		e   Endpoint
		res Result
	}{{"server", server, r.Server}, {"client", client, r.Client}} {
		interrupted := c.InterruptClient > 0 && p.who == "client" && p.e.Impl() == "rxe" && p.res.Err == nil && p.res.ExitCode == 130
		switch {
		case !p.res.OK() && !interrupted:
			fail("%s %s did not succeed:\n%s", p.who, p.e.Label(), p.res)
		case c.Tool.Done != "" && !(p.who == "server" && c.Tool.SilentServer) && !strings.Contains(p.res.Stdout+p.res.Stderr, c.Tool.Done):
			fail("%s %s printed no %q line:\n%s", p.who, p.e.Label(), c.Tool.Done, p.res)
		}
	}
	if stats.DroppedByKernel > 0 {
		fail("tcpdump dropped %d packets: the capture is incomplete", stats.DroppedByKernel)
	}

	rep, err := RunDump(m.Bin, r.Pcap)
	if err != nil {
		fail("goroce dump: %v", err)
		return r
	}
	impls := map[netip.Addr]string{gor.IP(): gor.Impl(), rxe.IP(): rxe.Impl()}
	m.judge(r, rep, c.Expect, impls)
	if !c.Expect.Loss && !c.Expect.RNR {
		r.Profiles = Profiles(r.Pcap, impls)
	}
	// UC retransmits nothing: there is no recovery to explain (judgeUC
	// counts the loss instead).
	if c.Expect.Loss && !c.Expect.UC || r.RXERNRNAKs > 0 {
		ex, err := RunDump(m.Bin, r.Pcap, "--explain")
		if err != nil {
			fail("goroce dump --explain: %v", err)
			return r
		}
		causes := lossCauses
		if !c.Expect.Loss {
			causes = rnrRecoveryCauses
		}
		if c.Tool.CM != nil {
			// rping's server is a requester too (READ, WRITE, SEND).
			judgeExplainFlows(r, &ex.Summary, causes)
		} else {
			// The bw tools' client is the requester of the one data QP.
			judgeExplain(r, &ex.Summary, client.IP().String(), server.IP().String(), causes)
		}
	}
	if tos := c.Expect.TOS; tos != nil {
		for _, impl := range []string{gor.Impl(), rxe.Impl()} {
			if got := r.Profiles[impl]["IPv4 TOS"]; got != strconv.Itoa(int(*tos)) {
				fail("%s sent IPv4 TOS %q, want %d (the traffic class)", impl, got, *tos)
			}
		}
	}
	return r
}

const captureFilterMatrix = "udp port 4791 or tcp"
