// Package netns gives tests (NewPair) and programs (New: goroce demo --netns,
// bench/) a private two-host network: two fresh network
// namespaces joined by a veth pair, each end with one address from the
// benchmark range 198.18.0.0/15 (RFC 2544) on a /24, and nothing else — no
// default route, no route out, only the connected /24 and loopback. Nothing a
// test sends there can leave the machine.
//
//	namespace A (goroce-<pid>-<n>-a)        namespace B (goroce-<pid>-<n>-b)
//	  veth "gr<n>a" 198.18.X.1/24  <-------->  veth "gr<n>b" 198.18.X.2/24
//
// X is taken from a per-process counter and the PID so that concurrent test
// binaries use different subnets (not strictly needed, the namespaces are
// isolated, but it keeps captures unambiguous). The namespaces are named (bind
// mounted in /var/run/netns, so `ip netns exec NAME ...` works while the test
// runs) and deleted by t.Cleanup (NewPair) or Close (New), which also
// destroys the veth pair.
//
// Each namespace gets an ownership marker, /run/goroce-netns/NAME, holding
// the creating process's PID, its start time and its PID namespace. The
// first pair of a process deletes the namespaces whose marker names a dead
// process of its own PID namespace (test binaries killed before their
// cleanup ran). Namespaces without a marker, or marked by another PID
// namespace (containers sharing /run), are never deleted.
//
// Code runs inside a namespace through Pair.Do, which switches one locked OS
// thread into it. A socket opened inside Do stays in that namespace for its
// whole life and may be used from any goroutine afterwards; goroutines
// started inside Do do NOT inherit the namespace.
//
// Creating namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Tests
// call RequireRoot first: it skips with a reason when not root, and fails
// when CI=true so that privileged tests never vanish silently in CI (the
// cilium/ebpf internal/testutils model).
//
// Network namespaces are Linux's. On other systems the package builds with
// the same API: New, Do and Handle return errors wrapping ErrNotSupported
// (which matches errors.ErrUnsupported), and NewPair skips the test with
// that reason, CI or not.
package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// Side selects one end of a Pair.
type Side int

//go:generate go run golang.org/x/tools/cmd/stringer@v0.52.0 -type=Side

const (
	A Side = iota
	B
)

// Options configure NewPair and New. The zero value gives MTU 1500 and IPv6
// DAD on.
type Options struct {
	// MTU of both veth ends (default 1500).
	MTU int
	// NoDAD turns off IPv6 duplicate address detection in both namespaces,
	// so the fe80:: link-local addresses are usable at once instead of after
	// about a second.
	NoDAD bool
	// Prefix of the namespace names (default "goroce"): PREFIX-PID-N-a|b.
	Prefix string
	// Queues is the number of transmit and receive queues of each veth
	// end (ip link add ... numtxqueues N numrxqueues N; 0: the kernel's
	// default, 1), for multi-queue devices (qp.InterfaceOptions.Queues).
	Queues int
}

// End describes one end of the pair.
type End struct {
	NS      string           // namespace name (usable with `ip netns exec`)
	Ifname  string           // veth name inside the namespace
	Ifindex int              // veth ifindex inside the namespace
	MAC     net.HardwareAddr // veth MAC
	Addr    netip.Addr       // IPv4 address
	Prefix  netip.Prefix     // Addr with its /24
	// LinkLocal is the IPv6 link-local address (with Options.NoDAD only:
	// NewPair waits until it is usable; otherwise the zero Addr).
	LinkLocal netip.Addr

	handle  netns.NsHandle
	marked  bool // New wrote markerDir/NS
	created bool // New created the namespace NS
}

// Pair is two namespaces joined by a veth pair. A test's pair (NewPair) is
// torn down by t.Cleanup; a program's (New) by Close.
type Pair struct {
	A, B End
	MTU  int

	vethAdded bool
	closeOnce sync.Once
}

// ErrNotSupported is wrapped by New, Do and Handle outside Linux.
var ErrNotSupported = fmt.Errorf("netns: network namespaces need Linux, not %s: %w", runtime.GOOS, errors.ErrUnsupported)

// TB is the part of testing.TB that RequireRoot and NewPair use. It is
// declared here so that programs linking this package (goroce demo --netns,
// bench/) do not link the testing package; a *testing.T or *testing.B
// satisfies it.
type TB interface {
	Helper()
	Cleanup(func())
	Skip(args ...any)
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Unprivileged is the environment variable that makes the privileged
// tests skip even as root and under CI=true: `make test` sets it, so that
// the README's test command never creates namespaces or attaches XDP
// programs; `make check` (CI) runs those suites.
const Unprivileged = "GOROCE_UNPRIVILEGED"

// RequireRoot skips the test when the process is not root, or fails it when
// the environment variable CI is "true" (privileged tests must run in CI).
// With GOROCE_UNPRIVILEGED=1 it skips, root or not, CI or not.
func RequireRoot(t TB) {
	t.Helper()
	if os.Getenv(Unprivileged) == "1" {
		t.Skip(Unprivileged + "=1 (make test): the privileged suites run in make check")
	}
	if os.Geteuid() == 0 {
		return
	}
	const reason = "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true forbids skipping", reason)
	}
	t.Skip(reason)
}

// NewPair creates the namespaces and the veth pair, or ends the test: skip
// (not root, or namespaces not permitted here) or fail (any other error, or
// CI=true).
func NewPair(t TB, opts Options) *Pair {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("%v", ErrNotSupported)
	}
	RequireRoot(t)
	p, err := New(opts)
	if err != nil {
		if errors.Is(err, os.ErrPermission) && os.Getenv("CI") != "true" {
			t.Skipf("netns: not permitted here: %v", err)
		}
		t.Fatalf("netns: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// New creates the namespaces and the veth pair for a program (goroce demo

func (p *Pair) end(s Side) *End {
	if s == A {
		return &p.A
	}
	return &p.B
}

// End returns the description of one side.
func (p *Pair) End(s Side) End { return *p.end(s) }
