package rpingcmd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cmd/goroce/internal/tool"
	"github.com/goroce/goroce/cmd/goroce/internal/tool/tooltest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// wantPings is what rping -v prints for count pings of size bytes: the
// client's lines (prefix "ping data: ") or the server's ("server ping
// data: ").
func wantPings(prefix string, count, size int) string {
	var b strings.Builder
	buf := make([]byte, size)
	start := 65
	for i := range count {
		start = FillPing(buf, i, start)
		fmt.Fprintf(&b, "%s%s\n", prefix, CString(buf))
	}
	return b.String()
}

// TestRpingMem runs goroce rping against itself over the in-memory link
// through package cm: the server's and client's lines, byte for byte as
// the stock tools print them (testdata/rxe/rping.log), -V's check, and
// the disconnect seen by both.
func TestRpingMem(t *testing.T) {
	for _, c := range []struct {
		name        string
		count, size int
		extra       []string
	}{
		{"default", 10, 64, nil},
		{"4096", 10, 4096, []string{"-S", "4096"}},
		{"min-size", 3, MinBufSize, []string{"-S", fmt.Sprint(MinBufSize)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
			common := append([]string{"-C", fmt.Sprint(c.count), "-v"}, c.extra...)
			s, cl := tooltest.RunCMPair(t, Run, open,
				append([]string{"--dev", "a", "-s", "-a", "198.18.0.1"}, common...),
				append([]string{"--dev", "b", "-c", "-a", "198.18.0.1", "-V"}, common...))
			if s.Code != 0 || cl.Code != 0 {
				t.Fatalf("exit codes server %d client %d", s.Code, cl.Code)
			}
			if want := wantPings("ping data: ", c.count, c.size); cl.Stdout != want {
				t.Errorf("client printed\n%s\nwant\n%s", cl.Stdout, want)
			}
			if want := wantPings("server ping data: ", c.count, c.size); s.Stdout != want {
				t.Errorf("server printed\n%s\nwant\n%s", s.Stdout, want)
			}
			// The client prints its DISCONNECTED event when its DREQ gets
			// the DREP; cm sends the DREP before the server's connection
			// learns it is done, so the server may close its device at once.
			if cl.Stderr != "client DISCONNECT EVENT...\n" {
				t.Errorf("client stderr %q", cl.Stderr)
			}
			if s.Stderr != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
				t.Errorf("server stderr %q", s.Stderr)
			}
			last := make([]byte, c.size)
			start := 65
			for i := range c.count {
				start = FillPing(last, i, start)
			}
			if !bytes.Equal(cl.Final, last) {
				t.Errorf("client's rdma_buf at the end %q, want the last ping %q", cl.Final, last)
			}
		})
	}
}

// TestRpingRefused: a client of a port nobody listens on gets the REJ
// (invalid service ID) and reports it as rping does.
func TestRpingRefused(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	// Device a's CM agent answers, with nobody listening.
	a, err := open(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	unregister, err := cm.Register(a)
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	var out, errb bytes.Buffer
	code := Run(tool.Env{Stdout: &out, Stderr: &errb, Open: open}, []string{"--dev", "b", "-c", "-a", "198.18.0.1", "-p", "7175", "-C", "1"})
	if code != tool.ExitFailure || errb.String() != "cma event RDMA_CM_EVENT_REJECTED, error 8\n" {
		t.Errorf("exit %d, stderr %q, stdout %q", code, errb.String(), out.String())
	}
}

// TestRpingOptions: the goroce options and usage.
func TestRpingOptions(t *testing.T) {
	var out, errb bytes.Buffer
	noDev := func(context.Context, string) (*qp.Device, error) {
		t.Fatal("opened a device")
		return nil, nil
	}
	env := tool.Env{Stdout: &out, Stderr: &errb, Open: noDev}
	if code := Run(env, []string{"-h"}); code != 0 || !strings.Contains(out.String(), "--dev=IFACE") {
		t.Errorf("-h: %d %q", code, out.String())
	}
	out.Reset()
	if code := Run(env, []string{"-s", "--dev"}); code != tool.ExitUsage || !strings.Contains(errb.String(), "--dev requires") {
		t.Errorf("--dev without a value: %d %q", code, errb.String())
	}
}

// TestRpingPersistent: a persistent server (-s -P) serves three clients
// one after another, then two at once, each over its own connection
// (its own PD, CQ and buffers), printing every ping of every client, and
// ends when its run does, with exit 0. The clients are rping clients on
// one device that stays open between them (the tool would close it).
func TestRpingPersistent(t *testing.T) {
	open := tooltest.MemDevices(t, nic.MemConfig{Seed: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srvCtx, stopSrv := context.WithCancel(ctx)
	listening := make(chan struct{})
	var sout, serr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		env := tool.Env{Ctx: srvCtx, Stdout: &sout, Stderr: &serr, Open: open, Listening: func(net.Addr) { close(listening) }}
		code <- Run(env, []string{"--dev", "a", "-s", "-P", "-a", "198.18.0.1", "-v"})
	}()
	select {
	case <-listening:
	case c := <-code:
		t.Fatalf("server ended before listening: %d %s", c, serr.String())
	}
	b, err := open(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	client := func(count int) (string, int) {
		var out, errb bytes.Buffer
		f := Flags{Server: 0, Addr: netip.MustParseAddr("198.18.0.1"), Port: DefaultPort, Count: count, Size: 64, Verbose: true, Validate: true}
		cb := &controlBlock{env: tool.Env{Stdout: &out, Stderr: &errb}, f: f, ctx: ctx, dev: b}
		ret := cb.runClient()
		if ret != 0 {
			t.Errorf("client of %d pings: exit %d, %s", count, ret, errb.String())
		}
		return out.String(), ret
	}
	var want strings.Builder
	for _, n := range []int{3, 5, 2} {
		if out, _ := client(n); out != wantPings("ping data: ", n, 64) {
			t.Errorf("sequential client of %d pings printed\n%s", n, out)
		}
		want.WriteString(wantPings("server ping data: ", n, 64))
	}
	var wg sync.WaitGroup
	for _, n := range []int{4, 6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, _ := client(n); out != wantPings("ping data: ", n, 64) {
				t.Errorf("concurrent client of %d pings printed\n%s", n, out)
			}
		}()
	}
	wg.Wait()
	stopSrv()
	if c := <-code; c != 0 {
		t.Errorf("persistent server exit %d, want 0 (its run ended)\n%s", c, serr.String())
	}
	// The sequential clients' pings in order; the concurrent ones'
	// interleaved, each client's in its own order.
	got := sout.String()
	if !strings.HasPrefix(got, want.String()) {
		t.Fatalf("server printed\n%s\nwant first\n%s", got, want.String())
	}
	rest := strings.Split(strings.TrimSuffix(strings.TrimPrefix(got, want.String()), "\n"), "\n")
	if len(rest) != 10 {
		t.Fatalf("server printed %d lines for the concurrent clients, want 10:\n%s", len(rest), got)
	}
	if n := strings.Count(serr.String(), "server DISCONNECT EVENT...\n"); n != 5 {
		t.Errorf("server saw %d disconnects, want 5:\n%s", n, serr.String())
	}
}
