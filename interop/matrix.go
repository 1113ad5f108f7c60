//go:build linux

package interop

// The interoperability matrix: the stock rdma-core and perftest tools run by
// rxe in a VM against goroce's own tools on the host side, in both roles,
// each run captured on the bridge and judged from `goroce dump --json` of
// that capture. TestMatrix (matrix_test.go) lists the cells; this file is the
// runner, the judge and the report (docs/interop.md).
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

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/dumpjson"
	"github.com/goroce/goroce/internal/pcapfile"
)

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

// Endpoint runs one side of a cell: rxe in a VM, or goroce on the host side.
type Endpoint interface {
	Impl() string // "rxe" or "goroce"
	Label() string
	IP() netip.Addr
	// Start starts the tool; an invalid peer makes it a server.
	Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error)
	// WaitListen waits until something listens on TCP port (the server is
	// ready), giving up early when p has ended.
	WaitListen(port int, p Proc, timeout time.Duration) error
}

// Proc is a running tool.
type Proc interface {
	Wait(timeout time.Duration) Result
	Kill()
	Running() bool
	// Interrupt sends SIGINT (to the whole job in a VM).
	Interrupt() error
}

// VMEndpoint is a stock tool in a VM.
type VMEndpoint struct {
	H  *Harness
	VM int
	// AsGoroce labels it "goroce" (the VM↔VM self-test of the runner).
	AsGoroce bool
}

func (e VMEndpoint) Impl() string {
	if e.AsGoroce {
		return "goroce"
	}
	return "rxe"
}
func (e VMEndpoint) Label() string  { return fmt.Sprintf("rxe (vm%d %s)", e.VM, e.IP()) }
func (e VMEndpoint) IP() netip.Addr { return e.H.VMIP(e.VM) }

// ShellQuote quotes s for bash when it holds anything but safe characters.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/+%@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (e VMEndpoint) Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error) {
	if tool.CM != nil {
		return e.startCM(tool, args, peer)
	}
	words := append([]string{tool.RXE, tool.GIDFlag, "1"}, args...)
	if peer.IsValid() {
		words = append(words, peer.String())
	}
	for i, w := range words {
		words[i] = ShellQuote(w)
	}
	return vmProc{e.H.Start(e.VM, strings.Join(words, " "))}, nil
}

// cmWords is an rdma_cm tool's command line: the role, the address flag
// with the server's address (its own on the server), the cell's flags,
// and for perftest the GID flag and the positional host.
func cmWords(tool Tool, name string, args []string, self, peer netip.Addr) []string {
	c := tool.CM
	words := []string{name}
	if tool.GIDFlag != "" {
		words = append(words, tool.GIDFlag, "1")
	}
	if peer.IsValid() {
		words = append(words, c.ClientArgs...)
		if c.ClientAddrFlag != "" {
			words = append(words, c.ClientAddrFlag, peer.String())
		}
	} else {
		words = append(words, c.ServerArgs...)
		if c.ServerAddrFlag != "" {
			words = append(words, c.ServerAddrFlag, self.String())
		}
	}
	words = append(words, args...)
	if peer.IsValid() && c.ClientAddrFlag == "" {
		words = append(words, peer.String())
	}
	return words
}

// cmClientRetries bounds the stock client's attempts while the server is
// not listening yet (0.25 s apart).
const cmClientRetries = 60

// startCM starts a stock rdma_cm tool; a client is retried while its
// output says the connection was refused (CMTool.Refused).
func (e VMEndpoint) startCM(tool Tool, args []string, peer netip.Addr) (Proc, error) {
	words := cmWords(tool, tool.RXE, args, e.IP(), peer)
	for i, w := range words {
		words[i] = ShellQuote(w)
	}
	cmd := strings.Join(words, " ")
	if peer.IsValid() {
		// Each attempt's output goes to a file; the last one is shown.
		cmd = fmt.Sprintf("for i in $(seq %d); do %s > /tmp/cm.out 2>&1; rc=$?; "+
			"if [ $rc -eq 0 ] || ! grep -Eq %s /tmp/cm.out; then break; fi; sleep 0.25; done; cat /tmp/cm.out; exit $rc",
			cmClientRetries, cmd, ShellQuote(tool.CM.Refused))
	}
	return vmProc{e.H.Start(e.VM, cmd)}, nil
}

func (e VMEndpoint) WaitListen(port int, p Proc, timeout time.Duration) error {
	return e.H.WaitListen(e.VM, port, timeout)
}

// cmListenWaiter is an endpoint that can tell when its rdma_cm server
// listens.
type cmListenWaiter interface {
	WaitCMListen(tool Tool, timeout time.Duration) error
}

func (e VMEndpoint) WaitCMListen(tool Tool, timeout time.Duration) error {
	return e.H.WaitCMListen(e.VM, tool.RXE, timeout)
}

type vmProc struct{ *Job }

func (p vmProc) Running() bool { return p.Job.Running() }

func (p vmProc) Interrupt() error { return p.Job.Signal("INT") }

// GoroceEndpoint is goroce's tool in the host namespace on HostIface.
type GoroceEndpoint struct {
	H   *Harness
	Bin string
}

func (e GoroceEndpoint) Impl() string   { return "goroce" }
func (e GoroceEndpoint) Label() string  { return fmt.Sprintf("goroce (%s %s)", e.H.HostIface(), e.IP()) }
func (e GoroceEndpoint) IP() netip.Addr { return e.H.HostIP() }

func (e GoroceEndpoint) Start(tool Tool, args []string, peer netip.Addr, env []string) (Proc, error) {
	argv := append([]string{e.Bin, tool.Goroce, "-d", e.H.HostIface(), tool.GIDFlag, "1"}, args...)
	if peer.IsValid() {
		argv = append(argv, peer.String())
	}
	if c := tool.CM; c != nil {
		dev := c.DevFlag
		if dev == "" {
			dev = "-d"
		}
		argv = append([]string{e.Bin}, cmWords(tool, tool.Goroce, args, e.IP(), peer)...)
		argv = append(argv[:2], append([]string{dev, e.H.HostIface()}, argv[2:]...)...)
		if peer.IsValid() {
			// Retry a refused connection while the server starts.
			argv = append(argv[:2], append([]string{"--timeout", "120"}, argv[2:]...)...)
		}
	}
	if len(env) > 0 {
		argv = append(append([]string{"env"}, env...), argv...)
	}
	p, err := e.H.HostStart(argv[0], argv[1:]...)
	if err != nil {
		return nil, err
	}
	return hostProc{p}, nil
}

type hostProc struct{ *HostProc }

// Interrupt signals the tool itself: `ip netns exec` and `env` exec it.
func (p hostProc) Interrupt() error { return p.Cmd.Process.Signal(syscall.SIGINT) }

func (p hostProc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// WaitListen polls the host namespace's TCP tables (/proc/thread-self/net
// on a thread inside it) for a listener on port.
func (e GoroceEndpoint) WaitListen(port int, p Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var found bool
		err := e.H.HostDo(func() error {
			var err error
			found, err = tcpListening(port)
			return err
		})
		switch {
		case err != nil:
			return err
		case found:
			return nil
		case !p.Running():
			return fmt.Errorf("interop: goroce server ended before listening on TCP port %d", port)
		case time.Now().After(deadline):
			return fmt.Errorf("interop: nothing listens on TCP port %d in %s after %v", port, e.H.HostNS(), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tcpListening reads the calling thread's namespace's TCP tables.
func tcpListening(port int) (bool, error) {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return false, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
				return true, nil
			}
		}
	}
	return false, nil
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

// StrictRetransmissions makes any retransmission in a cell that expects no
// trouble a failure (GOROCE_INTEROP_STRICT_RETRANS=1). By default a clean
// cell tolerates retransmissions that come with no NAK and no PSN gap: they
// are the requester's ACK timeout firing while the responder's VM was not
// scheduled (TCG on a loaded 2-core host), and rxe↔rxe runs show the same
// (testdata/rxe/rc_pingpong.pcap: 4 per side, the duplicates re-ACKed). They
// are counted in the table and logged.
var StrictRetransmissions = os.Getenv("GOROCE_INTEROP_STRICT_RETRANS") != ""

// judge applies the capture checks to r; impls names the senders.
func (m *Matrix) judge(r *CellResult, rep *dumpjson.Report, e Expect, impls map[netip.Addr]string) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	s := rep.Summary
	r.Packets = s.RoCE
	rxeRNR, rxeSeq := 0, 0 // sent by rxe
	for _, f := range s.Flows {
		line := fmt.Sprintf("%s > %s dqpn 0x%x: %d packets", f.Src, f.Dst, f.DQPN, f.Packets)
		if f.DQPN == gsiQPN {
			// Connection management (CM MADs, UD SENDs to QP1): expected
			// in the rdma_cm cells, and its PSNs are no RC sequence (a lost
			// MAD is a gap, its retry a new PSN).
			r.MADs += f.Packets
			r.Summaries = append(r.Summaries, line+" (CM MADs on QP1)")
			continue
		}
		if q := f.Requests; q != nil {
			r.Retrans += q.Retransmitted
			if q.Retransmitted > 0 {
				if r.RetransBy == nil {
					r.RetransBy = map[string]int{}
				}
				who := f.Src
				if a, err := netip.ParseAddr(f.Src); err == nil && impls[a] != "" {
					who = impls[a]
				}
				r.RetransBy[who] += q.Retransmitted
			}
			r.Gaps += q.Gaps
			line += fmt.Sprintf("; requests %d psn %d..%d gaps %d retransmitted %d late %d", q.Packets, q.FirstPSN, q.LastPSN, q.Gaps, q.Retransmitted, q.Late)
		}
		if p := f.Responses; p != nil {
			if a, err := netip.ParseAddr(f.Src); err == nil && impls[a] == "rxe" {
				rxeRNR += p.RNRNAKs
				rxeSeq += p.NAKs[seqNAK]
			}
			for k, n := range p.NAKs {
				r.NAKs += n
				if r.NAKKinds == nil {
					r.NAKKinds = map[string]int{}
				}
				r.NAKKinds[k] += n
			}
			r.RNRNAKs += p.RNRNAKs
			if e.RNRTimer != 0 && p.RNRNAKs > 0 && (p.RNRTimer == nil || *p.RNRTimer != e.RNRTimer) {
				fail("%s > %s: RNR NAK timer code %v, want %d (min_rnr_timer)", f.Src, f.Dst, derefU8(p.RNRTimer), e.RNRTimer)
			}
			line += fmt.Sprintf("; responses %d acks %d naks %v rnr_naks %d", p.Packets, p.ACKs, p.NAKs, p.RNRNAKs)
		}
		r.Summaries = append(r.Summaries, line)
	}
	if s.RoCE == 0 {
		fail("the capture holds no RoCEv2 packet")
	}
	if s.ICRCFailures > 0 {
		fail("%d RoCEv2 packets with a bad ICRC", s.ICRCFailures)
	}
	if s.Malformed > 0 {
		fail("%d malformed RoCEv2 packets", s.Malformed)
	}
	// A sequence NAK follows a lost request (loss) and also an RNR NAK:
	// the requester has sent the next packets before the RNR NAK reached it,
	// and the responder, which dropped the RNR'd packet, NAKs the first of
	// them once (rxe_resp.c check_psn; seen rxe↔rxe). Other NAKs are
	// errors in every cell.
	//
	// An rxe responder in a cell built for no RNR NAK may still run out of
	// receives: the stock tool reposts each one only after polling its
	// completion, and under TCG on 2 loaded cores its process can go
	// unscheduled while rxe's kernel side consumes a burst (seen: send_bw
	// --use-srq -q 2 goroce-client, 2 RNR NAKs and 2 sequence NAKs, one
	// pair per QP). That is rxe's correct answer and goroce's pace, not a
	// fault of either, so it is a warning when every RNR NAK came from rxe
	// and its sequence NAKs are no more than one per RNR NAK; the caller
	// then checks goroce's recovery with --explain (rnrRecoveryCauses).
	// RNR NAKs from goroce stay failures.
	rxeDry := !e.RNR && !e.Loss && rxeRNR > 0 && rxeRNR == r.RNRNAKs &&
		rxeSeq == r.NAKKinds[seqNAK] && rxeSeq <= rxeRNR
	seqOK := e.Loss || e.RNR || rxeDry
	for k, n := range r.NAKKinds {
		if k != seqNAK || !seqOK {
			fail("%d NAKs %s (not expected)", n, k)
		}
	}
	if !e.Loss {
		if r.Gaps > 0 {
			fail("%d PSN gaps (none expected)", r.Gaps)
		}
		if r.Retrans > 0 && !e.RNR && !rxeDry {
			switch {
			case StrictRetransmissions || r.Gaps > 0:
				fail("%d retransmitted PSNs (none expected; by %v)", r.Retrans, r.RetransBy)
			default:
				r.Warnings = append(r.Warnings, fmt.Sprintf("%d timeout retransmissions (by %s) without NAK or gap", r.Retrans, byString(r.RetransBy)))
			}
		}
	}
	switch {
	case e.RNR && r.RNRNAKs == 0:
		fail(noRNRProblem)
	case rxeDry:
		r.RXERNRNAKs = rxeRNR
		r.Warnings = append(r.Warnings, fmt.Sprintf("rxe's receive queue ran dry: %d RNR NAKs and %d sequence NAKs from rxe", rxeRNR, rxeSeq))
	case !e.RNR && !e.Loss && r.RNRNAKs > 0:
		fail("%d RNR NAKs (none expected)", r.RNRNAKs)
	}
	if e.UDQKey != 0 {
		judgeUD(r, rep, e.UDQKey)
	}
	if e.UC {
		judgeUC(r, rep)
		if e.Loss {
			// UC never retransmits: a repeated PSN is a fault; a gap is a
			// lost packet, whose message the receiver dropped.
			if r.Retrans > 0 {
				fail("UC cell: %d retransmitted PSNs (UC retransmits nothing)", r.Retrans)
			}
			r.Warnings = append(r.Warnings, fmt.Sprintf("UC cell: %d PSN gaps (packets lost on purpose; their messages dropped, not retransmitted)", r.Gaps))
		}
	}
	if e.PathMTU > 0 {
		largest := 0
		for _, p := range rep.Packets {
			if p.PayloadLen != nil && *p.PayloadLen > largest {
				largest = *p.PayloadLen
			}
		}
		if largest != e.PathMTU {
			fail("largest RoCEv2 payload %d bytes, want the path MTU %d", largest, e.PathMTU)
		}
	}
	if e.Atomic {
		n, probs := CheckAtomics(rep.Packets, !e.Loss)
		r.Atomics = n
		for _, p := range probs {
			fail("atomics: %s", p)
		}
		if n == 0 {
			fail("atomics: no operation hit an address twice, nothing to check (use more iterations)")
		}
	}
}

// judgeUD checks a UD cell's packets: UD SENDs only, the expected Q_Key,
// AckReq clear (as rxe sends them), and no responses at all.
func judgeUD(r *CellResult, rep *dumpjson.Report, qkey uint32) {
	bad := map[string]int{}
	for _, p := range rep.Packets {
		switch {
		case p.Opcode != "UD_SEND_ONLY" && p.Opcode != "UD_SEND_ONLY_WITH_IMMEDIATE":
			bad["opcode "+p.Opcode]++
		case p.DETH == nil || p.DETH.QKey != qkey:
			bad["DETH Q_Key"]++
		case p.AckReq != nil && *p.AckReq:
			bad["AckReq set"]++
		}
	}
	for what, n := range bad {
		r.Problems = append(r.Problems, fmt.Sprintf("UD cell: %d packets with %s (want UD SEND, Q_Key %#x, AckReq clear)", n, what, qkey))
	}
	for _, f := range rep.Summary.Flows {
		if f.Responses != nil && f.Responses.Packets > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("UD cell: %s > %s: %d responses (UD has none)", f.Src, f.Dst, f.Responses.Packets))
		}
	}
}

// judgeUC checks a UC cell's packets: UC SEND/WRITE requests only (QP1's
// CM MADs aside) and no responses at all. AckReq is not judged: IBTA lets
// a UC requester set it and the responder ignores it (rxe sent it on UC
// until its requester learnt otherwise, ack_req for RC only); how many
// packets carried it is noted.
func judgeUC(r *CellResult, rep *dumpjson.Report) {
	bad := map[string]int{}
	ackReq := 0
	for _, p := range rep.Packets {
		if p.DQPN != nil && *p.DQPN == gsiQPN {
			continue
		}
		if !strings.HasPrefix(p.Opcode, "UC_SEND_") && !strings.HasPrefix(p.Opcode, "UC_RDMA_WRITE_") {
			bad[p.Opcode]++
		}
		if p.AckReq != nil && *p.AckReq {
			ackReq++
		}
	}
	for op, n := range bad {
		r.Problems = append(r.Problems, fmt.Sprintf("UC cell: %d packets %s (want UC SEND/WRITE requests only)", n, op))
	}
	for _, f := range rep.Summary.Flows {
		if f.DQPN != gsiQPN && f.Responses != nil && f.Responses.Packets > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("UC cell: %s > %s: %d responses (UC has none)", f.Src, f.Dst, f.Responses.Packets))
		}
	}
	if ackReq > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("UC cell: %d packets with AckReq set (ignored by UC responders)", ackReq))
	}
}

func derefU8(p *uint8) any {
	if p == nil {
		return "none"
	}
	return *p
}

func byString(m map[string]int) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// Retransmission causes of `goroce dump --explain` that packet loss
// explains (cmd/goroce/internal/dump/analysis.go Cause*): the responder's
// sequence NAK, the requester's ACK timeout, a gap in the READ responses,
// and an ACK passing an unanswered READ (implicit NAK).
var lossCauses = map[string]bool{
	"sequence_nak": true, "timeout": true, "read_response_gap": true, "implicit_nak": true,
}

// rnrRecoveryCauses are the causes of the retransmissions that follow an
// RNR NAK in a cell built for none: the RNR'd request and those behind it
// (rnr_nak), a sequence NAK for one behind it (sequence_nak), and the
// timeouts every clean cell tolerates (StrictRetransmissions).
var rnrRecoveryCauses = map[string]bool{"rnr_nak": true, "sequence_nak": true, "timeout": true}

// seqNAK is dump's name of the PSN sequence error NAK.
const seqNAK = "PSN_SEQUENCE_ERROR"

// causeWord names a set of causes in judgeExplain's problems.
func causeWord(causes map[string]bool) string {
	if causes["rnr_nak"] {
		return "an RNR NAK"
	}
	return "loss"
}

// explained counts the retransmissions whose cause is in causes. A READ
// requester that sees a gap in the responses re-requests at once
// (read_response_gap), so a READ cell may recover every loss that way
// without a single timeout or NAK.
func explained(by map[string]int, causes map[string]bool) int {
	n := 0
	for cause, k := range by {
		if causes[cause] {
			n += k
		}
	}
	return n
}

// judgeExplain checks the --explain analysis of a loss cell's capture
// after judge (r.Retrans), or of a clean cell whose rxe side ran out of
// receives: when the capture holds retransmitted PSNs the anomalies
// include retransmissions explained by causes (lossCauses, or
// rnrRecoveryCauses); every retransmission is so explained and lies in a
// data flow (a verdict with operations from src, the requester, to dst:
// one per QP, send_bw -q 2 has two); and every data flow's operations
// completed. A capture may hold no retransmission at all: when the
// dropping side is the responder of a WRITE stream, it loses only
// coalesced ACKs, which the next ACK covers, and the capture point (after
// the drop) sees nothing to explain.
func judgeExplain(r *CellResult, s *dumpjson.Summary, src, dst string, causes map[string]bool) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	r.Explained = len(s.Anomalies)
	r.ExplainedBy = map[string]int{}
	isData := func(v dumpjson.Verdict) bool {
		return v.Src == src && v.Dst == dst && v.DQPN != gsiQPN && v.Operations > 0
	}
	data := map[uint32]bool{} // by DQPN
	for _, v := range s.Verdicts {
		if isData(v) {
			data[v.DQPN] = true
		}
	}
	if len(data) == 0 {
		fail("explain: no verdict for the data flow %s > %s", src, dst)
		return
	}
	for _, a := range s.Anomalies {
		if a.Kind != "retransmission" {
			continue
		}
		r.ExplainedBy[a.Cause]++
		if a.Src != src || a.Dst != dst || !data[a.DQPN] {
			fail("explain: retransmission in %s > %s dqpn %#x, outside the data flows %s > %s: %s",
				a.Src, a.Dst, a.DQPN, src, dst, a.Text)
		}
		if !causes[a.Cause] {
			fail("explain: retransmission with cause %q, not one %s explains: %s", a.Cause, causeWord(causes), a.Text)
		}
	}
	switch n := explained(r.ExplainedBy, causes); {
	case r.Retrans > 0 && n == 0:
		fail("explain: %d retransmitted PSNs but no retransmission explained by %s (causes %s; %d anomalies, retransmissions by cause: %s)",
			r.Retrans, causeWord(causes), setString(causes, func(c string) string { return c }), r.Explained, byString(r.ExplainedBy))
	case r.Retrans == 0 && len(r.ExplainedBy) > 0:
		fail("explain: retransmissions (%s) where the flow summary counts none", byString(r.ExplainedBy))
	}
	r.Completed = 0
	for _, v := range s.Verdicts {
		if !isData(v) {
			continue
		}
		r.Completed += v.Completed
		if v.Unanswered != 0 || v.Failed != 0 || v.Completed != v.Operations {
			fail("explain: data flow %s > %s dqpn %#x: %d operations, %d completed, %d failed, %d unanswered: %s",
				v.Src, v.Dst, v.DQPN, v.Operations, v.Completed, v.Failed, v.Unanswered, v.Text)
		}
	}
}

// dreqSenders are the IP addresses that sent the first DREQ of a
// connection in the capture (Connection.Messages: "DREQ>" from the active
// side, "DREQ<" from the passive one).
func dreqSenders(s *dumpjson.Summary) map[string]bool {
	ip := func(addr string) string {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			return ap.Addr().String()
		}
		return addr
	}
	out := map[string]bool{}
	for _, c := range s.Connections {
	messages:
		for _, m := range c.Messages {
			switch m {
			case "DREQ>":
				out[ip(c.Active)] = true
				break messages
			case "DREQ<":
				out[ip(c.Passive)] = true
				break messages
			}
		}
	}
	return out
}

// judgeExplainFlows is judgeExplain for a tool whose both ends are
// requesters (rping): every retransmission is explained by loss and lies in
// an RC flow, not in the CM's traffic on QP1 (which retries by sending
// anew), and every RC flow's operations completed.
func judgeExplainFlows(r *CellResult, s *dumpjson.Summary, causes map[string]bool) {
	fail := func(format string, a ...any) {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	r.Explained = len(s.Anomalies)
	r.ExplainedBy = map[string]int{}
	disconnectedBy := dreqSenders(s)
	flows := 0
	for _, v := range s.Verdicts {
		if v.DQPN == gsiQPN {
			continue
		}
		flows++
		r.Completed += v.Completed
		// The peer that disconnected may have taken the flow's last
		// operation and sent DREQ while the ACK of it was lost: nothing
		// retransmits to a QP that is gone (a stock rping client does
		// exactly that under loss). One such operation is allowed.
		lastLost := v.Unanswered == 1 && v.Completed == v.Operations-1 && disconnectedBy[v.Dst]
		if !lastLost && (v.Unanswered != 0 || v.Failed != 0 || v.Completed != v.Operations) {
			fail("explain: flow %s > %s dqpn %#x: %d operations, %d completed, %d failed, %d unanswered: %s",
				v.Src, v.Dst, v.DQPN, v.Operations, v.Completed, v.Failed, v.Unanswered, v.Text)
		}
	}
	if flows == 0 {
		fail("explain: no verdict for any RC flow")
	}
	for _, a := range s.Anomalies {
		if a.Kind != "retransmission" {
			continue
		}
		r.ExplainedBy[a.Cause]++
		if a.DQPN == gsiQPN {
			fail("explain: retransmission on QP1: %s", a.Text)
		}
		if !causes[a.Cause] {
			fail("explain: retransmission with cause %q, not one %s explains: %s", a.Cause, causeWord(causes), a.Text)
		}
	}
	switch n := explained(r.ExplainedBy, causes); {
	case r.Retrans > 0 && n == 0:
		fail("explain: %d retransmitted PSNs but no retransmission explained by %s (causes %s; %d anomalies, retransmissions by cause: %s)",
			r.Retrans, causeWord(causes), setString(causes, func(c string) string { return c }), r.Explained, byString(r.ExplainedBy))
	case r.Retrans == 0 && len(r.ExplainedBy) > 0:
		fail("explain: retransmissions (%s) where the flow summary counts none", byString(r.ExplainedBy))
	}
}

// RunDump runs `bin dump --json [flags] pcap` and parses it.
func RunDump(bin, pcap string, flags ...string) (*dumpjson.Report, error) {
	var stderr bytes.Buffer
	c := exec.Command(bin, append(append([]string{"dump", "--json"}, flags...), pcap)...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%s dump --json %s: %v: %s", bin, pcap, err, stderr.Bytes())
	}
	return dumpjson.Read(bytes.NewReader(out))
}

// CheckAtomics follows every 8-byte location the atomics of a capture touch.
// Requests are taken in PSN order (the order a responder executes them) and
// matched to their ATOMIC_ACKNOWLEDGE by PSN; from the second operation on a
// location, the original value returned must be what the previous operation
// left: orig+add for FETCH_ADD, swap if orig == compare for COMPARE_SWAP
// (IBTA 9.4.5; rxe_resp.c atomic_reply). A duplicate response must repeat
// the first one's value (rxe answers replays from its saved result). With
// strict, a request left unanswered is a problem too. It returns how many
// original values were checked against the chain.
func CheckAtomics(pkts []dumpjson.Packet, strict bool) (int, []string) {
	type key struct {
		src, dst string
		psn      uint32
	}
	type req struct {
		key
		fadd         bool
		va           uint64
		rkey         uint32
		swapAdd, cmp uint64
	}
	var reqs []req
	seen := map[key]bool{}
	orig := map[key]uint64{}
	var probs []string
	for _, p := range pkts {
		if p.PSN == nil {
			continue
		}
		switch {
		case (p.Opcode == "RC_FETCH_ADD" || p.Opcode == "RC_COMPARE_SWAP") && p.AtomicETH != nil:
			k := key{p.Src, p.Dst, *p.PSN}
			if seen[k] {
				continue
			}
			seen[k] = true
			a := p.AtomicETH
			reqs = append(reqs, req{k, p.Opcode == "RC_FETCH_ADD", uint64(a.VA), a.RKey, uint64(a.SwapAdd), uint64(a.Compare)})
		case p.Opcode == "RC_ATOMIC_ACKNOWLEDGE" && p.AtomicAckETH != nil && p.AETH != nil && p.AETH.Kind == "ACK":
			k := key{p.Dst, p.Src, *p.PSN} // keyed as the request: requester → responder
			v := uint64(p.AtomicAckETH.Orig)
			if old, ok := orig[k]; ok {
				if old != v && len(probs) < 10 {
					probs = append(probs, fmt.Sprintf("duplicate ATOMIC_ACK psn %d: orig %#x, first answer said %#x", k.psn, v, old))
				}
				continue
			}
			orig[k] = v
		}
	}
	// PSN order per requester→responder pair, relative to its first request.
	base := map[[2]string]uint32{}
	for _, r := range reqs {
		if _, ok := base[[2]string{r.src, r.dst}]; !ok {
			base[[2]string{r.src, r.dst}] = r.psn
		}
	}
	rel := func(r req) uint32 { return (r.psn - base[[2]string{r.src, r.dst}]) & 0xFFFFFF }
	sort.SliceStable(reqs, func(i, j int) bool {
		if reqs[i].src != reqs[j].src || reqs[i].dst != reqs[j].dst {
			return reqs[i].src+reqs[i].dst < reqs[j].src+reqs[j].dst
		}
		return rel(reqs[i]) < rel(reqs[j])
	})
	type loc struct {
		dst  string
		rkey uint32
		va   uint64
	}
	value := map[loc]uint64{}
	checked := 0
	for _, r := range reqs {
		o, ok := orig[r.key]
		l := loc{r.dst, r.rkey, r.va}
		if !ok {
			if strict && len(probs) < 10 {
				probs = append(probs, fmt.Sprintf("%s → %s psn %d: no ATOMIC_ACKNOWLEDGE", r.src, r.dst, r.psn))
			}
			delete(value, l) // the location's value is unknown from here
			continue
		}
		if want, ok := value[l]; ok {
			checked++
			if o != want && len(probs) < 10 {
				probs = append(probs, fmt.Sprintf("va %#x psn %d: original value %#x, the earlier operations imply %#x", r.va, r.psn, o, want))
			}
		}
		switch {
		case r.fadd:
			value[l] = o + r.swapAdd
		case o == r.cmp:
			value[l] = r.swapAdd
		default:
			value[l] = o
		}
	}
	return checked, probs
}

// WireProfile describes how one implementation fills the headers of the
// frames it sent in a capture: field → observed value(s) or class.
type WireProfile map[string]string

// Profiles reads a capture and builds a WireProfile per implementation
// (senders are recognised by their IPv4 source address in impls).
func Profiles(pcap string, impls map[netip.Addr]string) map[string]WireProfile {
	f, err := os.Open(pcap)
	if err != nil {
		return nil
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		return nil
	}
	var frames []roceFrame
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if fr, ok := parseRoCEFrame(rec.Data); ok {
			frames = append(frames, fr)
		}
	}
	return profilesOf(frames, impls)
}

// roceFrame is what the wire profile needs of an IPv4 RoCEv2 frame.
//
// parseRoCEFrame, which fills it, is deliberately a second RoCEv2 parser,
// independent of package wire: the profiles compare the frames goroce
// sends with the frames rxe sends, and reading both through goroce's own
// parser would hide any field goroce builds and parses wrong the same way.
// It reads the fixed offsets of IBTA vol. 1 §9.2 (BTH), §9.3.4 (AETH) and
// RFC 791 directly, plus what wire does not expose (IP ID, DF, padding
// after the datagram, reserved BTH bits). TestOracleAgreesWithWire checks
// the two parsers agree on rxe's own captures.
type roceFrame struct {
	src, dst   netip.Addr
	ttl, tos   uint8
	df         bool
	ihl        int
	id         uint16
	sport      uint16
	udpCsum    uint16
	frameExtra int // bytes after the IP datagram (Ethernet padding)
	op         byte
	se, migreq bool
	tver, pad  uint8
	pkey       uint16
	fecn, becn bool
	resv       bool // any reserved BTH bit set
	dqpn       uint32
	ackreq     bool
	psn        uint32
	hasAETH    bool
	syndrome   uint8
	msn        uint32
}

func parseRoCEFrame(fr []byte) (roceFrame, bool) {
	var x roceFrame
	if len(fr) < 14 || binary.BigEndian.Uint16(fr[12:]) != etherIPv4 {
		return x, false
	}
	ipb := fr[14:]
	if len(ipb) < 20 || ipb[0]>>4 != 4 || ipb[9] != 17 {
		return x, false
	}
	x.ihl = int(ipb[0]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(ipb[2:]))
	if x.ihl < 20 || tot < x.ihl+8+12 || tot > len(ipb) {
		return x, false
	}
	x.frameExtra = len(ipb) - tot
	x.tos, x.ttl = ipb[1], ipb[8]
	x.id = binary.BigEndian.Uint16(ipb[4:])
	x.df = ipb[6]&0x40 != 0
	x.src = netip.AddrFrom4([4]byte(ipb[12:16]))
	x.dst = netip.AddrFrom4([4]byte(ipb[16:20]))
	u := ipb[x.ihl:tot]
	if binary.BigEndian.Uint16(u[2:]) != rocePort {
		return x, false
	}
	x.sport = binary.BigEndian.Uint16(u[0:])
	x.udpCsum = binary.BigEndian.Uint16(u[6:])
	b := u[8:]
	x.op = b[0]
	x.se, x.migreq = b[1]&0x80 != 0, b[1]&0x40 != 0
	x.pad, x.tver = (b[1]>>4)&3, b[1]&0xf
	x.pkey = binary.BigEndian.Uint16(b[2:])
	x.fecn, x.becn = b[4]&0x80 != 0, b[4]&0x40 != 0
	x.resv = b[4]&0x3f != 0 || b[8]&0x7f != 0
	x.dqpn = uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	x.ackreq = b[8]&0x80 != 0
	x.psn = uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
	// AETH follows the BTH directly in ACK, ATOMIC_ACK and READ_RESPONSE
	// FIRST/LAST/ONLY (IBTA table 38).
	switch x.op {
	case 0x0d, 0x0f, 0x10, 0x11, 0x12:
		if len(b) >= 16 {
			x.hasAETH = true
			x.syndrome = b[12]
			x.msn = uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
		}
	}
	return x, true
}

// Opcode classes.
func isRequest(op byte) bool {
	return op <= 0x0c || op == 0x13 || op == 0x14 || op == 0x16 || op == 0x17
}
func isResponse(op byte) bool { return op >= 0x0d && op <= 0x12 }
func endsMessage(op byte) bool {
	switch op {
	case 0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x16, 0x17:
		return true
	}
	return false
}

// UDPSportFlowLabel and UDPSportHash32 restate, independently of package
// wire (RCSourcePort, UDSourcePort), the kernel's two choices of UDP source
// port, for the same reason as parseRoCEFrame: the profile judges goroce's
// ports against the kernel's formulas, not against goroce's copy of them.

// UDPSportFlowLabel is rdma_get_udp_sport(0, lqpn, rqpn) of newer rxe and
// mlx5: the symmetric flow label of both QPNs folded into 14 bits
// (include/rdma/ib_verbs.h rdma_calc_flow_label, rdma_flow_label_to_udp_sport).
func UDPSportFlowLabel(lqpn, rqpn uint32) uint16 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	fl := uint32(v & 0xFFFFF)
	return uint16(0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)))
}

// UDPSportHash32 is the older rxe default, 0xC000 + hash_32(qpn, 14).
func UDPSportHash32(qpn uint32) uint16 {
	return uint16(0xC000 + ((qpn * 0x61C88647) >> 18))
}

type counts struct{ yes, no int }

func (c counts) class() string {
	switch {
	case c.yes > 0 && c.no == 0:
		return "always"
	case c.yes == 0:
		return "never"
	}
	return "sometimes"
}

func setString[T comparable](m map[T]bool, format func(T) string) string {
	var s []string
	for v := range m {
		s = append(s, format(v))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func profilesOf(frames []roceFrame, impls map[netip.Addr]string) map[string]WireProfile {
	// The QPN of each address: what its peer puts in DestQP.
	qpnOf := map[netip.Addr]uint32{}
	for _, f := range frames {
		qpnOf[f.dst] = f.dqpn
	}
	type acc struct {
		ttl, tos, ihl               map[uint8]bool
		df, migreq, fecn, becn, rsv map[bool]bool
		tver                        map[uint8]bool
		pkey                        map[uint16]bool
		csum, sport, pad            map[string]bool
		lastID                      map[netip.Addr]uint16
		haveID                      map[netip.Addr]bool
		idClass                     map[string]bool
		ackreq                      map[byte]*counts
		aeth                        map[byte]*counts
		ackSyn                      map[uint8]bool
		ackPSNs                     map[uint32]bool
		ackReqsSeen                 int
		ackPSN                      counts
		msnOff                      map[string]bool
		se                          map[byte]*counts
	}
	accs := map[string]*acc{}
	get := func(impl string) *acc {
		a := accs[impl]
		if a == nil {
			a = &acc{ttl: map[uint8]bool{}, tos: map[uint8]bool{}, ihl: map[uint8]bool{}, df: map[bool]bool{},
				migreq: map[bool]bool{}, fecn: map[bool]bool{}, becn: map[bool]bool{}, rsv: map[bool]bool{},
				tver: map[uint8]bool{}, pkey: map[uint16]bool{}, csum: map[string]bool{}, sport: map[string]bool{},
				pad: map[string]bool{}, lastID: map[netip.Addr]uint16{}, haveID: map[netip.Addr]bool{},
				idClass: map[string]bool{}, ackreq: map[byte]*counts{}, aeth: map[byte]*counts{},
				ackSyn: map[uint8]bool{}, msnOff: map[string]bool{}, se: map[byte]*counts{}, ackPSNs: map[uint32]bool{}}
			accs[impl] = a
		}
		return a
	}
	cnt := func(m map[byte]*counts, op byte, yes bool) {
		c := m[op]
		if c == nil {
			c = &counts{}
			m[op] = c
		}
		if yes {
			c.yes++
		} else {
			c.no++
		}
	}
	// Requests by receiver, first transmission only, for ACK PSN and MSN.
	type reqInfo struct {
		ackreq, ends bool
	}
	reqs := map[[2]netip.Addr]map[uint32]reqInfo{} // [requester, responder] → psn
	for _, f := range frames {
		if isRequest(f.op) {
			k := [2]netip.Addr{f.src, f.dst}
			if reqs[k] == nil {
				reqs[k] = map[uint32]reqInfo{}
			}
			if _, ok := reqs[k][f.psn]; !ok {
				reqs[k][f.psn] = reqInfo{f.ackreq, endsMessage(f.op)}
			}
		}
	}
	// Message-ending request PSNs per pair, sorted, for the MSN a response implies.
	type pairReqs struct {
		base uint32
		ends []uint32 // relative PSNs
	}
	pairs := map[[2]netip.Addr]*pairReqs{}
	for _, f := range frames {
		if !isRequest(f.op) {
			continue
		}
		k := [2]netip.Addr{f.src, f.dst}
		if pairs[k] == nil {
			pairs[k] = &pairReqs{base: f.psn}
		}
	}
	for k, m := range reqs {
		p := pairs[k]
		for psn, ri := range m {
			if ri.ends {
				p.ends = append(p.ends, (psn-p.base)&0xFFFFFF)
			}
		}
		sort.Slice(p.ends, func(i, j int) bool { return p.ends[i] < p.ends[j] })
	}
	for _, f := range frames {
		impl, ok := impls[f.src]
		if !ok {
			continue
		}
		a := get(impl)
		a.ttl[f.ttl], a.tos[f.tos], a.ihl[uint8(f.ihl)] = true, true, true
		a.df[f.df], a.migreq[f.migreq], a.fecn[f.fecn], a.becn[f.becn], a.rsv[f.resv] = true, true, true, true, true
		a.tver[f.tver], a.pkey[f.pkey] = true, true
		if f.udpCsum == 0 {
			a.csum["0"] = true
		} else {
			a.csum["set"] = true
		}
		if f.frameExtra == 0 {
			a.pad["none"] = true
		} else {
			a.pad[fmt.Sprintf("%d bytes", f.frameExtra)] = true
		}
		lq, rq := qpnOf[f.src], f.dqpn
		switch f.sport {
		case UDPSportFlowLabel(lq, rq):
			a.sport["flow label of both QPNs (rdma_get_udp_sport)"] = true
		case UDPSportHash32(lq):
			a.sport["0xC000 + hash_32(own QPN, 14)"] = true
		default:
			a.sport[fmt.Sprintf("other (0x%04x for QPNs 0x%x, 0x%x)", f.sport, lq, rq)] = true
		}
		if a.haveID[f.dst] {
			switch d := f.id - a.lastID[f.dst]; {
			case f.id == 0 && a.lastID[f.dst] == 0:
				a.idClass["0"] = true
			case d == 0:
				a.idClass["constant"] = true
			case d >= 1 && d < 0x8000:
				a.idClass["increasing per packet"] = true
			default:
				a.idClass["not increasing"] = true
			}
		}
		a.haveID[f.dst], a.lastID[f.dst] = true, f.id
		if isRequest(f.op) {
			cnt(a.ackreq, f.op, f.ackreq)
			cnt(a.se, f.op, f.se)
		}
		if isResponse(f.op) {
			if f.op >= 0x0d && f.op <= 0x10 {
				cnt(a.aeth, f.op, f.hasAETH)
			}
			k := [2]netip.Addr{f.dst, f.src} // requester, responder
			if f.op == 0x11 && f.hasAETH && f.syndrome>>5 == 0 {
				a.ackPSNs[f.psn] = true
				a.ackSyn[f.syndrome] = true
				if ri, ok := reqs[k][f.psn]; ok && ri.ackreq {
					a.ackPSN.yes++
				} else {
					a.ackPSN.no++
				}
			}
			if f.hasAETH && f.syndrome>>5 == 0 {
				if p := pairs[k]; p != nil {
					r := (f.psn - p.base) & 0xFFFFFF
					n := sort.Search(len(p.ends), func(i int) bool { return p.ends[i] > r })
					off := int(f.msn) - n
					a.msnOff[fmt.Sprintf("%s: %+d", OpcodeName(f.op), off)] = true
				}
			}
		}
	}
	// AckReq'd requests each implementation received (ACK coalescing).
	for k, m := range reqs {
		impl, ok := impls[k[1]]
		if !ok {
			continue
		}
		for _, ri := range m {
			if ri.ackreq {
				get(impl).ackReqsSeen++
			}
		}
	}
	out := map[string]WireProfile{}
	u8 := func(v uint8) string { return strconv.Itoa(int(v)) }
	bl := func(v bool) string { return strconv.FormatBool(v) }
	for impl, a := range accs {
		p := WireProfile{
			"IPv4 TTL":              setString(a.ttl, u8),
			"IPv4 TOS":              setString(a.tos, u8),
			"IPv4 header length":    setString(a.ihl, u8),
			"IPv4 DF":               setString(a.df, bl),
			"IPv4 ID":               setString(a.idClass, func(s string) string { return s }),
			"UDP checksum":          setString(a.csum, func(s string) string { return s }),
			"UDP source port":       setString(a.sport, func(s string) string { return s }),
			"Ethernet padding":      setString(a.pad, func(s string) string { return s }),
			"BTH P_Key":             setString(a.pkey, func(v uint16) string { return fmt.Sprintf("0x%04x", v) }),
			"BTH MigReq":            setString(a.migreq, bl),
			"BTH TVer":              setString(a.tver, u8),
			"BTH FECN":              setString(a.fecn, bl),
			"BTH BECN":              setString(a.becn, bl),
			"BTH reserved bits set": setString(a.rsv, bl),
		}
		for op, c := range a.ackreq {
			p["AckReq on "+OpcodeName(op)] = c.class()
		}
		for op, c := range a.se {
			p["SE on "+OpcodeName(op)] = c.class()
		}
		for op, c := range a.aeth {
			p["AETH on "+OpcodeName(op)] = c.class()
		}
		// Distinct ACK PSNs: a duplicate request is answered again (rxe_resp.c
		// duplicate_request), which is not coalescing's business.
		if acks := len(a.ackPSNs); acks > 0 {
			p["ACK syndrome"] = setString(a.ackSyn, func(v uint8) string { return fmt.Sprintf("0x%02x", v) })
			p["ACK PSN"] = map[string]string{"always": "the AckReq'd request's PSN", "never": "not a requested PSN",
				"sometimes": "sometimes an AckReq'd request's PSN"}[a.ackPSN.class()]
			switch {
			case acks == a.ackReqsSeen:
				p["ACKs per AckReq'd request"] = "one each"
			case acks < a.ackReqsSeen:
				p["ACKs per AckReq'd request"] = "fewer (coalesced)"
			default:
				p["ACKs per AckReq'd request"] = "more (unrequested ACKs)"
			}
		}
		if len(a.msnOff) > 0 {
			p["MSN minus messages completed"] = setString(a.msnOff, func(s string) string { return s })
		}
		out[impl] = p
	}
	return out
}

// ProfileDiff lists the fields where two profiles of one cell disagree
// (fields only one side has, e.g. AckReq on an opcode only one side sent in
// this cell, are left out).
func ProfileDiff(a, b WireProfile) []string {
	var d []string
	for k, va := range a {
		if vb, ok := b[k]; ok && va != vb {
			d = append(d, k)
		}
	}
	sort.Strings(d)
	return d
}

// Table renders the results as a Markdown table.
func (m *Matrix) Table() string {
	var b strings.Builder
	b.WriteString("| cell | MTU | direction | result | packets | NAKs | retransmissions | time |\n")
	b.WriteString("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, r := range m.Results() {
		res := r.Status
		if r.Status != StatusPass && r.Reason != "" {
			res += ": " + oneLine(r.Reason, 110)
		}
		if r.Status == StatusPass && r.Atomics > 0 {
			res += fmt.Sprintf(" (%d atomic values chained)", r.Atomics)
		}
		if r.Status == StatusPass && len(r.Warnings) > 0 {
			res += " (" + oneLine(strings.Join(r.Warnings, "; "), 110) + ")"
		}
		naks := strconv.Itoa(r.NAKs)
		if r.RNRNAKs > 0 {
			naks += fmt.Sprintf(" + %d RNR", r.RNRNAKs)
		}
		pk, rt, tm := strconv.Itoa(r.Packets), strconv.Itoa(r.Retrans), fmt.Sprintf("%.1f s", r.Elapsed.Seconds())
		if len(r.RetransBy) > 0 {
			rt += " (" + byString(r.RetransBy) + ")"
		}
		if r.Status == StatusSkip {
			pk, naks, rt, tm = "–", "–", "–", "–"
		}
		name := r.Cell
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", name, r.MTU, r.Dir, res, pk, naks, rt, tm)
	}
	return b.String()
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "\\|")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// WireDiffs compares, per cell, the profile of goroce's frames with rxe's
// over both directions (so that each side is seen as requester and as
// responder), and returns Markdown: one row per field that differs in some
// cell, with both values and the cells. Only cells that passed both ways
// count.
func (m *Matrix) WireDiffs() (string, int) {
	type pair struct{ gor, rxe WireProfile }
	byCell := map[string]*pair{}
	passed := map[string]int{}
	var order []string
	for _, r := range m.Results() {
		key := fmt.Sprintf("%s@%d", r.Cell, r.MTU)
		if r.Status != StatusPass || r.Profiles == nil {
			passed[key] -= 10
			continue
		}
		passed[key]++
		p := byCell[key]
		if p == nil {
			p = &pair{WireProfile{}, WireProfile{}}
			byCell[key] = p
			order = append(order, key)
		}
		merge := func(dst, src WireProfile) {
			for k, v := range src {
				if old, ok := dst[k]; ok && old != v {
					dst[k] = mergeValues(old, v)
				} else {
					dst[k] = v
				}
			}
		}
		merge(p.gor, r.Profiles["goroce"])
		merge(p.rxe, r.Profiles["rxe"])
	}
	type row struct {
		gor, rxe map[string]bool
		cells    []string
	}
	rows := map[string]*row{}
	all := map[string]*row{} // every field, values over all compared cells
	compared := 0
	for _, key := range order {
		if passed[key] != 2 {
			continue
		}
		compared++
		p := byCell[key]
		for f, v := range p.rxe {
			if all[f] == nil {
				all[f] = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
			}
			for _, x := range strings.Split(v, ", ") {
				all[f].rxe[x] = true
			}
		}
		for f, v := range p.gor {
			if all[f] == nil {
				all[f] = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
			}
			for _, x := range strings.Split(v, ", ") {
				all[f].gor[x] = true
			}
		}
		for _, f := range ProfileDiff(p.gor, p.rxe) {
			rw := rows[f]
			if rw == nil {
				rw = &row{gor: map[string]bool{}, rxe: map[string]bool{}}
				rows[f] = rw
			}
			rw.gor[p.gor[f]], rw.rxe[p.rxe[f]] = true, true
			rw.cells = append(rw.cells, key)
		}
	}
	if compared == 0 {
		return "No cell passed in both directions, so nothing was compared.\n", 0
	}
	var fields []string
	for f := range rows {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	var b strings.Builder
	id := func(s string) string { return s }
	if len(fields) == 0 {
		fmt.Fprintf(&b, "In all %d cells that passed both ways, every profiled field of goroce's frames matched rxe's.\n", compared)
	} else {
		b.WriteString("| field | rxe | goroce | cells |\n| --- | --- | --- | --- |\n")
		for _, f := range fields {
			rw := rows[f]
			cells := strings.Join(rw.cells, ", ")
			if len(rw.cells) == compared {
				cells = fmt.Sprintf("all %d compared", compared)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f, oneLine(setString(rw.rxe, id), 200), oneLine(setString(rw.gor, id), 200), cells)
		}
	}
	// Every field with the values seen over all compared cells: what
	// "identical" above stands for.
	var names []string
	for f := range all {
		names = append(names, f)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "\nEvery profiled field, values seen over the %d compared cells (a field only one side shows is one only that side sent in these cells):\n\n", compared)
	b.WriteString("| field | rxe | goroce | |\n| --- | --- | --- | --- |\n")
	for _, f := range names {
		a := all[f]
		rv, gv := setString(a.rxe, id), setString(a.gor, id)
		mark := "same"
		switch {
		case len(a.rxe) == 0 || len(a.gor) == 0:
			mark = "one side only"
		case rows[f] != nil:
			mark = "**differs**"
		case rv != gv:
			mark = "same per cell"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f, oneLine(rv, 200), oneLine(gv, 200), mark)
	}
	return b.String(), len(fields)
}

func mergeValues(a, b string) string {
	m := map[string]bool{}
	for _, s := range strings.Split(a, ", ") {
		m[s] = true
	}
	for _, s := range strings.Split(b, ", ") {
		m[s] = true
	}
	return setString(m, func(s string) string { return s })
}

// Doc markers in docs/interop.md.
const (
	docMatrixBegin = "<!-- matrix:begin (generated by GOROCE_INTEROP_WRITE_DOC=1 go test ./interop/ -run TestMatrix) -->"
	docMatrixEnd   = "<!-- matrix:end -->"
	docWireBegin   = "<!-- wire:begin (generated) -->"
	docWireEnd     = "<!-- wire:end -->"
)

// WriteDoc replaces the generated sections of the doc at path: the results
// table (with the run's date, mode and time) and the measured wire
// differences.
func (m *Matrix) WriteDoc(path, header string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	wire, _ := m.WireDiffs()
	s, err := replaceBetween(string(b), docMatrixBegin, docMatrixEnd, header+"\n"+m.Table())
	if err != nil {
		return err
	}
	s, err = replaceBetween(s, docWireBegin, docWireEnd, wire)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func replaceBetween(s, begin, end, body string) (string, error) {
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("markers %q … %q not found", begin, end)
	}
	return s[:i+len(begin)] + "\n" + strings.TrimRight(body, "\n") + "\n" + s[j:], nil
}
